"""The distillation loss terms (fairseq_bio.modules.distillation) against direct computations on
hand-sized batches: position by position, with Python loops and math, to 1e-5."""

import math

import pytest
import torch

from fairseq_bio.modules.distillation import (
    attention_kl,
    attention_mse,
    cosine_loss,
    hidden_mse,
    kl_loss,
    mlm_loss,
    parse_layer_map,
    uniform_layer_map,
)

PAD = 1
# Two rows, the second padded after 4 tokens; masked (predicted) positions: (0, 1), (0, 3), (1, 2).
NONPAD = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]], dtype=torch.bool)
MASKED = torch.zeros(2, 5, dtype=torch.bool)
MASKED[0, 1] = MASKED[0, 3] = MASKED[1, 2] = True


def rand(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).float()


def positions(mask):
    return [(b, t) for b in range(mask.size(0)) for t in range(mask.size(1)) if mask[b, t]]


def softmax(row):
    m = max(row)
    e = [math.exp(x - m) for x in row]
    return [x / sum(e) for x in e]


def test_mlm_cross_entropy_is_the_mean_over_masked_positions_only():
    logits = rand(2, 5, 7, seed=1)
    target = torch.full((2, 5), PAD)
    target[0, 1], target[0, 3], target[1, 2] = 4, 0, 6
    expected = []
    for b, t in positions(MASKED):
        p = softmax(logits[b, t].tolist())
        expected.append(-math.log(p[int(target[b, t])]))
    got = mlm_loss(logits, target, PAD)
    assert got.item() == pytest.approx(sum(expected) / len(expected), abs=1e-5)
    logits[~MASKED] = 100.0  # what is not predicted does not count
    assert mlm_loss(logits, target, PAD).item() == pytest.approx(got.item(), abs=1e-6)


def reference_kl(student, teacher, temperature, mask):
    total = []
    for b, t in positions(mask):
        ps = softmax([x / temperature for x in student[b, t].tolist()])
        pt = softmax([x / temperature for x in teacher[b, t].tolist()])
        total.append(sum(q * (math.log(q) - math.log(p)) for p, q in zip(ps, pt)))
    return temperature**2 * sum(total) / len(total)


@pytest.mark.parametrize("temperature", [1.0, 2.0, 0.5])
@pytest.mark.parametrize("which", ["masked", "all"])
def test_kl_teacher_to_student_with_temperature_squared(temperature, which):
    student, teacher = rand(2, 5, 7, seed=2) * 3, rand(2, 5, 7, seed=3) * 3
    mask = MASKED if which == "masked" else NONPAD
    got = kl_loss(student, teacher, temperature, mask)
    assert got.item() == pytest.approx(reference_kl(student, teacher, temperature, mask), abs=1e-5)
    # padding (and, over masked positions, every unmasked one) is excluded
    student[~mask], teacher[~mask] = 50.0, -50.0
    assert kl_loss(student, teacher, temperature, mask).item() == pytest.approx(
        got.item(), abs=1e-5
    )


def test_kl_is_teacher_first_and_zero_for_equal_logits():
    student, teacher = rand(3, 6, seed=4) * 2, rand(3, 6, seed=5) * 2
    forward = kl_loss(student, teacher).item()
    assert forward != pytest.approx(
        kl_loss(teacher, student).item(), abs=1e-3
    )  # KL is not symmetric
    assert forward == pytest.approx(
        reference_kl(student[None], teacher[None], 1.0, torch.ones(1, 3, dtype=torch.bool))
    )
    assert kl_loss(student, student, 2.0).item() == pytest.approx(0.0, abs=1e-6)


def test_no_selected_position_gives_zero_not_nan():
    none = torch.zeros(2, 5, dtype=torch.bool)
    assert kl_loss(rand(2, 5, 7, seed=6), rand(2, 5, 7, seed=7), 2.0, none).item() == 0.0
    assert mlm_loss(rand(2, 5, 7, seed=6), torch.full((2, 5), PAD), PAD).item() == 0.0


def linear(in_dim, out_dim, seed):
    layer = torch.nn.Linear(in_dim, out_dim)
    with torch.no_grad():
        layer.weight.copy_(rand(out_dim, in_dim, seed=seed))
        layer.bias.copy_(rand(out_dim, seed=seed + 1))
    return layer


def project(layer, vector):
    w, bias = layer.weight.tolist(), layer.bias.tolist()
    return [sum(wi * x for wi, x in zip(row, vector)) + bi for row, bi in zip(w, bias)]


def test_cosine_alignment_with_a_projection_when_widths_differ():
    student, teacher = rand(2, 5, 3, seed=8), rand(2, 5, 4, seed=9)
    proj = linear(3, 4, seed=10)
    expected = []
    for b, t in positions(NONPAD):
        u, v = project(proj, student[b, t].tolist()), teacher[b, t].tolist()
        cos = sum(x * y for x, y in zip(u, v)) / math.sqrt(
            sum(x * x for x in u) * sum(y * y for y in v)
        )
        expected.append(1 - cos)
    got = cosine_loss(student, teacher, NONPAD, projection=proj)
    assert got.item() == pytest.approx(sum(expected) / len(expected), abs=1e-5)
    got.backward()
    assert (
        proj.weight.grad is not None and proj.weight.grad.abs().sum() > 0
    )  # the projection learns
    with pytest.raises(ValueError, match="student width 3 != teacher width 4"):
        cosine_loss(student, teacher, NONPAD)


def test_cosine_without_projection_on_equal_widths():
    student, teacher = rand(2, 5, 4, seed=11), rand(2, 5, 4, seed=12)
    expected = []
    for b, t in positions(NONPAD):
        u, v = student[b, t].tolist(), teacher[b, t].tolist()
        expected.append(
            1
            - sum(x * y for x, y in zip(u, v))
            / math.sqrt(sum(x * x for x in u) * sum(y * y for y in v))
        )
    assert cosine_loss(student, teacher, NONPAD).item() == pytest.approx(
        sum(expected) / len(expected), abs=1e-5
    )
    assert cosine_loss(teacher * 3.0, teacher, NONPAD).item() == pytest.approx(
        0.0, abs=1e-6
    )  # scale-free


def test_hidden_mse_over_positions_and_teacher_channels_with_projection():
    student, teacher = rand(2, 5, 3, seed=13), rand(2, 5, 4, seed=14)
    proj = linear(3, 4, seed=15)
    squares = []
    for b, t in positions(NONPAD):
        u = project(proj, student[b, t].tolist())
        squares += [(x - y) ** 2 for x, y in zip(u, teacher[b, t].tolist())]
    got = hidden_mse(student, teacher, NONPAD, projection=proj)
    assert got.item() == pytest.approx(sum(squares) / len(squares), abs=1e-5)
    student[1, 4], teacher[1, 4] = 1e3, -1e3  # the pad position is excluded
    assert hidden_mse(student, teacher, NONPAD, projection=proj).item() == pytest.approx(
        got.item(), abs=1e-5
    )
    # without padding and projection it is torch's MSE
    a, b = rand(2, 5, 4, seed=16), rand(2, 5, 4, seed=17)
    assert hidden_mse(a, b).item() == pytest.approx(
        torch.nn.functional.mse_loss(a, b).item(), abs=1e-6
    )


def attention_maps(seed, heads=3):
    """Real softmax maps: B x H x T x T over the non-pad keys of each row (pad keys get probability
    0)."""
    scores = rand(2, heads, 5, 5, seed=seed) * 2
    scores = scores.masked_fill(~NONPAD[:, None, None, :], float("-inf"))
    return scores.softmax(-1)


def test_attention_mse_per_head_over_non_pad_query_key_pairs():
    student, teacher = attention_maps(18), attention_maps(19)
    per_head = []
    for h in range(3):
        squares = [
            (student[b, h, q, k].item() - teacher[b, h, q, k].item()) ** 2
            for b in range(2)
            for q in range(5)
            for k in range(5)
            if NONPAD[b, q] and NONPAD[b, k]
        ]
        per_head.append(sum(squares) / len(squares))  # MSE(a_s^h, a_t^h)
    got = attention_mse(student, teacher, NONPAD)
    assert got.item() == pytest.approx(sum(per_head) / 3, abs=1e-6)  # 1/H sum_h
    student[1, :, 4, :] = 0.7  # the pad query row does not count
    assert attention_mse(student, teacher, NONPAD).item() == pytest.approx(got.item(), abs=1e-7)


def test_attention_kl_teacher_to_student_per_head_and_query_row():
    student, teacher = attention_maps(20), attention_maps(21)
    rows = []
    for b in range(2):
        for h in range(3):
            for q in range(5):
                if not NONPAD[b, q]:
                    continue
                rows.append(
                    sum(
                        teacher[b, h, q, k].item()
                        * (
                            math.log(teacher[b, h, q, k].item())
                            - math.log(student[b, h, q, k].item())
                        )
                        for k in range(5)
                        if NONPAD[b, k]
                    )
                )
    got = attention_kl(student, teacher, NONPAD)
    assert torch.isfinite(got)
    assert got.item() == pytest.approx(sum(rows) / len(rows), abs=1e-5)  # 1/(H N) sum_h sum_n
    assert attention_kl(teacher, teacher, NONPAD).item() == pytest.approx(0.0, abs=1e-6)
    # gradients are finite although pad keys have probability 0 in both maps
    s = student.clone().requires_grad_(True)
    attention_kl(s, teacher, NONPAD).backward()
    assert torch.isfinite(s.grad).all()


def test_attention_maps_need_the_same_heads():
    with pytest.raises(ValueError, match="same number of heads"):
        attention_mse(attention_maps(22, heads=2), attention_maps(23, heads=3), NONPAD)


def test_layer_maps():
    assert uniform_layer_map(6, 12) == [2, 4, 6, 8, 10, 12]
    assert uniform_layer_map(4, 12) == [3, 6, 9, 12]  # TinyBERT's g(m) = 3m
    assert uniform_layer_map(1, 2) == [2]
    assert parse_layer_map("", 6, 12) == [2, 4, 6, 8, 10, 12]
    assert parse_layer_map("1,3,5,7,9,11", 6, 12) == [1, 3, 5, 7, 9, 11]
    with pytest.raises(ValueError, match="multiple"):
        uniform_layer_map(5, 12)
    with pytest.raises(ValueError, match="2 entries for 3 student layers"):
        parse_layer_map("1,2", 3, 12)
    with pytest.raises(ValueError, match="teacher layer 13 is not in 1..12"):
        parse_layer_map("4,8,13", 3, 12)
    with pytest.raises(ValueError, match="not a comma-separated list"):
        parse_layer_map("4;8", 2, 12)

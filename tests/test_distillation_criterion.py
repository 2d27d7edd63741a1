"""bio_distillation criterion on tiny models: the loss is the weighted sum of the terms computed
directly from the student's and teacher's outputs; the teacher is frozen, unsaved and unoptimised;
weight 0 skips a term's compute (and the attention maps); dictionaries must match; the teacher
follows the student's dtype."""

import pytest
import torch
from helpers.distillation import SYMBOLS, TEACHER, build_model, save_teacher, setup_task, write_dict
from omegaconf import OmegaConf

from fairseq_bio.criterions.bio_distillation import BioDistillationConfig, BioDistillationCriterion
from fairseq_bio.errors import BioConfigError
from fairseq_bio.modules import distillation as losses

STUDENT = dict(
    encoder_layers=1, encoder_embed_dim=16, encoder_ffn_embed_dim=32, encoder_attention_heads=4
)
ALL_TERMS = dict(
    mlm_weight=5.0,
    kl_weight=2.0,
    temperature=2.0,
    cos_weight=1.0,
    embed_weight=0.5,
    hidden_weight=0.7,
    attn_weight=0.3,
    kl_positions="all",
    hidden_loss="cosine",
    attn_loss="kl",
)
OFF = dict(mlm_weight=0.0, kl_weight=0.0, cos_weight=0.0)


@pytest.fixture(scope="module")
def teacher_path(tmp_path_factory):
    return save_teacher(tmp_path_factory.mktemp("teacher"))


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return setup_task(write_dict(tmp_path_factory.mktemp("data"), SYMBOLS))


def criterion_for(task, teacher_path, sizes=STUDENT, **weights):
    cfg = BioDistillationConfig(
        teacher=str(teacher_path),
        student_layers=sizes["encoder_layers"],
        student_embed_dim=sizes["encoder_embed_dim"],
        student_arch="bio_roberta",
        **weights,
    )
    return BioDistillationCriterion(OmegaConf.structured(cfg), task)


def hand_batch(task):
    """Two rows (the second padded); positions 2, 3, 5 of row 0 and 2 of row 1 are masked."""
    d = task.source_dictionary
    w = [d.index(s) for s in SYMBOLS]
    bos, eos, pad, mask = d.bos(), d.eos(), d.pad(), task.mask_idx
    original = torch.tensor(
        [[bos, w[3], w[5], w[7], w[9], w[5], eos], [bos, w[1], w[5], w[4], eos, pad, pad]]
    )
    masked = torch.zeros_like(original, dtype=torch.bool)
    masked[0, [2, 3, 5]] = True
    masked[1, 2] = True
    return {
        "id": torch.tensor([0, 1]),
        "net_input": {
            "src_tokens": torch.where(masked, torch.full_like(original, mask), original),
            "src_lengths": original.ne(pad).sum(1),
        },
        "target": torch.where(masked, original, torch.full_like(original, pad)),
        "ntokens": int(original.ne(pad).sum()),
        "nsentences": 2,
    }


def test_loss_is_the_weighted_sum_of_the_terms_computed_directly(task, teacher_path):
    crit = criterion_for(task, teacher_path, layer_map="2", **ALL_TERMS)
    student = build_model(task, STUDENT, seed=1).eval()
    sample = hand_batch(task)
    loss, sample_size, log = crit(student, sample)

    tokens, target, pad = (
        sample["net_input"]["src_tokens"],
        sample["target"],
        task.source_dictionary.pad(),
    )
    nonpad, masked = tokens.ne(pad), target.ne(pad)
    s_logits, s_extra = student(tokens, return_all_hiddens=True, return_attn=True)
    s_feat, _ = student(tokens, features_only=True)
    with torch.no_grad():
        t_logits, t_extra = crit.teacher(tokens, return_all_hiddens=True, return_attn=True)
        t_feat, _ = crit.teacher(tokens, features_only=True)
    s_states = [s.transpose(0, 1) for s in s_extra["inner_states"]]
    t_states = [s.transpose(0, 1) for s in t_extra["inner_states"]]
    expected = {
        "mlm_loss": losses.mlm_loss(s_logits, target, pad),
        "kl_loss": losses.kl_loss(s_logits, t_logits, 2.0, nonpad),  # kl_positions=all
        "cos_loss": losses.cosine_loss(s_feat, t_feat, nonpad, crit.last_projection),
        "embed_loss": losses.hidden_mse(s_states[0], t_states[0], nonpad, crit.layer_projection),
        "hidden_loss": losses.cosine_loss(
            s_states[1], t_states[2], nonpad, crit.layer_projection
        ),  # g(1) = 2
        "attn_loss": losses.attention_kl(s_extra["attn"][0], t_extra["attn"][1], nonpad),
    }
    weights = dict(
        mlm_loss=5.0, kl_loss=2.0, cos_loss=1.0, embed_loss=0.5, hidden_loss=0.7, attn_loss=0.3
    )
    assert sample_size == 1 and masked.sum() == 4
    for term, value in expected.items():
        assert log[term].item() == pytest.approx(value.item(), abs=1e-5), term
    assert loss.item() == pytest.approx(
        sum(weights[t] * v.item() for t, v in expected.items()), abs=1e-5
    )


def test_teacher_is_frozen_unsaved_and_unoptimised(task, teacher_path):
    crit = criterion_for(task, teacher_path, **ALL_TERMS)
    before = {k: v.clone() for k, v in crit.teacher.state_dict().items()}
    # the criterion's parameters are the two projections (16 -> 32), nothing of the teacher's
    assert sorted(crit.state_dict()) == sorted(
        f"{p}_projection.{w}" for p in ("last", "layer") for w in ("weight", "bias")
    )
    assert {tuple(p.shape) for p in crit.parameters()} == {(32, 16), (32,)}
    student = build_model(task, STUDENT, seed=1)
    optimizer = torch.optim.SGD(list(student.parameters()) + list(crit.parameters()), lr=0.5)
    student.train(), crit.train()
    assert not crit.teacher.training and not any(p.requires_grad for p in crit.teacher.parameters())
    projection = crit.last_projection.weight.detach().clone()
    for _ in range(3):
        optimizer.zero_grad()
        loss, _, _ = crit(student, hand_batch(task))
        loss.backward()
        optimizer.step()
    assert not torch.equal(projection, crit.last_projection.weight)  # the projection is trained
    assert all(p.grad is None for p in crit.teacher.parameters())
    after = crit.teacher.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


def record_calls(model):
    """Keep the keyword arguments of each forward call of ``model`` (its own forward still runs)."""
    calls, forward = [], model.forward

    def recording(*args, **kwargs):
        calls.append(kwargs)
        return forward(*args, **kwargs)

    model.forward = recording
    return calls


@pytest.mark.parametrize(
    "weights, maps, states, teacher_runs",
    [
        (
            dict(mlm_weight=5.0, kl_weight=2.0, cos_weight=1.0),
            False,
            False,
            True,
        ),  # bio-lm: no maps, no layer states
        (dict(OFF, attn_weight=1.0), True, False, True),
        (dict(OFF, hidden_weight=1.0), False, True, True),
        (dict(OFF, mlm_weight=1.0), False, False, False),  # MLM alone never runs the teacher
    ],
)
def test_weight_zero_skips_the_compute(task, teacher_path, weights, maps, states, teacher_runs):
    crit = criterion_for(task, teacher_path, **weights)
    student = build_model(task, STUDENT, seed=1).eval()
    student_calls, teacher_calls = record_calls(student), record_calls(crit.teacher)
    _, _, log = crit(student, hand_batch(task))
    assert {k for k in log if k.endswith("_loss")} == {
        k.replace("_weight", "_loss") for k, v in weights.items() if v
    }
    assert [c["return_attn"] for c in student_calls] == [maps]
    assert [c["return_all_hiddens"] for c in student_calls] == [states]
    assert len(teacher_calls) == int(teacher_runs)
    if teacher_runs:
        assert (
            teacher_calls[0]["return_attn"] == maps
            and teacher_calls[0]["return_all_hiddens"] == states
        )
    # projections exist only for terms that are on and compare states of different widths
    assert (crit.last_projection is not None) == bool(weights.get("cos_weight"))
    assert (crit.layer_projection is not None) == bool(weights.get("hidden_weight"))


def test_equal_widths_need_no_projection(task, teacher_path):
    crit = criterion_for(task, teacher_path, sizes={**TEACHER, "encoder_layers": 1}, **ALL_TERMS)
    assert (
        crit.last_projection is None
        and crit.layer_projection is None
        and not list(crit.parameters())
    )


def test_dictionary_mismatch_names_both_dictionaries_and_the_first_symbol(task, tmp_path):
    other = SYMBOLS[:5] + ["zz"] + SYMBOLS[6:]
    path = save_teacher(tmp_path / "other", symbols=other)
    with pytest.raises(BioConfigError) as e:
        criterion_for(task, path)
    message = str(e.value)
    assert "\n" not in message and str(tmp_path / "other" / "dict.txt") in message
    assert task.cfg.data + "/dict.txt" in message and "'zz'" in message and "'w5'" in message
    shorter = save_teacher(tmp_path / "short", symbols=SYMBOLS[:-1])
    with pytest.raises(BioConfigError, match="differ"):
        criterion_for(task, shorter)


def test_bad_set_ups_fail_in_one_line(task, teacher_path, tmp_path):
    with pytest.raises(BioConfigError, match="no such checkpoint"):
        criterion_for(task, tmp_path / "missing.pt")
    with pytest.raises(BioConfigError, match="layer_map.*multiple"):
        criterion_for(task, teacher_path, sizes={**STUDENT, "encoder_layers": 3}, hidden_weight=1.0)
    with pytest.raises(BioConfigError, match="every weight is 0"):
        criterion_for(task, teacher_path, **OFF)
    crit = criterion_for(task, teacher_path, **dict(OFF, attn_weight=1.0))
    wider = build_model(task, {**STUDENT, "encoder_embed_dim": 8}, seed=1)
    with pytest.raises(BioConfigError, match="built for a 1 x 16 student"):
        crit(wider, hand_batch(task))


def test_attention_terms_train_with_attention_dropout(task, teacher_path):
    """The attention terms compare maps before dropout: with attention dropout 0.1 (and no other
    dropout) a training step's attention terms equal eval mode's, while the states, mixed through
    dropped-out attention, do not; the step trains the student's attention."""
    for attn_loss in ("mse", "kl"):
        crit = criterion_for(
            task, teacher_path, **dict(OFF, mlm_weight=1.0, attn_weight=1.0, attn_loss=attn_loss)
        )
        student = build_model(
            task, STUDENT, seed=1, attention_dropout=0.1, dropout=0.0, activation_dropout=0.0
        )
        tokens = hand_batch(task)["net_input"]["src_tokens"]
        _, _, eval_log = crit(student.eval(), hand_batch(task))
        eval_features, _ = student(tokens, features_only=True)
        torch.manual_seed(0)
        loss, _, log = crit(student.train(), hand_batch(task))
        assert log["attn_loss"].item() == pytest.approx(eval_log["attn_loss"].item(), abs=1e-6)
        train_features, _ = student(tokens, features_only=True)
        assert (train_features - eval_features).abs().max() > 1e-3  # attention dropout is on
        loss.backward()
        assert (
            student.encoder.sentence_encoder.layers[0].self_attn.q_proj.weight.grad.abs().sum() > 0
        )


def test_teacher_follows_the_students_dtype(task, teacher_path):
    crit = criterion_for(task, teacher_path)
    student = build_model(task, STUDENT, seed=1).double()
    crit.double()
    loss, _, _ = crit(student, hand_batch(task))
    assert torch.isfinite(loss)
    assert next(crit.teacher.parameters()).dtype == torch.float64


def test_projections_survive_a_checkpoint_round_trip_and_start_fresh_without_one(
    task, teacher_path
):
    crit = criterion_for(task, teacher_path)
    state = {k: v + 1 for k, v in crit.state_dict().items()}
    crit.load_state_dict(state)
    assert torch.equal(crit.last_projection.bias, state["last_projection.bias"])
    crit.load_state_dict(None)  # an encoder checkpoint (criterion: None) leaves them as they are
    assert torch.equal(crit.last_projection.bias, state["last_projection.bias"])


def test_embedding_term_has_its_own_projection_when_asked(task, teacher_path):
    """criterion.embed_projection=own (TinyBioBERT eq. 7's W_e, recipe/tinybiobert): the embedding
    term goes through a projection of its own, the layer terms through W_h; shared (the default,
    TinyBERT's code) uses W_h for both.
    """
    shared = criterion_for(
        task, teacher_path, **OFF, embed_weight=1.0, hidden_weight=1.0, layer_map="2"
    )
    assert shared.embed_projection is None and shared.layer_projection is not None
    own = criterion_for(
        task,
        teacher_path,
        **OFF,
        embed_weight=1.0,
        hidden_weight=1.0,
        layer_map="2",
        embed_projection="own",
    )
    assert {n.split(".")[0] for n, _ in own.named_parameters()} == {
        "embed_projection",
        "layer_projection",
    }
    student = build_model(task, STUDENT, seed=1).eval()
    sample = hand_batch(task)
    tokens, pad = sample["net_input"]["src_tokens"], task.source_dictionary.pad()
    _, log = own(student, sample)[1:]
    _, s_extra = student(tokens, return_all_hiddens=True)
    with torch.no_grad():
        _, t_extra = own.teacher(tokens, return_all_hiddens=True)
    s0, t0 = (x["inner_states"][0].transpose(0, 1) for x in (s_extra, t_extra))
    expected = losses.hidden_mse(s0, t0, tokens.ne(pad), own.embed_projection)
    assert log["embed_loss"].item() == pytest.approx(expected.item(), abs=1e-6)
    other = losses.hidden_mse(s0, t0, tokens.ne(pad), own.layer_projection)
    assert abs(log["embed_loss"].item() - other.item()) > 1e-4  # not W_h's
    # own embed_loss, and a hidden_loss with no embedding term: only W_h
    alone = criterion_for(
        task, teacher_path, **OFF, hidden_weight=1.0, layer_map="2", embed_projection="own"
    )
    assert alone.embed_projection is None and alone.layer_projection is not None


def test_a_shared_projection_checkpoint_resumes_with_its_own_embedding_projection(
    task, teacher_path
):
    """A run saved with one W_h (embed_projection=shared, the recipe before seed 004's W_e) loads
    into a criterion with its own W_e: W_e starts as the saved W_h, W_h is the saved one."""
    shared = criterion_for(
        task, teacher_path, **OFF, embed_weight=1.0, hidden_weight=1.0, layer_map="2"
    )
    saved = {k: v + 1 for k, v in shared.state_dict().items()}
    assert set(saved) == {"layer_projection.weight", "layer_projection.bias"}
    own = criterion_for(
        task,
        teacher_path,
        **OFF,
        embed_weight=1.0,
        hidden_weight=1.0,
        layer_map="2",
        embed_projection="own",
    )
    own.load_state_dict(saved)
    for name in ("weight", "bias"):
        assert torch.equal(getattr(own.embed_projection, name), saved[f"layer_projection.{name}"])
        assert torch.equal(getattr(own.layer_projection, name), saved[f"layer_projection.{name}"])
    own.embed_projection.weight.data.add_(1.0)  # two parameters, not one
    assert not torch.equal(own.embed_projection.weight, own.layer_projection.weight)


def test_the_terms_read_back_only_the_predicted_positions(task, teacher_path):
    """Every term's count of positions stays on the batch's device (reading it back,
    ``int(mask.sum())``, waits for a GPU; issue 36): a forward of all six terms reads only what
    sizes its work: whether the batch has padding (once per encoder, student and teacher) and the
    number of predicted positions, once (the two LM heads' N x V logits and their targets take them
    as indices); the logged values stay tensors."""
    import sys

    from conftest import REPO

    sys.path.insert(0, str(REPO / "benchmarks"))
    import host_reads

    crit = criterion_for(task, teacher_path, layer_map="2", **ALL_TERMS)
    student = build_model(task, STUDENT, seed=1).eval()
    sample = hand_batch(task)
    with host_reads.host_read_mode() as mode:
        _, _, log = crit(student, sample)
    sites = {(site.split(":")[0], what): n for (site, what), n in mode.reads.items()}
    assert sites == {
        ("fairseq_bio/modules/transformer_encoder.py", "__bool__"): 2,
        ("fairseq_bio/modules/masking.py", "nonzero"): 1,
    }, mode.reads
    assert all(
        torch.is_tensor(log[term]) for term in ("mlm_loss", "kl_loss", "cos_loss", "attn_loss")
    )

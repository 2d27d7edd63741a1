"""bio_electra model, task and criterion: shared embeddings (one Parameter, one checkpoint copy),
the loss against a direct computation on a hand-sized batch, the replaced/original labels, and the
generator input the task builds."""

import math

import pytest
import torch
import torch.nn.functional as F
from helpers.small_models import DictionaryTask, make_dictionary
from omegaconf import OmegaConf

from fairseq_bio.criterions.bio_electra import BioElectraCriterion
from fairseq_bio.models.bio_electra import BioElectraConfig, BioElectraModel

SYMBOLS = [f"w{i}" for i in range(24)]
TINY = dict(
    encoder_layers=2,
    encoder_embed_dim=32,
    encoder_ffn_embed_dim=64,
    encoder_attention_heads=4,
    generator_embed_dim=16,
    generator_ffn_embed_dim=32,
    generator_attention_heads=2,
    max_positions=16,
)


def build(**overrides):
    dictionary, mask = make_dictionary(SYMBOLS)
    cfg = OmegaConf.structured(BioElectraConfig(**{**TINY, **overrides}))
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = BioElectraModel.build_model(cfg, DictionaryTask(dictionary))
    return model, dictionary, mask


def hand_batch(dictionary, mask):
    """Two rows (one padded): <s> w.. </s>; positions 2, 3, 5 of row 0 and 2, 4 of row 1 are
    masked."""
    w = [dictionary.index(s) for s in SYMBOLS]
    bos, eos, pad = dictionary.bos(), dictionary.eos(), dictionary.pad()
    original = torch.tensor(
        [
            [bos, w[3], w[5], w[7], w[9], w[5], w[2], eos],
            [bos, w[1], w[5], w[4], w[8], eos, pad, pad],
        ]
    )
    masked = torch.zeros_like(original, dtype=torch.bool)
    masked[0, [2, 3, 5]] = True
    masked[1, [2, 4]] = True
    target = torch.where(masked, original, torch.full_like(original, pad))
    src = torch.where(masked, torch.full_like(original, mask), original)
    return {
        "id": torch.tensor([0, 1]),
        "net_input": {"src_tokens": src, "src_lengths": original.ne(pad).sum(1)},
        "target": target,
        "original_tokens": original,
        "sampling_seed": 1234,
        "ntokens": int(original.ne(pad).sum()),
        "nsentences": 2,
    }


def test_generator_and_discriminator_share_one_copy_of_the_embeddings(tmp_path):
    model, dictionary, mask = build()
    gen, disc = model.generator, model.discriminator
    assert gen.embed_tokens.weight is disc.embed_tokens.weight is model.generator_head.weight
    assert gen.embed_positions.weight is disc.embed_positions.weight
    assert gen.layernorm_embedding.weight is disc.layernorm_embedding.weight
    assert gen.embed_proj.weight.shape == (
        16,
        32,
    )  # 32-wide embeddings projected to the 16-wide generator
    assert disc.layers[0].fc1.weight.shape == (64, 32) and gen.layers[0].fc1.weight.shape == (
        32,
        16,
    )

    # One optimizer step: the embedding gets gradient from both losses and is one entry of the
    # optimizer.
    criterion = BioElectraCriterion(DictionaryTask(dictionary))
    model.eval()  # no dropout: the two partial gradients below add up exactly
    sample = hand_batch(dictionary, mask)
    embed = disc.embed_tokens.weight
    grads = []
    for weight in (0.0, 1.0):
        model.zero_grad()
        criterion.discriminator_weight = weight
        criterion(model, sample)[0].backward()
        grads.append(embed.grad.clone())
    gen_grad, both = grads
    disc_grad = both - gen_grad
    assert gen_grad.abs().sum() > 0 and disc_grad.abs().sum() > 0
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    params = optimizer.param_groups[0]["params"]
    assert sum(p is embed for p in params) == 1 and len(params) == len(
        dict(model.named_parameters())
    )
    before = embed.detach().clone()
    optimizer.step()
    assert not torch.equal(before, embed) and gen.embed_tokens.weight is embed

    # The checkpoint holds one copy, and loading restores the sharing.
    state = model.state_dict()
    assert (
        "discriminator.embed_tokens.weight" in state
        and "discriminator.embed_positions.weight" in state
    )
    assert "generator.embed_proj.weight" in state and "generator.layers.0.fc1.weight" in state
    shared = [
        "generator." + k
        for k in ("embed_tokens.weight", "embed_positions.weight", "layernorm_embedding.weight")
    ]
    assert not set(shared + ["generator_head.weight"]) & set(state)
    torch.save(state, tmp_path / "m.pt")
    other, _, _ = build()
    other.load_state_dict(torch.load(tmp_path / "m.pt", weights_only=True), strict=True)
    assert (
        other.generator.embed_tokens.weight
        is other.discriminator.embed_tokens.weight
        is other.generator_head.weight
    )
    assert torch.equal(other.generator.embed_tokens.weight, embed)
    other.eval()
    criterion.discriminator_weight = 50.0
    with torch.no_grad():
        assert torch.equal(criterion(model, sample)[0], criterion(other, sample)[0])


def test_criterion_equals_a_direct_computation_and_labels_equal_samples_original():
    model, dictionary, mask = build()
    model.eval()
    sample = hand_batch(dictionary, mask)
    original, src, pad = (
        sample["original_tokens"],
        sample["net_input"]["src_tokens"],
        dictionary.pad(),
    )
    masked = sample["target"].ne(pad)
    w5 = dictionary.index("w5")
    with torch.no_grad():
        model.generator_head.bias[w5] = 40.0  # the generator (almost surely) samples w5 everywhere
        model.generator_head.bias[dictionary.eos()] = (
            80.0  # ... but never a special symbol, however likely
        )
    criterion = BioElectraCriterion(DictionaryTask(dictionary), discriminator_weight=50.0)
    loss, sample_size, log = criterion(model, sample)

    # Direct computation from the parameters.
    with torch.no_grad():
        h = model.generator(src)["encoder_out"][0].transpose(0, 1)[masked]  # N x H
        head = model.generator_head
        x = F.layer_norm(
            F.gelu(h @ head.dense.weight.T + head.dense.bias),
            (32,),
            head.layer_norm.weight,
            head.layer_norm.bias,
            eps=1e-5,
        )
        logits = x @ model.discriminator.embed_tokens.weight.T + head.bias
        log_probs = logits.log_softmax(-1)
        targets = original[masked]
        gen_loss = -log_probs[torch.arange(len(targets)), targets].mean()
        corrupted = original.clone()
        corrupted[masked] = w5
        replaced = corrupted.ne(original)
        # Masked positions holding w5 already (row 0 pos 2 and 5, row 1 pos 2) count as original.
        assert replaced.nonzero().tolist() == [[0, 3], [1, 4]]
        d = model.discriminator(corrupted)["encoder_out"][0].transpose(0, 1)
        dh = model.discriminator_head
        z = (
            F.gelu(d @ dh.dense.weight.T + dh.dense.bias) @ dh.out_proj.weight.T + dh.out_proj.bias
        ).squeeze(-1)
        p = torch.sigmoid(z)
        y = replaced.double()
        bce = -(y * p.double().log() + (1 - y) * (1 - p.double()).log())
        keep = original.ne(pad)
        disc_loss = bce[keep].mean()
    expected = gen_loss.double() + 50.0 * disc_loss
    assert sample_size == 1
    assert abs(loss.item() - float(expected)) < 1e-5 * max(1.0, float(expected))
    assert abs(float(log["gen_loss_sum"]) - float(gen_loss) * 5) < 1e-4
    assert abs(float(log["disc_loss_sum"]) - float(bce[keep].sum())) < 1e-4
    assert (log["masked"], log["tokens"], log["replaced"], log["original"]) == (5, 14, 2, 12)
    predicted = (z > 0) & keep
    assert log["replaced_detected"] == int((predicted & replaced).sum())
    assert log["original_correct"] == int((~predicted & ~replaced & keep).sum())
    assert float(log["replaced_prob_sum"]) == pytest.approx(float(p[replaced].sum()), abs=1e-5)
    assert float(log["original_prob_sum"]) == pytest.approx(
        float(p[~replaced & keep].sum()), abs=1e-5
    )

    out = model(
        src,
        original_tokens=original,
        masked_tokens=masked,
        generator=torch.Generator().manual_seed(0),
    )
    keys = {
        "generator_logits",
        "generator_targets",
        "sampled_tokens",
        "discriminator_tokens",
        "replaced",
        "discriminator_logits",
    }
    assert set(out) == keys and torch.equal(out["generator_targets"], original[masked])
    assert out["sampled_tokens"].tolist() == [w5] * 5
    # With the likely symbols forbidden, draws still never pick a special one.
    with torch.no_grad():
        model.generator_head.bias.zero_()
        model.generator_head.bias[: dictionary.nspecial] = 80.0
        model.generator_head.bias[mask] = 80.0
    draws = model(
        src,
        original_tokens=original,
        masked_tokens=masked,
        generator=torch.Generator().manual_seed(1),
    )
    assert not model.forbidden[draws["sampled_tokens"]].any()
    assert model.forbidden[[dictionary.bos(), pad, dictionary.eos(), dictionary.unk(), mask]].all()


def test_reduce_metrics_derives_rates_from_summed_counts():
    from fairseq import metrics

    logs = [
        {
            "loss": 2.0,
            "sample_size": 1,
            "gen_loss_sum": 10.0,
            "masked": 4,
            "gen_correct": 1,
            "disc_loss_sum": 3.0,
            "tokens": 30,
            "disc_correct": 27,
            "replaced": 3,
            "replaced_detected": 1,
            "original": 27,
            "original_correct": 26,
            "predicted_replaced": 2,
            "replaced_prob_sum": 1.5,
            "original_prob_sum": 2.7,
        },
        {
            "loss": 4.0,
            "sample_size": 1,
            "gen_loss_sum": 2.0,
            "masked": 1,
            "gen_correct": 1,
            "disc_loss_sum": 1.0,
            "tokens": 10,
            "disc_correct": 10,
            "replaced": 1,
            "replaced_detected": 1,
            "original": 9,
            "original_correct": 9,
            "predicted_replaced": 1,
            "replaced_prob_sum": 0.9,
            "original_prob_sum": 0.9,
        },
    ]
    with metrics.aggregate() as agg:
        BioElectraCriterion.reduce_metrics(logs)
        values = agg.get_smoothed_values()
    assert values["loss"] == pytest.approx(3.0 / math.log(2), abs=1e-3)
    assert values["gen_loss"] == pytest.approx(12 / 5 / math.log(2), abs=1e-4)
    assert values["gen_acc"] == 0.4 and values["disc_acc"] == pytest.approx(37 / 40, abs=1e-4)
    assert (
        values["replaced_recall"] == 0.5 and values["replaced_frac"] == 0.1
    )  # not the mean of 1/3 and 1
    assert values["replaced_precision"] == pytest.approx(2 / 3, abs=1e-4)
    assert values["original_acc"] == pytest.approx(35 / 36, abs=1e-4)
    assert (
        values["replaced_prob"] == pytest.approx(2.4 / 4, abs=1e-4)
        and values["original_prob"] == 0.1
    )
    assert not any(k.startswith("_") for k in values)


def test_task_masks_every_chosen_position_and_keys_the_sampling_seed(data_bin):
    from fairseq_bio.tasks.bio_electra import BioElectraTask, BioElectraTaskConfig

    data = data_bin("bytebpe")
    task = BioElectraTask.setup_task(
        OmegaConf.structured(
            BioElectraTaskConfig(
                data=str(data), tokens_per_sample=64, mask_whole_words=True, seed=3
            )
        )
    )
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    sample = dataset.collater([dataset[i] for i in range(8)])
    out = task.mask_sample(sample, 0.15, stream=7)
    src, target, original = out["net_input"]["src_tokens"], out["target"], out["original_tokens"]
    chosen = target.ne(task.source_dictionary.pad())
    assert chosen.sum() > 0
    assert torch.equal(original, sample["net_input"]["src_tokens"])
    assert (src[chosen] == task.mask_idx).all()  # [MASK] at every chosen position (no 80/10/10)
    assert torch.equal(src[~chosen], original[~chosen]) and torch.equal(
        target[chosen], original[chosen]
    )
    again = task.mask_sample(sample, 0.15, stream=7)
    assert again["sampling_seed"] == out["sampling_seed"] and torch.equal(
        again["net_input"]["src_tokens"], src
    )
    assert task.mask_sample(sample, 0.15, stream=8)["sampling_seed"] != out["sampling_seed"]


def test_phase_2_grows_the_position_table_on_loading():
    short, _, _ = build(max_positions=8)
    long, _, _ = build(max_positions=16)
    fresh = long.discriminator.embed_positions.weight.detach().clone()
    long.load_state_dict(short.state_dict(), strict=True)
    grown = long.discriminator.embed_positions.weight
    saved = short.discriminator.embed_positions.weight
    assert grown.shape == (16 + 2, 32) and torch.equal(grown[: saved.size(0)], saved)
    assert torch.equal(
        grown[saved.size(0) :], fresh[saved.size(0) :]
    )  # positions phase 1 never had: initialised
    assert long.generator.embed_positions.weight is grown


def test_discriminator_sees_the_samples_in_place_and_labels_line_up_on_pubmed(data_bin):
    """Real blocks through the task's masker and an untrained generator: the discriminator's actual
    input is the original with the draws at exactly the masked positions (row-major, no shift, never
    <s>, </s> or pad), the labels are "input differs from the original", and an oracle head reading
    those labels scores loss ~0.
    """
    from fairseq_bio.tasks.bio_electra import BioElectraTask, BioElectraTaskConfig

    task = BioElectraTask.setup_task(
        OmegaConf.structured(
            BioElectraTaskConfig(
                data=str(data_bin("bytebpe")), tokens_per_sample=64, mask_whole_words=True, seed=5
            )
        )
    )
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    sample = task.mask_sample(dataset.collater([dataset[i] for i in range(16)]), 0.15, stream=3)
    dictionary = task.source_dictionary
    pad, bos, eos = dictionary.pad(), dictionary.bos(), dictionary.eos()
    original, masked = sample["original_tokens"], sample["target"].ne(pad)
    assert original.eq(pad).any() and (original[:, 0] == bos).all()  # padded rows, <s> first
    assert not masked[:, 0].any() and not masked[original.eq(eos) | original.eq(pad)].any()

    cfg = OmegaConf.structured(BioElectraConfig(**{**TINY, "max_positions": 64}))
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = BioElectraModel.build_model(cfg, task)
    model.eval()
    seen = []
    model.discriminator.register_forward_pre_hook(lambda module, args: seen.append(args[0].clone()))
    out = model(
        **sample["net_input"],
        original_tokens=original,
        masked_tokens=masked,
        generator=torch.Generator().manual_seed(sample["sampling_seed"]),
    )
    (disc_input,) = seen
    assert torch.equal(disc_input, out["discriminator_tokens"])
    assert torch.equal(
        disc_input[~masked], original[~masked]
    )  # <s>, </s>, pad and unmasked tokens untouched
    assert torch.equal(disc_input[masked], out["sampled_tokens"])  # the draws, in row-major order
    assert (
        torch.equal(out["replaced"], disc_input.ne(original)) and not out["replaced"][~masked].any()
    )
    # An untrained generator draws ~uniformly from ~3000 symbols: nearly every masked position is
    # replaced.
    assert out["replaced"].sum() >= 0.95 * masked.sum() > 0

    # The criterion's labels sit at the same positions: a head that answers the truth scores ~0 and
    # recall 1; the same answer one position off misses replacements (whole words: spans overlap
    # their shift only in part).
    criterion = BioElectraCriterion(task)
    for shift, good in ((0, True), (1, False)):
        truth = out["replaced"].roll(shift, dims=1)
        handle = model.discriminator_head.register_forward_hook(
            lambda m, a, o: (truth.float() * 2 - 1) * 30.0
        )
        with torch.no_grad():
            _, _, log = criterion(model, sample)
        handle.remove()
        if good:
            assert (
                float(log["disc_loss_sum"]) < 1e-6
                and log["replaced_detected"] == log["replaced"] > 0
            )
            assert log["disc_correct"] == log["tokens"]
        else:
            assert (
                log["replaced_detected"] < 0.8 * log["replaced"]
                and float(log["disc_loss_sum"]) > 1000
            )


def test_restored_optimizer_state_grows_with_the_position_table():
    """Per-parameter state (fp32, memory-efficient fp16) and fairseq's flat fp16 master copy: the
    phase-1 moments are kept where they were, the new position rows get zeros; any other misfit is
    refused in one line.
    """
    from fairseq_bio.tasks.bio_electra import grow_optimizer_state

    short, dictionary, _ = build(max_positions=8)
    criterion = BioElectraCriterion(DictionaryTask(dictionary))

    def stepped(params):
        optimizer = torch.optim.Adam(params, lr=1e-3)
        for p in params:
            p.grad = torch.randn_like(p)
        optimizer.step()
        return optimizer

    def flat(model):
        return torch.nn.Parameter(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))

    for flattened in (False, True):
        long, _, _ = build(max_positions=16)
        long.load_state_dict(short.state_dict())
        old_rows, positions = long.grown_positions_from, long.discriminator.embed_positions.weight
        assert (old_rows, positions.size(0)) == (10, 18)
        old_params = [flat(short)] if flattened else list(short.parameters())
        new_params = [flat(long)] if flattened else list(long.parameters())
        saved = stepped(old_params).state_dict()
        optimizer = torch.optim.Adam(new_params, lr=1e-3)
        optimizer.load_state_dict(saved)
        grow_optimizer_state(optimizer, long, criterion, positions, old_rows)
        for key in ("exp_avg", "exp_avg_sq"):
            new = [optimizer.state[p][key] for p in new_params]
            old = [saved["state"][i][key] for i in range(len(old_params))]
            if flattened:  # back to per-parameter pieces, in the order fairseq flattens them
                new = list(new[0].split([p.numel() for p in long.parameters()]))
                old = list(old[0].split([p.numel() for p in short.parameters()]))
            for (name, param), n, o in zip(long.named_parameters(), new, old):
                n = n.view(param.shape)
                if param is positions:
                    assert (
                        torch.equal(n[:old_rows], o.view(old_rows, -1)) and not n[old_rows:].any()
                    ), key
                else:
                    assert torch.equal(n, o.view(param.shape)), (key, name)
        for p in new_params:
            p.grad = torch.ones_like(p)
        optimizer.step()  # the grown state fits

    wrong = torch.optim.Adam([positions], lr=1e-3)
    wrong.state[positions] = {"exp_avg": torch.zeros(3, 3)}
    with pytest.raises(
        ValueError, match="does not fit a parameter of shape .* checkpoint.reset_optimizer=true"
    ):
        grow_optimizer_state(wrong, long, criterion, positions, old_rows)


def test_fairseq_train_command_line_trains_bio_electra(data_bin, tmp_path):
    """The argparse form, ``fairseq-train --task bio_electra --arch bio_electra_tiny`` (fairseq
    gives the model only the options typed, the architecture fills the rest): it trained nothing
    before (``Namespace`` has no ``encoder_normalize_before``). 4 updates on real PubMed blocks,
    every replaced-token statistic logged.
    """
    from conftest import logged, run_cli

    from fairseq_bio import runs

    log = tmp_path / "train.log"
    run_cli(
        runs.train(
            data_bin(),
            "--task",
            "bio_electra",
            "--arch",
            "bio_electra_tiny",
            "--criterion",
            "bio_electra",
            "--optimizer",
            "bio_adamw",
            "--lr",
            "1e-4",
            "--max-update",
            "4",
            "--batch-size",
            "4",
            "--tokens-per-sample",
            "128",
            "--no-save",
            "--disable-validation",
            "--log-format",
            "json",
            "--log-interval",
            "1",
            "--log-file",
            log,
        ),
        cwd=tmp_path,
    )
    steps = logged(log, "train_inner")
    assert sorted(steps) == [1, 2, 3, 4]
    for entry in steps.values():
        assert math.isfinite(float(entry["loss"])) and 0 < float(entry["replaced_frac"]) < 0.5
        assert 0 <= float(entry["disc_acc"]) <= 1 and 0 < float(entry["replaced_prob"]) < 1

"""``precision=memory_efficient_fp16|bf16`` with ``optimizer._name=bio_adamw``: fairseq's
``MemoryEfficientFP16Optimizer`` steps bio_adamw on the fp16/bf16 weights themselves, and bio_adamw
(``FP32StateAdamW``) keeps their moments in fp32 and updates them through fp32 copies.

- The plugin's trainer, on the pretraining recipe's tiny encoder: after ``STEPS`` updates the
  weights and moments are, bit for bit, torch's AdamW run on fp32 copies of the same gradients
  whose weights are rounded to the low precision after every update (what a weight stored in that
  precision is), and within those roundings of an fp32 master copy never rounded.
- fp32 weights keep torch's own AdamW; the chunking does not change an update.
- The second moment decays in fp32 where torch's AdamW on bf16 weights freezes it, and fp16's small
  squared gradients survive where torch's underflow to 0.
- A checkpoint (``Trainer.save_checkpoint`` / ``load_checkpoint``) restores fp32 moments, and the
  resumed trainer's next update is the uninterrupted one's, bit for bit.
- fairseq-hydra-train of the tiny pretraining config in ``memory_efficient_bf16`` trains.
"""

import copy

import pytest
import torch
from conftest import logged, run_cli
from fairseq import metrics
from fairseq.optim.fp16_optimizer import MemoryEfficientFP16Optimizer
from helpers.trainers import STEPS, plugin_trainer, pretraining_setup
from helpers.trainers import vocab_dir  # noqa: F401  (a fixture)

from fairseq_bio import runs
from fairseq_bio.checkpoints import load_checkpoint
from fairseq_bio.optim.bio_adamw import FP32StateAdamW

PRECISIONS = ["memory_efficient_bf16", "memory_efficient_fp16"]
DTYPE = {"memory_efficient_bf16": torch.bfloat16, "memory_efficient_fp16": torch.float16}
MOMENTS = ("exp_avg", "exp_avg_sq")
# the tiny config smaller still, so that fairseq-hydra-train's run takes seconds
SMALL = [
    "model.encoder_layers=2",
    "model.encoder_embed_dim=64",
    "model.encoder_ffn_embed_dim=128",
    "model.encoder_attention_heads=2",
    "task.tokens_per_sample=64",
    "model.max_positions=64",
    "dataset.batch_size=8",
]


def memory_efficient_trainer(vocab_dir, precision):
    """The plugin's trainer (what fairseq-train builds) with bio_adamw in ``precision``: (trainer,
    sample, the torch optimizer)."""
    cfg, task, model, criterion, sample = pretraining_setup(
        vocab_dir, precision, "optimizer._name=bio_adamw"
    )
    trainer = plugin_trainer()(cfg, task, model, criterion)
    assert type(trainer.optimizer) is MemoryEfficientFP16Optimizer
    adamw = trainer.optimizer.optimizer
    assert type(adamw) is FP32StateAdamW
    return trainer, sample, adamw


def train_steps(trainer, sample, steps):
    for _ in range(steps):
        with metrics.aggregate(new_root=True):
            trainer.train_step([copy.deepcopy(sample)])


def record_steps(adamw):
    """Before each of ``adamw``'s steps: every group's lr and its weights and gradients as
    stepped (after the wrapper's unscaling and clipping)."""
    seen = []

    def hook(optimizer, args, kwargs):
        seen.append(
            [
                (
                    group["lr"],
                    [p.detach().clone() for p in group["params"]],
                    [p.grad.detach().clone() for p in group["params"]],
                )
                for group in optimizer.param_groups
            ]
        )

    adamw.register_step_pre_hook(hook)
    return seen


def reference_adamw(adamw, seen, round_to=None, **kernel):
    """torch's AdamW on fp32 copies of the weights ``adamw`` started from, stepped with the recorded
    gradients (as fp32) and learning rates; ``round_to``: the copies rounded to that dtype after
    every update. (the reference optimizer, its weights per group)."""
    masters = [[w.float() for w in weights] for _, weights, _ in seen[0]]
    groups = [
        {key: value for key, value in group.items() if key not in ("params", "fused", "foreach")}
        for group in adamw.param_groups
    ]
    reference = torch.optim.AdamW(
        [{**g, "params": m} for g, m in zip(groups, masters)],
        fused=adamw.defaults["fused"],
        foreach=adamw.defaults["foreach"],
    )
    for step in seen:
        for group, weights, (lr, _, grads) in zip(reference.param_groups, masters, step):
            group["lr"] = lr
            for w, g in zip(weights, grads):
                w.grad = g.float()
        reference.step()
        if round_to is not None:
            with torch.no_grad():
                for w in (w for weights in masters for w in weights):
                    w.copy_(w.to(round_to))
    return reference, masters


@pytest.mark.parametrize("precision", PRECISIONS)
def test_updates_are_torchs_adamw_on_fp32_copies_with_fp32_moments(precision, vocab_dir):
    """``STEPS`` updates of the plugin's trainer: every moment is fp32; weights and moments equal
    (bit for bit) torch's AdamW on fp32 copies given the same gradients, the copies rounded to the
    weights' dtype after every update; against an fp32 master copy never rounded the weights differ
    by at most one rounding per update (half a unit in the last place each)."""
    dtype = DTYPE[precision]
    trainer, sample, adamw = memory_efficient_trainer(vocab_dir, precision)
    seen = record_steps(adamw)
    train_steps(trainer, sample, STEPS)
    assert len(seen) == STEPS
    params = [p for group in adamw.param_groups for p in group["params"]]
    assert all(p.dtype == dtype for p in params) and len(params) > 10
    for p in params:
        state = adamw.state[p]
        assert all(state[key].dtype == torch.float32 for key in MOMENTS)
        assert float(state["step"]) == STEPS
    names = {id(p): n for n, p in trainer.model.named_parameters()}
    start = [w for _, weights, _ in seen[0] for w in weights]  # before the first update
    still = sorted(names[id(p)] for p, w in zip(params, start) if torch.equal(p, w))
    # only LayerNorm weights, at 1.0, whose updates (1e-3) are below half a bf16 unit there, and
    # the key biases, whose gradient softmax cancels (0 in fp16 here)
    unmoved = ("layer_norm.weight", "layernorm_embedding.weight", "k_proj.bias")
    assert all(n.endswith(unmoved) for n in still), still
    assert len(still) < len(params) // 4

    rounded, weights = reference_adamw(adamw, seen, round_to=dtype)
    for p, w in zip(params, (w for ws in weights for w in ws)):
        assert torch.equal(p.float(), w)
        for key in MOMENTS:
            assert torch.equal(adamw.state[p][key], rounded.state[w][key])

    # Against fp32 master weights never rounded: each update's rounding moves a weight by at most
    # half a unit in the last place of the rounded weight (eps / 2 x its size), and these add up
    _, masters = reference_adamw(adamw, seen)
    # each parameter's stored weights before updates 2..STEPS
    after = zip(*([w for _, weights, _ in step for w in weights] for step in seen[1:]))
    for p, master, stored in zip(params, (w for ws in masters for w in ws), after):
        trajectory = [*stored, p.detach()]
        half_ulps = sum(w.detach().float().abs() for w in trajectory) * torch.finfo(dtype).eps / 2
        difference = (p.float() - master).abs()
        # (measured: at most 0.78 of that sum in bf16, 0.80 in fp16)
        assert bool((difference <= half_ulps * (1 + 1e-3) + 1e-12).all())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_moments_stay_fp32_where_torchs_adamw_loses_them(dtype):
    """bf16: a gradient of 1 then 0s; the fp32 second moment decays by beta2 every update as in
    fp32, where torch's AdamW on bf16 weights keeps it in bf16 and 0.999 x v rounds back to v. fp16:
    a gradient of 1e-4, whose square's share (1e-11) underflows in fp16 and not in fp32."""
    weight = torch.ones(4, dtype=dtype)
    ours = torch.nn.Parameter(weight.clone())
    torchs = torch.nn.Parameter(weight.clone())
    exact = torch.nn.Parameter(weight.float())
    optimizers = [
        FP32StateAdamW([ours], lr=1e-3, fused=True),
        torch.optim.AdamW([torchs], lr=1e-3, fused=True),
        torch.optim.AdamW([exact], lr=1e-3, fused=True),
    ]
    grads = [1.0, 0.0, 0.0] if dtype == torch.bfloat16 else [1e-4]
    for g in grads:
        for p, optimizer in zip((ours, torchs, exact), optimizers):
            p.grad = torch.full((4,), g, dtype=dtype).to(p.dtype)  # the same value for all three
            optimizer.step()
    v_ours, v_torch, v_exact = (
        o.state[p]["exp_avg_sq"] for o, p in zip(optimizers, (ours, torchs, exact))
    )
    assert v_ours.dtype == torch.float32 and v_torch.dtype == dtype
    assert torch.equal(v_ours, v_exact) and bool((v_ours > 0).all())
    if dtype == torch.bfloat16:
        assert torch.equal(v_ours, torch.full_like(v_ours, 1e-3) * 0.999 * 0.999)
        assert float(v_torch[0]) == pytest.approx(1e-3, rel=2**-8)  # not decayed
    else:
        assert torch.equal(v_torch, torch.zeros_like(v_torch))


def test_fp32_weights_keep_torchs_adamw_and_chunks_leave_the_update_alone():
    """bio_adamw on fp32 weights builds torch's own AdamW (its path unchanged); on bf16 weights
    ``FP32StateAdamW``, whose update does not depend on how the weights are chunked, and whose fp32
    weights in the same group are updated as torch's AdamW updates them."""
    from fairseq_bio.optim.bio_adamw import BioAdamW, BioAdamWConfig

    cfg = BioAdamWConfig(lr=[1e-3], weight_decay=0.01)
    assert type(BioAdamW(cfg, [torch.nn.Parameter(torch.ones(3))]).optimizer) is torch.optim.AdamW
    low = BioAdamW(cfg, [torch.nn.Parameter(torch.ones(3, dtype=torch.bfloat16))])
    assert type(low.optimizer) is FP32StateAdamW and low.supports_memory_efficient_fp16

    torch.manual_seed(0)
    shapes = [(7, 5), (5,), (16,), (3, 3)]
    start = [torch.randn(s) for s in shapes]
    runs = []
    for chunk_numel in (1, 20, 1 << 24):
        weights = [torch.nn.Parameter(w.to(torch.bfloat16)) for w in start[:3]]
        weights.append(torch.nn.Parameter(start[3].clone()))  # an fp32 weight beside them
        adamw = FP32StateAdamW(weights, lr=1e-2, weight_decay=0.01, fused=True)
        adamw.chunk_numel = chunk_numel
        for step in range(3):
            for i, w in enumerate(weights):
                g = torch.Generator().manual_seed(step * 10 + i)
                w.grad = torch.randn(shapes[i], generator=g).to(w.dtype)
            adamw.step()
        runs.append((weights, adamw))
    for weights, adamw in runs[1:]:
        for w, first in zip(weights, runs[0][0]):
            assert torch.equal(w, first)
            assert torch.equal(adamw.state[w]["exp_avg_sq"], runs[0][1].state[first]["exp_avg_sq"])
    fp32 = torch.nn.Parameter(start[3].clone())
    plain = torch.optim.AdamW([fp32], lr=1e-2, weight_decay=0.01, fused=True)
    for step in range(3):
        fp32.grad = torch.randn(shapes[3], generator=torch.Generator().manual_seed(step * 10 + 3))
        plain.step()
    assert torch.equal(runs[0][0][3], fp32)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_checkpoint_restores_fp32_moments_and_resumes_exactly(precision, vocab_dir, tmp_path):
    """Two updates, a checkpoint, a third update; a fresh trainer restored from the checkpoint (the
    weights, the wrapper's optimizer state, the update count) makes the same third update, bit for
    bit. torch's own loading would have cast the fp32 moments to the weights' dtype."""
    trainer, sample, adamw = memory_efficient_trainer(vocab_dir, precision)
    train_steps(trainer, sample, 2)
    checkpoint = tmp_path / "checkpoint.pt"
    trainer.consolidate_optimizer()  # as fairseq's save_checkpoint does first
    trainer.save_checkpoint(str(checkpoint), {})

    saved = load_checkpoint(checkpoint)["last_optimizer_state"]
    plain = torch.optim.AdamW([p.detach().clone() for g in adamw.param_groups for p in g["params"]])
    plain.load_state_dict(copy.deepcopy(saved))
    assert all(s["exp_avg_sq"].dtype == DTYPE[precision] for s in plain.state.values())

    restored, _, _ = memory_efficient_trainer(vocab_dir, precision)
    restored.load_checkpoint(str(checkpoint))  # builds its optimizer anew, then loads the state
    restored_adamw = restored.optimizer.optimizer
    assert type(restored_adamw) is FP32StateAdamW
    assert restored.get_num_updates() == 2
    params = [p for g in adamw.param_groups for p in g["params"]]
    again = [p for g in restored_adamw.param_groups for p in g["params"]]
    for p, q in zip(params, again, strict=True):
        assert torch.equal(p, q)
        for key in MOMENTS:
            moment = restored_adamw.state[q][key]
            assert moment.dtype == torch.float32 and torch.equal(moment, adamw.state[p][key])

    train_steps(trainer, sample, 1)
    train_steps(restored, sample, 1)
    for p, q in zip(params, again):
        assert torch.equal(p, q)
        for key in (*MOMENTS, "step"):
            assert torch.equal(restored_adamw.state[q][key], adamw.state[p][key])


def test_fairseq_hydra_train_in_memory_efficient_bf16_trains(data_bin, tmp_path):
    """fairseq-hydra-train, the tiny pretraining config, ``precision=memory_efficient_bf16`` with
    bio_adamw on CPU: it trains (the loss falls) and saves a checkpoint whose moments are fp32."""
    log = tmp_path / "train.log"
    run_cli(
        runs.hydra_train(
            "bio_roberta_tiny",
            f"task.data={data_bin('bytebpe')}",
            "precision=memory_efficient_bf16",
            "optimizer._name=bio_adamw",
            *SMALL,
            "optimization.max_update=30",
            "optimization.lr=[0.002]",
            "lr_scheduler.warmup_updates=5",
            "dataset.disable_validation=true",
            "checkpoint.save_interval_updates=100000",
            "common.log_interval=5",
            save_dir=tmp_path,
            log=log,
        ),
        cwd=tmp_path,
        timeout=300,
    )
    losses = [float(entry["loss"]) for entry in logged(log, "train_inner").values()]
    assert len(losses) >= 4 and losses[-1] < losses[0] - 0.5, losses
    state = load_checkpoint(tmp_path / "checkpoint_last.pt")
    moments = [s["exp_avg_sq"] for s in state["last_optimizer_state"]["state"].values()]
    assert moments and all(m.dtype == torch.float32 for m in moments)

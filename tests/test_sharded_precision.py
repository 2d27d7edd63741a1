"""Fully sharded data parallel in bf16 and fp16 (FSDP2's mixed precision through
``fairseq_bio.patches.sharded``) on this CPU, two gloo ranks.

- bf16: two real fairseq-hydra-train ranks, sharded against plain data parallel in bf16 (same ranks,
  batches and initial weights): the same losses and gradient norms, weights within bf16's rounding;
  the checkpoint is consolidated and holds the fp32 master weights; a run restored from its
  scheduled save ends bit-identical to the uninterrupted one.
- fp16: both ranks' trainers in-process, stepped as fairseq's ``train_step`` steps them. An fp16
  overflow, and an inf in only one rank's gradient shard, make both ranks skip the same update and
  halve the loss scale alike, the weights and Adam states untouched; the next update applies.
- ``memory_efficient_*`` with ``bio_adamw`` (not sharded; with ``fully_sharded`` it is refused,
  test_sharded.py) keeps the fp32 moments torch's AdamW would keep in fp16 / bf16.
"""

import copy
import os

import pytest
import torch
from conftest import logged
from helpers.checkpoints import parameters
from helpers.slurm import free_port, slurm, slurm_job, two_tasks  # noqa: F401  (slurm: a fixture)
from helpers.trainers import vocab_dir  # noqa: F401  (a fixture)
from test_sharded import SHARDED, mlm
from training_processes import losses, updates_in

from fairseq_bio import checkpoints

UPDATES = 10
SAVE_AT = 5
BF16 = [
    "precision=bf16",
    f"optimization.max_update={UPDATES}",
    f"checkpoint.save_interval_updates={SAVE_AT}",
    "checkpoint.keep_interval_updates=2",
]
# bf16 keeps 8 significant bits: one rounding is up to 2^-9 (0.2 %) of a value. The two runs differ
# by such roundings only: the plain run's fp32 master weights start from its bf16-rounded initial
# weights and DDP sums its gradients in bf16, where FSDP2 keeps fp32 weights and sums in fp32. Adam
# scales each coordinate's update to about the learning rate whatever the gradient's size, so
# relative gradient differences of 0.2 % become update differences of the same order, accumulating
# over 10 updates: each weight tensor within 2 % (ten roundings) of its norm, the losses and
# gradient norms within 0.5 %.
WEIGHTS_RTOL = 0.02
LOGGED_RTOL = 0.005


@pytest.fixture(scope="module")
def bf16_runs(data_bin, tmp_path_factory):
    """save_dirs of the plain (DDP) and the sharded two-rank bf16 run, side by side."""
    root = tmp_path_factory.mktemp("sharded-bf16")
    env = slurm_job(root)
    config, *overrides = mlm(data_bin, *BF16)
    plain = two_tasks(config, root / "plain", env, *overrides)
    sharded = two_tasks(config, root / "sharded", env, *overrides, SHARDED)
    for run in (*plain, *sharded):
        assert run.finish() == 0, run.output()
    return {
        "plain": root / "plain",
        "sharded": root / "sharded",
        "output": sharded[0].output(whole=True),
    }


def test_sharded_bf16_matches_plain_bf16(bf16_runs):
    plain, sharded = bf16_runs["plain"], bf16_runs["sharded"]
    assert "weights in fp32, computed in torch.bfloat16" in bf16_runs["output"]
    a, b = parameters(plain / "checkpoint_last.pt"), parameters(sharded / "checkpoint_last.pt")
    assert a.keys() == b.keys() and all(type(v) is torch.Tensor for v in b.values())
    compared = 0
    for name, weight in a.items():
        assert b[name].shape == weight.shape and b[name].dtype == torch.float32, name
        if name.endswith("k_proj.bias") or not weight.is_floating_point():
            # softmax cancels the key bias (its gradient is 0 in exact arithmetic): Adam makes
            # lr-sized steps out of the rounding noise in its place
            continue
        difference = float((b[name] - weight).norm() / weight.norm())
        assert difference < WEIGHTS_RTOL, (name, difference)
        compared += 1
    assert compared >= len(a) - 3
    # fairseq saves the plain run's bf16 weights (widened to fp32); the sharded run's checkpoint
    # holds FSDP2's fp32 master weights, which bf16 cannot represent
    embed = "encoder.sentence_encoder.embed_tokens.weight"
    assert torch.equal(a[embed], a[embed].bfloat16().float())
    assert not torch.equal(b[embed], b[embed].bfloat16().float())

    state_a, state_b = (
        checkpoints.load_checkpoint(d / "checkpoint_last.pt")["last_optimizer_state"]
        for d in (plain, sharded)
    )
    assert state_a["state"].keys() == state_b["state"].keys()
    for i, state in state_b["state"].items():
        for key in ("exp_avg", "exp_avg_sq"):
            assert type(state[key]) is torch.Tensor
            assert state[key].shape == state_a["state"][i][key].shape
    assert "loss_scale" not in state_b  # bf16: no loss scaling

    for key in ("loss", "gnorm"):
        ours, theirs = (
            {u: float(e[key]) for u, e in logged(f"{d}.log", "train_inner").items()}
            for d in (sharded, plain)
        )
        assert sorted(ours) == list(range(1, UPDATES + 1))
        assert ours == pytest.approx(theirs, rel=LOGGED_RTOL), key


def test_a_sharded_bf16_run_resumes_exactly(bf16_runs, data_bin, slurm, tmp_path):  # noqa: F811
    """From the uninterrupted run's scheduled save at update 5 (fp32 master weights, Adam states,
    data position), a new sharded run ends where the uninterrupted one ended, bit for bit."""
    saved = bf16_runs["sharded"] / f"checkpoint_1_{SAVE_AT}.pt"
    assert updates_in(saved) == SAVE_AT
    config, *overrides = mlm(data_bin, *BF16, SHARDED, f"checkpoint.restore_file={saved}")
    resumed = two_tasks(config, tmp_path / "run", slurm, *overrides)
    assert [r.finish() for r in resumed] == [0, 0], resumed[0].output()
    assert f"Loaded checkpoint {saved} (epoch 1 @ {SAVE_AT} updates)" in resumed[0].output(
        whole=True
    )
    uninterrupted = parameters(bf16_runs["sharded"] / "checkpoint_last.pt")
    after = parameters(tmp_path / "run" / "checkpoint_last.pt")
    assert all(torch.equal(uninterrupted[k], after[k]) for k in uninterrupted), "not bit-identical"
    their_losses = losses(f"{bf16_runs['sharded']}.log")
    assert losses(f"{tmp_path / 'run'}.log") == {
        u: v for u, v in their_losses.items() if u > SAVE_AT
    }


# --- fp16: the loss scaler on two ranks, in-process ----------------------------------------------


def fp16_rank(rank, port, vocab, out):
    """One rank of the fp16 test (a ``torch.multiprocessing.spawn`` target): a sharded fp16 trainer
    of the pretraining recipe's tiny encoder, stepped as fairseq's ``train_step`` steps it; what it
    saw saved to ``out/rank<rank>.pt``."""
    import torch.distributed as dist
    from fairseq import metrics
    from helpers.trainers import plugin_trainer, pretraining_setup

    from fairseq_bio.patches.sharded import ShardedFP16Optimizer

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="localhost", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    cfg, task, model, criterion, sample = pretraining_setup(
        vocab,
        "fp16",
        SHARDED,
        "distributed_training.distributed_world_size=2",
        f"distributed_training.distributed_rank={rank}",
    )
    trainer = plugin_trainer()(cfg, task, model, criterion)
    optimizer = trainer.optimizer
    params = list(optimizer.params)
    seen = {"wrapper": type(optimizer).__name__, "scales": [optimizer.scaler.loss_scale]}

    def local():  # this rank's shards of the weights and Adam's moments
        state = optimizer.optimizer.state
        moments = [v for p in params for v in state.get(p, {}).values() if torch.is_tensor(v)]
        return [t.to_local().clone() for t in params + moments if t.dim() > 0]

    def train_step():
        with metrics.aggregate(new_root=True):
            trainer.train_step([copy.deepcopy(sample)])
        seen["scales"].append(optimizer.scaler.loss_scale)

    def overflowing_step(loss_factor=1.0, poison=None):
        """``train_step`` up to the overflow check, by hand: on this CPU fairseq's own
        ``OverflowError`` handler ends in ``torch.tensor(0.0).cuda()``."""
        trainer.zero_grad()
        sample_ = task.mask_sample(copy.deepcopy(sample), task.cfg.mask_prob, stream=0)
        loss, size, _ = trainer.criterion(trainer.model, sample_)
        optimizer.backward(loss * loss_factor)  # the scaled loss, fp16 backward
        optimizer.multiply_grads(2 / (2 * float(size)))  # world / both ranks' size, as train_step
        if poison is not None:
            poison()
        seen["local grads finite"] = seen.get("local grads finite", []) + [
            all(bool(torch.isfinite(p.grad.to_local()).all()) for p in params)
        ]
        before = local()
        try:
            trainer.clip_grad_norm(cfg.optimization.clip_norm)
            seen["overflows"] = seen.get("overflows", []) + [None]
            optimizer.step()
        except OverflowError as e:  # what fairseq's handler does next: no step
            seen["overflows"] = seen.get("overflows", []) + [str(e)]
            trainer.zero_grad()
        seen["scales"].append(optimizer.scaler.loss_scale)
        seen["untouched"] = seen.get("untouched", []) + [
            all(torch.equal(x, y) for x, y in zip(before, local()))
        ]

    def inf_on_rank_1():  # into an element only rank 1 holds
        if rank == 1:
            params[0].grad.to_local().view(-1)[0] = float("inf")

    train_step()  # scale 128
    seen["updates"] = [trainer.get_num_updates()]
    # rank 1's loss x 1e30: its fp16 gradients overflow, FSDP2 sums the infs into every shard
    overflowing_step(loss_factor=1e30 if rank == 1 else 1.0)
    overflowing_step(poison=inf_on_rank_1)  # only rank 1's own shard: the all-reduced norm decides
    seen["updates"].append(trainer.get_num_updates())
    weights = local()
    train_step()  # at the lowered scale: applied
    seen["updates"].append(trainer.get_num_updates())
    seen["moved"] = not all(torch.equal(x, y) for x, y in zip(weights, local()))
    seen["isinstance"] = isinstance(optimizer, ShardedFP16Optimizer)
    with torch.no_grad():
        seen["logits dtype"] = str(trainer.model(**sample["net_input"])[0].dtype)
    trainer.consolidate_optimizer()  # as fairseq's save_checkpoint, then its state dict:
    state = trainer.state_dict()  # consolidated, a collective; rank 0 keeps it
    if rank == 0:
        seen["saved loss scale"] = state["last_optimizer_state"]["loss_scale"]
        moments = next(iter(state["last_optimizer_state"]["state"].values()))
        seen["saved optimizer"] = type(moments["exp_avg"]).__name__
    torch.save(seen, out / f"rank{rank}.pt")
    dist.destroy_process_group()


def test_an_fp16_overflow_skips_the_same_update_on_every_rank(vocab_dir, tmp_path):  # noqa: F811
    """Loss scale 128: an update, then rank 1's loss x 1e30 (its fp16 gradients overflow, FSDP2's
    fp32 reduction carries the infs into both ranks' shards), then an inf put into rank 1's own
    shard alone (rank 0's shards finite: only the all-reduced norm tells it). Both ranks skip both
    updates with fairseq's message, the scale 128 -> 64 -> 32, weights and Adam's moments untouched;
    the next update at 32 applies. fp16 runs on this CPU (torch's CPU kernels take it); fairseq's
    own overflow handler does not (``torch.tensor(0.0).cuda()``), so the overflowing updates are
    stepped by hand, the others by ``train_step``."""
    torch.multiprocessing.spawn(fp16_rank, (free_port(), vocab_dir, tmp_path), nprocs=2)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    for seen in ranks:
        assert seen["wrapper"] == "ShardedFP16Optimizer" and seen["isinstance"]
        assert seen["logits dtype"] == "torch.float16"  # FSDP2 computes in fp16
        # both overflows skipped on both ranks, fairseq's message; the scale halved each time
        assert seen["overflows"] == ["setting loss scale to: 64.0", "setting loss scale to: 32.0"]
        assert seen["scales"] == [128, 128, 64.0, 32.0, 32.0]
        assert seen["untouched"] == [True, True]  # weights and Adam's moments
        assert seen["updates"] == [1, 1, 2] and seen["moved"]
    # the second overflow: rank 0's own shards were finite, its decision the all-reduced norm's
    assert ranks[0]["local grads finite"] == [False, True]
    assert ranks[1]["local grads finite"] == [False, False]
    assert ranks[0]["saved loss scale"] == 32.0 and ranks[0]["saved optimizer"] == "Tensor"


# --- memory_efficient_* --------------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["memory_efficient_fp16", "memory_efficient_bf16"])
def test_memory_efficient_precisions_give_bio_adamw_fp32_moments(
    precision, vocab_dir
):  # noqa: F811
    """fairseq's memory-efficient wrapper keeps no fp32 copy of the weights, so the optimizer must
    keep fp32 moments itself. torch's AdamW keeps them in the weights' dtype: bf16's second moment
    stops decaying (0.999 x v rounds back to v) and fp16's squared gradients of 1e-4 underflow to 0.
    bio_adamw keeps them in fp32 for fp16/bf16 weights: the plugin's trainer takes the pair (without
    ``fully_sharded``: test_sharded.py refuses memory_efficient_* there) and its updates keep fp32
    moments; the same two gradients give the fp32 values torch's AdamW loses."""
    from helpers.trainers import STEPS, plugin_trainer, trained

    from fairseq_bio.optim.bio_adamw import FP32StateAdamW

    dtype = torch.bfloat16 if "bf16" in precision else torch.float16
    trainer, norms = trained(plugin_trainer(), vocab_dir, precision, "optimizer._name=bio_adamw")
    assert type(trainer.optimizer).__name__ == "MemoryEfficientFP16Optimizer"
    adamw = trainer.optimizer.optimizer
    assert type(adamw) is FP32StateAdamW and len(norms) == STEPS
    for group in adamw.param_groups:
        for p in group["params"]:
            assert p.dtype == dtype
            state = adamw.state[p]
            assert state["exp_avg"].dtype == state["exp_avg_sq"].dtype == torch.float32

    weights = [torch.nn.Parameter(torch.ones(4, dtype=dtype)) for _ in range(2)]
    torchs, ours = (
        cls([w], lr=1e-3, betas=(0.9, 0.999), fused=True)
        for cls, w in zip((torch.optim.AdamW, FP32StateAdamW), weights)
    )
    for w in weights:
        w.grad = torch.full_like(w, 1.0 if dtype == torch.bfloat16 else 1e-4)
    torchs.step(), ours.step()
    v_torch, v_ours = torchs.state[weights[0]]["exp_avg_sq"], ours.state[weights[1]]["exp_avg_sq"]
    assert v_torch.dtype == dtype and v_ours.dtype == torch.float32
    if dtype == torch.bfloat16:
        first_torch, first_ours = v_torch.clone(), v_ours.clone()
        for w in weights:
            w.grad = torch.zeros_like(w)
        torchs.step(), ours.step()  # fp32: v x 0.999
        assert torch.equal(v_torch, first_torch)
        assert torch.equal(v_ours, first_ours * 0.999)
    else:
        assert torch.equal(v_torch, torch.zeros_like(v_torch))  # 0.001 x 1e-8: below fp16's range
        assert bool((v_ours > 0).all())

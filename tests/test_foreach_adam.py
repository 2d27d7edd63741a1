"""``fairseq_bio.patches.foreach_adam``: fairseq's ``adam`` updating with multi-tensor kernels. What
it must keep is fairseq's arithmetic and state, bit for bit (a step is the same statements in the
same order, over lists of tensors); what it must change is the number of ops launched per update.
The multi-tensor step runs on CUDA only (on a CPU fairseq's loop is faster); here the tests that
check its arithmetic let it run on the CPU (``on_cpu``)."""

import copy

import pytest
import torch
from fairseq.optim.adam import Adam, FairseqAdam
from fairseq.optim.composite import FairseqCompositeOptimizer
from fairseq.optim.fp16_optimizer import FP16Optimizer
from helpers.tensors import assert_same_state
from helpers.trainers import (
    plugin_trainer,
    trained,
    vocab_dir,
)  # noqa: F401  (vocab_dir: a fixture)
from torch.utils._python_dispatch import TorchDispatchMode

import fairseq_bio  # noqa: F401  (registration; installs the plugin's trainer)
from fairseq_bio.patches import foreach_adam
from fairseq_bio.optim.bio_adamw import BioAdamW
from fairseq_bio.patches.foreach_adam import (
    ForeachAdam,
    ForeachCompositeOptimizer,
    ForeachFairseqAdam,
)


class Ops(TorchDispatchMode):
    """Counts the ops that reach torch's dispatcher and compute (on a GPU each is a kernel launch):
    not ``.data``'s detached views, not the profiler's marks."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.count += name != "detach" and not name.startswith("_record_function")
        return func(*args, **(kwargs or {}))


SHAPES = [(6, 5), (7,), (2, 3, 4), (5,), (40,)]


@pytest.fixture
def on_cpu(monkeypatch):
    """The multi-tensor step on the CPU too (its arithmetic is the device's; only the speed policy
    keeps it off)."""
    monkeypatch.setattr(foreach_adam, "DEVICES", ("cuda", "cpu"))


def groups(seed: int):
    """Two parameter groups of fp32 tensors (different lr and weight decay), the same values for the
    same seed."""
    g = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(s, generator=g)) for s in SHAPES]
    return [
        {"params": params[:3], "lr": 1e-2, "weight_decay": 0.01},
        {"params": params[3:], "lr": 3e-3},
    ]


def run(cls, updates: int = 6, **options):
    """``updates`` steps of ``cls`` on random gradients (the last parameter without one in the first
    two updates, so that the parameters' update counts differ): (parameters, optimizer, ops per
    step)."""
    param_groups = groups(0)
    optimizer = cls(param_groups, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.0, **options)
    params = [p for group in param_groups for p in group["params"]]
    g = torch.Generator().manual_seed(1)
    ops = []
    for update in range(updates):
        for p in params:
            p.grad = None if (p is params[-1] and update < 2) else torch.randn(p.shape, generator=g)
        with Ops() as seen:
            optimizer.step()
        ops.append(seen.count)
    return params, optimizer, ops


@pytest.mark.parametrize("chunk", [foreach_adam.CHUNK, 50])
def test_the_update_is_fairseqs_bit_for_bit(chunk, monkeypatch, on_cpu):
    """Weights and state (update counts, both moments) equal to fairseq's loop after 6 updates, two
    groups with their own lr and weight decay, one parameter joining late, in one multi-tensor chunk
    or cut into chunks of 50 elements; the ops per update: as many as fairseq's per tensor, per
    bucket of tensors."""
    monkeypatch.setattr(foreach_adam, "CHUNK", chunk)
    theirs, their_optimizer, their_ops = run(Adam)
    ours, our_optimizer, our_ops = run(ForeachAdam)
    for p, q in zip(ours, theirs, strict=True):
        assert torch.equal(p, q)
    assert_same_state(our_optimizer.state_dict(), their_optimizer.state_dict())
    assert our_optimizer.state_dict()["state"][4]["step"] == 4  # the late parameter: its own count
    # the last update: fairseq 8 ops per tensor in the first group (weight decay), 7 in the second;
    # ours as many per (device, update count) bucket: the first group, and the second's two counts
    # (the late parameter apart)
    assert their_ops[-1] == 3 * 8 + 2 * 7
    # cut at 50 elements the first group (30 + 7 + 24) is two chunks
    assert our_ops[-1] == (8 if chunk > 61 else 2 * 8) + 2 * 7


def test_on_the_cpu_fairseqs_loop_runs():
    """Without ``DEVICES`` extended: fairseq's ops, one set per tensor (the CPU's faster path)."""
    _, _, theirs = run(Adam)
    _, _, ours = run(ForeachAdam)
    assert ours == theirs


def test_what_fairseqs_loop_does_differently_is_left_to_it(on_cpu):
    """amsgrad, or a non-fp32 weight (fairseq casts it per tensor: the memory-efficient fp16
    wrapper): fairseq's step, with its results."""
    theirs, _, _ = run(Adam, amsgrad=True)
    ours, _, ops = run(ForeachAdam, amsgrad=True)
    assert all(torch.equal(p, q) for p, q in zip(ours, theirs)) and ops[-1] > 8 * len(
        SHAPES
    )  # (the max too)
    half = [torch.nn.Parameter(torch.randn(4).half()), torch.nn.Parameter(torch.randn(3))]
    reference = copy.deepcopy(half)
    for params, cls in ((half, ForeachAdam), (reference, Adam)):
        for p in params:
            p.grad = torch.ones_like(p)
        cls(params, lr=0.1).step()
    assert all(p.dtype == q.dtype and torch.equal(p, q) for p, q in zip(half, reference))


def test_adopt_takes_exactly_fairseqs_adam_wherever_it_sits(vocab_dir):  # noqa: F811
    """The trainer fairseq-train builds with the plugin: fairseq's adam alone (fp32) and inside the
    bf16 wrapper get the multi-tensor step and gradient norm; bio_adamw keeps its own; a TPU's adam
    and a composite's sub-optimizers as stated."""
    ours, _ = trained(plugin_trainer(), vocab_dir, "fp32", "optimizer._name=adam")
    assert (
        type(ours.optimizer) is ForeachFairseqAdam and type(ours.optimizer.optimizer) is ForeachAdam
    )
    ours, _ = trained(plugin_trainer(), vocab_dir, "bf16", "optimizer._name=adam")
    inner = ours.optimizer.fp32_optimizer
    assert isinstance(ours.optimizer, FP16Optimizer) and type(inner) is ForeachFairseqAdam
    assert type(inner.optimizer) is ForeachAdam
    ours, _ = trained(plugin_trainer(), vocab_dir, "fp32", "optimizer._name=bio_adamw")
    assert type(ours.optimizer) is BioAdamW

    params = [torch.nn.Parameter(torch.randn(3))]
    tpu = FairseqAdam.__new__(FairseqAdam)
    tpu.cfg, tpu._optimizer = type("Cfg", (), {"tpu": True})(), Adam(params)
    assert type(foreach_adam.adopt(tpu)) is FairseqAdam and type(tpu._optimizer) is Adam
    composite = FairseqCompositeOptimizer.__new__(FairseqCompositeOptimizer)
    sub = FairseqAdam.__new__(FairseqAdam)
    sub.cfg, sub._optimizer = type("Cfg", (), {"tpu": False})(), Adam(params)
    composite.optimizers = {"default": sub}
    foreach_adam.adopt(composite)
    assert type(composite) is ForeachCompositeOptimizer and type(sub) is ForeachFairseqAdam
    assert type(sub._optimizer) is ForeachAdam


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_plugins_trainer_updates_as_fairseqs_with_clipping(
    precision, vocab_dir, on_cpu
):  # noqa: F811
    """bio-lm's recipe with fairseq's adam and gradient clipping at 0.5 (every update clipped: the
    norms of a tiny encoder at lr 1e-3 are above it), fairseq's Trainer against the plugin's (its
    multi-tensor step on the CPU): the same weights, optimizer state and logged norms, bit for
    bit."""
    from fairseq.trainer import Trainer

    overrides = (precision, "optimizer._name=adam", "optimization.clip_norm=0.5")
    ours, our_norms = trained(plugin_trainer(), vocab_dir, *overrides)
    theirs, their_norms = trained(Trainer, vocab_dir, *overrides)
    assert (
        our_norms == their_norms and min(our_norms) > 0.5 and len(set(our_norms)) == len(our_norms)
    )
    for p, q in zip(ours.model.parameters(), theirs.model.parameters(), strict=True):
        assert torch.equal(p, q)
    assert_same_state(ours.optimizer.state_dict(), theirs.optimizer.state_dict())


def test_a_resumed_run_continues_fairseqs_updates(on_cpu):
    """fairseq's Adam for 3 updates, its state dict loaded into the multi-tensor step (a checkpoint
    written by fairseq or by the plugin, resumed with the plugin), 3 more: the weights and state of
    6 updates of fairseq's loop.
    """
    theirs, their_optimizer, _ = run(Adam)
    params, first, _ = run(Adam, updates=3)
    resumed = ForeachAdam(first.param_groups, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.0)
    resumed.load_state_dict(copy.deepcopy(first.state_dict()))
    g = torch.Generator().manual_seed(1)
    for update in range(6):  # the same gradients as run()'s, the first 3 drawn and dropped
        grads = [
            None if (p is params[-1] and update < 2) else torch.randn(p.shape, generator=g)
            for p in params
        ]
        if update >= 3:
            for p, grad in zip(params, grads):
                p.grad = grad
            resumed.step()
    for p, q in zip(params, theirs, strict=True):
        assert torch.equal(p, q)
    assert_same_state(resumed.state_dict(), their_optimizer.state_dict())

"""``MultiTensorFP16Optimizer`` (fairseq_bio/patches/mixed_precision.py): fairseq's fp16/bf16
wrapper with multi-tensor copies. What it must keep is fairseq's arithmetic, bit for bit: the same
master weights, model weights, optimizer state and loss scale after the same updates, in both of
fairseq's layouts; what it must change is the number of copies launched per update."""

import sys

import pytest
import torch
from conftest import REPO
from fairseq.optim.fp16_optimizer import FP16Optimizer
from helpers.tensors import assert_same_state
from helpers.trainers import vocab_dir  # noqa: F401  (a fixture)
from helpers.trainers import assert_fairseqs_updates, plugin_trainer, trained

import fairseq_bio  # noqa: F401  (registration; installs the plugin's trainer)
from fairseq_bio.patches.mixed_precision import MultiTensorFP16Optimizer

sys.path.insert(0, str(REPO / "benchmarks"))
import master_copies  # noqa: E402


@pytest.mark.parametrize("optimizer", ["adam", "bio_adamw"])
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_the_plugins_trainer_updates_as_fairseqs(precision, optimizer, vocab_dir):  # noqa: F811
    """bio-lm's pretraining recipe, fairseq's adam and bio_adamw, one fp32 master tensor per
    parameter (the CPU's layout; the flat one: tests/gpu/test_gpu_mixed_precision.py on CUDA, and
    the copies below)."""
    ours = assert_fairseqs_updates(vocab_dir, precision, f"optimizer._name={optimizer}")
    assert not ours.optimizer.has_flat_params


class FlatLayout:
    """fairseq's flat layout (fp16's default: one fp32 tensor per device, keyed by the device index)
    built by hand: fairseq's ``build_fp32_params(flatten=True)`` asks for
    ``torch.cuda.current_device()``, so on a CPU the key is ``None`` (a CPU tensor's
    ``device.index``), which fairseq's own copies look parameters up by."""

    def __init__(self, shapes, generator):
        self.fp16_params = [
            torch.nn.Parameter(torch.randn(s, generator=generator).half()) for s in shapes
        ]
        flat = torch.cat([p.data.float().view(-1) for p in self.fp16_params])
        self.fp32_params = {None: torch.nn.Parameter(flat)}
        self.fp32_params[None].grad = torch.randn(flat.shape, generator=generator)


def wrapper(cls, layout):
    """A ``cls`` (fairseq's wrapper or ours) around ``layout``'s tensors, without fairseq's config:
    only what the copies and ``zero_grad`` read."""
    optimizer = cls.__new__(cls)
    optimizer.fp16_params, optimizer.fp32_params = layout.fp16_params, layout.fp32_params
    optimizer.scaler, optimizer._multiply_factor, optimizer._needs_sync = None, 1.0, False
    return optimizer


@pytest.mark.parametrize("layout", ["flat", "per-parameter"])
def test_copies_equal_fairseqs_in_both_layouts(layout):
    """Gradients into the master copy (a parameter without a gradient, one frozen), the master
    weights back into the model, and ``zero_grad``: fairseq's loops and the multi-tensor kernels
    leave the same bits everywhere.
    """
    shapes = [(3, 5), (7,), (2, 2, 2), (4,)]
    results = []
    for cls in (FP16Optimizer, MultiTensorFP16Optimizer):
        g = torch.Generator().manual_seed(0)
        if layout == "flat":
            state = FlatLayout(shapes, g)
        else:
            state = FlatLayout(shapes, g)
            state.fp32_params = [torch.nn.Parameter(p.data.float() + 1) for p in state.fp16_params]
            for p32 in (
                state.fp32_params[0],
                state.fp32_params[2],
            ):  # the second has none yet: the copy makes it
                p32.grad = torch.randn(p32.shape, generator=g)
        optimizer = wrapper(cls, state)
        for p in state.fp16_params[:2]:
            p.grad = torch.randn(p.shape, generator=g).half()  # the third and fourth have none
        state.fp16_params[3].requires_grad_(False)
        optimizer._needs_sync = True
        optimizer._sync_fp16_grads_to_fp32()
        masters = state.fp32_params.values() if layout == "flat" else state.fp32_params
        after_grads = [m.grad.clone() if m.grad is not None else None for m in masters]
        for m in masters:
            m.data.add_(0.5)  # an "update"
        optimizer._sync_fp32_params_to_fp16()
        after_weights = [p.data.clone() for p in state.fp16_params]
        optimizer.zero_grad()
        after_zero = [m.grad.clone() if m.grad is not None else None for m in masters]
        results.append(
            (after_grads, after_weights, after_zero, [p.grad for p in state.fp16_params])
        )
    assert_same_state(*results)
    after_grads, after_weights, after_zero, _ = results[1]
    assert any(
        g is not None and g.abs().sum() > 0 for g in after_grads
    )  # the copies copied something
    assert all(g is None or not g.any() for g in after_zero)


def test_one_copy_kernel_per_device_instead_of_one_per_parameter(vocab_dir):  # noqa: F811
    """What the change is for: the copies of one bf16 update of the tiny encoder (its 39 trained
    tensors), counted at torch's dispatcher by benchmarks/master_copies.py's counter: fairseq's
    wrapper launches one ``copy_`` per tensor each way and one ``zero_`` per master gradient; the
    plugin's, one ``_foreach_copy_`` each way and one ``_foreach_zero_``."""
    from fairseq.trainer import Trainer

    counts = {}
    for name, cls in (("fairseq", Trainer), ("plugin", plugin_trainer())):
        trainer, _ = trained(
            cls, vocab_dir, "bf16", "optimizer._name=bio_adamw"
        )  # the gradients are there
        tensors = len(trainer.optimizer.fp32_params)
        counts[name] = master_copies.count_ops(trainer.optimizer)
    assert tensors > 30
    assert counts["fairseq"] == {
        "copy_": 2 * tensors,
        "zero_": tensors,
        "_foreach_copy_": 0,
        "_foreach_zero_": 0,
    }
    assert counts["plugin"] == {"copy_": 0, "zero_": 0, "_foreach_copy_": 2, "_foreach_zero_": 1}

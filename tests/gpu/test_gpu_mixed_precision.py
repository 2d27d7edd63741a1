"""The plugin's mixed-precision copies (fairseq_bio/patches/mixed_precision.py) against fairseq's on
a GPU, bit for bit: the pretraining recipe in fp16 with fairseq's default flat fp32 master tensor
(which fairseq builds only on CUDA) and in bf16. ``GPU_CHECK_DRY=1``: the same on the CPU with one
master tensor per parameter (the main suite's tests/test_mixed_precision.py covers the flat layout's
copies there by hand)."""

import os
import sys

import pytest
import torch
from conftest import REPO
from helpers.trainers import (
    assert_fairseqs_updates,
    vocab_dir,
)  # noqa: F401  (vocab_dir: a fixture)

sys.path.insert(0, str(REPO / "benchmarks"))  # master_copies: bio_roberta_tiny's parameter shapes

DRY = os.environ.get("GPU_CHECK_DRY") == "1"
CUDA = torch.cuda.is_available() and not DRY
if not (CUDA or DRY):
    pytest.skip(
        "needs a CUDA GPU (make gpu-check); GPU_CHECK_DRY=1 runs it on the CPU",
        allow_module_level=True,
    )
pytestmark = pytest.mark.gpu

ON_CUDA = ["common.cpu=false", "common.fp16_no_flatten_grads=false"]


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_the_plugins_copies_update_as_fairseqs(precision, vocab_dir):  # noqa: F811
    ours = assert_fairseqs_updates(
        vocab_dir, precision, "optimizer._name=bio_adamw", *(ON_CUDA if CUDA else [])
    )
    assert ours.optimizer.has_flat_params == (
        CUDA and precision == "fp16"
    )  # fairseq flattens fp16 on CUDA only
    assert next(ours.model.parameters()).device.type == ("cuda" if CUDA else "cpu")


def test_fairseqs_adam_as_multi_tensor_kernels_on_the_device(monkeypatch):
    """fairseq's ``adam`` step as the plugin's trainer runs it (``optim.foreach_adam``) against
    fairseq's loop on the device, 5 updates of bio_roberta_tiny's tensors with weight decay: on the
    CPU (dry) the same bits; on CUDA the multi-tensor kernels may round a fused multiply-add
    differently, so within fp32's last bits."""
    from fairseq.optim.adam import Adam
    from master_copies import parameter_shapes
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.add(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    from fairseq_bio.patches import foreach_adam
    from fairseq_bio.patches.foreach_adam import ForeachAdam

    device = "cuda" if CUDA else "cpu"
    if (
        not CUDA
    ):  # the dry mode: the multi-tensor step on the CPU (fairseq's loop runs there otherwise)
        monkeypatch.setattr(foreach_adam, "DEVICES", ("cuda", "cpu"))
    g = torch.Generator().manual_seed(0)
    shapes = parameter_shapes("bio_roberta_tiny")
    initial = [torch.randn(s, generator=g) for s in shapes]
    grads = [[torch.randn(s, generator=g) for s in shapes] for _ in range(5)]
    results = []
    for cls in (Adam, ForeachAdam):
        params = [torch.nn.Parameter(t.clone().to(device)) for t in initial]
        optimizer = cls(params, lr=1e-3, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01)
        for update in grads:
            for p, grad in zip(params, update):
                p.grad = grad.to(device)
            with Ops() as seen:
                optimizer.step()
        assert ("_foreach_addcdiv_" in seen.names) == (
            cls is ForeachAdam
        )  # the multi-tensor step ran, on the device
        results.append(params)
    for p, q in zip(*results, strict=True):
        if CUDA:
            torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
        else:
            assert torch.equal(p, q)

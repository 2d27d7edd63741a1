"""The plugin's mixed-precision copies (fairseq_bio/mixed_precision.py) against fairseq's on a GPU, bit for bit: the
pretraining recipe in fp16 with fairseq's default flat fp32 master tensor (which fairseq builds only on CUDA) and in
bf16. ``GPU_CHECK_DRY=1``: the same on the CPU with one master tensor per parameter (the main suite's
tests/test_mixed_precision.py covers the flat layout's copies there by hand)."""

import os

import pytest
import torch
from test_gpu_paths_on_cpu import vocab_dir  # noqa: F401  (a fixture)
from test_mixed_precision import assert_fairseqs_updates

DRY = os.environ.get("GPU_CHECK_DRY") == "1"
CUDA = torch.cuda.is_available() and not DRY
if not (CUDA or DRY):
    pytest.skip("needs a CUDA GPU (make gpu-check); GPU_CHECK_DRY=1 runs it on the CPU", allow_module_level=True)
pytestmark = pytest.mark.gpu

ON_CUDA = ["common.cpu=false", "common.fp16_no_flatten_grads=false"]


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_the_plugins_copies_update_as_fairseqs(precision, vocab_dir):  # noqa: F811
    ours = assert_fairseqs_updates(vocab_dir, precision, "optimizer._name=bio_adamw", *(ON_CUDA if CUDA else []))
    assert ours.optimizer.has_flat_params == (CUDA and precision == "fp16")  # fairseq flattens fp16 on CUDA only
    assert next(ours.model.parameters()).device.type == ("cuda" if CUDA else "cpu")

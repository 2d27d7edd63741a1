"""benchmarks/encoder_speed.py: the true CUDA peak across fairseq's per-step resets, the profile's
grouping, the reference's and HF's shapes against bio_roberta's, and every new code path at a tiny
size on the CPU (a check, not a measurement)."""

import json
import sys
import types

import pytest
import torch
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import encoder_speed  # noqa: E402
import step_measures  # noqa: E402


class FakeCuda:
    """torch.cuda's peak counter: ``allocate`` moves the current value, the peak follows until a
    reset."""

    def __init__(self):
        self.current = self.peak = 0

    def allocate(self, mib):
        self.current += mib
        self.peak = max(self.peak, self.current)

    def max_memory_allocated(self):
        return self.peak

    def reset_peak_memory_stats(self):
        self.peak = self.current


def test_true_peak_survives_the_trainers_resets():
    cuda = FakeCuda()
    cuda.allocate(500)  # parameters, before the run
    original = cuda.reset_peak_memory_stats
    with step_measures.true_peak(cuda) as peak:
        for activations in (3000, 9000, 2000):  # three steps; fairseq resets at the end of each
            cuda.allocate(activations)
            cuda.allocate(-activations)
            cuda.reset_peak_memory_stats()
            assert cuda.max_memory_allocated() == 500  # what the old column read
        assert peak() == 9500
        cuda.allocate(10000)  # after the last reset: read directly
        assert peak() == 10500
    assert cuda.reset_peak_memory_stats == original


def test_true_peak_starts_from_entry():
    cuda = FakeCuda()
    cuda.allocate(4000)
    cuda.allocate(-3000)  # an earlier peak, not this run's
    with step_measures.true_peak(cuda, read=cuda.max_memory_allocated) as peak:
        assert peak() == 1000


@pytest.mark.parametrize(
    "chain, group",
    [
        (
            ["aten::mm", "AddmmBackward0", "autograd::engine::evaluate_function: AddmmBackward0"],
            "matmul",
        ),
        (["nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", "aten::mm"], "matmul"),
        (
            [
                "aten::bmm",
                "aten::_scaled_dot_product_attention_math",
                "aten::scaled_dot_product_attention",
            ],
            "attention",
        ),
        (
            ["void pytorch_flash::flash_bwd_kernel<...>", "aten::_flash_attention_backward"],
            "attention",
        ),
        (["aten::mul_", "Optimizer.step#Adam.step"], "optimizer + gradient norm"),
        (
            [
                "reduce_kernel<512, 1, ReduceOp<float, NormTwoOps<float>>>",
                "aten::linalg_vector_norm",
            ],
            "optimizer + gradient norm",
        ),
        (
            [
                "cunn_SoftMaxForward<4, float, float, float, LogSoftMaxForwardEpilogue>",
                "aten::_log_softmax",
            ],
            "loss (log-softmax, NLL)",
        ),
        (["aten::native_layer_norm", "aten::layer_norm"], "elementwise / norm"),
        (["triton_poi_fused_add_native_dropout_0"], "elementwise / norm"),
        (["aten::copy_", "aten::_to_copy"], "copy / gather"),
        (["aten::empty", "aten::ones"], step_measures.OTHER),
    ],
)
def test_profile_groups(chain, group):
    assert step_measures.profile_group(chain) == group


def test_grouped_times_sums_cuda_kernels_by_their_launching_ops():
    """The CUDA path on fake profiler events: kernels counted once, under the op that launched them
    and its callers; device-side events themselves skipped."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import Kernel

    def event(name, parent=None, kernels=(), self_us=0.0, device=DeviceType.CPU):
        return types.SimpleNamespace(
            name=name,
            cpu_parent=parent,
            kernels=list(kernels),
            is_async=False,
            device_type=device,
            self_cpu_time_total=self_us,
        )

    step = event("Optimizer.step#AdamW.step", self_us=50)
    mm = event("aten::mm", kernels=[Kernel("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", 0, 300)], self_us=5)
    events = [
        mm,
        event(
            "aten::_fused_adamw_",
            step,
            [Kernel("multi_tensor_apply_kernel<FusedAdamMathFunctor>", 0, 40)],
            3,
        ),
        step,
        event(
            "aten::add",
            kernels=[Kernel("vectorized_elementwise_kernel<4, AddFunctor>", 0, 7)],
            self_us=2,
        ),
        event("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", kernels=[], device=DeviceType.CUDA),
    ]
    cuda = step_measures.grouped_times(events, cuda=True)
    assert (cuda["matmul"], cuda["optimizer + gradient norm"], cuda["elementwise / norm"]) == (
        300,
        40,
        7,
    )
    assert sum(cuda.values()) == 347
    cpu = step_measures.grouped_times(events, cuda=False)
    assert (cpu["matmul"], cpu["optimizer + gradient norm"], cpu["elementwise / norm"]) == (
        5,
        53,
        2,
    )


def test_stock_only_where_fairseq_has_the_shape(capsys):
    assert "stock" in encoder_speed.choose_variants(None, "bio_roberta_large")
    assert "stock" not in encoder_speed.choose_variants(None, "bio_megatron_345m")
    assert "no stock model" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no stock model"):
        encoder_speed.choose_variants("stock,bio", "bio_roberta_tiny")


@pytest.mark.parametrize("arch", ["bio_roberta_tiny", "bio_megatron_345m"])
def test_reference_and_hf_have_bio_robertas_shape(data_bin, arch):
    """Same parameters as the fairseq model (HF: plus its one token-type row), post- and pre-LN."""
    common = dict(data=data_bin(), batch=1, device="cpu", fp32=True, tiny=True, arch=arch)
    counts, task = {}, None
    for variant in ("bio", "reference", "hf"):
        task, step, sizes = encoder_speed.build(variant, types.SimpleNamespace(**common), task)
        counts[variant] = sum(p.numel() for p in step.model.parameters())
    assert sizes["pre_ln"] == (arch == "bio_megatron_345m")
    assert counts["reference"] == counts["bio"]
    assert counts["hf"] == counts["bio"] + sizes["dim"] + (
        sizes["dim"] * 2 if sizes["pre_ln"] else 0
    )


def test_stock_and_the_attention_dropout_variant_build(data_bin):
    """Stock RoBERTa's model config is an argparse namespace, bio_roberta's a DictConfig: both take
    the variants' model options (the opt-in variants set attention dropout 0, the recipes' being
    0.1, or compile the whole model).
    """
    common = dict(
        data=data_bin(), batch=1, device="cpu", fp32=True, tiny=True, arch="bio_roberta_base"
    )
    task, stock, _ = encoder_speed.build("stock", types.SimpleNamespace(**common))
    assert type(stock.model).__name__ == "RobertaModel"
    _, fast, _ = encoder_speed.build(
        "bio+adamw+comp+noattndrop", types.SimpleNamespace(**common), task
    )
    assert (
        fast.trainer.cfg.model.attention_dropout == 0.0
        and fast.trainer.cfg.model.compile_encoder_layers
    )
    _, whole, _ = encoder_speed.build(
        "bio+adamw+wholecomp+fused", types.SimpleNamespace(**common), task
    )
    model, criterion = whole.trainer.cfg.model, whole.trainer.cfg.criterion
    assert (
        model.compile_model
        and not model.compile_encoder_layers
        and criterion._name == "bio_masked_lm"
    )


def test_tiny_run_and_profile_on_cpu(data_bin, tmp_path, capsys):
    torch.set_num_threads(1)
    data = str(data_bin())
    encoder_speed.main(
        [
            "--data",
            data,
            "--tiny",
            "--arch",
            "bio_roberta_tiny",
            "--batch",
            "1",
            "--steps",
            "2",
            "--warmup",
            "1",
            "--variants",
            "bio,bio+adamw,reference,hf",
            "--no-memory",
            "--out",
            str(tmp_path),
        ]
    )
    record = json.loads((tmp_path / "encoder_speed_tiny_bio_roberta_tiny.json").read_text())
    rows = {r["variant"]: r for r in record["rows"]}
    assert set(rows) == {"bio", "bio+adamw", "reference", "hf"}
    assert all(set(r["ratios"]) == {"reference"} and r["tokens_per_s"] > 0 for r in rows.values())
    assert rows["reference"]["ratios"]["reference"][0] == 1.0
    encoder_speed.main(
        [
            "--data",
            data,
            "--tiny",
            "--batch",
            "1",
            "--warmup",
            "1",
            "--profile",
            "reference",
            "--out",
            str(tmp_path),
        ]
    )
    table = (tmp_path / "encoder_speed_tiny_profile_reference.md").read_text()
    shares = {
        line.split(" | ")[0][2:]: float(line.split(" | ")[1])
        for line in table.splitlines()
        if line.startswith("| ") and not line.startswith(("| group", "| ---"))
    }
    assert set(shares) == set(step_measures.GROUP_NAMES) | {
        "outside any op (Python: Trainer, model code)"
    }
    assert (
        shares["matmul"] > 0 and shares["attention"] > 0 and shares["optimizer + gradient norm"] > 0
    )

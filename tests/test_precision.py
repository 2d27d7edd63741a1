"""Precision switches: ``precision=fp32|fp16|bf16|memory_efficient_fp16|memory_efficient_bf16`` on
every shipped training config, a real bf16 fine-tuning run on CPU, and the diagnosis fairseq's fp16
loss scaler now gives when it reaches its minimum scale."""

import math

import pytest
import torch
from conftest import REPO, logged

from fairseq_bio import checkpoints

PRIMARY = sorted(p.stem for p in (REPO / "hydra_configs").glob("*.yaml"))
FLAGS = ("fp16", "bf16", "memory_efficient_fp16", "memory_efficient_bf16")
EXPECTED = {
    "fp32": (False, False, False, False),
    "fp16": (True, False, False, False),
    "bf16": (False, True, False, False),
    "memory_efficient_fp16": (True, False, True, False),
    "memory_efficient_bf16": (False, True, False, True),
}


def compose(name, *overrides):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    extra = ["sentence_task=re_gad"] if name == "bio_sentence_prediction" else []
    # version_base 1.1 as fairseq and the other config tests: hydra's version base is global to the
    # process, and None (this hydra's own) makes fairseq's later hydra.experimental.initialize raise
    # in the same worker
    with initialize_config_dir(config_dir=str(REPO / "hydra_configs"), version_base="1.1"):
        return hydra_compose(config_name=name, overrides=[*extra, *overrides])


def test_every_training_config_has_the_precision_switch():
    assert len(PRIMARY) >= 12, PRIMARY
    for name in PRIMARY:
        for precision, flags in EXPECTED.items():
            common = compose(name, f"precision={precision}").common
            assert tuple(common.get(flag, False) for flag in FLAGS) == flags, (name, precision)


def test_default_keeps_the_recipe_precision():
    """The paper recipes train in fp16 (seed 000), the CPU configs in fp32; the SLURM presets may
    choose too."""
    assert compose("bio_roberta_base").common.fp16 is True
    assert compose("bio_roberta_tiny").common.fp16 is False
    assert (
        compose("bio_roberta_base", "precision=bf16").common.fp16 is False
    )  # a switch, not an addition


def test_fp16_scale_settings():
    common = compose("bio_roberta_large", "precision=fp16").common
    assert (common.fp16_init_scale, common.fp16_scale_window, common.min_loss_scale) == (
        128,
        128,
        1e-4,
    )


def test_bf16_fine_tuning_runs_on_cpu(tiny_encoder, ncbi_slice, tmp_path):
    """bf16 through fairseq's trainer (no loss scale) with the fine-tuning recipe's composite
    optimizer, restored from an fp32 encoder: the loss is finite, and the saved weights are fp32
    tensors (checkpoints do not depend on the precision they were trained in) holding bf16 values:
    the model itself ran in bf16."""
    from conftest import fine_tune

    log = fine_tune(
        ncbi_slice,
        tmp_path,
        f"checkpoint.restore_file={tiny_encoder}",
        "precision=bf16",
        "dataset.disable_validation=true",
        "common.log_interval=1",
        updates=3,
    )
    losses = [float(entry["loss"]) for entry in logged(log, "train_inner").values()]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses), losses
    state = checkpoints.load_checkpoint(tmp_path / "checkpoint_last.pt")
    assert state["cfg"]["common"]["bf16"] is True
    weights = [v for k, v in state["model"].items() if k.endswith("fc1.weight")]
    assert weights and all(w.dtype == torch.float32 for w in weights)
    assert all(torch.equal(w, w.bfloat16().float()) for w in weights)


def test_minimum_loss_scale_gets_a_diagnosis():
    """fairseq's own DynamicLossScaler, fed overflowing gradient norms as fp16 training would: each
    overflow halves the scale, and the one that would pass the minimum raises a FloatingPointError
    (the type fairseq's trainer handles) whose single line says how the run got there and what to
    do."""
    from fairseq.optim.dynamic_loss_scaler import DynamicLossScaler

    scaler = DynamicLossScaler(init_scale=128.0, scale_window=128, min_loss_scale=1.0)
    for _ in range(3):  # healthy updates first
        scaler.check_overflow(1.5)
        scaler.update()
    overflows = 0
    with pytest.raises(FloatingPointError) as error:
        for _ in range(20):
            overflows += 1
            try:
                scaler.check_overflow(float("inf") if overflows % 2 else float("nan"))
            except OverflowError:  # fairseq skips the update and halves the scale
                continue
    message = str(error.value)
    assert overflows == 7  # 128 -> 64 -> ... -> 2, then the seventh would reach 1
    assert "\n" not in message and message.startswith("fp16: minimum loss scale reached (1)")
    assert "after 7 gradient overflows in a row (scale 128 -> 1, from optimizer step 3)" in message
    assert "optimization.clip_norm" in message and "precision=bf16" in message


def test_a_finite_gradient_ends_the_overflow_run():
    from fairseq.optim.dynamic_loss_scaler import DynamicLossScaler

    scaler = DynamicLossScaler(init_scale=8.0, scale_window=1000, min_loss_scale=1.0)
    for grad_norm in (float("inf"), float("inf"), 2.0):  # 8 -> 4 -> 2, then a good update
        try:
            scaler.check_overflow(grad_norm)
        except OverflowError:
            continue
        scaler.update()
    with pytest.raises(
        FloatingPointError, match=r"after 1 gradient overflows in a row \(scale 2 -> 1"
    ):
        scaler.check_overflow(float("inf"))

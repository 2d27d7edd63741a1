"""Data parallel over NCCL: two real fairseq-hydra-train processes, one GPU each, started as the two
tasks of a SLURM job step (what the run_config=slurm_* presets launch: fairseq's infer_init_method
reads the SLURM_* variables; the cluster's scontrol is stood in for as in
tests/test_distributed.py), end with the losses of one process doing the same work as two
micro-batches per update. Part of `make gpu-check` on a machine with 2+ GPUs, skipped on fewer;
``GPU_CHECK_DRY=1`` runs the same two processes on the CPU over gloo (tests/test_distributed.py
checks that path in depth, requeue included)."""

import os

import pytest
import torch

DRY = os.environ.get("GPU_CHECK_DRY") == "1"
GPUS = 0 if DRY else torch.cuda.device_count()
if not (DRY or GPUS >= 2):
    pytest.skip(
        f"needs 2+ CUDA GPUs for NCCL data parallel ({GPUS} here; make gpu-check)",
        allow_module_level=True,
    )

from conftest import logged  # noqa: E402
from helpers.gpu_runs import BATCH, BLOCK, CUDA, DEVICE, ENCODER, LR, slurm_task  # noqa: E402
from helpers.slurm import SCONTROL, free_port  # noqa: E402
from training_processes import Run, losses  # noqa: E402

pytestmark = pytest.mark.gpu
UPDATES = 8


def test_two_processes_train_like_one_with_two_micro_batches(data_bin, tmp_path):
    """bio_roberta_base (tiny in the dry mode), fp32, dropout off: 2 ranks x BATCH sequences per
    update against one process with update_freq 2; every update counts both ranks' sequences and
    logs the one process's loss.
    """
    bin_dir = tmp_path / "slurm-bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(SCONTROL)
    (bin_dir / "scontrol").chmod(0o755)
    settings = [
        f"task.data={data_bin('bytebpe')}",
        *DEVICE,
        *ENCODER,
        "precision=fp32",
        "model.dropout=0",
        "model.attention_dropout=0",
        f"task.tokens_per_sample={BLOCK}",
        f"dataset.batch_size={BATCH}",
        f"optimization.max_update={UPDATES}",
        f"optimization.lr=[{LR}]",
        "lr_scheduler.warmup_updates=3",
        "dataset.disable_validation=true",
        "checkpoint.save_interval_updates=100000",
    ]
    one = Run.train(
        "bio_roberta_base",
        tmp_path / "one",
        *settings,
        "distributed_training.distributed_world_size=1",
        "optimization.update_freq=[2]",
    )
    assert one.finish() == 0, one.output()

    backend, port = ("nccl" if CUDA else "gloo"), free_port()
    dist = [
        "optimization.update_freq=[1]",
        "distributed_training.distributed_world_size=2",
        f"distributed_training.distributed_port={port}",
        f"distributed_training.distributed_backend={backend}",
    ]
    two = [
        Run.train(
            "bio_roberta_base",
            tmp_path / "two",
            *settings,
            *dist,
            env=slurm_task(rank, bin_dir),
            out=tmp_path / f"two.rank{rank}.out",
            log=tmp_path / f"two.rank{rank}.log",
        )
        for rank in (0, 1)
    ]
    assert [r.finish() for r in two] == [0, 0], (two[0].output(), two[1].output())
    assert f"'distributed_backend': '{backend}'" in two[0].output(whole=True)
    assert f"distributed init (rank 1): tcp://localhost:{port}" in two[1].output(whole=True)
    entries = logged(two[0].log, "train_inner")
    assert sorted(entries) == list(range(1, UPDATES + 1))
    assert {int(e["bsz"]) for e in entries.values()} == {
        2 * BATCH
    }  # rank 1's batch is in every update
    # GPU kernels (atomics in the embedding backward) are not bit-reproducible; gloo on the CPU is,
    # up to the order of the gradient sums.
    assert losses(two[0].log) == pytest.approx(losses(one.log), abs=2e-2 if CUDA else 2e-3)

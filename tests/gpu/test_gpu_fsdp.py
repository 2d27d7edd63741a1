"""Fully sharded data parallel over NCCL (``distributed_training.ddp_backend=fully_sharded``:
PyTorch's FSDP2 through ``fairseq_bio.patches.sharded``, the memory saving the BioMegatron sizes
need): bio_roberta_base masked LM in fp32, two real fairseq-hydra-train processes, one GPU each,
started as the two tasks of a SLURM job step (what the run_config=slurm_* presets launch, as
test_gpu_data_parallel.py does). The sharded run logs the losses of plain data parallel (torch DDP)
on the same two ranks and batches; its checkpoint is consolidated (the plain run's parameter names
and shapes) and fine-tuning restores from it and fairseq-bio-export-hf exports it.

Part of `make gpu-check` on a machine with 2+ GPUs, skipped on fewer (one process has nothing to
shard); ``GPU_CHECK_DRY=1`` runs the same processes on the CPU over gloo at the tiny size
(tests/test_sharded.py checks that path in depth: exact equality, optimizer states, a killed and
resumed run).
"""

import os

import pytest
import torch

DRY = os.environ.get("GPU_CHECK_DRY") == "1"
GPUS = 0 if DRY else torch.cuda.device_count()
if not (DRY or GPUS >= 2):
    pytest.skip(
        f"needs 2+ CUDA GPUs to shard over NCCL ({GPUS} here; make gpu-check)",
        allow_module_level=True,
    )

from conftest import logged, run_cli  # noqa: E402
from helpers.gpu_runs import ncbi  # noqa: E402, F401 (a fixture)
from helpers.gpu_runs import (  # noqa: E402
    BATCH,
    BLOCK,
    CUDA,
    DEVICE,
    ENCODER,
    FINE_TUNE,
    LR,
    UPDATES,
    slurm_task,
    train,
)
from helpers.slurm import SCONTROL, free_port  # noqa: E402
from training_processes import Run, losses  # noqa: E402

from fairseq_bio import checkpoints  # noqa: E402

pytestmark = pytest.mark.gpu
SHARDED = "distributed_training.ddp_backend=fully_sharded"


def two_ranks(save_dir, bin_dir, *overrides):
    backend = "nccl" if CUDA else "gloo"
    dist = [
        "distributed_training.distributed_world_size=2",
        f"distributed_training.distributed_port={free_port()}",
        f"distributed_training.distributed_backend={backend}",
    ]
    ranks = [
        Run.train(
            "bio_roberta_base",
            save_dir,
            *overrides,
            *dist,
            env=slurm_task(rank, bin_dir),
            out=f"{save_dir}.rank{rank}.out",
            log=f"{save_dir}.rank{rank}.log",
        )
        for rank in (0, 1)
    ]
    assert [r.finish(timeout=900) for r in ranks] == [0, 0], (ranks[0].output(), ranks[1].output())
    return ranks


def test_sharded_trains_as_plain_data_parallel_and_saves_a_consolidated_checkpoint(
    data_bin, ncbi, tmp_path
):
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
        "optimization.update_freq=[1]",
        f"optimization.max_update={UPDATES}",
        f"optimization.lr=[{LR}]",
        "lr_scheduler.warmup_updates=3",
        "dataset.disable_validation=true",
        "checkpoint.save_interval_updates=100000",
    ]
    two_ranks(tmp_path / "plain", bin_dir, *settings)
    sharded = two_ranks(tmp_path / "sharded", bin_dir, *settings, SHARDED)
    assert "fully sharded (PyTorch FSDP2) over 2 ranks" in sharded[0].output(whole=True)
    plain_losses, sharded_losses = losses(tmp_path / "plain.rank0.log"), losses(
        tmp_path / "sharded.rank0.log"
    )
    assert sorted(sharded_losses) == list(range(1, UPDATES + 1))
    # GPU kernels are not bit-reproducible (atomics in the embedding backward); gloo on the CPU is
    assert sharded_losses == pytest.approx(plain_losses, abs=2e-2 if CUDA else 2e-3)

    checkpoint = tmp_path / "sharded" / "checkpoint_last.pt"
    plain, ours = (
        checkpoints.load_checkpoint(p)["model"]
        for p in (tmp_path / "plain" / checkpoint.name, checkpoint)
    )
    assert {k: tuple(v.shape) for k, v in ours.items()} == {
        k: tuple(v.shape) for k, v in plain.items()
    }
    log = train(
        "bio_tagging_ner",
        tmp_path / "ner",
        f"task.data={ncbi}",
        f"checkpoint.restore_file={checkpoint}",
        "dataset.batch_size=16",
        *FINE_TUNE,
    )
    assert sorted(logged(log, "train_inner")) == list(range(1, UPDATES + 1))
    printed = run_cli(
        ["fairseq-bio-export-hf", "--checkpoint", checkpoint, "--out", tmp_path / "hf"],
        cwd=tmp_path,
    ).stdout
    assert "RobertaForMaskedLM" in printed and "token ids equal fairseq's" in printed

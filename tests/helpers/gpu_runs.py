"""The GPU checks' settings (tests/gpu, run by benchmarks/gpu_check.py): real sizes on CUDA, tiny
ones on the CPU in the dry mode (``GPU_CHECK_DRY=1``), and what their training runs share: the
command, the environment of a SLURM task on its GPU, the NCBI-disease slice. Importing it checks
nothing; each test module skips itself where it cannot run."""

import os

import pytest
import torch
from conftest import SHARED_DATA, build_once, conll_slice, run_cli
from helpers.slurm import JOB_ID
from training_processes import hydra_command

DRY = os.environ.get("GPU_CHECK_DRY") == "1"
CUDA = torch.cuda.is_available() and not DRY  # the dry mode runs on the CPU even where a GPU is
if CUDA:
    # bio_roberta_base and bio_electra_base at their sizes (12 x 768), short blocks.
    DEVICE = ["common.cpu=false"]
    ENCODER, ELECTRA, STUDENT = (
        [],
        [],
        [],
    )  # STUDENT: distill_tinybiobert's 4 x 312, 12 heads (as base's)
    LAYERS, BLOCK, BATCH, UPDATES, LR, FINE_TUNE_LR = 12, 128, 16, 20, 3e-4, 1e-4
else:
    DEVICE = ["common.cpu=true", "dataset.num_workers=0"]
    ENCODER = [
        "model.encoder_layers=2",
        "model.encoder_embed_dim=64",
        "model.encoder_ffn_embed_dim=128",
        "model.encoder_attention_heads=2",
        "model.max_positions=128",
    ]
    ELECTRA = [
        *ENCODER[:4],
        "model.generator_embed_dim=32",
        "model.generator_ffn_embed_dim=64",
        "model.generator_attention_heads=1",
    ]
    STUDENT = [
        "model.encoder_layers=1",
        "model.encoder_embed_dim=32",
        "model.encoder_ffn_embed_dim=64",
        "model.encoder_attention_heads=2",
    ]
    LAYERS, BLOCK, BATCH, UPDATES, LR, FINE_TUNE_LR = 2, 64, 8, 10, 2e-3, 1e-3
ONE_PROCESS = [
    "distributed_training.distributed_world_size=1"
]  # fairseq's default: one process per GPU
FINE_TUNE = [
    f"optimizer.groups.default.lr_float={FINE_TUNE_LR}",
    "optimizer.groups.default.lr_scheduler.warmup_updates=2",
    "optimization.max_epoch=0",
    f"optimization.max_update={UPDATES}",
]


def train(config, save_dir, *overrides):
    """``config`` trained for real, a json log line per update; returns the log's path."""
    save_dir.mkdir(parents=True, exist_ok=True)
    run_cli(
        hydra_command(config, save_dir, *DEVICE, *ONE_PROCESS, *overrides),
        cwd=save_dir,
        timeout=900,
    )
    return save_dir.parent / f"{save_dir.name}.log"


@pytest.fixture(scope="module")
def ncbi(tmp_path_factory):
    """300 / 100 / 100 real NCBI-disease sentences."""

    def build(out):
        for split, n in (("train", 300), ("devel", 100), ("test", 100)):
            conll_slice(
                SHARED_DATA / "ner" / "NCBI-disease" / f"{split}.tsv", out / f"{split}.tsv", n
            )
        return out

    return build_once(tmp_path_factory, "gpu-ncbi", build)


def slurm_task(rank, bin_dir):
    """The environment srun gives task ``rank`` of a one-node, two-task job (its GPU: SLURM_LOCALID;
    on the CPU fairseq must not set a device, so both say 0)."""
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SCONTROL_LOG": str(bin_dir / "scontrol.log"),
        "SLURM_JOB_ID": JOB_ID,
        "SLURM_JOB_NODELIST": "localhost",
        "SLURM_NNODES": "1",
        "SLURM_NTASKS": "2",
        "SLURM_NTASKS_PER_NODE": "2",
        "SLURM_NODEID": "0",
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank if CUDA else 0),
    }

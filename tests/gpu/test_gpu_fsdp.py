"""Fully sharded data parallel (fairseq's ``distributed_training.ddp_backend=fully_sharded``, fairscale's FSDP), the
memory saving the BioMegatron sizes need: bio_roberta_base masked LM in fp16 (fairseq 0.12 refuses FSDP with bf16).

Needs CUDA and fairscale (requirements/gpu.txt): fairscale 0.4.13's FSDP creates CUDA streams unconditionally, so there
is no CPU or dry mode of it. What fairscale allows was measured on a lent H200 (2026-11-25): in a world of one process
it shards nothing, and then its optimizer-state consolidation, which fairseq runs before every checkpoint save
(``Trainer.consolidate_optimizer``), fails ("'FlatParameter' object has no attribute '_full_param_padded'"). So:

- on one GPU, the training: the sharded run's losses against the plain run's, update by update, no checkpoint saved;
- on 2+ GPUs, the checkpoint: two ranks started as the tasks of a SLURM job step (as test_gpu_data_parallel.py does)
  save one consolidated checkpoint_last.pt with the plain run's parameter names and shapes, which fine-tuning
  restores from and fairseq-bio-export-hf exports.
"""

import statistics

import pytest
import torch
from conftest import logged, run_cli
from test_distributed import free_port
from test_gpu_training import BATCH, BLOCK, CUDA, ENCODER, FINE_TUNE, LR, UPDATES, losses, ncbi, train  # noqa: F401
from training_processes import Run

from fairseq_bio import compat

if not CUDA:
    pytest.skip("fairscale's FSDP needs a CUDA GPU (no dry mode)", allow_module_level=True)
pytest.importorskip("fairscale", reason="fairscale is not installed (requirements/gpu.txt)")
pytestmark = pytest.mark.gpu
GPUS = torch.cuda.device_count()
SHARDED = "distributed_training.ddp_backend=fully_sharded"


def pretraining(data_bin):
    return [f"task.data={data_bin('bytebpe')}", *ENCODER, f"task.tokens_per_sample={BLOCK}",
            f"dataset.batch_size={BATCH}", "optimization.update_freq=[1]", f"optimization.max_update={UPDATES}",
            f"optimization.lr=[{LR}]", "lr_scheduler.warmup_updates=3", "dataset.disable_validation=true",
            "task.mask_whole_words=true", "precision=fp16", "common.seed=7"]  # fmt: skip


def test_fully_sharded_trains_as_the_plain_run(data_bin, tmp_path):
    common = [*pretraining(data_bin), "checkpoint.no_save=true"]
    plain = train("bio_roberta_base", tmp_path / "plain", *common)
    # fairscale asks torch.distributed for its reduce-scatter group even in a world of one, and fairseq starts
    # torch.distributed for one process only when given an init method (on a cluster every rank has one)
    sharded = train("bio_roberta_base", tmp_path / "sharded", *common, SHARDED,
                    f"distributed_training.distributed_init_method=tcp://localhost:{free_port()}",
                    "distributed_training.distributed_no_spawn=true")  # fmt: skip
    plain, sharded = losses(logged(plain, "train_inner")), losses(logged(sharded, "train_inner"))
    assert len(plain) == len(sharded) == UPDATES
    # fp16 both, but FSDP always takes fairseq's memory-efficient fp16 optimizer: rounding differs, the path not
    assert all(abs(a - b) <= 0.02 * a for a, b in zip(plain, sharded)), (plain, sharded)
    assert statistics.mean(sharded[-3:]) < sharded[0] - 0.2, sharded


@pytest.mark.skipif(GPUS < 2, reason=f"a consolidated FSDP checkpoint needs 2+ GPUs ({GPUS} here; see the docstring)")
def test_two_ranks_save_a_consolidated_checkpoint_that_fine_tunes_and_exports(data_bin, ncbi, tmp_path):
    from test_gpu_data_parallel import SCONTROL, slurm_task

    bin_dir = tmp_path / "slurm-bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(SCONTROL)
    (bin_dir / "scontrol").chmod(0o755)
    train("bio_roberta_base", tmp_path / "plain", *pretraining(data_bin))
    dist = [SHARDED, "distributed_training.distributed_world_size=2",
            f"distributed_training.distributed_port={free_port()}"]  # fmt: skip
    ranks = [Run.train("bio_roberta_base", tmp_path / "sharded", *pretraining(data_bin), *dist,
                       env=slurm_task(rank, bin_dir), out=tmp_path / f"sharded.rank{rank}.out",
                       log=tmp_path / f"sharded.rank{rank}.log")
             for rank in (0, 1)]  # fmt: skip
    assert [r.finish() for r in ranks] == [0, 0], (ranks[0].output(), ranks[1].output())
    checkpoint = tmp_path / "sharded" / "checkpoint_last.pt"
    plain, sharded = (compat.load_checkpoint(p)["model"] for p in (tmp_path / "plain" / checkpoint.name, checkpoint))
    assert {k: tuple(v.shape) for k, v in sharded.items()} == {k: tuple(v.shape) for k, v in plain.items()}

    log = train("bio_tagging_ner", tmp_path / "ner", f"task.data={ncbi}", f"checkpoint.restore_file={checkpoint}",
                "dataset.batch_size=16", *FINE_TUNE, "precision=fp16")  # fmt: skip
    assert sorted(logged(log, "train_inner")) == list(range(1, UPDATES + 1))
    printed = run_cli(["fairseq-bio-export-hf", checkpoint, tmp_path / "hf"], cwd=tmp_path).stdout
    assert "RobertaForMaskedLM" in printed and "token ids equal fairseq's" in printed

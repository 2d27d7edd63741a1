"""Data-parallel training as on a SLURM cluster, on this CPU: two real fairseq-hydra-train processes
(gloo) find each other from the SLURM_* variables srun gives each task, through fairseq's own
infer_init_method (the node from `scontrol show hostnames`, the rank from SLURM_PROCID), and end
with the parameters of one process doing the same work. The cluster's scontrol is stood in for by a
script that answers `show hostnames` and records `requeue`."""

import signal

import pytest
from conftest import SHARED_DATA, conll_slice, logged
from helpers.checkpoints import assert_same_parameters
from helpers.slurm import JOB_ID, slurm, two_tasks  # noqa: F401  (slurm: a fixture)
from training_processes import MLM, MLM_UPDATES, Run, losses, updates_in
from training_processes import reference  # noqa: F401  (a fixture)

from fairseq_bio.patches.preemption import PREEMPTED_EXIT_STATUS


def test_two_processes_mlm_equal_one_process_and_survive_a_requeue(
    reference, data_bin, slurm, tmp_path
):
    """bio_masked_lm, 2 ranks x 8 sequences vs 1 process x 2 micro-batches of 8 (update_freq 2: the
    same 16 sequences per update, in the same two batches; the masks are drawn per batch, keyed by
    its sample ids). Early on, rank 1 alone gets SIGUSR1: both ranks stop at the same update, rank 0
    saves and asks SLURM to requeue the job, and the requeued job (the same two commands) ends with
    the parameters of the uninterrupted single process.
    """
    two = tmp_path / "two"
    args = ("bio_roberta_tiny", two, slurm, f"task.data={data_bin('bytebpe')}", *MLM)
    rank0, rank1 = two_tasks(*args)
    rank0.wait_for_update(3)
    rank1.signal(signal.SIGUSR1)
    assert (rank0.finish(), rank1.finish()) == (PREEMPTED_EXIT_STATUS, 0), rank0.output()
    stopped = updates_in(two / "checkpoint_last.pt")
    assert 3 <= stopped < MLM_UPDATES
    assert f"SIGUSR1: saving a checkpoint at update {stopped}" in rank0.output(
        whole=True
    )  # rank 1's signal
    assert (
        slurm.log.read_text().splitlines().count(f"requeue {JOB_ID}") == 1
    )  # asked by rank 0 only

    requeued = two_tasks(*args)
    assert [r.finish() for r in requeued] == [0, 0], requeued[0].output()
    resumed = f"Loaded checkpoint {two / 'checkpoint_last.pt'} (epoch 1 @ {stopped} updates)"
    assert resumed in requeued[0].output(whole=True)
    assert updates_in(two / "checkpoint_last.pt") == MLM_UPDATES
    assert_same_parameters(reference / "checkpoint_last.pt", two / "checkpoint_last.pt")
    one_losses, two_losses = losses(reference / "train.log"), losses(f"{two}.log")
    assert sorted(two_losses) == sorted(one_losses) == list(range(1, MLM_UPDATES + 1))
    assert two_losses == pytest.approx(one_losses, abs=2e-3)  # logged with 3 decimals
    # every update of the two ranks counted 16 sequences: rank 1's batch was in it
    assert {int(e["bsz"]) for e in logged(f"{two}.log", "train_inner").values()} == {16}


@pytest.fixture(scope="module")
def ncbi_32(tmp_path_factory):
    """32 real NCBI-disease training sentences (2 x 16: one batch of 32, or one batch of 16 per
    rank), 8 dev/test."""
    out = tmp_path_factory.mktemp("ncbi-32")
    src = SHARED_DATA / "ner" / "NCBI-disease"
    conll_slice(src / "train.tsv", out / "train.tsv", 32)
    conll_slice(src / "devel.tsv", out / "devel.tsv", 8)
    conll_slice(src / "test.tsv", out / "test.tsv", 8)
    return out


def test_two_processes_fine_tune_like_one_process_with_twice_the_batch(
    tiny_encoder, ncbi_32, slurm, tmp_path
):
    """bio_tagging from the shared tiny encoder, dropout off: 2 ranks x 16 sentences vs 1 process x
    32, one update per epoch over the same 32 sentences (each rank's batch padded to its own longest
    sentence)."""
    tune = [
        f"task.data={ncbi_32}",
        f"checkpoint.restore_file={tiny_encoder}",
        "model.dropout=0",
        "model.attention_dropout=0",
        "task.head_dropout=0",
        "optimization.max_update=4",
        "optimization.max_epoch=0",
        "optimizer.groups.default.lr_float=0.001",
        "optimizer.groups.default.lr_scheduler.warmup_updates=1",
        "dataset.disable_validation=true",
        "dataset.num_workers=0",
    ]
    one = Run.train("bio_tagging_ner", tmp_path / "one", *tune, "dataset.batch_size=32")
    two = two_tasks("bio_tagging_ner", tmp_path / "two", slurm, *tune, "dataset.batch_size=16")
    assert [r.finish() for r in (one, *two)] == [0, 0, 0], (
        one.output(),
        two[0].output(),
        two[1].output(),
    )
    assert_same_parameters(
        tmp_path / "one" / "checkpoint_last.pt", tmp_path / "two" / "checkpoint_last.pt"
    )
    for run in ("one", "two"):
        entries = logged(f"{tmp_path / run}.log", "train_inner")
        assert sorted(entries) == [1, 2, 3, 4] and {int(e["bsz"]) for e in entries.values()} == {
            32
        }, run
    assert losses(f"{tmp_path / 'two'}.log") == pytest.approx(
        losses(f"{tmp_path / 'one'}.log"), abs=2e-3
    )

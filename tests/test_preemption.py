"""Pre-emption (fairseq_bio.patches.preemption): a signal to a real fairseq-hydra-train saves
checkpoint_last.pt at the next update and ends the run, and the run started again (or requeued by
submitit) resumes from it with the losses and parameters of an uninterrupted run. SIGUSR1 to one
rank of a two-task SLURM job: tests/test_distributed.py."""

import os
import signal

import pytest
import torch
from conftest import logged
from training_processes import (
    MLM,
    MLM_UPDATES,
    Run,
    hydra_command,
    losses,
    updates_in,
)
from training_processes import reference  # noqa: F401  (a fixture)

from fairseq_bio import checkpoints
from fairseq_bio.patches import preemption


def assert_resumed_exactly(reference, save_dir):
    """Every update's loss and the final parameters are the uninterrupted run's."""
    got, want = losses(f"{save_dir}.log"), losses(reference / "train.log")
    assert sorted(got) == sorted(want) == list(range(1, MLM_UPDATES + 1))
    assert got == pytest.approx(want, abs=2e-3)  # logged with 3 decimals
    a = checkpoints.load_checkpoint(reference / "checkpoint_last.pt")["model"]
    b = checkpoints.load_checkpoint(save_dir / "checkpoint_last.pt")["model"]
    for name in a:
        assert torch.allclose(a[name], b[name], atol=1e-5, rtol=0), name


def test_sigterm_to_a_local_run_saves_and_the_same_command_resumes(reference, data_bin, tmp_path):
    """SIGTERM to the whole process group (as SLURM and a terminal do: the DataLoader worker gets it
    too and keeps serving the trainer): the run ends after the next update's checkpoint with status
    75, and the same command resumes from there. Every update has a scheduled save here, so the run
    ends on fairseq's own save of that update (the other tests end on the extra one;
    tests/test_distributed.py, the submitit test below)."""
    save_dir = tmp_path / "run"
    every_update = [o for o in MLM if not o.startswith("checkpoint.save_interval_updates=")]
    args = (
        "bio_roberta_tiny",
        save_dir,
        f"task.data={data_bin('bytebpe')}",
        *every_update,
        "checkpoint.save_interval_updates=1",
        "checkpoint.keep_interval_updates=1",
        "optimization.update_freq=[2]",
        "dataset.num_workers=1",
    )
    run = Run.train(*args, session=True)
    run.wait_for_update(3)
    os.killpg(run.proc.pid, signal.SIGTERM)
    assert run.finish() == preemption.PREEMPTED_EXIT_STATUS, run.output()
    stopped = updates_in(save_dir / "checkpoint_last.pt")
    assert 3 <= stopped < MLM_UPDATES
    assert f"SIGTERM: update {stopped} is saved; ending this run to be resumed" in run.output(
        whole=True
    )
    assert sorted(p.name for p in save_dir.glob("*.pt")) == [
        f"checkpoint_1_{stopped}.pt",
        "checkpoint_last.pt",
    ]
    assert (
        max(logged(f"{save_dir}.log", "train_inner")) == stopped
    )  # nothing trained after the save

    again = Run.train(*args)
    assert again.finish() == 0, again.output()
    assert (
        f"Loaded checkpoint {save_dir / 'checkpoint_last.pt'} (epoch 1 @ {stopped} updates)"
        in again.output(whole=True)
    )
    assert_resumed_exactly(reference, save_dir)


def submitit_task_pid(folder) -> int:
    """The pid of the job task submitit's local executor started
    (``python -m submitit.core._submit <folder>``)."""
    import psutil

    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "submitit.core._submit" in cmdline and any(str(folder) in a for a in cmdline):
            return proc.pid
    raise AssertionError(f"no submitit task running for {folder}")


def test_submitit_requeues_after_the_checkpoint_and_the_job_resumes(reference, data_bin, tmp_path):
    """`fairseq-hydra-train -m hydra/launcher=submitit_local`: submitit's own protocol. Its
    pre-emption signal (SIGUSR2, what SLURM sends signal_delay_s before the time limit) reaches the
    job while it trains; the run saves, hands over to submitit's handler, which pickles the job and
    requeues it; the local executor starts it again and it resumes from the checkpoint to the end,
    as SLURM would after `scontrol requeue`."""
    save_dir, sweep = tmp_path / "run", tmp_path / "sweep"
    command = hydra_command(
        "bio_roberta_tiny",
        save_dir,
        f"task.data={data_bin('bytebpe')}",
        *MLM,
        "optimization.update_freq=[2]",
    )
    argv = [
        command[0],
        "-m",
        *command[1:],
        "hydra/launcher=submitit_local",
        "hydra.launcher.timeout_min=30",
        f"hydra.sweep.dir={sweep}",
    ]
    job = Run(argv, tmp_path / "multirun.out", f"{save_dir}.log")
    job.wait_for_update(3)
    os.kill(submitit_task_pid(sweep), signal.SIGUSR2)
    assert job.finish() == 0, job.output()
    (task_log,) = sweep.glob(".submitit/*/*_0_log.out")
    text = task_log.read_text()
    stopped = int(text.split("SIGUSR2: saving a checkpoint at update ")[1].split(",")[0])
    assert 3 <= stopped < MLM_UPDATES
    assert "Requeued job" in text and "Calling checkpoint method" in text
    assert (
        f"Loaded checkpoint {save_dir / 'checkpoint_last.pt'} (epoch 1 @ {stopped} updates)" in text
    )
    assert_resumed_exactly(reference, save_dir)


def test_a_world_size_without_a_process_group_is_refused(monkeypatch, tmp_path):
    """Under SLURM without `scontrol`, fairseq's infer_init_method finds no init method and every
    task would train alone on all the data: train() stops it in one line saying why."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(
        {"distributed_training": {"distributed_world_size": 8}, "common": {"tpu": False}}
    )
    for key in ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol
    with pytest.raises(RuntimeError) as error:
        preemption.check_distributed(cfg)
    assert str(error.value).startswith(
        "distributed_training.distributed_world_size=8, but this process joined no"
    )
    assert "SLURM job 77" in str(error.value) and "`scontrol` is not on PATH" in str(error.value)
    cfg.distributed_training.distributed_world_size = 1
    preemption.check_distributed(cfg)  # one process: nothing to join

"""The cluster path, real: a one-node SLURM cluster of the test's own (munged, slurmctld, slurmd
in a temp dir; tests/helpers/slurm.py) runs a two-task job, and the documented pretraining command
(`fairseq-hydra-train -m ... run_config=slurm_1x8`, docs/cluster.md) is submitted to it through
hydra's submitit launcher: two CPU tasks over gloo that end with the parameters of the one-process
reference run of tests/test_distributed.py; pre-empted by USR2, or warned by SLURM before its time
limit, it saves, is requeued and resumes. A job with a failed rank, and a cancelled one, end the
submitting process's wait in one line (this cluster keeps no accounting: no sacct). Every wait has a
time limit; a failed job fails the test with its logs' tails. Skipped, in one line, where Debian's
slurmctld, slurmd, slurm-client and munge are not installed."""

import os
import pickle
import re
import shutil
import signal
import socket
import subprocess
import time

import pytest
from helpers import slurm
from helpers.checkpoints import assert_same_parameters
from helpers.slurm import ENDED, Cluster, ClusterError, available, free_port
from training_processes import (
    MLM,
    MLM_UPDATES,
    Run,
    hydra_command,
    losses,
    updates_in,
)
from training_processes import reference  # noqa: F401  (a fixture)

from fairseq_bio.runs import logged

JOB_S = 600  # the longest a training job may take here, queued, requeued and run (2 shared cores)
REPORT_S = 240  # the longest the submitting process may take to report a failed or cancelled job
TAIL = 3000  # characters of each log in a failure's message


def test_a_two_task_job_runs_on_the_cluster(cluster, tmp_path):
    """sbatch -n 2 (srun inside it) and srun -n 2 on its own: two tasks here, ranks 0 and 1."""
    host = socket.gethostname().split(".")[0]
    script = "#!/bin/bash\nsrun bash -c 'echo \"$(hostname -s) $SLURM_PROCID $SLURM_NTASKS\"'\n"
    job = cluster.sbatch(script, "-N", "1", "-n", "2", "-o", tmp_path / "job.%j.out")
    fields = cluster.wait_job(job, 60)
    out = (tmp_path / f"job.{job}.out").read_text()
    assert fields["JobState"] == "COMPLETED", out
    assert sorted(out.splitlines()) == [f"{host} 0 2", f"{host} 1 2"]
    step = cluster.client(
        "srun", "-N", "1", "-n", "2", "bash", "-c", "echo $SLURM_PROCID $SLURM_JOB_ID"
    )
    ranks = sorted(line.split()[0] for line in step.stdout.splitlines())
    assert ranks == ["0", "1"] and len({line.split()[1] for line in step.stdout.splitlines()}) == 1


def test_stop_cancels_its_jobs_and_reports_a_process_it_left(tmp_path):
    """stop() cancels a running job and ends the daemons; a process of the cluster still running
    after that (here one started beside it with its SLURM_CONF) is killed and reported."""
    reason = available()
    if reason:
        pytest.skip(reason)
    cluster = Cluster().start()
    job = cluster.sbatch("#!/bin/bash\nsrun sleep 600\n", "-n", "2", "-o", tmp_path / "sleep.out")
    cluster.wait_job(job, 60, states={"RUNNING"})
    stray = subprocess.Popen(["sleep", "600"], env={**os.environ, **cluster.env})
    with pytest.raises(
        ClusterError, match=f"left running after stop\\(\\), now killed: \\[{stray.pid}\\]"
    ):
        cluster.stop()
    assert stray.wait(10) == -signal.SIGKILL
    assert cluster.leftovers() == [] and all(p.poll() is not None for p in cluster._procs.values())
    shutil.rmtree(cluster.root)  # kept by stop() for a look at what was left


def test_missing_packages_skip_in_one_line(monkeypatch):
    monkeypatch.setattr(slurm, "_which", lambda name: None)
    assert slurm.available() == (
        "SLURM not installed: apt-get install -y --no-install-recommends "
        "slurmctld slurmd slurm-client munge"
    )


def submit(cluster, save_dir, data, logs, *overrides, run=MLM):
    """The documented cluster command (docs/cluster.md) at the reference run's size (``run``),
    submitted from the shell with the FAIRSEQ_BIO_SLURM_* variables: 1 node, 2 CPU tasks over gloo,
    this cluster's partition."""
    command = hydra_command("bio_roberta_tiny", save_dir, f"task.data={data}", *run)
    argv = [
        command[0],
        "-m",
        *command[1:],
        "run_config=slurm_1x8",
        "common.cpu=true",
        "distributed_training.distributed_world_size=2",
        "distributed_training.distributed_backend=gloo",
        "hydra.launcher.tasks_per_node=2",
        "hydra.launcher.gpus_per_node=null",
        *overrides,
    ]
    env = {
        **cluster.env,
        "FAIRSEQ_BIO_SLURM_PARTITION": cluster.partition,
        "FAIRSEQ_BIO_SLURM_TIMEOUT_MIN": "20",
        "FAIRSEQ_BIO_SLURM_CPUS_PER_TASK": "1",
        "FAIRSEQ_BIO_SLURM_LOG_DIR": str(logs),
        "FAIRSEQ_BIO_SLURM_PORT": str(free_port()),
    }
    return Run(argv, f"{save_dir}.submit.out", f"{save_dir}.log", env=env, cwd=save_dir.parent)


def task_logs(logs):
    """The stdout and stderr files of each task of submitit's jobs (``<sweep>/submitit/<job>/``)."""
    return sorted(logs.glob("**/submitit/*/*_log.*"))


def tails(run, logs, cluster):
    """The submitting process's output, each task log's end and the jobs' states."""
    parts = [f"--- {run.out}\n{run.output()}"]
    parts += [f"--- {p}\n{p.read_text(errors='replace')[-TAIL:]}" for p in task_logs(logs)]
    parts += [
        f"--- job {j}: {f['JobState']} ({f['Reason']})" for j, f in own_jobs(cluster, run).items()
    ]
    return "\n".join(parts)


def own_jobs(cluster, run):
    """{job id: fields} of the jobs ``run`` submitted: those whose working directory is its own (the
    directory of its output file)."""
    return {j: f for j, f in cluster.jobs().items() if f.get("WorkDir") == str(run.out.parent)}


def wait_submitted(run, cluster, logs, timeout=JOB_S):
    """Wait for the submitting ``fairseq-hydra-train -m`` to end; its job's ``scontrol`` fields.
    A job that ended other than COMPLETED fails at once (submitit would wait for its result
    forever), and so does a wait past ``timeout``; both kill the submitting process and report the
    logs' tails."""
    error = None
    try:
        run.finish(timeout, progress=lambda _: _fail_fast(cluster, run, logs), every=2)
    except (ClusterError, RuntimeError) as raised:
        error = raised
    if error is not None:
        fail(error, run, cluster, logs)
    jobs = own_jobs(cluster, run)
    assert run.returncode == 0 and len(jobs) == 1, tails(run, logs, cluster)
    (job,) = jobs
    return job, cluster.wait_job(job, 60)


def fail(error, run, cluster, logs):
    """Fail the test with ``error`` and the logs' tails; its submitting process is killed and its
    jobs cancelled first."""
    run.kill()
    message = f"{error}\n{tails(run, logs, cluster)}"
    for job in own_jobs(cluster, run):
        cluster.client("scancel", job, check=False)
    pytest.fail(message)


def wait_for_update(run, cluster, logs, update, timeout=JOB_S):
    """Wait until the job's json log shows ``update`` (failing as ``wait_submitted`` does)."""
    deadline, error = time.monotonic() + timeout, None
    while not (run.log.exists() and max(logged(run.log, "train_inner"), default=0) >= update):
        try:
            _fail_fast(cluster, run, logs)
        except ClusterError as raised:
            error = raised
        if error is None and run.poll() is not None:
            error = f"the submitting process exited {run.returncode} before update {update}"
        if error is None and time.monotonic() > deadline:
            error = f"no update {update} within {timeout:g} s"
        if error is not None:
            fail(error, run, cluster, logs)
        time.sleep(0.5)


def _fail_fast(cluster, run, logs):
    for job, fields in own_jobs(cluster, run).items():
        if fields["JobState"] in ENDED - {"COMPLETED"}:
            raise ClusterError(f"job {job} ended {fields['JobState']} ({fields['Reason']})")
    failed = failed_tasks(logs)
    if failed:
        raise ClusterError("a task failed while the others wait for it: " + "; ".join(failed))


def failed_tasks(logs):
    """The tasks whose submitit result is a failure: an exception, or hydra's FAILED job (hydra's
    multirun catches the task function's exception and returns it, so submitit counts the task as a
    success and the other ranks wait for it at their next collective)."""
    failed = []
    for path in sorted(logs.glob("**/submitit/*/*_result.pkl")):
        try:
            with open(path, "rb") as f:
                outcome, value = pickle.load(f)
        except Exception:  # still being written
            continue
        if outcome != "success":
            failed.append(f"{path.name}: {str(value)[-TAIL:]}")
        elif getattr(getattr(value, "status", None), "name", None) == "FAILED":
            failed.append(f"{path.name}: {value._return_value!r}")
    return failed


def assert_like_the_reference(reference, save_dir):
    """The reference run's losses and final parameters (compared as tests/test_distributed.py
    does)."""
    assert updates_in(save_dir / "checkpoint_last.pt") == MLM_UPDATES
    assert_same_parameters(reference / "checkpoint_last.pt", save_dir / "checkpoint_last.pt")
    got, want = losses(f"{save_dir}.log"), losses(reference / "train.log")
    assert sorted(got) == sorted(want) == list(range(1, MLM_UPDATES + 1))
    assert got == pytest.approx(want, abs=2e-3)  # logged with 3 decimals
    # every update counted 16 sequences: both ranks' batches of 8 were in it
    assert {int(e["bsz"]) for e in logged(f"{save_dir}.log", "train_inner").values()} == {16}


def assert_both_ranks_ran(job, logs):
    """The logs of the job's two tasks: SLURM_PROCID 0 and 1, as submitit and fairseq read it."""
    for rank in (0, 1):
        (out,) = [p for p in task_logs(logs) if p.name == f"{job}_{rank}_log.out"]
        text = out.read_text(errors="replace")
        text += out.with_name(f"{job}_{rank}_log.err").read_text(errors="replace")
        # submitit's JobEnvironment and fairseq's infer_init_method, both read from SLURM_PROCID
        assert f"global_rank={rank}(2)" in text, text[-TAIL:]
        assert f"Rank {rank}, device_id:" in text, text[-TAIL:]


def test_the_documented_pretraining_command_trains_on_the_cluster(
    cluster, reference, data_bin, tmp_path
):
    """`fairseq-hydra-train -m --config-name bio_roberta_tiny ... run_config=slurm_1x8` at the
    reference's size on 2 CPU tasks: sbatch through submitit, both ranks train, and the job ends
    with the parameters and losses of the one-process reference run (2 ranks x 8 sequences vs 1
    process x 2 micro-batches of 8)."""
    save_dir, logs = tmp_path / "run", tmp_path / "slurm_logs"
    run = submit(cluster, save_dir, data_bin("bytebpe"), logs)
    job, fields = wait_submitted(run, cluster, logs)
    assert fields["JobState"] == "COMPLETED" and fields["NumTasks"] == "2", fields
    assert fields["Partition"] == cluster.partition and fields["Restarts"] == "0", fields
    assert_both_ranks_ran(job, logs)
    assert_like_the_reference(reference, save_dir)


def test_usr2_checkpoints_requeues_and_resumes_on_the_cluster(
    cluster, reference, data_bin, tmp_path
):
    """`scancel --signal=USR2` (what SLURM sends signal_delay_s before the time limit) to the
    training job: the ranks save checkpoint_last.pt after the current update, submitit requeues the
    job, and the requeued job resumes from it to the reference run's final parameters and losses."""
    save_dir, logs = tmp_path / "run", tmp_path / "slurm_logs"
    run = submit(cluster, save_dir, data_bin("bytebpe"), logs)
    wait_for_update(run, cluster, logs, 3)
    (job,) = own_jobs(cluster, run)
    cluster.client("scancel", f"--signal={signal.SIGUSR2.name[3:]}", job)
    job, fields = wait_submitted(run, cluster, logs)
    assert fields["JobState"] == "COMPLETED" and fields["Restarts"] == "1", fields
    text = "".join(p.read_text(errors="replace") for p in task_logs(logs))
    stopped = int(text.split("SIGUSR2: saving a checkpoint at update ")[1].split(",")[0])
    assert 3 <= stopped < MLM_UPDATES
    assert f"Requeued job {job} " in text, text[-TAIL:]  # by submitit, once the ranks saved
    assert (
        f"Loaded checkpoint {save_dir / 'checkpoint_last.pt'} (epoch 1 @ {stopped} updates)" in text
    )
    assert_like_the_reference(reference, save_dir)


def test_the_time_limit_warning_checkpoints_requeues_and_resumes(cluster, data_bin, tmp_path):
    """SLURM's own warning before the time limit, nothing sent by hand: a 3-minute job whose preset
    asks for SIGUSR2 135 s before its end gets it from slurmctld (which checks limits every 30 s)
    45-75 s after it started, in training; the ranks save checkpoint_last.pt, submitit requeues the
    job, and the requeued job resumes from that update and trains on. (That a resumed run ends with
    an uninterrupted run's parameters is the USR2 test's; the signal is the same.)"""
    save_dir, logs = tmp_path / "run", tmp_path / "slurm_logs"
    endless = [o for o in MLM if not o.startswith("optimization.max_update=")]
    run = submit(
        cluster,
        save_dir,
        data_bin("bytebpe"),
        logs,
        "hydra.launcher.timeout_min=3",
        "hydra.launcher.signal_delay_s=135",
        run=[*endless, "optimization.max_update=100000"],
    )
    wait_for_update(run, cluster, logs, 1)
    (job,) = own_jobs(cluster, run)
    deadline = time.monotonic() + JOB_S
    while True:
        text = "".join(p.read_text(errors="replace") for p in task_logs(logs))
        loaded = re.search(
            rf"Loaded checkpoint {re.escape(str(save_dir))}\S+ \(epoch \d+ @ (\d+) updates\)", text
        )
        if loaded and max(logged(run.log, "train_inner"), default=0) > int(loaded[1]):
            break
        try:
            _fail_fast(cluster, run, logs)
        except ClusterError as error:
            fail(error, run, cluster, logs)
        if time.monotonic() > deadline or run.poll() is not None:
            fail("no requeued job trained on from a saved checkpoint", run, cluster, logs)
        time.sleep(1)
    fields = cluster.wait_job(job, 5, states={"RUNNING"})
    run.kill()
    cluster.client("scancel", job)
    stopped = int(text.split("SIGUSR2: saving a checkpoint at update ")[1].split(",")[0])
    assert int(loaded[1]) == stopped >= 1 and fields["Restarts"] == "1", fields
    assert f"Requeued job {job} " in text, text[-TAIL:]


def reported(run, cluster, logs, timeout=REPORT_S):
    """The submitting process's exit status and output lines, once it ended by itself within
    ``timeout`` s (else the test fails with the logs' tails: the wait hung)."""
    try:
        code = run.finish(timeout)
    except RuntimeError as hung:
        fail(hung, run, cluster, logs)
    return code, run.output(whole=True).splitlines()


def test_a_failed_rank_ends_the_job_and_the_wait_in_one_line(cluster, data_bin, tmp_path):
    """checkpoint.save_dir naming a file: rank 0 fails (fairseq checks the directory on rank 0
    only) while rank 1 waits for it in the process group. Rank 0 writes the traceback to its log and
    exits with status 1, srun (SLURM_KILL_BAD_EXIT=1) ends the step, the job ends FAILED, and the
    submitting process exits 1 with one line naming the task and the cause."""
    save_dir, logs = tmp_path / "run", tmp_path / "slurm_logs"
    save_dir.write_text("a file, not a directory\n")
    run = submit(cluster, save_dir, data_bin("bytebpe"), logs)
    code, lines = reported(run, cluster, logs)
    (job,) = own_jobs(cluster, run)
    fields = cluster.wait_job(job, 60)
    assert code == 1 and fields["JobState"] == "FAILED" and fields["ExitCode"] == "1:0", fields
    err = next(p for p in task_logs(logs) if p.name == f"{job}_0_log.err")
    cause = f"NotADirectoryError: [Errno 20] Not a directory: '{save_dir / 'dummy'}'"
    assert f"SLURM job {job}, task 0: {cause} (traceback in {err})" in lines, lines[-5:]
    assert not any(line.startswith(("Traceback", "  File ")) for line in lines), lines[-40:]
    text = err.read_text(errors="replace")
    assert "Traceback (most recent call last)" in text and f"\n{cause}\n" in text, text[-TAIL:]
    host = socket.gethostname().split(".")[0]
    # task 0 alone, or with rank 1 when its own error (the peer's connection closed) came first
    assert re.search(rf"srun: error: {host}: tasks? 0(-1)?: Exited with exit code 1", text), text[
        -TAIL:
    ]
    assert f"Terminating StepId={job}.0" in text, text[-TAIL:]  # srun's kill on a bad exit


def test_a_cancelled_job_ends_the_wait_in_one_line(cluster, data_bin, tmp_path):
    """scancel during training: SLURM stops the tasks before either saves a result, and sacct knows
    nothing here (no accounting), where submitit would wait for ever: the submitting process learns
    from squeue that the job was CANCELLED and exits 1 with one line naming it."""
    assert cluster.client("sacct", check=False).returncode != 0
    save_dir, logs = tmp_path / "run", tmp_path / "slurm_logs"
    run = submit(cluster, save_dir, data_bin("bytebpe"), logs)
    wait_for_update(run, cluster, logs, 1)
    (job,) = own_jobs(cluster, run)
    cluster.client("scancel", job)
    code, lines = reported(run, cluster, logs)
    assert code == 1 and cluster.wait_job(job, 60)["JobState"] == "CANCELLED"
    err = next(p for p in task_logs(logs) if p.name == f"{job}_0_log.err")
    assert (
        f"SLURM job {job} ended CANCELLED before tasks 0, 1 of 2 saved a result (cancelled, out of "
        f"time or killed); see {err}"
    ) in lines, lines[-5:]
    assert not any(line.startswith(("Traceback", "  File ")) for line in lines), lines[-40:]


def test_job_states_come_from_squeue_where_sacct_fails(cluster, monkeypatch, tmp_path):
    """The submitting side's watcher (fairseq_bio.patches.slurm_jobs) on this cluster, which has no sacct:
    squeue's states, a pending array's range ("5_[0-3]"), and a job squeue does not list counts as
    ended; after scancel, each task of the array is CANCELLED."""
    from fairseq_bio.patches.slurm_jobs import GONE, SchedulerWatcher

    for name, value in cluster.env.items():
        monkeypatch.setenv(name, value)
    array = cluster.sbatch(
        "#!/bin/bash\nsleep 600\n", "-n", "1", "--array=0-3", "-o", tmp_path / "%A_%a.out"
    )
    tasks = [f"{array}_{i}" for i in range(4)]
    watcher = SchedulerWatcher()
    for job in [*tasks, "999999"]:
        watcher.register_job(job)
    watcher.update()
    assert watcher.sacct is False
    assert {j: watcher.get_state(j, mode="cache") for j in tasks} == dict.fromkeys(tasks, "RUNNING")
    assert watcher.get_state("999999", mode="cache") == GONE
    cluster.client("scancel", array)
    deadline = time.monotonic() + 60
    while not all(watcher.is_done(j, mode="cache") for j in tasks):
        assert time.monotonic() < deadline, {j: watcher.get_state(j, mode="cache") for j in tasks}
        time.sleep(0.5)
        watcher.update()
    assert {j: watcher.get_state(j, mode="cache") for j in tasks} == dict.fromkeys(
        tasks, "CANCELLED"
    )

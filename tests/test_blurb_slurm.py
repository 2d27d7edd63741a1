"""fairseq-bio-blurb --launcher slurm on a real one-node SLURM cluster (tests/helpers/slurm.py):
a 1 dataset x 2 lr grid runs as a job array, one run pre-empted with SIGUSR2 mid-training is
requeued by submitit and resumes from its checkpoint_last.pt, and the report has the scores of the
same grid run locally (CPU, one thread: bit for bit); a second invocation submits nothing; a
cancelled job ends the wait with one line naming the run and the job's log. Without accounting
(sacct), so the waits rely on squeue and submitit's result files. The waiting logic on its own
(no cluster): a job that raised, one gone without a result, squeue failing. Skipped, in one line,
where Debian's slurmctld, slurmd, slurm-client and munge are not installed."""

import json
import os
import pickle
import signal
import subprocess
import threading
import time
from types import SimpleNamespace

import pytest
from conftest import BIN, SHARED_DATA, conll_slice, logged

from fairseq_bio.cli.blurb import main
from fairseq_bio.errors import BioConfigError, BioError
from fairseq_bio.runner import slurm

GRID = "--tasks ncbi --seeds 1 --max-update 10 --lr-grid 2e-3,3e-3 --cpu".split()
OVERRIDES = ["--", "dataset.batch_size=16", "common.log_interval=1"]
JOBS = "--launcher slurm --cpus-per-task 1 --timeout-min 20".split()
PREEMPTED = "lr0.003"  # the run that gets SIGUSR2 at its second update
WAIT_S = 300  # the longest a step here may take (2 shared cores)
# what a report holds that is not a score: times, throughput, statuses, where it ran, and the
# examples counted from the log's epoch ends (a run pre-empted at an epoch's end logs one less)
NOT_SCORES = {"wall_s", "train_s", "train_examples_per_s", "test_examples_per_s", "status"}
NOT_SCORES |= {"run_dir", "train_examples"}


@pytest.fixture(scope="module")
def ncbi_small(tmp_path_factory):
    """A --data root with a small real NCBI-disease slice (100 / 30 / 30 sentences)."""
    root = tmp_path_factory.mktemp("blurb-slurm-data")
    ncbi = root / "ner" / "NCBI-disease"
    ncbi.mkdir(parents=True)
    for name, n in (("train.tsv", 100), ("devel.tsv", 30), ("test.tsv", 30)):
        conll_slice(SHARED_DATA / "ner" / "NCBI-disease" / name, ncbi / name, n)
    return root


@pytest.fixture
def on_cluster(cluster, monkeypatch):
    """This process submits to ``cluster`` (its jobs inherit the environment), polls often."""
    for key, value in cluster.env.items():
        monkeypatch.setenv(key, value)
    for key in list(os.environ):
        if key.startswith(slurm.ENV):
            monkeypatch.delenv(key)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(slurm, "POLL_S", 0.5)
    monkeypatch.setattr(slurm, "RESULT_GRACE_S", 2.0)
    return cluster


def _argv(encoder, data, out, *extra):
    return ["--checkpoint", str(encoder), "--data", str(data), "--out", str(out), *extra]


def _scores(results):
    """A results.json without what is not a score."""
    runs = [{k: v for k, v in r.items() if k not in NOT_SCORES} for r in results["runs"]]
    for r in runs:  # the dev entry carries fairseq's words per second
        r["dev"] = {k: v for k, v in r["dev"].items() if k != "wps"}
    datasets = {
        name: {k: v for k, v in d.items() if k not in NOT_SCORES}
        for name, d in results["datasets"].items()
    }
    return {"score": results["score"], "datasets": datasets, "runs": runs}


def _job_fields(cluster, job):
    """The ``scontrol show job`` fields of a job or array task (``<array>_<task>``)."""
    for fields in cluster.jobs().values():
        if job in (fields["JobId"], f"{fields.get('ArrayJobId')}_{fields.get('ArrayTaskId')}"):
            return fields
    raise AssertionError(f"job {job} unknown to the cluster")


def _send_usr2_at_update(run_dir, update, sent):
    """SIGUSR2 to the run's job (``scancel --signal``: every process of its step, as SLURM's
    warning before the time limit) once its log shows ``update``."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if max(logged(run_dir / "train.log", "train_inner"), default=0) >= update:
            job = json.loads((run_dir / slurm.JOB_FILE).read_text())["job_id"]
            subprocess.run(["scancel", f"--signal={signal.SIGUSR2.name[3:]}", job], check=True)
            sent.append(job)
            return
        time.sleep(0.2)


def test_a_grid_runs_as_jobs_and_reports_as_the_local_run(
    on_cluster, tiny_encoder, ncbi_small, tmp_path, capsys
):
    """NCBI-disease x lr {2e-3, 3e-3}: a job array of two, the lr 3e-3 run pre-empted at its
    second update; the same grid runs locally meanwhile. Then the command again."""
    local, remote = tmp_path / "local", tmp_path / "slurm"
    reference = subprocess.Popen(  # the same grid run locally, meanwhile
        [
            str(BIN / "fairseq-bio-blurb"),
            *_argv(tiny_encoder, ncbi_small, local, *GRID, *OVERRIDES),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        sent = []
        run_dir = remote / "ncbi-disease" / PREEMPTED / "seed1"
        usr2 = threading.Thread(target=_send_usr2_at_update, args=(run_dir, 2, sent), daemon=True)
        usr2.start()
        argv = _argv(tiny_encoder, ncbi_small, remote, *GRID, *JOBS, *OVERRIDES)
        assert main(argv) == 0, capsys.readouterr().out
        usr2.join(1)
        text = capsys.readouterr().out
        assert "slurm: submitted 2 job(s)" in text and sent, text
        output, _ = reference.communicate(timeout=WAIT_S)
        assert reference.returncode == 0, output
    finally:
        reference.kill()

    # the pre-empted run saved at its next update, was requeued once and resumed from there
    (job,) = sent
    fields = on_cluster.wait_job(int(_job_fields(on_cluster, job)["JobId"]), 60)
    train_out = (run_dir / "train.out").read_text()
    stopped = int(train_out.split("SIGUSR2: saving a checkpoint at update ")[1].split(",")[0])
    assert f"Loaded checkpoint {run_dir / 'checkpoint_last.pt'} (epoch" in train_out
    assert f"@ {stopped} updates)" in train_out and 2 <= stopped < 10
    logs = "".join(p.read_text() for p in (remote / "slurm").glob("*_log.err"))
    assert f"Requeued job {job} " in logs, logs[-3000:]
    assert fields["Restarts"] == "1" and fields["JobState"] == "COMPLETED", fields
    assert not (run_dir / "checkpoint_last.pt").exists()  # gone once the training ended

    # the same report as the local run's: every score equal, the run statuses as they happened
    got, want = (json.loads((out / "results.json").read_text()) for out in (remote, local))
    assert _scores(got) == _scores(want)
    assert got["counts"] == {
        "ran": 1,
        "redone": 0,
        "stale": 0,
        "reused": 0,
        "failed": 0,
        "resumed": 1,
    }
    assert (remote / "results.md").exists() and (remote / "results.png").exists()

    # again: every run reused, nothing submitted
    jobs = set(on_cluster.jobs())
    assert main(argv) == 0
    again = json.loads((remote / "results.json").read_text())
    assert again["counts"]["reused"] == 2 and set(on_cluster.jobs()) == jobs
    assert "submitted" not in capsys.readouterr().out and _scores(again) == _scores(got)


def test_a_cancelled_job_ends_the_wait_in_one_line(on_cluster, tiny_encoder, ncbi_small, tmp_path):
    """scancel once it runs: the job ends CANCELLED without a result (submitit alone would wait
    forever without sacct); the run's line names the job and its log, the others' would go on, and
    the command ends with status 1."""
    out = tmp_path / "out"
    one = ["--tasks", "ncbi", "--seeds", "1", "--max-update", "400", "--lr-grid", "3e-3", "--cpu"]
    run_dir = out / "ncbi-disease" / "lr0.003" / "seed1"
    cancelled = []

    def cancel_when_running():
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if (run_dir / slurm.JOB_FILE).exists():
                job = json.loads((run_dir / slurm.JOB_FILE).read_text())["job_id"]
                if (slurm.squeue_states([job]) or {}).get(job, ("",))[0] == "RUNNING":
                    subprocess.run(["scancel", job], check=True)
                    cancelled.append((job, time.monotonic()))
                    return
            time.sleep(0.2)

    canceller = threading.Thread(target=cancel_when_running, daemon=True)
    canceller.start()
    code = main(_argv(tiny_encoder, ncbi_small, out, *one, *JOBS, *OVERRIDES))
    ended = time.monotonic()
    canceller.join(1)
    (job, at) = cancelled[0]
    assert code == 1 and ended - at < 30
    results = json.loads((out / "results.json").read_text())
    (record,) = results["runs"]
    lines = record["error"].splitlines()
    log = out / "slurm" / f"{job}_0_log.err"
    assert lines == [f"SLURM job {job} ended CANCELLED without a result (see {log})"], lines
    assert log.exists() and results["counts"]["failed"] == 1


# --- the waiting logic, without a cluster --------------------------------------------------------


def _fake_job(tmp_path, job_id):
    run = SimpleNamespace(
        plan=SimpleNamespace(recipe=SimpleNamespace(name="gad")),
        lr=1e-3,
        seed=1,
        dir=tmp_path / "run",
        batch_size=None,
        fold=None,
        label="gad lr=0.001 seed=1",
    )
    return slurm.Job(run, job_id, tmp_path / "slurm")


def test_waiting_ends_for_a_job_that_raised_or_left_no_result(tmp_path, monkeypatch):
    from submitit.core.utils import cloudpickle_dump

    monkeypatch.setattr(slurm, "POLL_S", 0.01)
    monkeypatch.setattr(slurm, "RESULT_GRACE_S", 0.05)
    raised, gone, fine = (_fake_job(tmp_path, j) for j in ("7_0", "7_1", "7_2"))
    raised.paths.folder.mkdir(parents=True)
    trace = "Traceback (most recent call last):\n  ...\nMemoryError: out of memory\n"
    cloudpickle_dump(("error", trace), raised.paths.result_pickle)
    cloudpickle_dump(("success", {"status": "ran"}), fine.paths.result_pickle)
    records = {}
    slurm.wait(
        [raised, gone, fine],
        lambda job, record: records.setdefault(job.job_id, record),
        "[t]",
        states=lambda ids: {"7_1": ("COMPLETED", "None")},  # ended: its result never came
    )
    assert records["7_2"] == {"status": "ran"}
    assert records["7_0"]["error"] == (
        f"SLURM job 7_0 failed: MemoryError: out of memory (see {raised.paths.stderr})"
    )
    assert records["7_1"]["error"] == (
        f"SLURM job 7_1 ended COMPLETED without a result (see {gone.paths.stderr})"
    )
    assert {r.get("status") for r in records.values()} == {"ran", "failed"}


def test_waiting_ends_when_squeue_keeps_failing(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm, "POLL_S", 0.01)
    monkeypatch.setattr(slurm, "QUERY_GIVE_UP_S", 0.05)
    job = _fake_job(tmp_path, "8")
    with pytest.raises(BioError, match=r"^squeue has failed for 0 s; SLURM jobs 8 may still run"):
        slurm.wait([job], lambda *a: None, "[t]", states=lambda ids: None)


def test_options_come_from_the_command_line_then_the_presets_variables():
    args = SimpleNamespace(
        partition=None,
        timeout_min=30,
        gpus_per_node=None,
        cpus_per_task=None,
        mem_gb=None,
        array_parallelism=None,
        slurm_param=["qos=high", "--exclusive"],
        cpu=False,
    )
    environ = {"FAIRSEQ_BIO_SLURM_PARTITION": "gpu", "FAIRSEQ_BIO_SLURM_ACCOUNT": "proj",
               "FAIRSEQ_BIO_SLURM_QOS": "low", "FAIRSEQ_BIO_SLURM_CPUS_PER_TASK": "8",
               "FAIRSEQ_BIO_SLURM_TIMEOUT_MIN": "60"}  # fmt: skip
    params = slurm.SlurmOptions.from_args(args, environ).parameters()
    assert params["partition"] == "gpu" and params["time"] == 30 and params["cpus_per_task"] == 8
    assert params["gpus_per_node"] == 1 and "mem" not in params
    assert params["additional_parameters"] == {"account": "proj", "qos": "high", "exclusive": True}
    with pytest.raises(BioConfigError, match=r"^FAIRSEQ_BIO_SLURM_MEM_GB='lots': not a whole"):
        slurm.SlurmOptions.from_args(args, {"FAIRSEQ_BIO_SLURM_MEM_GB": "lots"})
    with pytest.raises(BioConfigError, match=r"^--slurm-param 'qos=': expected KEY=VALUE"):
        slurm.slurm_params(["qos="])


def test_slurm_options_need_the_slurm_launcher(tmp_path, capsys):
    with pytest.raises(BioConfigError, match=r"^--partition: a SLURM option; give it with"):
        main(["--checkpoint", str(tmp_path / "x.pt"), "--data", str(tmp_path), "--partition", "p"])


@pytest.mark.parametrize("code, trained", [(0, True), (75, False)])
def test_the_requeue_handler_waits_for_the_training(tmp_path, code, trained):
    """submitit's handler of SIGUSR2 asks ``checkpoint()`` for the job to requeue: it returns once
    the training has ended; a training that ended well is marked trained (the requeued job predicts
    and trains no more), one that saved to be resumed keeps its checkpoint_last.pt. The job pickles
    without its process."""
    from fairseq_bio.runs import Run as Process

    job = slurm.RunJob(_fake_job(tmp_path, "9").run, save_wait_s=60)
    job.run.dir.mkdir()
    (job.run.dir / "checkpoint_last.pt").write_bytes(b"saved")
    job._started(Process(["sh", "-c", f"sleep 0.5; exit {code}"]))
    start = time.monotonic()
    delayed = job.checkpoint()
    assert 0.4 < time.monotonic() - start < 30 and delayed.function is job
    assert (job.run.dir / "trained.json").exists() == trained
    assert (job.run.dir / "checkpoint_last.pt").exists() != trained
    assert pickle.loads(pickle.dumps(job))._training is None


def test_a_job_an_earlier_runner_left_running_is_waited_for(tmp_path, monkeypatch, capsys):
    """A runner killed while it waited left its jobs running: the next one waits for a job still
    running (two jobs must not train into one run directory) and submits again the run whose job
    ended without a result."""
    running, ended = (_fake_job(tmp_path / name, f"3_{i}") for i, name in enumerate("ab"))
    for job in (running, ended):
        job.run.dir.mkdir(parents=True)
        (job.run.dir / slurm.JOB_FILE).write_text(
            json.dumps({"job_id": job.job_id, "folder": str(job.folder)})
        )
    states = {"3_0": ("RUNNING", "None"), "3_1": ("CANCELLED", "None")}
    monkeypatch.setattr(slurm, "squeue_states", lambda ids: states)
    waited = []
    monkeypatch.setattr(
        slurm, "submit", lambda runs, folder, options: [slurm.Job(r, "4", folder) for r in runs]
    )

    def wait(jobs, done, tag):
        for job in jobs:
            waited.append(job.job_id)
            done(job, {"status": "failed", "error": "stopped here"})

    monkeypatch.setattr(slurm, "wait", wait)
    monkeypatch.setattr(slurm, "report_runs", lambda records, *rest: records)
    records = slurm.run_on_slurm(
        [running.run, ended.run], slurm.SlurmOptions(), None, None, [], {}, tmp_path, "[t]"
    )
    assert waited == ["3_0", "4"] and len(records) == 2
    assert "gad lr=0.001 seed=1: waiting for SLURM job 3_0 of an earlier runner" in (
        capsys.readouterr().out
    )

"""fairseq-bio-blurb on SLURM (``--launcher slurm``): each run not finished yet is one task of a job
array submitted through submitit, waited for here and reported as a local run is.

- ``SlurmOptions``: the jobs' resources, from the command line, else the FAIRSEQ_BIO_SLURM_*
  variables the ``run_config=slurm_*`` presets read.
- ``RunJob``: what a job runs, checkpointable: on SLURM's warning signal the training saves
  checkpoint_last.pt and ends, and submitit requeues the job, which resumes from it.
- ``wait``: results from submitit's result files, states from ``squeue`` (submitit asks sacct, and
  without accounting waits forever for a job that ended without a result): a job that ended so is
  one failed run, its line naming the job's log.
"""

import contextlib
import json
import os
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..errors import BioConfigError, BioError
from ..slurm import ENDED as SLURM_ENDED
from ..slurm import last_line, squeue_states
from .execute import (
    TRAINED,
    RunFailed,
    execute,
    failed_record,
    mark_trained,
    report_runs,
    reused_record,
    run_line,
)
from .plan import Run

ENV = "FAIRSEQ_BIO_SLURM_"
# a job that will not run again; PREEMPTED too unless the job is requeued (then it is PENDING
# again), which PREEMPTED_GRACE_S leaves time for
ENDED = SLURM_ENDED | {"PREEMPTED"}
PREEMPTED_GRACE_S = 300.0
POLL_S = 10.0  # between two looks at the jobs
PROGRESS_S = 30.0  # at most one progress line (jobs running, pending) this often
RESULT_GRACE_S = 10.0  # a job ended (or unknown to SLURM) this long without a result file: failed
QUERY_GIVE_UP_S = 600.0  # squeue failing this long ends the wait
ENDING_WAIT_S = 300.0  # a job that got SIGTERM and has no result waits this long for SLURM's kill
ARRAY_MAX = 1000  # tasks per job array (SLURM's default MaxArraySize is 1001)
JOB_FILE = "slurm.json"  # in a run's directory: the job that runs it (a rerun waits for it)
# The training process saves and ends on SLURM's signals; the job's own process (submitit) is the
# one that requeues. With these blank, patches.preemption does not requeue from the training too.
TRAINING_ENV = {"SLURM_JOB_ID": "", "SLURM_ARRAY_JOB_ID": "", "SLURM_ARRAY_TASK_ID": ""}


@dataclass
class SlurmOptions:
    """Every job's resources (one run each: one node, one task)."""

    partition: Optional[str] = None
    timeout_min: int = 1440
    gpus_per_node: int = 1
    cpus_per_task: int = 10
    mem_gb: Optional[int] = None
    array_parallelism: int = 256
    additional: Dict[str, Any] = field(default_factory=dict)  # sbatch options, as KEY: VALUE
    signal_delay_s: int = 120  # SIGUSR2 this long before the time limit: save, then requeue
    max_num_timeout: int = 30  # requeues after the time limit

    @classmethod
    def from_args(cls, args, environ=os.environ) -> "SlurmOptions":
        """The command line's values, else the presets' FAIRSEQ_BIO_SLURM_* variables, else the
        defaults (a GPU per run unless ``--cpu``)."""

        def number(value, name):
            if value is not None:
                return value
            text = environ.get(ENV + name, "").strip()
            if not text:
                return None
            if not text.isdigit():
                raise BioConfigError(f"{ENV}{name}={text!r}: not a whole number")
            return int(text)

        extra: Dict[str, Any] = {}
        for key in ("account", "qos", "constraint", "gres"):
            if environ.get(ENV + key.upper(), "").strip():
                extra[key] = environ[ENV + key.upper()].strip()
        extra.update(slurm_params(args.slurm_param or []))
        given = {
            "partition": args.partition or environ.get(ENV + "PARTITION") or None,
            "timeout_min": number(args.timeout_min, "TIMEOUT_MIN"),
            "gpus_per_node": args.gpus_per_node,
            "cpus_per_task": number(args.cpus_per_task, "CPUS_PER_TASK"),
            "mem_gb": number(args.mem_gb, "MEM_GB"),
            "array_parallelism": args.array_parallelism,
        }
        if given["gpus_per_node"] is None:
            given["gpus_per_node"] = 0 if args.cpu else 1
        return cls(**{k: v for k, v in given.items() if v is not None}, additional=extra)

    def parameters(self) -> Dict[str, Any]:
        """submitit's SlurmExecutor parameters."""
        params = {
            "job_name": "fairseq-bio-blurb",
            "time": self.timeout_min,
            "nodes": 1,
            "ntasks_per_node": 1,
            "cpus_per_task": self.cpus_per_task,
            "array_parallelism": self.array_parallelism,
            "signal_delay_s": self.signal_delay_s,
            "partition": self.partition,
            "gpus_per_node": self.gpus_per_node or None,
            "mem": None if self.mem_gb is None else f"{self.mem_gb}GB",
            "additional_parameters": dict(self.additional) or None,
        }
        return {k: v for k, v in params.items() if v is not None}


# the command line's SLURM options (``fairseq_bio.cli.blurb``), refused with --launcher local
OPTIONS = (
    "partition",
    "timeout_min",
    "gpus_per_node",
    "cpus_per_task",
    "mem_gb",
    "array_parallelism",
    "slurm_param",
)


def slurm_options(args) -> Optional[SlurmOptions]:
    """The jobs' options under ``--launcher slurm``; None under ``--launcher local``, which refuses
    SLURM options in one line."""
    if args.launcher == "slurm":
        return SlurmOptions.from_args(args)
    for name in OPTIONS:
        if getattr(args, name) not in (None, []):
            option = "--" + name.replace("_", "-")
            raise BioConfigError(f"{option}: a SLURM option; give it with --launcher slurm")
    return None


def slurm_params(items: Sequence[str]) -> Dict[str, Any]:
    """``--slurm-param`` values (``KEY=VALUE``, or ``KEY`` for a flag such as exclusive) as submitit's
    additional sbatch parameters."""
    params: Dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        if not key or (eq and not value.strip()):
            raise BioConfigError(f"--slurm-param {item!r}: expected KEY=VALUE (an sbatch option)")
        params[key] = value.strip() if eq else True
    return params


# --- the job -------------------------------------------------------------------------------------


def _ended(process) -> Optional[int]:
    """A process's exit status, None while it runs; read with a non-blocking waitpid: in a signal
    handler its Popen may be held by the wait the signal interrupted."""
    if process.proc.returncode is not None:
        return process.proc.returncode
    try:
        pid, status = os.waitpid(process.proc.pid, os.WNOHANG)
    except ChildProcessError:  # reaped already
        return process.proc.poll()
    return os.waitstatus_to_exitcode(status) if pid else None


class RunJob:
    """One run as a SLURM job (submitit calls it; ``checkpoint`` makes it requeueable): the run's
    record, a failed run's included; resumed from its checkpoint_last.pt when requeued."""

    def __init__(self, run: Run, save_wait_s: float):
        self.run, self.save_wait_s = run, save_wait_s
        self._training = None

    def __getstate__(self):
        return {**self.__dict__, "_training": None}

    def _started(self, process) -> None:
        self._training = process

    def __call__(self) -> Dict[str, Any]:
        start, ending = time.time(), []
        bypass = signal.getsignal(signal.SIGTERM)  # submitit's: logs it

        def terminated(signum, frame):
            ending.append(signum)
            if callable(bypass):
                bypass(signum, frame)

        signal.signal(signal.SIGTERM, terminated)
        try:
            record = execute(self.run, resumable=True, env=TRAINING_ENV, started=self._started)
        except RunFailed as e:
            record = failed_record(self.run, str(e), time.time() - start)
        if ending and record["status"] == "failed":
            # SLURM ends the job (scancel, pre-emption, the time limit) and this process with it: a
            # result written now would be read as the run's, also when the job is requeued
            time.sleep(ENDING_WAIT_S)
            record["error"] += "; the job got SIGTERM (run again to resume)"
        return record

    def checkpoint(self):
        """submitit's handler of SLURM's warning signal calls this before it requeues the job: the
        training got the signal too, saves checkpoint_last.pt at its next update and ends; wait for
        that (``save_wait_s`` at most), then the same job again, which resumes. A training that
        ended well meanwhile is marked so."""
        from submitit.helpers import DelayedSubmission

        training, deadline = self._training, time.monotonic() + self.save_wait_s
        code = None if training is None else _ended(training)
        while training is not None and code is None and time.monotonic() < deadline:
            time.sleep(0.2)
            code = _ended(training)
        if training is not None and code == 0 and not (self.run.dir / TRAINED).exists():
            mark_trained(self.run, time.time() - training.started)
        return DelayedSubmission(self)


# --- submitting and waiting ----------------------------------------------------------------------


@dataclass
class Job:
    """A submitted run: its job id (``<array>_<task>``) and submitit's files."""

    run: Run
    job_id: str
    folder: Path
    start: float = field(default_factory=time.time)

    @property
    def paths(self):
        from submitit.core.utils import JobPaths

        return JobPaths(self.folder, job_id=self.job_id, task_id=0)

    def outcome(self) -> Optional[Tuple[str, Any]]:
        """submitit's ("success", record) or ("error", traceback) once the job wrote it, else None."""
        from submitit.core.utils import pickle_load

        path = self.paths.result_pickle
        if not path.exists():
            return None
        try:
            return pickle_load(path)
        except Exception:  # an unreadable file: the job's log says more
            return ("error", f"unreadable result file {path}")


def _ended_line(job: Job, state: Optional[Tuple[str, str]]) -> str:
    if state is None:
        how = "is no longer known to SLURM"
    else:
        reason = f" ({state[1]})" if state[1] not in ("", "None") else ""
        how = f"ended {state[0]}{reason}"
    return f"SLURM job {job.job_id} {how} without a result (see {job.paths.stderr})"


def _record(job: Job, outcome: Tuple[str, Any]) -> Dict[str, Any]:
    kind, value = outcome
    if kind == "success" and isinstance(value, dict):
        return value
    return failed_record(
        job.run, f"SLURM job {job.job_id} failed: {last_line(value)} (see {job.paths.stderr})", 0.0
    )


def wait(
    jobs: List[Job],
    done: Callable[[Job, Dict[str, Any]], None],
    tag: str,
    states: Callable[[Sequence[str]], Optional[Dict[str, Tuple[str, str]]]] = squeue_states,
) -> None:
    """Wait until every job has a record (``done(job, record)`` as each has one): its result, or a
    failed record when it ended without one (after ``RESULT_GRACE_S``: result files may show
    late on a shared file system). squeue failing for ``QUERY_GIVE_UP_S`` ends the wait
    (``BioError``)."""
    waiting = {job.job_id: job for job in jobs}
    no_result_since: Dict[str, float] = {}
    last_query, shown, last_line = time.monotonic(), None, 0.0
    while waiting:
        known = states(list(waiting))
        now = time.monotonic()
        if known is None:
            if now - last_query > QUERY_GIVE_UP_S:
                raise BioError(
                    f"squeue has failed for {QUERY_GIVE_UP_S:.0f} s; SLURM jobs "
                    f"{', '.join(waiting)} may still run (run the command again to wait for them)"
                )
        else:
            last_query = now
        for job_id, job in list(waiting.items()):
            outcome = job.outcome()
            if outcome is not None:
                del waiting[job_id]
                done(job, _record(job, outcome))
                continue
            if known is None:
                continue
            state = known.get(job_id)
            if state is not None and state[0] not in ENDED:
                no_result_since.pop(job_id, None)
                continue
            first = no_result_since.setdefault(job_id, now)
            grace = PREEMPTED_GRACE_S if state and state[0] == "PREEMPTED" else RESULT_GRACE_S
            if now - first >= grace:
                del waiting[job_id]
                # the run's own result.json counts too (a job ended after it wrote it)
                record = reused_record(job.run)
                if record is not None:
                    record["status"] = "ran"
                else:
                    error = _ended_line(job, state)
                    record = failed_record(job.run, error, time.time() - job.start)
                done(job, record)
        if known is not None and waiting:
            counts = [
                sum(known.get(j, ("",))[0] == s for j in waiting) for s in ("RUNNING", "PENDING")
            ]
            line = f"{tag} slurm: {counts[0]} running, {counts[1]} pending, {len(waiting)} to go"
            if line != shown and (shown is None or now - last_line >= PROGRESS_S):
                print(line, flush=True)
                shown, last_line = line, now
        if waiting:
            time.sleep(POLL_S)


def cancel(job_ids: Sequence[str]) -> None:
    """scancel the jobs (an interrupted runner leaves none of its jobs behind)."""
    if job_ids:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(["scancel", *job_ids], capture_output=True, timeout=60)


def _recorded_job(run: Run) -> Optional[Job]:
    """The job an earlier runner submitted for ``run`` (its JOB_FILE), if any."""
    try:
        data = json.loads((run.dir / JOB_FILE).read_text(encoding="utf-8"))
        return Job(run, str(data["job_id"]), Path(data["folder"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def submit(runs: List[Run], folder: Path, options: SlurmOptions) -> List[Job]:
    """The runs as tasks of job arrays (submitit's ``executor.batch()``); each run's directory
    records its job."""
    import submitit
    from submitit.core.utils import FailedJobError

    try:
        executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=options.max_num_timeout)
    except RuntimeError:
        raise BioConfigError("--launcher slurm: no srun on PATH (run it where SLURM is)") from None
    executor.update_parameters(**options.parameters())
    save_wait_s = max(options.signal_delay_s - 30, 10)
    jobs = []
    for first in range(0, len(runs), ARRAY_MAX):
        chunk = runs[first : first + ARRAY_MAX]
        try:
            with executor.batch():
                submitted = [executor.submit(RunJob(run, save_wait_s)) for run in chunk]
        except FailedJobError as e:
            why = str(e).strip().splitlines()
            raise BioError(f"sbatch refused the jobs: {why[-1] if why else e}") from None
        for run, job in zip(chunk, submitted):
            run.dir.mkdir(parents=True, exist_ok=True)
            (run.dir / JOB_FILE).write_text(
                json.dumps({"job_id": job.job_id, "folder": str(folder)}) + "\n", encoding="utf-8"
            )
            jobs.append(Job(run, job.job_id, folder))
    return jobs


def run_on_slurm(
    runs: List[Run], options: SlurmOptions, args, benchmark, plans, missing, out: Path, tag: str
) -> int:
    """The runs as SLURM jobs: finished ones reused without a job, the jobs an earlier runner left
    running waited for, the others submitted; then the same report as a local run."""
    folder = out / "slurm"
    records: Dict[int, Dict[str, Any]] = {}
    n, order = len(runs), {id(run): i for i, run in enumerate(runs)}

    def done(job: Job, record: Dict[str, Any]) -> None:
        records[order[id(job.run)]] = record
        print(run_line(tag, len(records), n, job.run, record, time.time() - job.start), flush=True)

    todo = []
    for run in runs:
        record = reused_record(run)
        if record is not None:
            done(Job(run, "", folder), record)
        else:
            todo.append(run)
    # a job an earlier runner submitted and left running (that runner was killed) is waited for,
    # not submitted again: two jobs must not train into one run directory
    earlier = [j for j in map(_recorded_job, todo) if j is not None]
    alive = squeue_states([j.job_id for j in earlier]) or {}
    jobs = [
        j
        for j in earlier
        if alive.get(j.job_id, ("COMPLETED",))[0] not in ENDED - {"PREEMPTED"}
        and j.outcome() is None  # one with a result has ended
    ]
    for job in jobs:
        print(f"{tag} {job.run.label}: waiting for SLURM job {job.job_id} of an earlier runner")
    waited = {id(j.run) for j in jobs}
    fresh = [run for run in todo if id(run) not in waited]
    if fresh:
        jobs = jobs + submit(fresh, folder, options)
        print(f"{tag} slurm: submitted {len(fresh)} job(s) ({describe(options)}); logs in {folder}")
    try:
        wait(jobs, done, tag)
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM: the runner stops, and its jobs with it
        cancel([j.job_id for j in jobs if order[id(j.run)] not in records])
        raise
    return report_runs([records[i] for i in range(n)], args, benchmark, plans, missing, out, tag)


def describe(options: SlurmOptions) -> str:
    """The jobs' sbatch settings in one line (``partition=gpu time=720 ... exclusive``)."""
    params = {k: v for k, v in options.parameters().items() if k != "additional_parameters"}
    params.update(options.additional)
    return " ".join(k if v is True else f"{k}={shlex.quote(str(v))}" for k, v in params.items())

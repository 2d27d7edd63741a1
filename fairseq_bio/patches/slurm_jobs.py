"""The submitting side of the SLURM presets (``fairseq-hydra-train -m ... run_config=slurm_*``): its
wait for the job ends, in one line, when the job fails or ends without a result.

submitit waits until every task has saved its result, asking ``sacct`` meanwhile whether the job
still runs; where SLURM keeps no accounting, ``sacct`` fails, and a cancelled job, or one whose
tasks were killed, keeps it waiting forever. The hydra callback ``SlurmJobs`` (in the presets) has
submitit's SLURM executor make ``WatchedSlurmJob``s: their state comes from ``squeue`` where
``sacct`` fails (``SchedulerWatcher``), and their results name the first task that failed, or the
job's end state, in one line (``SlurmJobError``)."""

import time
from pathlib import Path

from hydra.experimental.callback import Callback
from submitit.slurm.slurm import SlurmExecutor, SlurmInfoWatcher, SlurmJob

from ..errors import BioError, traceback_requested
from ..slurm import ENDED, client, last_line, squeue_states


GONE = "ENDED"  # a job squeue no longer lists (it ended more than MinJobAge ago)
STATE_DELAY_S = 60  # the longest wait between two questions to SLURM (submitit's own: 600)


class SlurmJobError(BioError):
    """A SLURM job of a sweep failed or ended without a result: the job, the task, the cause and
    where its log is, in one line."""


class SlurmJobs(Callback):
    """hydra callback of the SLURM presets: in the submitting process (``on_multirun_start``),
    submitit's SLURM executor makes ``WatchedSlurmJob``s."""

    def on_multirun_start(self, config, **kwargs) -> None:
        SlurmExecutor.job_class = WatchedSlurmJob


class SchedulerWatcher(SlurmInfoWatcher):
    """submitit's watcher of job states: ``sacct``, and ``squeue`` from the first time sacct fails
    (no accounting); a job squeue no longer lists has ended (``GONE``)."""

    def __init__(self, delay_s: int = STATE_DELAY_S) -> None:
        super().__init__(delay_s)
        self.sacct = True

    def update(self) -> None:
        ids = sorted({x.split("_")[0] for x in self._registered - self._finished})
        if not ids:
            return
        self._num_calls += 1
        info = self._sacct() if self.sacct else None
        if info is None:
            self.sacct = False
            info = self._squeue(ids)
        self._info_dict.update(info or {})
        self._last_status_check = time.time()
        for job_id in self._registered - self._finished:
            if self.is_done(job_id, mode="cache"):
                self._finished.add(job_id)

    def _sacct(self):
        out = client(self._make_command())
        return None if out is None or out.returncode else self.read_info(out.stdout)

    def _squeue(self, ids):
        """{job id: {"State": ...}} from squeue (None where it failed): an ended state as it is,
        any other as RUNNING, GONE for a job it no longer lists."""
        states = squeue_states(ids)
        if states is None:
            return None
        listed = {
            job: {"State": state if state in ENDED else "RUNNING"}
            for job, (state, _) in states.items()
        }
        mains = {key.split("_")[0] for key in listed}
        gone = {
            j: {"State": GONE}
            for j in self._registered - self._finished
            if j not in listed and j.split("_")[0] not in mains
        }
        return {**listed, **gone}


class WatchedSlurmJob(SlurmJob):
    """submitit's SlurmJob, its state from ``SchedulerWatcher``. ``results()`` puts the result of
    the task that failed first before the others (hydra's launcher reports the first one), its
    error in one line; a job that ended without a result from each task raises a
    ``SlurmJobError``."""

    watcher = SchedulerWatcher()

    def results(self):
        self.wait()
        tasks = list(self._sub_jobs) or [self]
        outcomes = _outcomes(tasks, self._results_timeout_s)
        failed = sorted(
            (mtime, i)
            for i, (outcome, value, mtime) in outcomes.items()
            if outcome == "error" or _failed(value)
        )
        if failed:
            first = failed[0][1]
            outcome, value, _ = outcomes[first]
            where, log = f"SLURM job {self.job_id}, task {first}", tasks[first].paths.stderr
            if outcome == "error":  # raised outside hydra's job: submitit saved the traceback
                raise SlurmJobError(f"{where}: {last_line(value)} (traceback in {log})")
            if not traceback_requested():
                value._return_value = SlurmJobError(f"{where}: {_one_line(value, log)}")
            return [value] + [v for i, (_, v, _) in sorted(outcomes.items()) if i != first]
        missing = [i for i in range(len(tasks)) if i not in outcomes]
        if missing:
            state = self.watcher.get_state(self.job_id, mode="cache")
            ended = "ended" if state == GONE else f"ended {state}"
            which = "task" if len(missing) == 1 else "tasks"
            raise SlurmJobError(
                f"SLURM job {self.job_id} {ended} before {which} {', '.join(map(str, missing))} "
                f"of {len(tasks)} saved a result (cancelled, out of time or killed); see "
                f"{tasks[missing[0]].paths.stderr}"
            )
        return [outcomes[i][1] for i in range(len(tasks))]


def _outcomes(tasks, timeout):
    """{task index: (outcome, value, mtime)} of the tasks whose result file is there, waiting up to
    ``timeout`` s for the missing ones (a shared filesystem may show a file late)."""
    found = {}
    deadline = time.monotonic() + timeout
    while True:
        for i, task in enumerate(tasks):
            path = Path(task.paths.result_pickle)
            if i not in found and path.exists():
                found[i] = (*task._get_outcome_and_result(), path.stat().st_mtime)
        if len(found) == len(tasks) or time.monotonic() > deadline:
            return found
        time.sleep(1)


def _failed(value) -> bool:
    """Whether ``value`` is the JobReturn of a hydra job that failed."""
    return getattr(getattr(value, "status", None), "name", None) == "FAILED"


def _one_line(job_return, log) -> str:
    error = job_return._return_value
    if isinstance(error, BioError):
        return str(error)
    return f"{type(error).__name__}: {error} (traceback in {log})"

"""Running fairseq and reading its logs, in one place.

- Command lines: ``hydra_train`` (fairseq's hydra entry point, ``fairseq-hydra-train``, on a shipped
  config with the plugin as its user dir; ``shipped_config_dir`` is where those configs are),
  ``train`` / ``validate`` (fairseq's argparse entry points) and ``command`` (any console script of
  this environment: fairseq's, or the plugin's own ``fairseq-bio-*``).
- Processes: ``Run`` starts one (its output in a file, on ours, or kept in memory with stdout and
  stderr apart; optionally in a process group of its own), watches its JSON log for an update,
  reports its progress, signals, waits for or kills it; ``run`` runs one to its end, ``capture`` one
  whose output the caller reads. A failure is a ``RunError`` whose message ends with the tail of the
  output. The BLURB runner, the preprocessing scripts, the benchmarks and the test helpers start
  their processes here.
- Logs: ``logged`` reads fairseq's JSON progress log into ``{num_updates: entry}`` per kind
  (``train_inner``, ``train``, ``valid``); ``last_validation`` is the last validation of a log in
  the JSON or the simple format; ``tensorboard_curve`` reads one scalar of a run's tensorboard logs,
  whatever format its console log had.

Only the standard library is imported, so that the BLURB runner, the demo, the benchmarks and the
tests build and read runs without loading torch or fairseq (``tensorboard_curve`` loads
tensorboard's event reader when it is called).
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Optional, Sequence, Union

BIN = Path(
    sys.executable
).parent  # the console scripts of this environment: fairseq's and the plugin's
PLUGIN_DIR = (
    Path(__file__).resolve().parent
)  # the user dir (common.user_dir, --user-dir) fairseq loads
# the shipped hydra configs' directory, inside the installed plugin or beside the checkout's
CONFIGS = "hydra_configs"
HYDRA_TRAIN = "fairseq-hydra-train"
TAIL_CHARS = 4000  # of a run's output, in its errors
KILLED_OUTPUT_S = (
    10  # how long the output of a killed captured run is read (its children may hold the pipes)
)
PathLike = Union[str, os.PathLike]


# --- command lines -----------------------------------------------------------------------------------------------


def shipped_config_dir() -> Path:
    """The directory of the shipped hydra configs (``fairseq-bio-config-dir`` prints it). A
    ``pip install .`` puts ``hydra_configs/`` inside the package (``fairseq_bio/hydra_configs``, see
    setup.py); in a checkout (and an editable install) they are the repository's top-level
    ``hydra_configs/``, so the README's ``--config-dir hydra_configs`` keeps working there. The
    installed copy is looked for first."""
    for candidate in (PLUGIN_DIR / CONFIGS, PLUGIN_DIR.parent / CONFIGS):
        if (candidate / "bio_roberta_tiny.yaml").is_file():
            return candidate
    from .errors import (
        BioError,
    )  # here: errors imports hydra, and this module only the standard library

    raise BioError(
        f"{PLUGIN_DIR}: no {CONFIGS}/ beside or inside the package; reinstall fairseq_bio"
    )


def executable(name: str) -> str:
    """The console script ``name`` of this environment (beside ``sys.executable``)."""
    return str(BIN / name)


def command(name: str, *args: Any) -> list:
    """``name`` (a console script of this environment: fairseq's or the plugin's) with ``args``, as
    strings."""
    return [executable(name), *map(str, args)]


def hydra_train(
    config: str,
    *overrides: Any,
    save_dir: Optional[PathLike] = None,
    log: Optional[PathLike] = None,
    log_format: Optional[str] = "json",
    config_dir: Optional[PathLike] = None,
    user_dir: Optional[PathLike] = PLUGIN_DIR,
) -> list:
    """fairseq's hydra entry point on ``config`` (of ``config_dir``, default the plugin's shipped
    configs) with the plugin as its user dir, checkpoints in ``save_dir`` and a ``log_format``
    progress log in ``log`` (None: fairseq's default format) when given, then ``overrides`` (hydra
    applies them in order: a later value wins).

    ``user_dir=None`` leaves ``common.user_dir`` to the overrides (the BLURB runner's, whose command
    lines are the identity of its stored results and keep their order)."""
    fixed = [f"common.user_dir={user_dir}"] if user_dir is not None else []
    if save_dir is not None:
        fixed.append(f"checkpoint.save_dir={save_dir}")
    if log is not None:
        fixed += [f"common.log_file={log}"] + (
            [f"common.log_format={log_format}"] if log_format else []
        )
    config_dir = shipped_config_dir() if config_dir is None else config_dir
    return command(
        HYDRA_TRAIN, "--config-dir", config_dir, "--config-name", config, *fixed, *overrides
    )


def train(data: PathLike, *args: Any, plugin: bool = True) -> list:
    """fairseq's argparse training entry point (``fairseq-train``) on ``data``, the plugin as
    ``--user-dir`` unless ``plugin`` is false (stock fairseq), then ``args``."""
    return command("fairseq-train", data, *(["--user-dir", PLUGIN_DIR] if plugin else []), *args)


def validate(data: PathLike, *args: Any, plugin: bool = True) -> list:
    """fairseq's validation entry point (``fairseq-validate``) on ``data``, the plugin as
    ``--user-dir`` unless ``plugin`` is false, then ``args``."""
    return command("fairseq-validate", data, *(["--user-dir", PLUGIN_DIR] if plugin else []), *args)


# --- processes ---------------------------------------------------------------------------------------------------


class RunError(RuntimeError):
    """A run that exited non-zero, ended before what was waited for, or ran past its time (then it
    was killed); the message says which and ends with the tail of its output. ``code``: its exit
    status (None: still running then).
    """

    def __init__(self, run: "Run", what: str):
        self.run, self.code = run, run.proc.returncode
        if run.out:
            where = f"the end of its output ({run.out})"
        else:
            where = "the end of its output" if run.captured else "its output went to ours"
        tail = run.output()
        super().__init__(f"{run.name} {what}; {where}" + (f":\n{tail}" if tail else ""))


class RunTimeout(RunError):
    """A run still going at its time limit (and killed)."""


class Run:
    """One process, started at once: its output (stdout and stderr) appended to ``out`` (None:
    ours), its progress read from the JSON log ``log`` it writes (``wait_for_update``).

    ``env``: variables set over ours (PYTHONUNBUFFERED=1 is, so that the output file is up to date);
    ``session``: a process group of its own, which ``kill`` ends whole (DataLoader workers,
    pytest-xdist workers and their runs with it), as SLURM signals every process of a job step
    (``os.killpg(run.proc.pid, sig)``); ``capture``: its stdout and stderr kept apart, as text, in
    ``stdout`` and ``stderr`` once it ends (not with ``out``).
    """

    def __init__(
        self,
        argv: Sequence[Any],
        out: Optional[PathLike] = None,
        *,
        log: Optional[PathLike] = None,
        env: Optional[Dict[str, str]] = None,
        cwd: Optional[PathLike] = None,
        session: bool = False,
        capture: bool = False,
    ):
        if capture and out is not None:
            raise ValueError("a run's output goes to a file (out) or is captured, not both")
        self.argv = [str(a) for a in argv]
        self.out = Path(out) if out is not None else None
        self.log = Path(log) if log is not None else None
        self.session, self.captured = session, capture
        self.stdout: Optional[str] = None
        self.stderr: Optional[str] = None
        environment = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        if self.out is not None:
            self.out.parent.mkdir(parents=True, exist_ok=True)
        stream = open(self.out, "ab") if self.out is not None else None
        if capture:
            streams = dict(
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace"
            )
        else:
            streams = dict(stdout=stream, stderr=subprocess.STDOUT if stream else None)
        self.started = time.time()
        try:
            self.proc = subprocess.Popen(
                self.argv, env=environment, cwd=cwd, start_new_session=session, **streams
            )
        finally:
            if stream is not None:
                stream.close()

    @property
    def name(self) -> str:
        return Path(self.argv[0]).name

    @property
    def returncode(self) -> Optional[int]:
        """Its exit status, None while it runs (or before it was waited for)."""
        return self.proc.returncode

    def output(self, whole: bool = False) -> str:
        """What it printed (the last TAIL_CHARS characters unless ``whole``): its output file's, or
        a captured run's stdout then stderr; "" when it prints to ours."""
        if self.captured:
            text = (self.stdout or "") + (self.stderr or "")
        elif self.out is None or not self.out.exists():
            return ""
        else:
            text = self.out.read_text(encoding="utf-8", errors="replace")
        return text if whole else text[-TAIL_CHARS:]

    def poll(self) -> Optional[int]:
        """Its exit status, None while it runs."""
        return self.proc.poll()

    def signal(self, signum: int = signal.SIGUSR1) -> None:
        """``signum`` to the process itself (not its group)."""
        self.proc.send_signal(signum)

    def kill(self) -> int:
        """SIGKILL to it (to its whole group with ``session``); its exit status."""
        if self.proc.poll() is None:
            if self.session:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
            else:
                self.proc.kill()
        if self.captured:
            self._collect(KILLED_OUTPUT_S)
        return self.proc.wait()

    def _collect(self, timeout: Optional[float]) -> int:
        """A captured run: wait for its end, reading its stdout and stderr
        (``subprocess.TimeoutExpired`` past ``timeout`` while it runs; a later call reads on from
        there)."""
        if self.stdout is None:
            try:
                self.stdout, self.stderr = self.proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                if self.proc.poll() is None:
                    raise
                # it ended, and a child of its own still holds the pipes: its output is lost
        return self.proc.wait()

    def _wait(self, timeout: Optional[float]) -> int:
        return self._collect(timeout) if self.captured else self.proc.wait(timeout)

    def finish(
        self,
        timeout: Optional[float] = None,
        *,
        progress: Optional[Callable[["Run"], None]] = None,
        every: float = 60,
    ) -> int:
        """Wait for its end; its exit status. ``progress(run)`` is called every ``every`` seconds
        while it runs. Still running after ``timeout`` seconds (``RunTimeout``), or when the wait is
        interrupted (Ctrl-C, a SIGTERM handler raising, ``progress`` raising), it is killed first,
        never left running."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                left = None if deadline is None else max(deadline - time.monotonic(), 0)
                if progress is None:
                    return self._wait(left)
                try:
                    return self._wait(every if left is None else min(every, left))
                except subprocess.TimeoutExpired:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise
                    progress(self)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RunTimeout(self, f"still running after {timeout:g} s, killed") from None
        except BaseException:
            self.kill()
            raise

    def check(self, timeout: Optional[float] = None, **progress: Any) -> "Run":
        """``finish`` (``progress``, ``every``: as there), and a ``RunError`` unless it exited 0."""
        code = self.finish(timeout, **progress)
        if code != 0:
            raise RunError(self, f"exited {code}")
        return self

    def wait_for_update(
        self, update: int, timeout: float = 300, log: Optional[PathLike] = None
    ) -> int:
        """Block until its JSON log (``log``, default the run's) shows a training update ``update``
        or later; the first such update. A ``RunError`` when it exits before, or ``timeout`` seconds
        pass (it is left running).
        """
        log = Path(log or self.log)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if log.exists():
                done = [u for u in logged(log, "train_inner") if u >= update]
                if done:
                    return min(done)
            if self.proc.poll() is not None:
                raise RunError(self, f"exited {self.proc.returncode} before update {update}")
            time.sleep(0.05)
        raise RunError(self, f"logged no update {update} within {timeout:g} s")


def run(
    argv: Sequence[Any],
    out: Optional[PathLike] = None,
    *,
    env: Optional[Dict[str, str]] = None,
    cwd: Optional[PathLike] = None,
    timeout: Optional[float] = None,
    session: bool = False,
) -> Run:
    """Run ``argv`` to its end (see ``Run``); a ``RunError`` with the tail of ``out`` unless it
    exits 0."""
    return Run(argv, out, env=env, cwd=cwd, session=session).check(timeout)


def capture(
    argv: Sequence[Any],
    *,
    env: Optional[Dict[str, str]] = None,
    cwd: Optional[PathLike] = None,
    timeout: Optional[float] = None,
    check: bool = False,
) -> Run:
    """Run ``argv`` to its end, its stdout and stderr kept (``run.stdout``, ``run.stderr``,
    ``run.returncode``); with ``check``, a ``RunError`` with their tail unless it exits 0. Past
    ``timeout`` it is killed (``RunTimeout``)."""
    run = Run(argv, env=env, cwd=cwd, capture=True)
    if check:
        return run.check(timeout)
    run.finish(timeout)
    return run


# --- logs --------------------------------------------------------------------------------------------------------

KINDS = {"train_inner": "", "train": "train_", "valid": "valid_"}  # kind -> the prefix of its keys
SIMPLE_VALIDATION = "valid on 'valid' subset"  # fairseq's simple / tqdm format's validation line


def _number(value: Any) -> Any:
    """A value of fairseq's JSON log (numbers are written as strings, "0.37", "12") as a number;
    others unchanged."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return int(value) if value.lstrip("-").isdigit() else float(value)
    return value


def _simple_validation(line: str) -> Optional[Dict[str, Any]]:
    """The stats of a validation line in fairseq's simple format
    (``epoch 001 | valid on 'valid' subset | loss 9.1 | ppl 548.2 | ... | num_updates 600``;
    fairseq-validate's has no epoch and no num_updates), else None.
    """
    if SIMPLE_VALIDATION not in line:
        return None
    fields = dict(
        part.strip().split(" ", 1) for part in line.split("|") if part.strip().count(" ") == 1
    )
    return {k: _number(v) for k, v in fields.items()}


def _entry(line: str, kind: str) -> Optional[Dict[str, Any]]:
    """The progress entry of ``kind`` on one line of fairseq's output, its keys without the kind's
    prefix (``train``, ``valid``: only the prefixed keys) and its values numbers; else None. A JSON
    entry starts the line in a log file and follows the logger's ``time | level | name |`` on the
    console; validations in the simple format count too.
    """
    prefix = KINDS[kind]
    if kind == "valid" and SIMPLE_VALIDATION in line:
        return _simple_validation(line)
    start = line.find("{")
    if start < 0 or f'"{prefix}num_updates"' not in line:
        return None
    try:
        entry = json.loads(line[start:])
    except ValueError:
        return None
    if not isinstance(entry, dict) or f"{prefix}num_updates" not in entry:
        return None
    if kind == "train_inner" and "update" not in entry:
        return None  # not an interval's (those carry the fractional epoch ``update``)
    return {k[len(prefix) :]: _number(v) for k, v in entry.items() if k.startswith(prefix)}


def entries(lines: Iterable[str], kind: str) -> Dict[int, Dict[str, Any]]:
    """``{num_updates: entry}`` of the progress entries of ``kind`` in ``lines`` of fairseq's
    output: ``train_inner`` (every ``log_interval`` updates), ``train`` (end of epoch) or ``valid``
    (see ``_entry``). A later line for the same update wins (a resumed run's)."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: one of {', '.join(KINDS)}")
    found: Dict[int, Dict[str, Any]] = {}
    for line in lines:
        entry = _entry(line, kind)
        if entry is not None and "num_updates" in entry:
            found[int(float(entry["num_updates"]))] = entry
    return found


def logged(log: PathLike, kind: str) -> Dict[int, Dict[str, Any]]:
    """``entries`` of the log file ``log`` (``common.log_file``, or a run's output); {} when there
    is none."""
    if not os.path.exists(log):
        return {}
    with open(log, encoding="utf-8", errors="replace") as f:
        return entries(f, kind)


def last_validation(log: PathLike) -> Optional[Dict[str, Any]]:
    """The last validation written to ``log`` (``loss``, ``ppl``, ``num_updates``, ...; JSON or
    simple format, the output of fairseq-validate too), or None when it has none."""
    last = None
    if os.path.exists(log):
        with open(log, encoding="utf-8", errors="replace") as f:
            for line in f:
                last = _entry(line, "valid") or last
    return last


def tensorboard_curve(logdir: PathLike, split: str, key: str = "loss") -> list:
    """``[(update, value), ...]`` of scalar ``key`` in ``<logdir>/<split>`` (fairseq's tensorboard
    logs: ``common.tensorboard_logdir``, one folder per split: ``train_inner``, ``train``,
    ``valid``), by update; a later event for the same update wins (a resumed run's); [] when there
    are none."""
    folder = Path(logdir) / split
    if not folder.is_dir():
        return []
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    if key not in events.Tags().get("scalars", []):
        return []
    return sorted({e.step: e.value for e in events.Scalars(key)}.items())

"""The plugin's user errors: bad input, settings or files that the user must fix, reported in one
line.

Every such error derives from ``BioError``; its message names the file and line (or the option) and
says what to change. It reaches the user as one line from every entry point: the plugin's console
scripts (``cli.options.run_cli``), fairseq-hydra-train with the shipped configs (the hydra callback
``OneLineErrors``), fairseq-train and the other argparse entry points (``patches.excepthook``).
``FAIRSEQ_BIO_TRACEBACK=1`` asks for the traceback everywhere.
"""

import atexit
import logging
import os
import sys
import traceback
from typing import Optional

from hydra.errors import CompactHydraException
from hydra.experimental.callback import Callback

TRACEBACK_ENV = "FAIRSEQ_BIO_TRACEBACK"


class BioError(CompactHydraException):
    """Bad input or settings the user must fix; the message is one line naming the file and line or
    the option."""


class BioConfigError(BioError, ValueError):
    """A setting (hydra override, command-line option, config-file entry) that cannot work, or a
    checkpoint it names that does not fit the run; the message names it."""


class BioFileNotFoundError(BioError, FileNotFoundError):
    """A file or directory the settings name is missing; the message names it and the setting."""

    def __str__(
        self,
    ) -> str:  # FileNotFoundError's str is "[Errno ...] ..." only when built from (errno, text)
        return str(self.args[0]) if self.args else ""


def json_error(path, error, line: Optional[int] = None) -> str:
    """``<path>:<line>:<column>: not valid JSON (<what>)`` for a ``json.JSONDecodeError``; ``line``:
    the file line of a JSON-lines record (the error's own line is then 1)."""
    return f"{path}:{error.lineno if line is None else line}:{error.colno}: not valid JSON ({error.msg})"


def traceback_requested() -> bool:
    """Whether the user asked for tracebacks (``FAIRSEQ_BIO_TRACEBACK=1``, or hydra's
    ``HYDRA_FULL_ERROR=1``)."""
    return any(
        os.environ.get(name, "") not in ("", "0") for name in (TRACEBACK_ENV, "HYDRA_FULL_ERROR")
    )


class OneLineErrors(Callback):
    """hydra callback (``hydra.callbacks``; the shipped ``run_config``s set its subclass
    ``settings.OneLineSettingErrors``): a single run whose job failed with a ``BioError`` ends here,
    the message alone on stderr, exit status 1. Local sweeps (``-m``) keep hydra's own report, so that
    the other jobs still run.

    A task of a SLURM job (``-m`` with a ``run_config=slurm_*`` preset: submitit) whose job failed
    writes the error to its log (the message of a ``BioError``, else the traceback), returns the
    ``BioError`` to the submitting process, and exits with status 1 once submitit has saved that
    result: srun (``SLURM_KILL_BAD_EXIT=1`` in the presets) then ends the job's other tasks, which
    over NCCL would otherwise wait for this one in their next collective.
    """

    def on_job_end(self, config, job_return, **kwargs) -> None:
        from hydra.core.hydra_config import HydraConfig
        from hydra.core.utils import JobStatus
        from hydra.types import RunMode

        if job_return.status != JobStatus.FAILED:
            return
        # the public getter prints hydra's "Error executing job" line and raises
        error = job_return._return_value
        if not traceback_requested():
            error = self.named(config, error)
        if HydraConfig.get().mode == RunMode.RUN:
            if isinstance(error, BioError) and not traceback_requested():
                sys.stderr.write(f"{error}\n")
                sys.stderr.flush()
                raise SystemExit(1)
        elif os.environ.get("SUBMITIT_EXECUTOR") == "slurm":
            job_return._return_value = error
            end_failed_task(error)

    def named(self, config, error: BaseException) -> BaseException:
        """The error to report for a job of ``config`` that failed with ``error``: here ``error``
        itself."""
        return error


def end_failed_task(error: BaseException) -> None:
    """In a SLURM task whose job failed with ``error``: the error on stderr (one line for a
    ``BioError``, unless tracebacks are asked for), then exit status 1 when the interpreter exits,
    after submitit has saved the job's result (``os._exit``: no teardown, whose process group
    destructor could wait for the other ranks)."""
    if isinstance(error, BioError) and not traceback_requested():
        text = f"{error}\n"
    else:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    sys.stderr.write(text)
    sys.stderr.flush()
    atexit.register(_exit_failed)


def _exit_failed() -> None:
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(1)

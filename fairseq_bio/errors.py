"""The plugin's user errors: bad input, configuration or files that the user must fix, reported in one line.

Every error the plugin raises about the user's data or settings derives from ``BioError``; its message names the
file and line (or the option) and says what to change. How it reaches the user:

- ``fairseq-hydra-train`` with the shipped configs: their ``run_config`` installs a hydra callback
  (``OneLineErrors``, through its subclass in ``settings``), which prints a failed job's ``BioError`` as one line on stderr and exits with status 1, before
  hydra's own report (an "Error executing job" line, the traceback, a ``HYDRA_FULL_ERROR`` hint). With other
  configs hydra still shortens it: ``BioError`` is a ``CompactHydraException``, printed without a traceback.
- ``fairseq-train``, ``fairseq-validate`` and the other argparse entry points: ``patches.excepthook``, installed at
  plugin import, adds a ``sys.excepthook`` that prints an uncaught ``BioError`` as its message alone (status 1).
- The plugin's own console scripts print ``<script>: <message>`` (``fairseq_bio.cli.options.run_cli``).

Settings that cannot train are ``BioConfigError``s of ``fairseq_bio.settings``, raised in fairseq-train's ``main``
before anything is built; a value omegaconf refuses while fairseq reads the config before that check
(``optimizer.adam_eps=abc``) is named the same way by the configs' callback, ``settings.OneLineSettingErrors``. A
value hydra refuses while composing the config (``optimization.max_update=abc``) stops the run before any plugin
code is loaded: hydra reports it.

``FAIRSEQ_BIO_TRACEBACK=1`` asks for the traceback everywhere (it also sets ``HYDRA_FULL_ERROR``). fairseq's and
torch's own errors keep their tracebacks: only ``BioError`` is shortened.
"""

import os
import sys
from typing import Optional

from hydra.errors import CompactHydraException
from hydra.experimental.callback import Callback

TRACEBACK_ENV = "FAIRSEQ_BIO_TRACEBACK"


class BioError(CompactHydraException):
    """Bad input or settings the user must fix; the message is one line naming the file and line or the option."""


class BioConfigError(BioError, ValueError):
    """A setting (hydra override, command-line option) that cannot work; the message names it."""


class BioFileNotFoundError(BioError, FileNotFoundError):
    """A file or directory the settings name is missing; the message names it and the setting."""

    def __str__(self) -> str:  # FileNotFoundError's str is "[Errno ...] ..." only when built from (errno, text)
        return str(self.args[0]) if self.args else ""


def json_error(path, error, line: Optional[int] = None) -> str:
    """``<path>:<line>:<column>: not valid JSON (<what>)`` for a ``json.JSONDecodeError``; ``line``: the file line
    of a JSON-lines record (the error's own line is then 1)."""
    return f"{path}:{error.lineno if line is None else line}:{error.colno}: not valid JSON ({error.msg})"


def traceback_requested() -> bool:
    """Whether the user asked for tracebacks (``FAIRSEQ_BIO_TRACEBACK=1``, or hydra's ``HYDRA_FULL_ERROR=1``)."""
    return any(os.environ.get(name, "") not in ("", "0") for name in (TRACEBACK_ENV, "HYDRA_FULL_ERROR"))


class OneLineErrors(Callback):
    """hydra callback (``hydra.callbacks``; the shipped ``run_config``s set its subclass
    ``settings.OneLineSettingErrors``): a single run whose job failed with a ``BioError`` ends here, the message alone
    on stderr, exit status 1. Sweeps (``-m``) keep hydra's own report, so that the other jobs still run."""

    def on_job_end(self, config, job_return, **kwargs) -> None:
        from hydra.core.hydra_config import HydraConfig
        from hydra.core.utils import JobStatus
        from hydra.types import RunMode

        if job_return.status != JobStatus.FAILED or traceback_requested():
            return
        error = job_return._return_value  # the public getter prints hydra's "Error executing job" line and raises
        error = self.named(config, error)
        if isinstance(error, BioError) and HydraConfig.get().mode == RunMode.RUN:
            sys.stderr.write(f"{error}\n")
            sys.stderr.flush()
            raise SystemExit(1)

    def named(self, config, error: BaseException) -> BaseException:
        """The error to report for a job of ``config`` that failed with ``error``: here ``error`` itself."""
        return error

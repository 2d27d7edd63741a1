"""An uncaught ``BioError`` printed as its message alone (``sys.excepthook``), for fairseq-train,
fairseq-validate and the other argparse entry points; ``FAIRSEQ_BIO_TRACEBACK=1`` asks hydra for
full tracebacks too."""

import os
import sys

from ..errors import TRACEBACK_ENV, BioError, traceback_requested


def _one_line_hook(previous):
    def hook(kind, value, tb):
        if isinstance(value, BioError) and not traceback_requested():
            sys.stderr.write(f"{value}\n")
            sys.stderr.flush()
            return
        previous(kind, value, tb)

    hook.fairseq_bio_one_line = True
    return hook


def install() -> None:
    """Print uncaught ``BioError``s in one line (``sys.excepthook``); with
    ``FAIRSEQ_BIO_TRACEBACK=1``, ask hydra for full tracebacks too. Idempotent; called when the
    plugin is imported."""
    if not getattr(sys.excepthook, "fairseq_bio_one_line", False):
        sys.excepthook = _one_line_hook(sys.excepthook)
    if os.environ.get(TRACEBACK_ENV, "") not in ("", "0"):
        os.environ.setdefault("HYDRA_FULL_ERROR", "1")

"""The console scripts' one command-line vocabulary and their one entry point (STYLE habit 15).

Every script says the same thing the same way:

- ``--out``: what the command writes (a file or a directory);
- ``--checkpoint``: the model it reads;
- ``--data``: task data, and nothing else (a vocabulary directory is ``--vocab``);
- ``--overwrite``: replace what an earlier run of the same command wrote there (never anything
  else);
- ``--no-progress``: no progress bar.

What a command reads is spelled one way too: ``--input FILE`` for a command that reads one input,
positional ``INPUT...`` for one that reads many (never ``--inputs``, nor a positional for a single
input). A flag that names a role rather than "the input" is not an input flag:
``--train``/``--valid`` of fairseq-bio-binarize, which needs both splits,
``--train``/``--devel``/``--test`` of a convert-tagging format, which say the split of each file,
``--vocab``, ``--checkpoint`` and ``--data``.

``run_cli`` is every script's ``cli_main``: a user error (``BioError``) ends the command as
``<script>: <message>``, the script named as in its ``--help`` (``Parser(prog)``); so does a bad
option value (``<script>: --lr-grid: 'nan': ...``, ``Parser.error``).

Only the standard library and ``fairseq_bio.errors``: a corpus command answers ``--help`` without
torch or fairseq.
"""

import argparse
import errno
import sys
from typing import Callable, Optional, Sequence, Tuple

from ..errors import BioError, traceback_requested


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose ``prog`` is the script's full name, which ``run_cli``
    prefixes its errors with."""

    def error(self, message: str):
        """argparse's error, except that a bad value of one option is one line,
        ``<prog>: --option: <why>`` (status 2, as argparse's); an error about the command line as a
        whole keeps argparse's usage line.
        """
        option, colon, why = message.partition(": ")
        if option.startswith("argument ") and colon:
            self.exit(2, f"{self.prog}: {option[len('argument '):]}: {why}\n")
        super().error(message)


# ---------------------------------------------------------------------------------------------------
# The vocabulary


def add_out(parser: Parser, help: str, **kwargs):
    """``--out``: what the command writes (required unless it has a ``default`` or
    ``required=False``)."""
    kwargs.setdefault("required", "default" not in kwargs)
    return parser.add_argument("--out", help=help, **kwargs)


def add_checkpoint(parser: Parser, help: str, **kwargs):
    """``--checkpoint``: the model the command reads (required)."""
    return parser.add_argument("--checkpoint", help=help, required=True, **kwargs)


def add_data(parser: Parser, help: str, **kwargs):
    """``--data``: the task data (never a vocabulary or a model)."""
    return parser.add_argument("--data", help=help, **kwargs)


def add_overwrite(parser: Parser, what: str, help: Optional[str] = None):
    """``--overwrite``: replace ``what`` where an earlier run of this command wrote it, and nothing
    else (``help``: a command's own words for that)."""
    return parser.add_argument(
        "--overwrite",
        action="store_true",
        help=help or f"replace {what} an earlier {parser.prog} wrote",
    )


def add_no_progress(parser: Parser):
    """``--no-progress``: no progress bar."""
    return parser.add_argument("--no-progress", action="store_true", help="no progress bar")


# ---------------------------------------------------------------------------------------------------
# The entry point


def run_cli(
    prog: str,
    main: Callable[[Optional[Sequence[str]]], object],
    argv=None,
    *,
    interrupted: str = "interrupted",
    errors: Tuple[type, ...] = (BioError,),
) -> None:
    """Every console script's ``cli_main``: run ``main(argv)``; a non-zero int it returns is the
    exit status. A user error (a ``BioError``; ``errors``: and those classes) becomes
    ``<prog>: <message>`` on stderr and exit status 1 (the traceback with
    ``FAIRSEQ_BIO_TRACEBACK=1``), and so does a full disk (naming the file); Ctrl-C is
    ``<prog>: <interrupted>``."""
    try:
        status = main(argv)
    except errors as e:
        if traceback_requested():
            raise
        sys.exit(f"{prog}: {e}")
    except OSError as e:  # a full disk anywhere in a command's writing: one line naming the file
        if traceback_requested() or e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        sys.exit(f"{prog}: {e.filename or 'writing'}: no space left on the device")
    except KeyboardInterrupt:
        if traceback_requested():
            raise
        sys.exit(f"{prog}: {interrupted}")
    if isinstance(status, int) and not isinstance(status, bool) and status:
        sys.exit(status)

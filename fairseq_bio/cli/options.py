"""The console scripts' one command-line vocabulary and their one entry point (STYLE habit 15).

Every script says the same thing the same way:

- ``--out``: what the command writes (a file or a directory);
- ``--checkpoint``: the model it reads;
- ``--data``: task data, and nothing else (a vocabulary directory is ``--vocab``);
- ``--overwrite``: replace what an earlier run of the same command wrote there (never anything else);
- ``--no-progress``: no progress bar.

An older spelling of one of them (``--outputs``, ``--destdir``, ``--output``, ``--workdir``, ``--teacher``,
``--quiet``, export-hf's ``--data``, a positional output or checkpoint) stays a deprecated alias: it still works and
prints one line on stderr, ``<script>: --outputs is deprecated; use --out``.

``run_cli`` is every script's ``cli_main``: a user error (``BioError``) ends the command as
``<script>: <message>``, the script named as in its ``--help`` (``Parser(prog)``); so does a bad option value
(``<script>: --lr-grid: 'nan': ...``, ``Parser.error``).

Only the standard library and ``fairseq_bio.errors``: a corpus command answers ``--help`` without torch or fairseq.
"""

import argparse
import contextlib
import errno
import sys
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple

from ..errors import BioError, traceback_requested


class _Renamed(NamedTuple):
    action: argparse.Action  # the option under its one name; its default is SUPPRESS, so that given means present
    default: object  # set after parsing when no spelling gave it
    required: bool  # checked after the old spellings are folded in (argparse's own check would miss them)
    old: List[Tuple[str, str]]  # (what the user wrote, the hidden dest it lands in)


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose options may keep deprecated old spellings (``add_renamed``); ``prog`` is
    the script's full name, which ``run_cli`` prefixes its errors with."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._renamed: List[_Renamed] = []

    def add_renamed(self, name: str, *, old: Sequence[str] = (), positional: Optional[str] = None, **kwargs):
        """Add option ``name`` (``--out``) with argparse's ``kwargs``; each of ``old`` (``--outputs``), and an
        optional positional argument called ``positional`` (a script's old ``out_dir``), is a deprecated spelling of
        it: hidden from ``--help``, it still works and warns once on stderr."""
        required = kwargs.pop("required", False)
        default = kwargs.pop("default", False if kwargs.get("action") == "store_true" else None)
        action = self.add_argument(name, default=argparse.SUPPRESS, required=required, **kwargs)
        hidden = {key: value for key, value in kwargs.items() if key not in ("help", "dest")}
        spellings = []
        for spelling in old:
            dest = f"_old_{action.dest}_{len(spellings)}"
            self.add_argument(spelling, **hidden, dest=dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
            spellings.append((spelling, dest))
        if positional is not None:  # no type: argparse would convert the SUPPRESS default of an absent one
            dest = f"_old_{action.dest}_{len(spellings)}"
            self.add_argument(dest, nargs="?", metavar=positional, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
            spellings.append((f"the positional {positional}", dest))
        self._renamed.append(_Renamed(action, default, required, spellings))
        return action

    @contextlib.contextmanager
    def _required(self, declared: bool):
        """argparse's own check of required options off (``declared=False``: an old spelling may give them), or on
        as declared (for the usage line); restored afterwards."""
        before = [renamed.action.required for renamed in self._renamed]
        for renamed in self._renamed:
            renamed.action.required = renamed.required and declared
        try:
            yield
        finally:
            for renamed, required in zip(self._renamed, before):
                renamed.action.required = required

    def format_usage(self) -> str:  # --help and argparse's errors come while parse_known_args has them off
        with self._required(True):
            return super().format_usage()

    def format_help(self) -> str:
        with self._required(True):
            return super().format_help()

    def error(self, message: str):
        """argparse's error, except that a bad value of one option is one line, ``<prog>: --option: <why>``
        (status 2, as argparse's); an error about the command line as a whole keeps argparse's usage line."""
        option, colon, why = message.partition(": ")
        if option.startswith("argument ") and colon:
            self.exit(2, f"{self.prog}: {option[len('argument '):]}: {why}\n")
        super().error(message)

    def parse_known_args(self, args=None, namespace=None):
        with self._required(False):
            namespace, extras = super().parse_known_args(args, namespace)
        values, missing = vars(namespace), []
        for renamed in self._renamed:
            name, dest = renamed.action.option_strings[0], renamed.action.dest
            given = [(name, values.pop(dest))] if dest in values else []
            given += [(spelling, values.pop(hidden)) for spelling, hidden in renamed.old if hidden in values]
            if len(given) > 1:
                self.error(f"{name} given twice ({given[0][0]} and {given[1][0]}); give it once")
            if given and given[0][0] != name:
                print(f"{self.prog}: {given[0][0]} is deprecated; use {name}", file=sys.stderr)
            if renamed.required and not given:
                missing.append(name)
            values[dest] = given[0][1] if given else renamed.default
        if missing:
            self.error(f"the following arguments are required: {', '.join(missing)}")
        return namespace, extras


# ---------------------------------------------------------------------------------------------------
# The vocabulary


def add_out(parser: Parser, help: str, *, old: Sequence[str] = (), positional: Optional[str] = None, **kwargs):
    """``--out``: what the command writes (required unless ``required=False``)."""
    kwargs.setdefault("required", "default" not in kwargs)
    return parser.add_renamed("--out", old=old, positional=positional, help=help, **kwargs)


def add_checkpoint(parser: Parser, help: str, *, old: Sequence[str] = (), positional: Optional[str] = None, **kwargs):
    """``--checkpoint``: the model the command reads (required)."""
    return parser.add_renamed("--checkpoint", old=old, positional=positional, help=help, required=True, **kwargs)


def add_data(parser: Parser, help: str, **kwargs):
    """``--data``: the task data (never a vocabulary or a model)."""
    return parser.add_renamed("--data", help=help, **kwargs)


def add_overwrite(parser: Parser, what: str, help: Optional[str] = None):
    """``--overwrite``: replace ``what`` where an earlier run of this command wrote it, and nothing else (``help``: a
    command's own words for that)."""
    return parser.add_renamed(
        "--overwrite", action="store_true", help=help or f"replace {what} an earlier {parser.prog} wrote"
    )


def add_no_progress(parser: Parser, *, old: Sequence[str] = ()):
    """``--no-progress``: no progress bar."""
    return parser.add_renamed("--no-progress", old=old, action="store_true", help="no progress bar")


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
    """Every console script's ``cli_main``: run ``main(argv)``; a non-zero int it returns is the exit status. A user
    error (a ``BioError``; ``errors``: and those classes) becomes ``<prog>: <message>`` on stderr and exit status 1
    (the traceback with ``FAIRSEQ_BIO_TRACEBACK=1``), and so does a full disk (naming the file); Ctrl-C is
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

"""Shared helpers: one-line user errors, atomic file/dir outputs, a bounded ordered parallel map."""

import collections
import contextlib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional, Sequence


class PreprocessError(Exception):
    """A failure caused by the input or the environment; CLIs print it as one line, no traceback."""


def run_cli(prog: str, main: Callable[[Optional[Sequence[str]]], object], argv=None) -> None:
    """Run ``main(argv)``; a PreprocessError, or a plugin user error (``fairseq_bio.errors.BioError``, when the
    command loaded the plugin), becomes ``<prog>: <message>`` on stderr and exit code 1."""
    try:
        main(argv)
    except PreprocessError as e:
        sys.exit(f"{prog}: {e}")
    except KeyboardInterrupt:
        sys.exit(f"{prog}: interrupted")
    except Exception as e:
        plugin_errors = sys.modules.get("fairseq_bio.errors")  # only a command that imported the plugin raises them
        if plugin_errors is None or not isinstance(e, plugin_errors.BioError) or plugin_errors.traceback_requested():
            raise
        sys.exit(f"{prog}: {e}")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_write(path, mode: str = "w") -> Iterator:
    """Write to a temp file beside ``path`` and rename it onto ``path`` only if the block succeeds.

    A crash or an exception leaves the old file (or none), never a partial file under the final name.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if "b" in mode:
            f = os.fdopen(fd, mode)
        else:
            f = os.fdopen(fd, mode, encoding="utf-8", newline="\n")
        with f:
            yield f
        # mkstemp creates 0600 files; give the result the permissions a plain open() would.
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def make_temp_dir(dest: Path) -> Path:
    """A fresh temp directory beside ``dest`` (same filesystem, so a rename onto ``dest`` is atomic)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.tmp-"))
    os.chmod(tmp, 0o777 & ~_umask())
    return tmp


def check_destination(dest: Path, overwrite: bool, markers: Sequence[str]) -> None:
    """Refuse an existing ``dest`` unless ``overwrite`` and it holds one of ``markers`` (files we write).

    So a mistyped destination never replaces an unrelated directory.
    """
    if not dest.exists():
        return
    if not overwrite:
        raise PreprocessError(f"{dest}: already exists (pass --overwrite to replace it)")
    if not any((dest / marker).is_file() for marker in markers):
        raise PreprocessError(
            f"{dest}: exists but has no {' or '.join(markers)}, so it was not made by this tool; not replacing it"
        )


def replace_dir(tmp: Path, dest: Path, overwrite: bool, markers: Sequence[str]) -> None:
    """Move the finished ``tmp`` directory onto ``dest`` (see ``check_destination``)."""
    check_destination(dest, overwrite, markers)
    if dest.exists():
        old = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.old-"))
        os.replace(dest, old / dest.name)
        os.replace(tmp, dest)
        shutil.rmtree(old)
    else:
        os.replace(tmp, dest)


def remove_temp_dir(tmp: Path) -> None:
    """Remove a temp directory made by ``make_temp_dir`` (after a failure)."""
    if tmp.name.startswith(".") and ".tmp-" in tmp.name:
        shutil.rmtree(tmp, ignore_errors=True)


def ordered_map(pool, func: Callable, items: Iterable, max_in_flight: int) -> Iterator:
    """``pool.imap(func, items)`` that reads ``items`` lazily: at most ``max_in_flight`` tasks queued.

    ``Pool.imap`` consumes its whole input up front, which would load an entire corpus into memory.
    """
    pending = collections.deque()
    for item in items:
        pending.append(pool.apply_async(func, (item,)))
        if len(pending) >= max_in_flight:
            yield pending.popleft().get()
    while pending:
        yield pending.popleft().get()


def normalize_space(line: str) -> str:
    """``line`` with every run of whitespace one space, none at the ends: fastBPE splits words at " " only."""
    return " ".join(line.split())


def require_fastbpe():
    """The ``fastBPE`` module, or a one-line error saying how to build it (it is an optional extra)."""
    try:
        import fastBPE
    except ImportError:
        raise PreprocessError(
            "fastbpe: the fastBPE package is not installed (run `make fastbpe`, i.e. "
            "pip install --no-build-isolation fastBPE==0.1.0 with Cython and a C++ compiler present)"
        ) from None
    return fastBPE


def default_workers() -> int:
    """The number of CPUs this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1

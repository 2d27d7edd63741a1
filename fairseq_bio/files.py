"""The project's one way to write an output: under a temp name beside it, renamed onto it only when complete.

A crash or an exception leaves the old file (or none), never a partial file under the final name; an existing
directory is replaced only when the user asked (``overwrite``) and only if this project made it (a marker file).
Everything that writes a user-visible result uses these: the plugin, ``preprocess/`` and ``benchmarks/``. The
checkpoint writer (``checkpoints.py``) adds fsync and fairseq's ``.tmp`` naming on top of ``publish``.
"""

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator, Sequence

from .errors import BioError


class InputError(BioError):
    """A failure caused by the input or the environment (a file, a directory, an option); one line, no traceback."""


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def publish(tmp, path, durable: bool = False) -> None:
    """Rename the finished ``tmp`` onto ``path``; ``durable``: fsync the directory too, so the rename survives a
    crash (the file's own bytes are the writer's to fsync)."""
    os.replace(tmp, path)
    if not durable:
        return
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on a directory; the replace is still atomic
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path) -> Iterator[Path]:
    """A temp path beside ``path`` (same suffix, so writers that look at it, like matplotlib, still do the right
    thing) for a writer that wants a name rather than a file object; renamed onto ``path`` if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=f".tmp{path.suffix}")
    os.close(fd)
    try:
        yield Path(tmp)
        # mkstemp creates 0600 files; give the result the permissions a plain open() would.
        os.chmod(tmp, 0o666 & ~_umask())
        publish(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_write(path, mode: str = "w") -> Iterator:
    """``open(path, mode)`` that writes to a temp file beside ``path`` (text: UTF-8, ``\\n`` line ends) and renames it
    onto ``path`` only if the block succeeds."""
    with atomic_path(path) as tmp:
        with open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8", "newline": "\n"})) as f:
            yield f


def write_text(path, text: str) -> None:
    """``Path(path).write_text(text)``, atomically."""
    with atomic_write(path) as f:
        f.write(text)


def write_json(path, obj, indent: int = 2) -> None:
    """``obj`` as indented JSON with one final newline, atomically."""
    import json

    with atomic_write(path) as f:
        json.dump(obj, f, indent=indent)
        f.write("\n")


def make_temp_dir(dest: Path) -> Path:
    """A fresh temp directory beside ``dest`` (same filesystem, so a rename onto ``dest`` is atomic)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.tmp-"))
    os.chmod(tmp, 0o777 & ~_umask())
    return tmp


def check_destination(dest: Path, overwrite: bool, markers: Sequence[str]) -> None:
    """Refuse an existing ``dest`` unless ``overwrite`` and it holds one of ``markers`` (files we write).

    So a mistyped destination never replaces an unrelated directory.
    """
    dest = Path(dest)
    if not dest.exists():
        return
    if not overwrite:
        raise InputError(f"{dest}: already exists (pass --overwrite to replace it)")
    if not any((dest / marker).is_file() for marker in markers):
        raise InputError(
            f"{dest}: exists but has no {' or '.join(markers)}, so it was not made by this tool; not replacing it"
        )


def replace_dir(tmp: Path, dest: Path, overwrite: bool, markers: Sequence[str]) -> None:
    """Move the finished ``tmp`` directory onto ``dest`` (see ``check_destination``)."""
    dest = Path(dest)
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
    tmp = Path(tmp)
    if tmp.name.startswith(".") and ".tmp-" in tmp.name:
        shutil.rmtree(tmp, ignore_errors=True)

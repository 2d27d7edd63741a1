"""The project's one way to write an output: under a temp name beside it, renamed onto it only when complete.

A crash or an exception leaves the old file (or none), never a partial file under the final name. Temp names carry
the host and process id, so the next write beside them removes what a killed process left (``remove_stale``).

What a command made is recorded in ``.fairseq_bio-made.json`` in the directory that holds it (``record_made``; a
directory's record lists its entries, so the directory itself holds only the command's files):
``--overwrite`` replaces an existing output only when that record says the same command made it (and, for a file,
that it has not changed size since), so a mistyped output never replaces a user's file or folder. A replaced
directory keeps the entries the command did not make (``replace_dir``). Everything that writes a user-visible result
uses these: the plugin, ``preprocess/`` and ``benchmarks/``. The checkpoint writer (``checkpoint_safety.py``) adds fsync
and fairseq's ``.tmp`` naming on top of ``publish``.
"""

import contextlib
import errno
import json
import os
import re
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Dict, Iterator, Optional, Sequence

from .errors import BioError


class InputError(BioError):
    """A failure caused by the input or the environment (a file, a directory, an option); one line, no traceback."""


# Per directory: {"made": {entry name: {"by": command, "size": a file's bytes, "entries": a directory's entries}}}
MADE = ".fairseq_bio-made.json"


def _made_records(directory) -> Dict[str, dict]:
    """The entries of ``directory`` this project recorded as made ({} when there is no readable record)."""
    try:
        with open(os.path.join(directory, MADE), encoding="utf-8") as f:
            made = json.load(f).get("made")
    except (OSError, ValueError, AttributeError):
        return {}
    return made if isinstance(made, dict) else {}


def _write_made_records(directory, made: Dict[str, dict]) -> None:
    path = os.path.join(directory, MADE)
    remove_stale(path)
    tmp = os.path.join(directory, f".{MADE}.{_owner_tag()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"made": made}, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def record_made(path, by: str) -> None:
    """Record in ``path``'s directory that command ``by`` made ``path`` (a file: with its size)."""
    path = Path(path)
    made = _made_records(path.parent)
    made[path.name] = {"by": by, **({"size": path.stat().st_size} if path.is_file() else {})}
    _write_made_records(path.parent, made)


def made_by(path, by: str) -> bool:
    """Whether the record beside ``path`` says command ``by`` made it (a file: and it has kept its size since)."""
    path = Path(path)
    entry = _made_records(path.parent).get(path.name)
    if not isinstance(entry, dict) or entry.get("by") != by:
        return False
    return not path.is_file() or entry.get("size") == path.stat().st_size


def not_made_reason(path, by: str) -> str:
    """Why ``made_by(path, by)`` is false, for an error message."""
    path = Path(path)
    entry = _made_records(path.parent).get(path.name)
    if isinstance(entry, dict) and entry.get("by") == by:
        return f"was changed since {by} wrote it"
    if isinstance(entry, dict) and entry.get("by"):
        return f"was made by {entry['by']}, not {by}"
    return f"was not made by {by}"


def _owner_tag() -> str:
    """``<host>-<pid>``: whose temp file this is (hosts other than letters, digits, ``_`` and ``-`` are folded)."""
    return f"{re.sub(r'[^A-Za-z0-9_-]', '_', socket.gethostname())}-{os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def remove_stale(path) -> None:
    """Remove the temp files and directories beside ``path`` that a killed process of this host left (their names
    carry host and pid; another host's, or a live process's, are left alone)."""
    path = Path(path)
    host = _owner_tag().rsplit("-", 1)[0]
    pattern = re.compile(re.escape(f".{path.name}.") + r"(?:tmp-)?" + re.escape(host) + r"-(\d+)\.")
    try:
        siblings = list(path.parent.iterdir())
    except OSError:
        return
    for sibling in siblings:
        found = pattern.match(sibling.name)
        if found and int(found.group(1)) != os.getpid() and not _alive(int(found.group(1))):
            if sibling.is_dir() and not sibling.is_symlink():
                shutil.rmtree(sibling, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    sibling.unlink()


def discard_failed_write(tmp, path, error: BaseException) -> None:
    """Remove the temp file ``tmp`` of a write of ``path`` that failed with ``error``; a full disk is then raised as
    the one-line ``InputError`` naming ``path`` (asked before the removal frees the space); other errors are the
    caller's to re-raise."""
    full = no_space(error, path)
    with contextlib.suppress(OSError):
        os.unlink(tmp)
    if full is not None:
        raise full from None


def no_space(error: BaseException, path) -> Optional[InputError]:
    """A one-line ``InputError`` for a full disk (or quota) while writing ``path``; None for other errors. torch's
    writer raises a RuntimeError without errno ("file write failed", "unexpected pos"): that counts when the disk
    has under 1 MiB left (ask before removing the partial file)."""
    full = getattr(error, "errno", None) in (errno.ENOSPC, errno.EDQUOT)
    if not full and isinstance(error, RuntimeError):
        try:
            full = shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free < (1 << 20)
        except OSError:
            full = False
    if full:
        return InputError(f"{path}: no space left on the device (nothing was written under that name)")
    return None


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
def atomic_path(path, by: Optional[str] = None) -> Iterator[Path]:
    """A temp path beside ``path`` (same suffix, so writers that look at it, like matplotlib, still do the right
    thing) for a writer that wants a name rather than a file object; renamed onto ``path`` if the block succeeds,
    and recorded as made by command ``by`` when given. A full disk is an ``InputError`` naming ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{_owner_tag()}.", suffix=f".tmp{path.suffix}")
    os.close(fd)
    try:
        yield Path(tmp)
        # mkstemp creates 0600 files; give the result the permissions a plain open() would.
        os.chmod(tmp, 0o666 & ~_umask())
        publish(tmp, path)
        if by is not None:
            record_made(path, by)
    except BaseException as e:
        discard_failed_write(tmp, path, e)
        raise


@contextlib.contextmanager
def atomic_write(path, mode: str = "w", by: Optional[str] = None) -> Iterator:
    """``open(path, mode)`` that writes to a temp file beside ``path`` (text: UTF-8, ``\\n`` line ends) and renames it
    onto ``path`` only if the block succeeds (recorded as made by ``by`` when given)."""
    with atomic_path(path, by) as tmp:
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
    """A fresh temp directory beside ``dest`` (same filesystem, so a rename onto ``dest`` is atomic); what a killed
    earlier run left beside ``dest`` is removed first."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(dest)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.tmp-{_owner_tag()}."))
    os.chmod(tmp, 0o777 & ~_umask())
    return tmp


def _ours(dest: Path, markers: Sequence[str], by: str) -> bool:
    entry = _made_records(dest.parent).get(dest.name)
    return (isinstance(entry, dict) and entry.get("by") == by
            and any((dest / m).exists() for m in markers))  # fmt: skip


def _is_empty_dir(dest: Path) -> bool:
    return dest.is_dir() and not dest.is_symlink() and not any(dest.iterdir())


def check_destination(dest: Path, overwrite: bool, markers: Sequence[str], by: str) -> None:
    """Refuse an existing ``dest`` (an empty directory is fine) unless ``overwrite`` and this project's record in
    it says command ``by`` wrote one of ``markers`` there; so a mistyped destination never replaces a user's
    directory, nor one another command made."""
    dest = Path(dest)
    if not os.path.lexists(dest) or _is_empty_dir(dest):
        return
    if not dest.is_dir() or dest.is_symlink():
        raise InputError(f"{dest}: exists and is not a directory; name a directory to create")
    if not overwrite:
        raise InputError(f"{dest}: already exists (pass --overwrite to replace it)")
    if not _ours(dest, markers, by):
        raise InputError(
            f"{dest}: has no record that {by} made it ({MADE}), so it was not made by this tool; not replacing it "
            "(move it away or choose another output)"
        )


def replace_dir(tmp: Path, dest: Path, overwrite: bool, markers: Sequence[str], by: str) -> None:
    """Move the finished ``tmp`` directory onto ``dest`` (see ``check_destination``), recorded as made by ``by``
    (with the entries it holds) in the folder that holds ``dest``, so that ``dest`` holds only its own files.

    Replacing an earlier output keeps the entries of ``dest`` the command did not make (a user's notes, another
    command's files); one that the new output would replace is refused, and ``dest`` is left as it was."""
    dest, tmp = Path(dest), Path(tmp)
    check_destination(dest, overwrite, markers, by)
    new = sorted(entry.name for entry in tmp.iterdir())
    if dest.exists() and not _is_empty_dir(dest):
        made = set((_made_records(dest.parent).get(dest.name) or {}).get("entries") or [])
        keep = [e for e in dest.iterdir() if e.name not in made]
        clash = [e.name for e in keep if e.name in new]
        if clash:
            raise InputError(f"{dest / clash[0]}: was not made by {by}; the new output has this name; not "
                             "replacing it")  # fmt: skip
        for entry in keep:  # moved into the new directory first: a crash in between leaves them in the temp directory
            os.replace(entry, tmp / entry.name)
        old = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.tmp-{_owner_tag()}."))
        os.replace(dest, old / dest.name)
        os.replace(tmp, dest)
        shutil.rmtree(old)
    else:
        if dest.exists():
            dest.rmdir()
        os.replace(tmp, dest)
    records = _made_records(dest.parent)
    records[dest.name] = {"by": by, "entries": new}
    _write_made_records(dest.parent, records)


def remove_temp_dir(tmp: Path) -> None:
    """Remove a temp directory made by ``make_temp_dir`` (after a failure)."""
    tmp = Path(tmp)
    if tmp.name.startswith(".") and ".tmp-" in tmp.name:
        shutil.rmtree(tmp, ignore_errors=True)

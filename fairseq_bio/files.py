"""The project's one way to write an output, and the one check that a command may write it.

An output is written under a temp name beside it and renamed onto it only when complete
(``publish``, ``atomic_write``), so a crash leaves the old file or none. What a command made is
recorded beside it (``record_made``), and ``--overwrite`` replaces only what that record says the
same command made, unchanged since (``check_output`` for a file, ``check_destination`` for a
directory). The rules a user sees: docs/reliability.md, "One rule for outputs".
"""

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from .errors import BioError


class InputError(BioError):
    """A failure caused by the input or the environment (a file, a directory, an option); one line,
    no traceback."""


class NoSpaceError(InputError):
    """The disk (or quota) filled up while an output was written; nothing has its name."""


# Per directory: {"made": {entry name: record}}. A file's record: {"by": command, "size": bytes,
# "sha256": hex}; a directory's: {"by": command, "entries": [names], "files": {relative path:
# {"size", "sha256"} or {"symlink": target}}}. Sizes and hashes, not modification times: an edit
# within one timestamp tick of a coarse filesystem, or a copy that keeps times (cp -p, rsync -t),
# leaves the time as it was.
MADE = ".fairseq_bio-made.json"
_LOCK = f"{MADE}.lock"
# A record without hashes (written before they were kept) cannot show that nothing changed: such
# outputs are refused and the user moves them away once (a wrongly refused replacement costs a
# command; a wrongly allowed one costs the user's edits).
_NO_HASHES = "no hashes"

# sha256 of the files read in this process, by (device, inode, size, mtime, ctime): an output
# checked before a long run and again just before it is replaced is read once (any write changes
# its ctime, which no user can set).
_HASHED: Dict[tuple, str] = {}


def _stat_key(st: os.stat_result) -> tuple:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def file_sha256(path) -> str:
    """The sha256 of ``path``'s content, read in blocks (data-bins and checkpoints can be GBs)."""
    with open(path, "rb") as f:
        before = _stat_key(os.fstat(f.fileno()))
        if before in _HASHED:
            return _HASHED[before]
        digest = hashlib.file_digest(f, "sha256").hexdigest()
        if _stat_key(os.fstat(f.fileno())) == before:  # not written to while it was read
            _HASHED[before] = digest
    return digest


def _made_records(directory) -> Dict[str, dict]:
    """The entries of ``directory`` this project recorded as made ({} when there is no readable
    record)."""
    try:
        with open(os.path.join(directory, MADE), encoding="utf-8") as f:
            made = json.load(f).get("made")
    except (OSError, ValueError, AttributeError):
        return {}
    return made if isinstance(made, dict) else {}


@contextlib.contextmanager
def _record_lock(directory) -> Iterator[None]:
    """Hold the exclusive lock on ``directory``'s record: its read-modify-write, one at a time.

    The lock file is removed on release (by its holder, still locked), so a waiter may lock a file
    that is gone: it then tries again on the current one. The kernel releases the lock of a process
    that dies."""
    path = os.path.join(directory, _LOCK)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                current = os.stat(path)
            except FileNotFoundError:
                current = None
            held = os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
        if current is not None and (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino):
            break
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)


def _prepare_records(directory, made: Dict[str, dict]) -> str:
    """``made`` written to a temp file beside ``directory``'s record (returned), to be renamed onto
    it; written first, so that a full disk fails before the output it records is moved in place."""
    remove_stale(os.path.join(directory, MADE))
    tmp = os.path.join(directory, f".{MADE}.{_owner_tag()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"made": made}, f, indent=1, sort_keys=True)
            f.write("\n")
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def _record(directory, name: str, entry: dict, move: Callable[[], None] = lambda: None) -> None:
    """Record ``entry`` for ``name`` in ``directory`` (under its lock, other entries kept);
    ``move`` (the output into place) runs between writing the record and renaming it into place."""
    with _record_lock(directory):
        made = _made_records(directory)
        made[name] = entry
        tmp = _prepare_records(directory, made)
        try:
            move()
            os.replace(tmp, os.path.join(directory, MADE))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def _file_entry(path) -> Optional[dict]:
    """What a record keeps of a file (size, sha256) or a link (its target); None for others."""
    if os.path.islink(path):
        return {"symlink": os.readlink(path)}
    if os.path.isfile(path):
        return {"size": os.path.getsize(path), "sha256": file_sha256(path)}
    return None


def _tree(root: Path, name: str) -> Iterator[Tuple[str, Path]]:
    """(path relative to ``root``, path) of ``root/name`` (a file or link), or of each file and
    link under it."""
    top = root / name
    if top.is_symlink() or not top.is_dir():
        yield name, top
        return
    for parent, dirs, files in os.walk(top):  # links to directories: listed in dirs, not followed
        relative = Path(parent).relative_to(root).as_posix()
        links = [d for d in dirs if os.path.islink(os.path.join(parent, d))]
        for child in sorted(files) + sorted(links):
            yield f"{relative}/{child}", Path(parent, child)


def _made_entry(path: Path, by: str) -> dict:
    """The record of ``path`` as made by ``by`` (a directory: its entries, their files)."""
    if path.is_dir() and not path.is_symlink():
        names = sorted(entry.name for entry in path.iterdir())
        files = {}
        for name in names:
            for relative, file in _tree(path, name):
                entry = _file_entry(file)
                if entry is not None:
                    files[relative] = entry
        return {"by": by, "entries": names, "files": files}
    return {"by": by, **(_file_entry(path) or {})}


def _file_change(path: Path, entry: dict) -> Optional[str]:
    """How the file (or link) ``path`` differs from its record ``entry``; None when it does not."""
    if "symlink" in entry:
        same = path.is_symlink() and os.readlink(path) == entry["symlink"]
        return None if same else "it is not the link that was written"
    if "sha256" not in entry:
        return _NO_HASHES
    if path.is_symlink() or not path.is_file():
        return "it is no longer a file"
    size = path.stat().st_size
    if size != entry.get("size"):
        return f"{size:,} bytes, {entry.get('size', 0):,} when written"
    return None if file_sha256(path) == entry["sha256"] else "its content differs"


def _change(path: Path, entry: dict) -> Optional[str]:
    """What in ``path`` differs from its record ``entry`` (a file: how; a directory: the first file
    edited or added under one of its recorded entries); None when nothing did. A recorded file
    deleted since is no change: replacing it loses nothing."""
    if "entries" not in entry:
        return _file_change(path, entry)
    files = entry.get("files")
    if not isinstance(files, dict):
        return _NO_HASHES
    if path.is_symlink() or not path.is_dir():
        return "it is no longer a directory"
    for name in entry["entries"]:
        if not os.path.lexists(path / name):
            continue
        for relative, file in _tree(path, name):
            if relative not in files:
                return f"{file} was added"
            if _file_change(file, files[relative]) is not None:
                return f"{file} differs"
    return None


def record_made(path, by: str) -> None:
    """Record in ``path``'s directory that command ``by`` made ``path`` (a file: with its size and
    sha256; a directory: those of every file under it)."""
    path = Path(path)
    _record(path.parent, path.name, _made_entry(path, by))


def made_by(path, by: str) -> bool:
    """Whether the record beside ``path`` says command ``by`` made it, unchanged since."""
    path = Path(path)
    entry = _made_records(path.parent).get(path.name)
    return isinstance(entry, dict) and entry.get("by") == by and _change(path, entry) is None


def not_made_reason(path, by: str) -> str:
    """Why ``made_by(path, by)`` is false, for an error message."""
    path = Path(path)
    entry = _made_records(path.parent).get(path.name)
    if isinstance(entry, dict) and entry.get("by") == by:
        change = _change(path, entry)
        if change == _NO_HASHES:
            return (
                f"has a record ({MADE}) from an older fairseq_bio, without the content hash "
                f"that would show it unchanged since {by} wrote it"
            )
        return f"was changed since {by} wrote it ({change})"
    if isinstance(entry, dict) and entry.get("by"):
        return f"was made by {entry['by']}, not {by}"
    return f"was not made by {by}"


def _owner_tag() -> str:
    """``<host>-<pid>``: whose temp file this is (hosts other than letters, digits, ``_`` and ``-``
    are folded)."""
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
    """Remove the temp files and directories beside ``path`` that a killed process of this host left
    (their names carry host and pid; another host's, or a live process's, are left alone)."""
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
    """Remove the temp file ``tmp`` of a write of ``path`` that failed with ``error``; a full disk
    is then raised as the one-line ``InputError`` naming ``path`` (asked before the removal frees
    the space); other errors are the caller's to re-raise."""
    full = no_space(error, path)
    with contextlib.suppress(OSError):
        os.unlink(tmp)
    if full is not None:
        raise full from None


# How the Rust writers (safetensors, tokenizers) report a full disk: exceptions of their own, with
# the OS's message.
_FULL_MESSAGES = ("No space left on device", "StorageFull", "Disk quota exceeded", "QuotaExceeded")


def no_space(error: BaseException, path) -> Optional[NoSpaceError]:
    """A one-line ``NoSpaceError`` for a full disk (or quota) while writing ``path`` (also when
    ``error`` is one for a file inside it); None for other errors. torch's writer raises a
    RuntimeError without errno ("file write failed", "unexpected pos"): that counts when the disk
    has under 1 MiB left (ask before removing the partial file)."""
    full = getattr(error, "errno", None) in (errno.ENOSPC, errno.EDQUOT)
    full = full or isinstance(error, NoSpaceError)
    if not full and not isinstance(error, (OSError, BioError)):
        full = any(message in str(error) for message in _FULL_MESSAGES)
    if not full and isinstance(error, RuntimeError):
        try:
            full = shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free < (1 << 20)
        except OSError:
            full = False
    if full:
        message = "no space left on the device (nothing was written under that name)"
        return NoSpaceError(f"{path}: {message}")
    return None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def publish(tmp, path, durable: bool = False) -> None:
    """Rename the finished ``tmp`` onto ``path``; ``durable``: fsync the directory too, so the
    rename survives a crash (the file's own bytes are the writer's to fsync)."""
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


def _empty(path: Path) -> bool:
    """Whether ``path`` holds no bytes: an empty file, or a directory with no file that has any."""
    if path.is_symlink() or not path.exists():
        return False
    if path.is_file():
        return path.stat().st_size == 0
    sizes = (
        os.path.getsize(os.path.join(parent, name))
        for parent, _, names in os.walk(path)
        for name in names
    )
    return not any(sizes)


def _refuse_empty(new: Path, path: Path, by: str) -> None:
    """An output is never replaced by an empty one (a run that found nothing to write failed)."""
    if _empty(new) and os.path.lexists(path) and not _empty(path):
        raise InputError(
            f"{path}: the new output of {by} is empty; not replacing the existing "
            "one with it (nothing was written)"
        )


@contextlib.contextmanager
def atomic_path(path, by: Optional[str] = None) -> Iterator[Path]:
    """A temp path beside ``path`` (same suffix, so writers that look at it, like matplotlib, still
    do the right thing) for a writer that wants a name rather than a file object; renamed onto
    ``path`` if the block succeeds, and recorded as made by command ``by`` when given (an empty
    result then never replaces a non-empty file). A full disk is an ``InputError`` naming
    ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(path)
    fd, tmp = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.{_owner_tag()}.", suffix=f".tmp{path.suffix}"
    )
    os.close(fd)
    try:
        yield Path(tmp)
        # mkstemp creates 0600 files; give the result the permissions a plain open() would.
        os.chmod(tmp, 0o666 & ~_umask())
        if by is None:
            publish(tmp, path)
        else:
            _refuse_empty(Path(tmp), path, by)
            entry = _made_entry(Path(tmp), by)
            _record(path.parent, path.name, entry, lambda: publish(tmp, path))
    except BaseException as e:
        discard_failed_write(tmp, path, e)
        raise


@contextlib.contextmanager
def atomic_write(path, mode: str = "w", by: Optional[str] = None) -> Iterator:
    """``open(path, mode)`` that writes to a temp file beside ``path`` (text: UTF-8, ``\\n`` line ends) and renames it
    onto ``path`` only if the block succeeds (recorded as made by ``by`` when given)."""
    with atomic_path(path, by) as tmp:
        with open(
            tmp, mode, **({} if "b" in mode else {"encoding": "utf-8", "newline": "\n"})
        ) as f:
            yield f


def write_text(path, text: str) -> None:
    """``Path(path).write_text(text)``, atomically."""
    with atomic_write(path) as f:
        f.write(text)


def write_json(path, obj, indent: int = 2) -> None:
    """``obj`` as indented JSON with one final newline, atomically."""
    with atomic_write(path) as f:
        json.dump(obj, f, indent=indent)
        f.write("\n")


def make_temp_dir(dest: Path) -> Path:
    """A fresh temp directory beside ``dest`` (same filesystem, so a rename onto ``dest`` is
    atomic); what a killed earlier run left beside ``dest`` is removed first."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(dest)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.tmp-{_owner_tag()}."))
    os.chmod(tmp, 0o777 & ~_umask())
    return tmp


def _is_empty_dir(dest: Path) -> bool:
    return dest.is_dir() and not dest.is_symlink() and not any(dest.iterdir())


def _already_exists(path) -> str:
    """The refusal of an existing output when ``--overwrite`` was not given (a file or a
    directory)."""
    return f"{path}: already exists; pass --overwrite to replace it"


def same_file(a, b) -> bool:
    """Whether ``a`` and ``b`` are one file (also through a symbolic or hard link); False if either
    is missing."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _protected(inputs: Iterable[Optional[str]]) -> List[str]:
    """The files of ``inputs``: a file itself, a directory's files (what a command may read from
    it)."""
    files = []
    for item in inputs:
        if item is None:
            continue
        if os.path.isdir(item):
            files.extend(os.path.join(item, name) for name in sorted(os.listdir(item)))
        else:
            files.append(os.fspath(item))
    return files


def check_output(
    path,
    inputs: Iterable[Optional[str]],
    overwrite: bool,
    option: str = "--out",
    by: Optional[str] = None,
) -> None:
    """Refuse to write the file ``path`` when it is one of ``inputs`` (or a file in an input
    directory), whatever ``overwrite`` says; when it exists unless ``overwrite``; and, when command
    ``by`` is named, when it exists and ``by`` did not make it or it changed since (a user's file or
    edit, a vocabulary, another command's output: ``--overwrite`` or not).
    One-line ``InputError``s naming ``option``."""
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory; {option} names the file to write")
    for item in _protected(inputs):
        if same_file(path, item):
            how = "" if os.path.abspath(path) == os.path.abspath(item) else " (through a link)"
            raise InputError(f"{path}: is the input {item}{how}; {option} must name another file")
    if os.path.lexists(path) and not overwrite:
        raise InputError(_already_exists(path))
    if os.path.lexists(path) and by is not None and not made_by(path, by):
        raise InputError(
            f"{path}: exists and {not_made_reason(path, by)}; not replacing it, --overwrite or not "
            f"(move it away or choose another {option})"
        )


def check_destination(dest: Path, overwrite: bool, markers: Sequence[str], by: str) -> None:
    """Refuse an existing ``dest`` (an empty directory is fine) unless ``overwrite``, this
    project's record says command ``by`` wrote one of ``markers`` there, and nothing it wrote there
    has changed since; so a mistyped destination never replaces a user's directory, nor one another
    command made, nor a user's edits."""
    dest = Path(dest)
    if not os.path.lexists(dest) or _is_empty_dir(dest):
        return
    if not dest.is_dir() or dest.is_symlink():
        raise InputError(f"{dest}: exists and is not a directory; name a directory to create")
    if not overwrite:
        raise InputError(_already_exists(dest))
    entry = _made_records(dest.parent).get(dest.name)
    ours = isinstance(entry, dict) and entry.get("by") == by
    if not (ours and any((dest / m).exists() for m in markers)):
        raise InputError(
            f"{dest}: has no record that {by} made it ({MADE}), so it was not made by this tool; not replacing it "
            "(move it away or choose another output)"
        )
    change = _change(dest, entry)
    if change == _NO_HASHES:
        raise InputError(
            f"{dest}: has a record ({MADE}) from an older fairseq_bio, without the "
            f"content hashes that would show nothing in it changed since {by} "
            "wrote it; not replacing it (move it away once)"
        )
    if change is not None:
        raise InputError(
            f"{dest}: changed since {by} wrote it ({change}); not replacing it (move "
            "your changes out of it, or choose another output)"
        )


def replace_dir(tmp: Path, dest: Path, overwrite: bool, markers: Sequence[str], by: str) -> None:
    """Move the finished ``tmp`` directory onto ``dest`` (see ``check_destination``, checked again
    under the record's lock), recorded as made by ``by`` (with its entries and their files' hashes)
    in the folder that holds ``dest``, so that ``dest`` holds only its own files.

    Replacing an earlier output keeps the entries of ``dest`` the command did not make (a user's
    notes, another command's files); one that the new output would replace is refused, and ``dest``
    is left as it was; so is an output with something in it that the new one leaves empty."""
    dest, tmp = Path(dest), Path(tmp)
    check_destination(dest, overwrite, markers, by)  # before the new output is hashed: cheap
    _refuse_empty(tmp, dest, by)
    entry = _made_entry(tmp, by)  # outside the lock: the new output is this process's until moved
    new = entry["entries"]

    def move() -> None:
        check_destination(dest, overwrite, markers, by)
        if dest.exists() and not _is_empty_dir(dest):
            made = set((_made_records(dest.parent).get(dest.name) or {}).get("entries") or [])
            keep = [e for e in dest.iterdir() if e.name not in made]
            clash = [e.name for e in keep if e.name in new]
            if clash:
                raise InputError(
                    f"{dest / clash[0]}: was not made by {by}; the new output has "
                    "this name; not replacing it"
                )
            # moved into the new directory first: a crash in between leaves them in the temp one
            for kept in keep:
                os.replace(kept, tmp / kept.name)
            prefix = f".{dest.name}.tmp-{_owner_tag()}."
            old = Path(tempfile.mkdtemp(dir=dest.parent, prefix=prefix))
            os.replace(dest, old / dest.name)
            os.replace(tmp, dest)
            shutil.rmtree(old)
        else:
            if dest.exists():
                dest.rmdir()
            os.replace(tmp, dest)

    _record(dest.parent, dest.name, entry, move)


def remove_temp_dir(tmp: Path) -> None:
    """Remove a temp directory made by ``make_temp_dir`` (after a failure)."""
    tmp = Path(tmp)
    if tmp.name.startswith(".") and ".tmp-" in tmp.name:
        shutil.rmtree(tmp, ignore_errors=True)

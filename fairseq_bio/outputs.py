"""Where a command writes the file the user names: never onto one of its inputs, and never over an
existing file unless the user asked (``--overwrite``) and the same command made it, unchanged since
(``files.made_by``: its recorded size and sha256). Checked before any work starts, so a refusal
costs nothing."""

import os
from typing import Iterable, List, Optional

from .errors import BioError
from .files import made_by, not_made_reason


class OutputError(BioError, ValueError):
    """An output path that would destroy an input or a file the user did not ask to replace."""


def same_file(a, b) -> bool:
    """Whether ``a`` and ``b`` are one file (also through a symbolic or hard link); False if either is missing."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _protected(inputs: Iterable[Optional[str]]) -> List[str]:
    """The files of ``inputs``: a file itself, a directory's files (what a command may read from it)."""
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
    path, inputs: Iterable[Optional[str]], overwrite: bool, option: str = "--out", by: Optional[str] = None
) -> None:
    """Refuse to write ``path`` when it is one of ``inputs`` (or a file in an input directory), whatever
    ``overwrite`` says; when it exists unless ``overwrite``; and, when command ``by`` is named, when it exists and
    ``by`` did not make it or it changed since (a user's file or edit, a vocabulary, another
    command's output: ``--overwrite`` or not).
    One-line ``OutputError``s naming ``option``."""
    if os.path.isdir(path):
        raise OutputError(f"{path}: is a directory; {option} names the file to write")
    for item in _protected(inputs):
        if same_file(path, item):
            how = "" if os.path.abspath(path) == os.path.abspath(item) else " (through a link)"
            raise OutputError(f"{path}: is the input {item}{how}; {option} must name another file")
    if os.path.lexists(path) and not overwrite:
        raise OutputError(f"{path}: exists; pass --overwrite to replace it")
    if os.path.lexists(path) and by is not None and not made_by(path, by):
        raise OutputError(f"{path}: exists and {not_made_reason(path, by)}; not replacing it, --overwrite or not "
                          f"(move it away or choose another {option})")  # fmt: skip

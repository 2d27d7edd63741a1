"""Where a command writes the file the user names: never onto one of its inputs, and never over an existing file
unless the user asked (``--overwrite``). Checked before any work starts, so a refusal costs nothing."""

import os
from typing import Iterable, List, Optional

from .errors import BioError


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


def check_output(path, inputs: Iterable[Optional[str]], overwrite: bool, option: str = "--output") -> None:
    """Refuse to write ``path`` when it is one of ``inputs`` (or a file in an input directory), whatever
    ``overwrite`` says, and when it exists unless ``overwrite``; one-line ``OutputError``s naming ``option``."""
    if os.path.isdir(path):
        raise OutputError(f"{path}: is a directory; {option} names the file to write")
    for item in _protected(inputs):
        if same_file(path, item):
            how = "" if os.path.abspath(path) == os.path.abspath(item) else " (through a link)"
            raise OutputError(f"{path}: is the input {item}{how}; {option} must name another file")
    if os.path.lexists(path) and not overwrite:
        raise OutputError(f"{path}: exists; pass --overwrite to replace it")

"""A fairseq ``dict.txt`` read with one-line errors naming the file and line: fairseq's
``Dictionary.load`` raises a bare ``ValueError`` (or ``RuntimeError``, or ``Exception`` for bad
bytes) that names neither, from deep inside a task's set-up, where the user sees a traceback."""

import os
from typing import Optional

from ..errors import BioFileNotFoundError
from ..files import InputError


def dictionary_problem(path) -> Optional[str]:
    """``<path>:<line>: <what>`` for the first line fairseq cannot read as
    ``<token> <count> [#fairseq:overwrite]`` (or a token listed twice without the flag); None when
    every line reads."""
    try:
        with open(path, "rb") as f:
            raw_lines = f.read().split(b"\n")
    except OSError:
        return None
    seen = {}
    for number, raw in enumerate(raw_lines, start=1):
        try:
            line = raw.decode("utf-8").rstrip()
        except UnicodeDecodeError as e:
            return f"{path}:{number}: not valid UTF-8 (byte 0x{raw[e.start]:02x})"
        if not line and number == len(raw_lines):
            break  # the newline that ends the last entry
        parts = line.rsplit(" ", 2)
        overwrite = len(parts) == 3 and parts[2] == "#fairseq:overwrite"
        token, count = (parts[0], parts[1]) if overwrite else (line.rsplit(" ", 1) + [""])[:2]
        if not token or not count.lstrip("-").isdigit():
            return (
                f"{path}:{number}: {line[:60]!r} is not '<token> <count>' (a fairseq dict.txt line)"
            )
        if token in seen and not overwrite:
            return f"{path}:{number}: {token!r} again (first on line {seen[token]}); a dict.txt lists each token once"
        seen.setdefault(token, number)
    return None


def load_dictionary(path, cls=None):
    """``cls.load(path)`` (fairseq's ``Dictionary`` by default), its errors one line naming ``path``
    and the line."""
    if cls is None:
        from fairseq.data import Dictionary as cls
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise BioFileNotFoundError(f"{path}: not found (a fairseq dict.txt)")
    try:
        return cls.load(path)
    except Exception as e:  # ValueError, RuntimeError (a duplicate) or a bare Exception (bad bytes)
        raise InputError(
            dictionary_problem(path) or f"{path}: not a fairseq dict.txt ({e})"
        ) from None

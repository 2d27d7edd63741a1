"""Reading fairseq checkpoints safely: ``torch.load(weights_only=True)`` with the classes fairseq
pickles allowlisted, and one line naming a file that is corrupt, truncated, not a checkpoint, or
pickles anything else.

Under torch >= 2.6 ``torch.load`` refuses every pickled global it does not know, and fairseq 0.12
writes some: an ``argparse.Namespace`` (``cfg.model`` of argparse-built models) and, in a state that
was loaded and saved again, the omegaconf containers of its config. Upstream fairseq "fixed" this
with ``weights_only=False``, which runs arbitrary code from the file. Here exactly the classes
fairseq writes are allowlisted. Reading a checkpoint changes nothing else in fairseq or torch: the
plugin's changes are ``patches.install()``'s.
"""

import argparse
import collections
import glob
import os
import pickle
import re
import typing
import zipfile
from typing import Dict, Optional, Tuple

import torch
from omegaconf import DictConfig, ListConfig
from omegaconf.base import ContainerMetadata, Metadata
from omegaconf.nodes import AnyNode

from .errors import BioError

FALLBACK_ENV = "FAIRSEQ_BIO_RESUME_FALLBACK"

# What fairseq 0.12 pickles into checkpoints besides tensors and plain containers (measured on
# checkpoints written by fairseq-train, fairseq-hydra-train, and on states loaded and saved again;
# see tests/test_checkpoint_loading.py). The builtin types and typing.Any appear as omegaconf's type
# metadata (key/element/object types), defaultdict as its resolver cache.
FAIRSEQ_SAFE_GLOBALS = [
    argparse.Namespace,
    DictConfig,
    ListConfig,
    ContainerMetadata,
    Metadata,
    AnyNode,
    typing.Any,
    dict,
    list,
    int,
    collections.defaultdict,
]


class UnsafeCheckpointError(BioError, pickle.UnpicklingError):
    """A checkpoint pickles a global outside ``FAIRSEQ_SAFE_GLOBALS``."""


def unsafe_refusal(path, error: Exception) -> str:
    try:
        unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception:  # not a zip checkpoint: fall back to what torch's message names
        unsafe = re.findall(r"GLOBAL (\S+)", str(error))[:1]
    what = ", ".join(unsafe) if unsafe else "an object torch cannot load safely"
    return (
        f"{path}: refused to load: it pickles {what}, which is none of the classes fairseq writes "
        "(fairseq_bio.checkpoints.FAIRSEQ_SAFE_GLOBALS); only load checkpoints with weights_only=True"
    )


def load_checkpoint(path, map_location="cpu", mmap: bool = False):
    """``torch.load`` a fairseq checkpoint with ``weights_only=True`` and the fairseq allowlist;
    ``mmap``: the tensors mapped from the file rather than read (for a look at the checkpoint's
    other entries)."""
    allow_fairseq_globals()
    try:
        return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except (
        Exception
    ) as e:  # a broken file can make torch raise almost anything (EOFError, KeyError, ...)
        failure = read_failure(path, e)
        if failure is None:
            raise
        raise failure from None


def read_state(path) -> Dict:
    """A checkpoint's contents without reading its tensors' bytes where it can (mmap; the legacy
    format is read)."""
    try:
        return load_checkpoint(path, mmap=True)
    except BioError:
        raise
    except FileNotFoundError:  # gone since it was looked for: fairseq's own loading reports it
        return None
    except Exception:  # torch's legacy (non-zip) format cannot be mapped
        return load_checkpoint(path)


def read_failure(path, error: BaseException) -> Optional[BioError]:
    """The one-line error for ``error``, raised while reading checkpoint ``path``: a corrupt file
    (``CorruptCheckpointError``; an empty or truncated file is not an unsafe one) or one that
    pickles a class outside the allowlist (``UnsafeCheckpointError``); ``error`` itself when it is
    one already, None for any other.
    """
    if isinstance(error, (CorruptCheckpointError, UnsafeCheckpointError)):
        return error
    corrupt = corrupt_error(path, error)
    if corrupt is not None:
        return corrupt
    if isinstance(error, pickle.UnpicklingError):
        return UnsafeCheckpointError(unsafe_refusal(path, error))
    return None


def allow_fairseq_globals() -> None:
    """Allowlist ``FAIRSEQ_SAFE_GLOBALS`` for torch's ``weights_only`` loader, for good (torch's
    ``safe_globals()`` context manager drops globals added before it on exit). Idempotent."""
    known = set(map(id, torch.serialization.get_safe_globals()))
    torch.serialization.add_safe_globals([g for g in FAIRSEQ_SAFE_GLOBALS if id(g) not in known])


class CorruptCheckpointError(BioError, RuntimeError):
    """A checkpoint file is empty, truncated or damaged; ``fallback`` is the newest intact one
    beside it (or None)."""

    def __init__(
        self,
        path: str,
        problem: str,
        advice: str,
        fallback: Optional[str] = None,
        fallback_updates: Optional[int] = None,
    ):
        super().__init__(f"{path}: corrupt checkpoint, {problem}; {advice}")
        self.path, self.problem, self.fallback, self.fallback_updates = (
            path,
            problem,
            fallback,
            fallback_updates,
        )


def checkpoint_problem(path) -> Optional[str]:
    """What makes ``path`` unreadable as a checkpoint (empty, truncated, damaged, not one), or None
    if nothing shows."""
    path = os.fspath(path)
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return None  # missing or unreadable: the loader's own error says so
    if size == 0:
        return "an empty file (0 bytes)"
    if head.startswith(b"\x80"):
        return None  # torch's legacy pickle format: its completeness cannot be checked from outside
    if head != b"PK\x03\x04":
        return f"not a PyTorch checkpoint ({size:,} bytes starting {head!r}, not a zip archive)"
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError):  # the zip directory is the last thing written
        return f"truncated: {size:,} bytes and no complete zip directory at its end"
    with archive:
        names = archive.namelist()
        # torch's archives hold <name>/data.pkl (the pickled structure) beside the tensors'
        # <name>/data/<key>
        if not any(name.count("/") == 1 and name.endswith("/data.pkl") for name in names):
            shown = ", ".join(names[:3]) + (
                f" and {len(names) - 3:,} more" if len(names) > 3 else ""
            )
            return f"not a PyTorch checkpoint (a zip archive without torch's data.pkl; it holds {shown or 'nothing'})"
        try:
            damaged = _crc_failure(archive)
        except (zipfile.BadZipFile, EOFError, OSError) as e:
            return f"damaged: {e}"
    return f"damaged: {damaged} fails its CRC check" if damaged else None


def _crc_failure(archive: zipfile.ZipFile) -> Optional[str]:
    """The first member whose bytes differ from its CRC; skipped when the file was saved without
    CRCs."""
    # torch.serialization.set_crc32_options(False) writes CRC 0 for every member.
    if any(info.CRC == 0 and info.file_size > 0 for info in archive.infolist()):
        return None
    return archive.testzip()


def updates(state: Dict) -> Optional[int]:
    """The update count a loaded checkpoint was saved at; None when it records none."""
    count = ((state.get("optimizer_history") or [{}])[-1]).get("num_updates")
    return None if count is None else int(count)


def resume_point(path) -> Optional[int]:
    """The update count a training checkpoint records, read without its tensors' bytes; None if its
    archive is incomplete, its state does not unpickle under ``weights_only``, or it records no
    count."""
    try:
        return updates(read_state(os.fspath(path)))
    except Exception:
        return None


def newest_intact_checkpoint(directory, exclude=None) -> Optional[Tuple[str, int]]:
    """(path, update count) of the intact ``checkpoint*.pt`` in ``directory`` with the most updates
    (ties: the newer file), ``exclude`` left out; None if there is none. Intact: complete archive,
    CRCs match, state unpickles.
    """
    exclude = os.path.abspath(exclude) if exclude else None
    candidates = []
    for path in glob.glob(os.path.join(glob.escape(os.fspath(directory)), "checkpoint*.pt")):
        if os.path.abspath(path) == exclude or not os.path.isfile(path):
            continue
        updates = resume_point(path)
        if updates is not None:
            candidates.append((updates, os.path.getmtime(path), path))
    # The CRC check reads a whole file: only as many as it takes, newest first.
    for updates, _, path in sorted(candidates, reverse=True):
        if checkpoint_problem(path) is None:
            return path, updates
    return None


def corrupt_error(
    path, error: BaseException, resuming: bool = False
) -> Optional[CorruptCheckpointError]:
    """A ``CorruptCheckpointError`` for ``path`` if that is why loading it raised ``error``, else
    None. Only a training run that is ``resuming`` is told which intact checkpoint beside it to
    resume from; a command that reads a checkpoint (predict, export, a fine-tuning's encoder) is
    told the file itself is the problem.
    """
    path = os.fspath(path)
    problem = checkpoint_problem(path)
    if problem is None:
        return None
    if not resuming:
        return CorruptCheckpointError(
            path, problem, "copy it again from where it came from, or name another one"
        )
    directory = os.path.dirname(os.path.abspath(path))
    newest = newest_intact_checkpoint(directory, exclude=path)
    if newest is None:
        advice = (
            f"no intact checkpoint in {directory} to resume from (move it away to start afresh)"
        )
        return CorruptCheckpointError(path, problem, advice)
    fallback, updates = newest
    advice = (
        f"the newest intact checkpoint in {directory} is {os.path.basename(fallback)} (update {updates}): resume "
        f"from it with checkpoint.restore_file={fallback}, or set {FALLBACK_ENV}=1 to fall back to it automatically"
    )
    return CorruptCheckpointError(path, problem, advice, fallback, updates)


def checkpoint_section(state: Dict, name: str) -> Dict:
    """Section ``name`` of a loaded checkpoint's settings as a dict."""
    # Hydra-trained checkpoints hold plain dicts; argparse-trained ones an argparse.Namespace per
    # section.
    cfg = state.get("cfg") or {}
    section = cfg.get(name) if isinstance(cfg, dict) else None
    if section is None and state.get("args") is not None:
        section = state["args"]
    return section if isinstance(section, dict) else vars(section) if section is not None else {}

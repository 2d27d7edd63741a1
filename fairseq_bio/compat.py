"""Load fairseq checkpoints with ``torch.load(weights_only=True)``.

Under torch >= 2.6 ``torch.load`` refuses every pickled global it does not know, and fairseq 0.12 writes
some: an ``argparse.Namespace`` (``cfg.model`` of argparse-built models) and, in a state that was loaded and
saved again (``scripts/average_checkpoints.py``, the rank-0 broadcast of a checkpoint when resuming on many
GPUs), the omegaconf containers of its config. Upstream fairseq "fixed" this with ``weights_only=False``,
which runs arbitrary code from the file. Here exactly the classes fairseq writes are allowlisted, and a file
that pickles anything else is refused with a one-line error.
"""

import argparse
import collections
import functools
import pickle
import re
import typing

import torch
from omegaconf import DictConfig, ListConfig
from omegaconf.base import ContainerMetadata, Metadata
from omegaconf.nodes import AnyNode

# What fairseq 0.12 pickles into checkpoints besides tensors and plain containers (measured on checkpoints
# written by fairseq-train, fairseq-hydra-train, and on states loaded and saved again; see
# tests/test_compat.py). The builtin types and typing.Any appear as omegaconf's type metadata
# (key/element/object types), defaultdict as its resolver cache.
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


class UnsafeCheckpointError(pickle.UnpicklingError):
    """A checkpoint pickles a global outside ``FAIRSEQ_SAFE_GLOBALS``."""


def _refusal(path, error: Exception) -> str:
    try:
        unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception:  # not a zip checkpoint: fall back to what torch's message names
        unsafe = re.findall(r"GLOBAL (\S+)", str(error))[:1]
    what = ", ".join(unsafe) if unsafe else "an object torch cannot load safely"
    return (
        f"{path}: refused to load: it pickles {what}, which is none of the classes fairseq writes "
        "(fairseq_bio.compat.FAIRSEQ_SAFE_GLOBALS); only load checkpoints with weights_only=True"
    )


def load_checkpoint(path, map_location="cpu"):
    """``torch.load`` a fairseq checkpoint with ``weights_only=True`` and the fairseq allowlist."""
    # torch's safe_globals() context manager drops globals added before it on exit: allowlist for good.
    install()
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        raise UnsafeCheckpointError(_refusal(path, e)) from None


def install() -> None:
    """Allowlist fairseq's classes for ``torch.load`` and make fairseq's checkpoint loader report a refused
    file in one line. Idempotent; called when the plugin is imported."""
    known = set(map(id, torch.serialization.get_safe_globals()))
    torch.serialization.add_safe_globals([g for g in FAIRSEQ_SAFE_GLOBALS if id(g) not in known])
    from fairseq import checkpoint_utils

    loader = checkpoint_utils.load_checkpoint_to_cpu
    if getattr(loader, "fairseq_bio_refuses_unsafe", False):
        return

    @functools.wraps(loader)
    def load_checkpoint_to_cpu(path, *args, **kwargs):
        try:
            return loader(path, *args, **kwargs)
        except UnsafeCheckpointError:
            raise
        except pickle.UnpicklingError as e:
            raise UnsafeCheckpointError(_refusal(path, e)) from None

    load_checkpoint_to_cpu.fairseq_bio_refuses_unsafe = True
    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu

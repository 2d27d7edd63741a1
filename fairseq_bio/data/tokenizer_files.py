"""The tokenizer description beside a dictionary (``bpe.json``: fairseq's BPE name and its files)
and the optional fastBPE module: what the corpus commands and the plugin both read, without torch or
fairseq (the word-boundary tables built from it are ``word_boundaries``)."""

import json
import os
from typing import Any, Dict, Mapping

from ..errors import BioError, json_error
from ..files import InputError

BPE_JSON = "bpe.json"


class WordBoundaryError(BioError, ValueError):
    """The tokenizer description cannot give word boundaries."""


# The options of fairseq's BPEs that name files (relative to bpe.json in a bpe.json).
BPE_FILE_OPTIONS = (
    "gpt2_encoder_json",
    "gpt2_vocab_bpe",
    "sentencepiece_model",
    "bpe_vocab_file",
    "bpe_codes",
)


def bpe_file_options(spec: Mapping[str, Any]):
    """The keys of a bpe.json that name tokenizer files."""
    return [key for key in BPE_FILE_OPTIONS if key in spec]


def require_fastbpe():
    """The ``fastBPE`` module, or a one-line error saying how to build it (it is an optional
    extra)."""
    try:
        import fastBPE
    except ImportError:
        raise InputError(
            "fastbpe: the fastBPE package is not installed (run `make fastbpe`, i.e. "
            "pip install --no-build-isolation fastBPE==0.1.0 with Cython and a C++ compiler present)"
        ) from None
    return fastBPE


def load_bpe_json(path: str) -> Dict[str, Any]:
    """Read a ``bpe.json`` (fairseq BPE name and options); relative file options become absolute."""
    try:
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
    except FileNotFoundError:
        raise WordBoundaryError(
            f"{path}: not found; it is written by fairseq-bio-vocab next to dict.txt and names the BPE "
            "that produced the data (see preprocess/vocab.py)"
        ) from None
    except json.JSONDecodeError as e:
        raise WordBoundaryError(json_error(path, e)) from None
    if not isinstance(spec, dict) or not isinstance(spec.get("_name"), str):
        raise WordBoundaryError(f'{path}: field "_name" (the fairseq BPE name) is missing')
    base = os.path.dirname(os.path.abspath(path))
    for key in bpe_file_options(spec):
        spec[key] = os.path.join(base, spec[key])
    return spec

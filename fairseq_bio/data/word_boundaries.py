"""Where words begin, for any fairseq dictionary and the BPE that produced its symbols.

Whole-word masking (pretraining) and word-level label alignment (fine-tuning) both need to know
which subword tokens start a word. The rule depends on the tokenizer (``WordBoundaries.from_bpe``);
control symbols belong to no word."""

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

import torch

from .tokenizer_files import BPE_JSON, WordBoundaryError, load_bpe_json

SPACE_BYTE_CHAR = "\u0120"  # "Ġ": GPT-2's byte-level stand-in for a space
SENTENCEPIECE_SPACE = "\u2581"  # "▁"


@dataclass(frozen=True)
class WordBoundaries:
    """Per-symbol flags of one dictionary (each a ``V`` bool tensor) and the rule that combines
    them."""

    begins: torch.Tensor  # symbol starts a new word (when it follows a symbol that can end one)
    ends: torch.Tensor  # a word may end after this symbol (False for subword-nmt "@@" symbols)
    special: torch.Tensor  # control symbols: never part of a word, never masked
    # (begins, ends, special) per device they were used on: copied once, not per batch
    _on_device: Dict[torch.device, Tuple[torch.Tensor, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def tables(self, device: torch.device) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(begins, ends, special) on ``device``, copied there once and then reused."""
        if device not in self._on_device:
            self._on_device[device] = tuple(
                t.to(device) for t in (self.begins, self.ends, self.special)
            )
        return self._on_device[device]

    @classmethod
    def from_bpe(cls, dictionary, bpe: Mapping[str, Any]) -> "WordBoundaries":
        """Flags for ``dictionary``, whose symbols the fairseq BPE described by ``bpe`` produced.

        - ``gpt2`` (byte-level BPE, bio-lm): symbols are GPT-2 token ids; a token begins a word
          when its byte-level text starts with a space (``Ġ``). fairseq encodes a line without a
          leading space, so the first word of a sentence has no ``Ġ``: it begins a word because it
          follows a control symbol (``word_starts``).
        - ``sentencepiece``: a piece begins a word when it starts with ``▁``.
        - ``bert`` (WordPiece, PubMedBERT): a piece begins a word unless it starts with ``##``.
        - ``subword_nmt`` / ``fastbpe``: a token ends a word unless it ends with ``@@``; the next
          token then continues the word.

        ``<unk>`` stands for a whole word in WordPiece, but for an unknown character inside a word
        in SentencePiece (whose ``▁`` then comes as a piece of its own)."""
        name = bpe["_name"]
        symbols = [dictionary[i] for i in range(len(dictionary))]
        special = special_symbols(dictionary)
        ends = [True] * len(symbols)
        unk_begins = name != "sentencepiece"
        if name == "gpt2":
            begins = _gpt2_begins(symbols, bpe)
        elif name == "sentencepiece":
            begins = [s.startswith(SENTENCEPIECE_SPACE) for s in symbols]
        elif name == "bert":
            begins = [not s.startswith("##") for s in symbols]
        elif name in ("subword_nmt", "fastbpe"):
            begins = [True] * len(symbols)
            ends = [not s.endswith("@@") for s in symbols]
        else:
            raise WordBoundaryError(
                f'bpe "{name}": word boundaries are known for gpt2, sentencepiece, bert, subword_nmt '
                "and fastbpe"
            )
        unk = dictionary.unk()
        begins[unk], ends[unk] = unk_begins, True
        return cls(
            begins=torch.tensor(begins, dtype=torch.bool),
            ends=torch.tensor(ends, dtype=torch.bool),
            special=special,
        )

    @classmethod
    def from_data_dir(cls, dictionary, data_dir: str, bpe_json: Optional[str] = None):
        """Flags from ``<data_dir>/bpe.json`` (or ``bpe_json``), as written by preprocessing."""
        return cls.from_bpe(dictionary, load_bpe_json(bpe_json or os.path.join(data_dir, BPE_JSON)))

    def word_starts(self, tokens: torch.Tensor) -> torch.Tensor:
        """``B x T`` (or ``T``) bool: the token begins a word. Control symbols begin nothing."""
        begins, ends, special = self.tables(tokens.device)
        is_special = special[tokens]
        # The first position behaves as if it followed a control symbol.
        prev_special = torch.ones_like(is_special)
        prev_special[..., 1:] = is_special[..., :-1]
        prev_ends = torch.ones_like(is_special)
        prev_ends[..., 1:] = ends[tokens[..., :-1]]
        return ~is_special & (prev_special | (prev_ends & begins[tokens]))

    def word_ids(self, tokens: torch.Tensor) -> torch.Tensor:
        """``B x T`` (or ``T``) long: 1-based index of each token's word in its row, 0 for control
        symbols."""
        starts = self.word_starts(tokens)
        return torch.where(self.tables(tokens.device)[2][tokens], 0, starts.long().cumsum(-1))


def special_symbols(dictionary) -> torch.Tensor:
    """``V`` bool: fairseq's control symbols (everything but ``<unk>`` among the specials,
    ``<mask>``, ``madeupword`` padding)."""
    flags = torch.zeros(len(dictionary), dtype=torch.bool)
    flags[: dictionary.nspecial] = True
    flags[dictionary.unk()] = False
    for i in range(dictionary.nspecial, len(dictionary)):
        symbol = dictionary[i]
        if symbol == "<mask>" or symbol.startswith("madeupword"):
            flags[i] = True
    return flags


def _gpt2_begins(symbols, bpe: Mapping[str, Any]):
    path = bpe.get("gpt2_encoder_json")
    if not path:
        raise WordBoundaryError(
            'bpe "gpt2" needs "gpt2_encoder_json" (the encoder.json of the BPE)'
        )
    try:
        with open(path, encoding="utf-8") as f:
            id_to_token = {v: k for k, v in json.load(f).items()}
    except FileNotFoundError:
        raise WordBoundaryError(f"{path}: not found (gpt2_encoder_json)") from None
    begins = []
    for symbol in symbols:
        token = id_to_token.get(int(symbol)) if symbol.isdigit() else None
        begins.append(token is None or token.startswith(SPACE_BYTE_CHAR))
    return begins

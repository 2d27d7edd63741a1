"""HF tokenizer files -> fairseq vocabulary, without transformers: an HF tokenizer (tokenizer.json,
vocab.txt, or vocab.json + merges.txt) read as fairseq's ``bert``, ``gpt2`` or ``fastbpe`` BPE with
the HF ids in fairseq dictionary order, refused where fairseq would not tokenize exactly as it does,
and written as dict.txt + bpe.json + the BPE files."""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Tuple

import torch

from ..files import write_json
from .common import HFConvertError, read_json
from .tokenizers import (
    BERT_SPECIALS,
    END_OF_WORD,
    FAIRSEQ_ROLES,
    GPT2_MERGES_HEADER,
    MASK,
    fastbpe_pipeline,
    fastbpe_symbol,
)

DICT_FILE = "dict.txt"
FASTBPE_CODES = "codes"

_ROLE_KEYS = {
    "<s>": ("cls_token", "bos_token"),
    "<pad>": ("pad_token",),
    "</s>": ("sep_token", "eos_token"),
    "<unk>": ("unk_token",),
    MASK: ("mask_token",),
}
_DEFAULT_SPECIALS = {
    "wordpiece": BERT_SPECIALS,
    "bytebpe": {role: role for role in _ROLE_KEYS},
    "fastbpe": {role: role for role in _ROLE_KEYS},
}


@dataclass
class HFVocab:
    """An HF tokenizer's vocabulary: ``tokens[hf_id]``, which ids play fairseq's special roles, and
    the rules."""

    kind: str  # "wordpiece" (fairseq --bpe bert), "bytebpe" (fairseq --bpe gpt2) or "fastbpe"
    tokens: List[str]
    roles: Dict[str, int]  # "<s>", "<pad>", "</s>", "<unk>", "<mask>" -> HF id
    source: Path
    lowercase: bool = (
        False  # wordpiece: lower-case and strip accents (BertTokenizer's do_lower_case)
    )
    merges: List[str] = field(default_factory=list)  # bytebpe, fastbpe: "a b" merge rules, in order
    added: List[str] = field(
        default_factory=list
    )  # fastbpe: added tokens (control symbols), kept as they are
    # whether the tokenizer gives a pair's second text token type 1 (BERT's pair template)
    pair_segments: bool = False
    # whether one separator stands between a pair's texts (BERT's rows, DistilBERT's among them)
    pair_one_separator: bool = False

    def symbol(self, hf_id: int) -> str:
        """The dict.txt symbol of a non-special token: the wordpiece, the byte-BPE id as fairseq's
        gpt2 BPE emits it (the written encoder.json maps tokens to HF ids), or the fastBPE subword
        ("@@" inside a word).
        """
        token = self.tokens[hf_id]
        if self.kind == "fastbpe":
            return token if token in self.added else fastbpe_symbol(token)
        return token if self.kind == "wordpiece" else str(hf_id)

    def fairseq_order(self) -> List[int]:
        """HF ids in fairseq dictionary order: ``<s> <pad> </s> <unk>``, the other tokens by HF id,
        ``<mask>``."""
        special = set(self.roles.values())
        return (
            [self.roles[r] for r in FAIRSEQ_ROLES]
            + [i for i in range(len(self.tokens)) if i not in special]
            + [self.roles[MASK]]
        )

    def hf_to_fairseq(self) -> torch.Tensor:
        """``V`` long: the fairseq id of each HF id (a permutation)."""
        order = torch.tensor(self.fairseq_order())
        ids = torch.empty_like(order)
        ids[order] = torch.arange(len(order))
        return ids

    def dict_symbols(self) -> List[str]:
        """The dict.txt symbols, in order (fairseq ids 4 .. V-2)."""
        return [self.symbol(i) for i in self.fairseq_order()[len(FAIRSEQ_ROLES) : -1]]


def read_hf_vocab(hf_dir: Path) -> HFVocab:
    """The tokenizer of ``hf_dir`` (tokenizer.json, else vocab.txt, else vocab.json + merges.txt),
    refused in one line when fairseq's ``bert``/``gpt2`` BPE would not tokenize exactly as it
    does."""
    settings = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        if (hf_dir / name).is_file():
            settings.update(read_json(hf_dir / name))
    if (hf_dir / "tokenizer.json").is_file():
        vocab = _vocab_from_tokenizer_json(hf_dir / "tokenizer.json", settings)
    elif (hf_dir / "vocab.txt").is_file():
        path = hf_dir / "vocab.txt"
        with open(path, encoding="utf-8") as f:
            tokens = [line.rstrip("\n") for line in f]
        lowercase = bool(settings.get("do_lower_case", True))
        _check_bert_normalisation(
            path,
            lowercase,
            settings.get("strip_accents"),
            settings.get("tokenize_chinese_chars", True),
        )
        vocab = HFVocab("wordpiece", tokens, {}, path, lowercase=lowercase)
    elif (hf_dir / "vocab.json").is_file() and (hf_dir / "merges.txt").is_file():
        path = hf_dir / "vocab.json"
        if settings.get("add_prefix_space"):
            raise HFConvertError(
                f"{hf_dir / 'tokenizer_config.json'}: add_prefix_space=true; fairseq's gpt2 BPE adds none"
            )
        tokens = _tokens_by_id(path, read_json(path))
        with open(hf_dir / "merges.txt", encoding="utf-8") as f:
            merges = [
                line.rstrip("\n") for line in f if line.strip() and not line.startswith("#version")
            ]
        vocab = HFVocab("bytebpe", tokens, {}, path, merges=merges)
    else:
        raise HFConvertError(
            f"{hf_dir}: no tokenizer files (tokenizer.json, vocab.txt, or vocab.json + merges.txt)"
        )
    vocab.roles = _special_roles(vocab, settings)
    vocab.pair_one_separator, vocab.pair_segments = _pair_template(hf_dir, vocab.kind)
    _check_symbols(vocab)
    return vocab


def _pair_template(hf_dir: Path, kind: str) -> Tuple[bool, bool]:
    """Whether the tokenizer of ``hf_dir`` puts one separator between a pair's texts, and whether
    it makes the second text token type 1: its tokenizer.json's post-processor says; without one,
    BertTokenizer (vocab.txt) does both and RobertaTokenizer (vocab.json + merges.txt) neither."""
    path = hf_dir / "tokenizer.json"
    if not path.is_file():
        return kind == "wordpiece", kind == "wordpiece"
    processors = [read_json(path).get("post_processor") or {}]
    if processors[0].get("type") == "Sequence":
        processors = processors[0].get("processors") or []
    for processor in processors:
        if processor.get("type") == "BertProcessing":
            return True, True
        if processor.get("type") == "TemplateProcessing":
            pieces = [next(iter(p.items())) for p in processor.get("pair") or []]
            kinds = [k if k == "SpecialToken" else v.get("id") for k, v in pieces]
            between = kinds[kinds.index("A") + 1 : kinds.index("B")] if "B" in kinds else []
            return len(between) == 1, any(v.get("type_id", 0) > 0 for _, v in pieces)
    return False, False


def _tokens_by_id(path: Path, token_to_id: Dict[str, int]) -> List[str]:
    by_id = {}
    for token, i in token_to_id.items():
        if not isinstance(i, int) or i < 0:
            raise HFConvertError(f"{path}: token {token!r} has id {i!r}")
        if i in by_id and by_id[i] != token:
            raise HFConvertError(f"{path}: tokens {by_id[i]!r} and {token!r} share id {i}")
        by_id[i] = token
    if sorted(by_id) != list(range(len(by_id))):
        missing = next(i for i in range(len(by_id)) if i not in by_id)
        raise HFConvertError(
            f"{path}: vocabulary ids are not contiguous (no token has id {missing})"
        )
    return [by_id[i] for i in range(len(by_id))]


def _vocab_from_tokenizer_json(path: Path, settings: dict) -> HFVocab:
    spec = read_json(path)
    model = spec.get("model") or {}
    token_to_id = dict(model.get("vocab") or {})
    for added in spec.get("added_tokens") or []:
        if token_to_id.get(added["content"], added["id"]) != added["id"]:
            raise HFConvertError(f'{path}: added token {added["content"]!r} has two ids')
        token_to_id[added["content"]] = added["id"]
    tokens = _tokens_by_id(path, token_to_id)
    normalizer, pre = spec.get("normalizer") or {}, spec.get("pre_tokenizer") or {}
    if model.get("type") == "WordPiece":
        if (
            model.get("continuing_subword_prefix", "##") != "##"
            or model.get("max_input_chars_per_word", 100) != 100
        ):
            raise HFConvertError(
                f'{path}: field "model": fairseq\'s bert BPE needs prefix "##" and 100 chars per word'
            )
        if normalizer.get("type") != "BertNormalizer" or pre.get("type") != "BertPreTokenizer":
            raise HFConvertError(
                f'{path}: field "normalizer"/"pre_tokenizer": {normalizer.get("type")}/{pre.get("type")}, '
                "but fairseq's bert BPE (transformers' BertTokenizer) is BertNormalizer + BertPreTokenizer"
            )
        if not normalizer.get("clean_text", True):
            raise HFConvertError(
                f'{path}: field "normalizer.clean_text": false; BertTokenizer always cleans text'
            )
        lowercase = bool(normalizer.get("lowercase", True))
        _check_bert_normalisation(
            path,
            lowercase,
            normalizer.get("strip_accents"),
            normalizer.get("handle_chinese_chars", True),
        )
        return HFVocab("wordpiece", tokens, {}, path, lowercase=lowercase)
    if model.get("type") == "BPE" and model.get("end_of_word_suffix") == END_OF_WORD:
        return _fastbpe_vocab(path, spec, tokens)
    if model.get("type") == "BPE":
        byte_level = pre.get("type") == "ByteLevel" and pre.get("use_regex", True)
        if not byte_level or pre.get("add_prefix_space") or normalizer:
            raise HFConvertError(
                f"{path}: field \"pre_tokenizer\": fairseq's gpt2 BPE is byte-level with GPT-2's regex, no prefix "
                "space and no normaliser"
            )
        if (
            model.get("continuing_subword_prefix")
            or model.get("end_of_word_suffix")
            or model.get("dropout")
        ):
            raise HFConvertError(
                f'{path}: field "model": subword prefixes/suffixes or BPE dropout are not GPT-2 BPE'
            )
        merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
        return HFVocab("bytebpe", tokens, {}, path, merges=merges)
    raise HFConvertError(
        f'{path}: field "model.type": {model.get("type")!r}; WordPiece, byte-level BPE or fastBPE-style BPE only'
    )


def _fastbpe_vocab(path: Path, spec: dict, tokens: List[str]) -> HFVocab:
    # A BPE whose word-final units end with "</w>" is fastBPE's codes when it splits words exactly
    # as fairseq_bio's fastbpe encoding does and nothing else changes the text (what
    # fairseq-bio-export-hf writes).
    from tokenizers import Tokenizer, models

    expected = Tokenizer(models.BPE())
    expected.normalizer, expected.pre_tokenizer = fastbpe_pipeline()
    expected = json.loads(expected.to_str())
    model = spec["model"]
    for key in ("normalizer", "pre_tokenizer"):
        if spec.get(key) != expected[key]:
            raise HFConvertError(
                f'{path}: field "{key}": a BPE with "{END_OF_WORD}" is read as fastBPE codes only with the whitespace '
                f"splitting fairseq_bio's fastbpe encoding does ({json.dumps(expected[key])})"
            )
    if any(
        model.get(key)
        for key in ("continuing_subword_prefix", "dropout", "byte_fallback", "ignore_merges")
    ):
        raise HFConvertError(
            f'{path}: field "model": subword prefixes, BPE dropout, byte fallback or ignore_merges are not fastBPE'
        )
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
    added = [t["content"] for t in spec.get("added_tokens") or []]
    return HFVocab("fastbpe", tokens, {}, path, merges=merges, added=added)


def _check_bert_normalisation(path: Path, lowercase: bool, strip_accents, chinese_chars) -> None:
    # fairseq's bert BPE builds BertTokenizer(vocab, do_lower_case=not bpe_cased): accents are
    # stripped exactly when lower-casing, Chinese characters are split.
    if strip_accents is not None and bool(strip_accents) != lowercase:
        raise HFConvertError(
            f"{path}: strip_accents={strip_accents} with lowercase={lowercase}; fairseq's bert BPE strips accents "
            "exactly when it lower-cases"
        )
    if not chinese_chars:
        raise HFConvertError(
            f"{path}: Chinese-character splitting is off; fairseq's bert BPE always splits them"
        )


def _special_roles(vocab: HFVocab, settings: dict) -> Dict[str, int]:
    index = {token: i for i, token in enumerate(vocab.tokens)}
    roles = {}
    for role, keys in _ROLE_KEYS.items():
        token = next(
            (settings[k] for k in keys if settings.get(k)), _DEFAULT_SPECIALS[vocab.kind][role]
        )
        token = token.get("content") if isinstance(token, dict) else token
        if token not in index:
            raise HFConvertError(
                f"{vocab.source}: special token {token!r} ({keys[0]}) is not in the vocabulary"
            )
        roles[role] = index[token]
    if len(set(roles.values())) != len(roles):
        raise HFConvertError(
            f"{vocab.source}: two of the special tokens {sorted(roles)} are the same token"
        )
    return roles


def _check_symbols(vocab: HFVocab) -> None:
    symbols = vocab.dict_symbols()
    seen = set(FAIRSEQ_ROLES) | {MASK}
    for symbol in symbols:
        if symbol in seen or not symbol or any(c.isspace() for c in symbol):
            raise HFConvertError(
                f"{vocab.source}: token {symbol!r} cannot be a fairseq dictionary symbol (duplicate, empty, "
                "whitespace, or one of fairseq's own specials)"
            )
        seen.add(symbol)


def write_vocab_files(vocab: HFVocab, out: Path) -> Dict:
    """dict.txt and the BPE files of ``vocab`` in ``out``; returns the bpe.json written there."""
    with open(out / DICT_FILE, "w", encoding="utf-8", newline="\n") as f:
        # No counts exist for an imported vocabulary; 1 keeps frequency-weighted replacement
        # uniform.
        f.writelines(f"{symbol} 1\n" for symbol in vocab.dict_symbols())
    if vocab.kind == "wordpiece":
        with open(out / "vocab.txt", "w", encoding="utf-8", newline="\n") as f:
            f.writelines(token + "\n" for token in vocab.tokens)
        spec = {"_name": "bert", "bpe_vocab_file": "vocab.txt", "bpe_cased": not vocab.lowercase}
    elif vocab.kind == "bytebpe":
        with open(out / "encoder.json", "w", encoding="utf-8") as f:
            json.dump(
                {t: i for i, t in enumerate(vocab.tokens)}, f, ensure_ascii=True
            )  # fairseq opens it as ASCII
        with open(out / "vocab.bpe", "w", encoding="utf-8", newline="\n") as f:
            # fairseq's reader drops the first line (header) and the last (empty after the final
            # newline).
            f.write(GPT2_MERGES_HEADER + "\n")
            f.writelines(merge + "\n" for merge in vocab.merges)
        spec = {"_name": "gpt2", "gpt2_encoder_json": "encoder.json", "gpt2_vocab_bpe": "vocab.bpe"}
    elif vocab.kind == "fastbpe":
        with open(out / FASTBPE_CODES, "w", encoding="utf-8", newline="\n") as f:
            # fastBPE's "left right count" lines; the counts are the learner's and play no part in
            # applying them.
            f.writelines(f"{merge} 0\n" for merge in vocab.merges)
        spec = {"_name": "fastbpe", "bpe_codes": FASTBPE_CODES}
    write_json(out / "bpe.json", spec)
    return spec

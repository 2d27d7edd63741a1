"""Parameters between HF's BERT/RoBERTa/ELECTRA/DistilBERT/MegatronBERT encoders and
``bio_roberta``, both directions: reading HF weight files (without transformers), the name map of
the encoder layers (post-LN, pre-LN, DistilBERT's and MegatronBERT's names), HF -> bio_roberta (rows
in fairseq dictionary order, the MLM head when there is one) and a bio_roberta encoder -> HF
RoBERTa, RobertaPreLayerNorm or MegatronBERT."""

import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch

from .common import HFConvertError, read_json
from .config import (
    CLASS_PREFIXES,
    MEGATRON,
    PRE_LN,
    base_model_prefix,
    bio_roberta_options,
    encoder_config,
    position_offset,
)
from .vocab import HFVocab

ENCODER = "encoder.sentence_encoder."
LM_HEAD = "encoder.lm_head."
HF_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
FAIRSEQ_BUFFERS = (".version", "_float_tensor")  # fairseq's bookkeeping buffers

# Where each HF model type keeps its masked-LM head: transform dense + LayerNorm, output bias, and
# the output matrix (saved only when it is not tied to the input embeddings). The forward adds the
# decoder's bias; ``bias`` is its tied twin, the only one saved when tied, and may differ from it in
# an untied model.
MLM_HEADS = {
    "bert": (
        "cls.predictions.transform.dense",
        "cls.predictions.transform.LayerNorm",
        ("cls.predictions.decoder.bias", "cls.predictions.bias"),
        "cls.predictions.decoder.weight",
    ),
    "roberta": (
        "lm_head.dense",
        "lm_head.layer_norm",
        ("lm_head.decoder.bias", "lm_head.bias"),
        "lm_head.decoder.weight",
    ),
    "electra": (
        "generator_predictions.dense",
        "generator_predictions.LayerNorm",
        ("generator_lm_head.bias",),
        "generator_lm_head.weight",
    ),
    "distilbert": (
        "vocab_transform",
        "vocab_layer_norm",
        ("vocab_projector.bias",),
        "vocab_projector.weight",
    ),
}
MLM_HEADS[PRE_LN], MLM_HEADS[MEGATRON] = MLM_HEADS["roberta"], MLM_HEADS["bert"]
# The heads that apply the encoder's activation between dense and LayerNorm, as bio_roberta's does;
# RoBERTa's and ELECTRA's always apply gelu.
HEADS_WITH_ENCODER_ACTIVATION = ("bert", "distilbert", MEGATRON)
# Parameters of other heads, which bio_roberta has no place for: the import drops them and says so.
OTHER_HEADS = {
    "pooler.": "BERT pooler (fairseq classification heads bring their own dense + tanh)",
    "cls.seq_relationship.": "next-sentence head",
    "discriminator_predictions.": "ELECTRA discriminator head",
    "classifier.": "classification head",
    "pre_classifier.": "classification head",  # DistilBERT's dense before its classifier
    "qa_outputs.": "question-answering head",
}

# HF layer module -> bio_roberta layer module: post-LN (BERT/RoBERTa) and pre-LN
# (RobertaPreLayerNorm, whose LayerNorms sit before attention and before the FFN).
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
_DISTILBERT_LAYER_MAP = {  # post-LN as BERT's, under other names
    "attention.q_lin": "self_attn.q_proj",
    "attention.k_lin": "self_attn.k_proj",
    "attention.v_lin": "self_attn.v_proj",
    "attention.out_lin": "self_attn.out_proj",
    "sa_layer_norm": "self_attn_layer_norm",
    "ffn.lin1": "fc1",
    "ffn.lin2": "fc2",
    "output_layer_norm": "final_layer_norm",
}
_PRE_LN_LAYER_MAP = {
    "attention.self.query": "self_attn.q_proj",
    "attention.self.key": "self_attn.k_proj",
    "attention.self.value": "self_attn.v_proj",
    "attention.output.dense": "self_attn.out_proj",
    "attention.LayerNorm": "self_attn_layer_norm",
    "intermediate.LayerNorm": "final_layer_norm",
    "intermediate.dense": "fc1",
    "output.dense": "fc2",
}
_MEGATRON_LAYER_MAP = (
    {  # pre-LN: attention.ln before attention, ln before the FFN; no embedding LayerNorm
        "attention.ln": "self_attn_layer_norm",
        "attention.self.query": "self_attn.q_proj",
        "attention.self.key": "self_attn.k_proj",
        "attention.self.value": "self_attn.v_proj",
        "attention.output.dense": "self_attn.out_proj",
        "ln": "final_layer_norm",
        "intermediate.dense": "fc1",
        "output.dense": "fc2",
    }
)


def encoder_name_map(num_layers: int, model_type: str = "bert") -> List[Tuple[str, str]]:
    """(HF base-model name, bio_roberta name) of every encoder parameter but the token/position
    embeddings."""
    layers, layer_map = "encoder.layer", _LAYER_MAP
    modules = [("embeddings.LayerNorm", "layernorm_embedding")]
    if model_type == "distilbert":
        layers, layer_map = "transformer.layer", _DISTILBERT_LAYER_MAP
    elif model_type == PRE_LN:
        layer_map, modules = _PRE_LN_LAYER_MAP, modules + [("LayerNorm", "layer_norm")]
    elif model_type == MEGATRON:
        layer_map, modules = _MEGATRON_LAYER_MAP, [("encoder.ln", "layer_norm")]
    for i in range(num_layers):
        modules += [(f"{layers}.{i}.{hf}", f"layers.{i}.{fs}") for hf, fs in layer_map.items()]
    return [(f"{hf}.{p}", f"{ENCODER}{fs}.{p}") for hf, fs in modules for p in ("weight", "bias")]


# ------------------------------------------------------------------------------------------- reading HF files


def read_hf_weights(hf_dir: Path) -> Tuple[Dict[str, torch.Tensor], Path]:
    """All tensors of ``model.safetensors`` or ``pytorch_model.bin`` (also sharded), as float32
    where floating."""
    for name in (
        "model.safetensors",
        "model.safetensors.index.json",
        "pytorch_model.bin",
        "pytorch_model.bin.index.json",
    ):
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
            state.update(
                _load_safetensors(shard)
                if shard.name.endswith(".safetensors")
                else _load_torch_bin(shard)
            )
        return {k: v.float() if v.is_floating_point() else v for k, v in state.items()}, path
    raise HFConvertError(f"{hf_dir}: no model.safetensors or pytorch_model.bin")


def _load_safetensors(path: Path) -> Dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    if not path.is_file():
        raise HFConvertError(f"{path}: not found")
    try:
        return load_file(str(path))
    except Exception as e:  # safetensors raises its own error types for truncated or corrupt files
        raise HFConvertError(
            f"{path}: not a readable safetensors file ({str(e).splitlines()[0]})"
        ) from None


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
        raise HFConvertError(
            f"{path}: not a readable PyTorch file ({str(e).splitlines()[0]})"
        ) from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise HFConvertError(f"{path}: expected a dict of tensors (a state dict)")
    return state


def base_model_names(state: Dict[str, torch.Tensor], model_type: str) -> Dict[str, torch.Tensor]:
    """Parameter names without the ``bert.``/``roberta.``/``electra.``/``distilbert.`` prefix,
    TF-era gamma/beta renamed."""
    out = {}
    prefix = base_model_prefix(model_type) + "."
    for name, tensor in state.items():
        name = name[len(prefix) :] if name.startswith(prefix) else name
        name = re.sub(
            r"LayerNorm\.gamma$",
            "LayerNorm.weight",
            re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name),
        )
        out[name] = tensor
    return out


# ------------------------------------------------------------------------------------------ HF -> bio_roberta


def fairseq_positions(
    positions: torch.Tensor, token_types, config: dict, weights: Path
) -> torch.Tensor:
    """fairseq's ``(max_positions + 2) x C`` position table (its first position at row padding_idx +
    1 = 2) of HF's ``position_embeddings``, with the segment-0 row of ``token_types`` (None:
    DistilBERT has none) folded in (the other segments: ``segment_table``).
    """
    offset = position_offset(config)
    max_positions = positions.size(0) - offset
    if max_positions <= 0:
        raise HFConvertError(
            f"{weights}: {positions.size(0)} position embeddings, fewer than the offset {offset}"
        )
    segment0 = (
        token_types[0] if token_types is not None else torch.zeros(positions.size(1))
    )  # adds exactly 0
    table = torch.zeros(max_positions + 2, positions.size(1))
    table[2:] = positions[offset:] + segment0
    if (
        offset >= 2
    ):  # RoBERTa: the rows before the first position (its padding row) carry over as they are
        table[:2] = positions[offset - 2 : offset] + segment0
    return table


def token_types(config: dict, vocab: HFVocab) -> int:
    """bio_roberta's ``token_types`` for an HF ``config``: its ``type_vocab_size`` where the model
    has two or more and its tokenizer gives a pair's second text type 1 (the BERT family: BERT,
    ELECTRA, MegatronBERT; also a model this plugin exported with token types), else 0 (RoBERTa:
    pairs as ``<s> a </s></s> b </s>``, one type; DistilBERT has none)."""
    if config["model_type"] == "distilbert" or not vocab.pair_segments:
        return 0
    types = config.get("type_vocab_size", 2)  # transformers' default for every such model
    return types if types >= 2 else 0


def segment_table(
    table: Optional[torch.Tensor], config: dict, vocab: HFVocab, weights: Path
) -> Tuple[int, Optional[torch.Tensor]]:
    """(``token_types``, ``segment_embeddings``) an import keeps of HF's ``token_type_embeddings``
    ``table`` (None: the weights have none): each type's row minus type 0's, which the positions
    hold (row 0 is then exactly zero); (0, None) for a model without token types. A table whose
    rows are not the config's ``type_vocab_size`` is refused in one line."""
    types = token_types(config, vocab)
    if not types:
        return 0, None
    if table is None or table.size(0) != types:
        rows = "none" if table is None else table.size(0)
        raise HFConvertError(
            f"{weights}: embeddings.token_type_embeddings.weight has {rows} rows but config.json "
            f"type_vocab_size is {types}"
        )
    return types, table - table[0]


@dataclass
class ConvertedModel:
    """bio_roberta parameters and model options converted from an HF encoder."""

    state: Dict[str, torch.Tensor]
    model_options: Dict
    has_mlm_head: bool
    dropped: List[str]


def hf_to_fairseq_state(
    config: dict, state: Dict[str, torch.Tensor], vocab: HFVocab, weights: Path
) -> ConvertedModel:
    """Map HF parameters onto bio_roberta's: rows in fairseq dictionary order, segment-0 token-type
    embedding folded into the positions (fairseq's start at padding_idx + 1; DistilBERT has none, so
    nothing is added) and, for the BERT family, the other types as ``segment_embeddings`` (their
    differences from type 0), the MLM head when there is one."""
    model_type = config["model_type"]
    state = base_model_names(state, model_type)
    used = set(HF_BUFFERS)

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
    # Megatron-LM pads its vocabulary with rows no token maps to (to a multiple of 128 x its
    # tensor-parallel size), and transformers' converter keeps them: they are left out (their logits
    # are dropped from the output).
    padding = rows - len(vocab.tokens) if model_type == MEGATRON and rows > len(vocab.tokens) else 0
    if len(vocab.tokens) + padding != rows:
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

    segment0 = state.get("embeddings.token_type_embeddings.weight")
    used.add("embeddings.token_type_embeddings.weight")
    fs_positions = fairseq_positions(
        take("embeddings.position_embeddings.weight"), segment0, config, weights
    )
    out[f"{ENCODER}embed_positions.weight"] = fs_positions
    max_positions = fs_positions.size(0) - 2
    types, segments = segment_table(segment0, config, vocab, weights)
    if segments is not None:
        out[f"{ENCODER}segment_embeddings.weight"] = segments

    for hf, fs in encoder_name_map(config["num_hidden_layers"], model_type=model_type):
        out[fs] = take(hf)

    dense, norm, biases, decoder = MLM_HEADS[model_type]
    has_head = f"{dense}.weight" in state
    untied = False
    out[f"{LM_HEAD}weight"] = out[
        f"{ENCODER}embed_tokens.weight"
    ]  # tied, unless the head says otherwise
    if has_head:
        if (
            model_type not in HEADS_WITH_ENCODER_ACTIVATION
            and config.get("hidden_act", "gelu") != "gelu"
        ):
            raise HFConvertError(
                f"{weights}: the {model_type} MLM head applies gelu but the encoder uses {config['hidden_act']}; "
                "bio_roberta's head uses the encoder's activation"
            )
        for p in ("weight", "bias"):
            out[f"{LM_HEAD}dense.{p}"] = take(f"{dense}.{p}")
            out[f"{LM_HEAD}layer_norm.{p}"] = take(f"{norm}.{p}")
        bias = next((name for name in biases if name in state), biases[0])
        out[f"{LM_HEAD}bias"] = take(bias)[order]
        used.update(biases)
        output = state.get(decoder)
        used.add(decoder)
        untied = output is not None and not torch.equal(output, word)
        if untied:
            out[f"{LM_HEAD}weight"] = output[order]

    dropped = sorted(
        {what for name in state for prefix, what in OTHER_HEADS.items() if name.startswith(prefix)}
    )
    if padding:
        dropped.append(
            f"{padding} vocabulary padding rows (ids {len(vocab.tokens)}-{rows - 1}: no token)"
        )
    used.update(name for name in state if name.startswith(tuple(OTHER_HEADS)))
    unknown = sorted(set(state) - used)
    if unknown:
        raise HFConvertError(
            f"{weights}: parameter {unknown[0]!r} has no place in bio_roberta ({len(unknown)} such)"
        )
    options = bio_roberta_options(config, max_positions, untied, types, vocab.pair_one_separator)
    return ConvertedModel(out, options, has_head, dropped)


# ------------------------------------------------------------------------------------------ bio_roberta -> HF


@dataclass
class HFModel:
    """An HF model ready to be written: config.json fields, parameters, side files, and what was
    left out."""

    config: Dict
    state: Dict[str, torch.Tensor]
    side_files: Dict[str, Dict] = field(default_factory=dict)  # file name -> JSON content
    dropped: List[str] = field(
        default_factory=list
    )  # fairseq parts with no place in the HF model, named
    warnings: List[str] = field(default_factory=list)  # one line each, printed by the command


def hf_encoder(hub) -> Tuple[HFModel, str, set]:
    """The encoder of a loaded bio_roberta as HF RoBERTa (post-LN), RobertaPreLayerNorm (pre-LN with
    an embedding LayerNorm) or MegatronBERT (pre-LN without one) base-model parameters: (HFModel, HF
    class prefix, the fairseq parameter names it took)."""
    config = encoder_config(hub)
    model_type = config["model_type"]
    state = {k: v.detach().float() for k, v in hub.model.state_dict().items()}
    prefix = base_model_prefix(model_type) + "."
    # fairseq's first position is row padding_idx + 1; HF's is row position_offset (RoBERTa: the
    # same row; BERT: 0)
    first = hub.task.source_dictionary.pad() + 1 - position_offset(config)
    hf = {
        prefix + "embeddings.word_embeddings.weight": state[f"{ENCODER}embed_tokens.weight"],
        prefix
        + "embeddings.position_embeddings.weight": state[f"{ENCODER}embed_positions.weight"][
            first:
        ],
        # type 0 lives in the positions (an import folds it there): HF's row 0 adds nothing
        prefix
        + "embeddings.token_type_embeddings.weight": state.get(
            f"{ENCODER}segment_embeddings.weight", torch.zeros(1, config["hidden_size"])
        ),
    }
    names = encoder_name_map(config["num_hidden_layers"], model_type)
    hf.update({prefix + hf_name: state[fs_name] for hf_name, fs_name in names})
    used = {fs for _, fs in names} | {
        f"{ENCODER}embed_tokens.weight",
        f"{ENCODER}embed_positions.weight",
        f"{ENCODER}segment_embeddings.weight",
    }
    return HFModel(config, hf), CLASS_PREFIXES[model_type], used

"""HF ``config.json`` <-> bio_roberta model options, both directions: what an imported HF
BERT/RoBERTa/ELECTRA/DistilBERT/MegatronBERT config must say for bio_roberta to compute it exactly,
and the HF config an exported encoder is (RoBERTa, RobertaPreLayerNorm or MegatronBERT by its
LayerNorm layout)."""

from pathlib import Path
from typing import Dict

from .common import HFConvertError, read_json

# pre-LN without an embedding LayerNorm, a final LayerNorm: the bio_megatron_* layout
MEGATRON = "megatron-bert"
MODEL_TYPES = ("bert", "roberta", "electra", "distilbert", MEGATRON)  # what the import reads
# Encoders that bio_roberta cannot compute, refused by name with the reason.
REFUSED_MODEL_TYPES = {
    "mobilebert": "MobileBERT's bottleneck projections around every layer, NoNorm (an elementwise affine in place "
    "of LayerNorm), stacked feed-forward networks per layer and 3-gram embedding projection have no counterpart "
    "in bio_roberta (it would need a model of its own)",
}
# DistilBERT's config.json names -> the BERT names the import reads. Its LayerNorms are always eps
# 1e-12 (fixed in HF's code, not configurable) and it has no token-type embeddings.
DISTILBERT_FIELDS = {
    "dim": "hidden_size",
    "n_layers": "num_hidden_layers",
    "n_heads": "num_attention_heads",
    "hidden_dim": "intermediate_size",
    "activation": "hidden_act",
    "dropout": "hidden_dropout_prob",
    "attention_dropout": "attention_probs_dropout_prob",
}
# the export's model_type of a pre-LN encoder with an embedding LayerNorm
PRE_LN = "roberta-prelayernorm"
# model_type -> HF class name prefix, and the prefix of the base model's parameters where it is not
# the model_type
CLASS_PREFIXES = {"roberta": "Roberta", PRE_LN: "RobertaPreLayerNorm", MEGATRON: "MegatronBert"}
BASE_MODEL_PREFIXES = {PRE_LN: "roberta_prelayernorm", MEGATRON: "bert"}
# HF hidden_act -> the fairseq activation_fn computing the same function.
ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_accurate",
    "gelu_pytorch_tanh": "gelu_accurate",
    "relu": "relu",
}
# fairseq activation_fn -> HF hidden_act computing the same function.
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_accurate": "gelu_new", "relu": "relu"}


def read_hf_config(hf_dir: Path, embedding_projection: bool = False) -> dict:
    """``config.json`` of an HF BERT/RoBERTa/ELECTRA/DistilBERT encoder, checked for what
    bio_roberta can hold exactly (``embedding_projection``: also ELECTRA embeddings narrower than
    the layers, which bio_electra holds); a DistilBERT config is returned with BERT's field names
    added (``DISTILBERT_FIELDS``)."""
    path = hf_dir / "config.json"
    if not path.is_file():
        raise HFConvertError(
            f"{path}: missing (an HF model directory holds config.json, weights, tokenizer files)"
        )
    config = read_json(path)
    model_type = config.get("model_type")
    if model_type in REFUSED_MODEL_TYPES:
        raise HFConvertError(
            f'{path}: field "model_type": {model_type!r}: {REFUSED_MODEL_TYPES[model_type]}'
        )
    if model_type not in MODEL_TYPES:
        raise HFConvertError(
            f'{path}: field "model_type": {model_type!r} is not one of {", ".join(MODEL_TYPES)} '
            "(the encoders bio_roberta can hold exactly)"
        )
    name = {
        key: key for key in DISTILBERT_FIELDS.values()
    }  # the file's name of each field read, for messages
    if model_type == "distilbert":
        name = {bert: own for own, bert in DISTILBERT_FIELDS.items()}
        config.update(
            {bert: config[own] for own, bert in DISTILBERT_FIELDS.items() if own in config}
        )
        config["layer_norm_eps"] = 1e-12
    for key in (
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "max_position_embeddings",
    ):
        value = config.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise HFConvertError(
                f'{path}: field "{name.get(key, key)}": expected a positive integer, got {value!r}'
            )
    if config["hidden_size"] % config["num_attention_heads"]:
        raise HFConvertError(
            f'{path}: field "{name["num_attention_heads"]}": does not divide {name["hidden_size"]}'
        )
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise HFConvertError(
            f'{path}: field "position_embedding_type": {config["position_embedding_type"]!r}; bio_roberta has '
            "learned absolute positions only"
        )
    if config.get("is_decoder") or config.get("add_cross_attention"):
        raise HFConvertError(
            f'{path}: field "is_decoder"/"add_cross_attention": a decoder is not an encoder'
        )
    if config.get("hidden_act", "gelu") not in ACTIVATIONS:
        raise HFConvertError(
            f'{path}: field "{name["hidden_act"]}": {config.get("hidden_act")!r} has no fairseq equivalent '
            f'({", ".join(ACTIVATIONS)})'
        )
    if (
        model_type == "electra"
        and not embedding_projection
        and electra_embedding_size(config) != config["hidden_size"]
    ):
        raise HFConvertError(
            f'{path}: field "embedding_size": {electra_embedding_size(config)} != hidden_size {config["hidden_size"]}; '
            "bio_roberta has no embedding projection (ELECTRA-small style factorised embeddings); import the "
            "discriminator with its generator (--generator) as a bio_electra pair"
        )
    return config


def electra_embedding_size(config: dict) -> int:
    """The width of an HF ELECTRA's embeddings (128, ElectraConfig's default, when config.json does
    not say)."""
    return config.get("embedding_size", 128)


def position_offset(config: dict) -> int:
    """HF row of the first token's position: RoBERTa counts from ``pad_token_id + 1`` like fairseq,
    BERT (and MegatronBERT, DistilBERT, ELECTRA) from 0."""
    return config.get("pad_token_id", 1) + 1 if config["model_type"] in ("roberta", PRE_LN) else 0


def base_model_prefix(model_type: str) -> str:
    """The name the HF heads' classes give their base model (``bert`` in
    ``bert.encoder.layer.0...``)."""
    return BASE_MODEL_PREFIXES.get(model_type, model_type)


def bio_roberta_options(
    config: dict, max_positions: int, untied: bool, token_types: int = 0, bert_pairs=False
) -> Dict:
    """The bio_roberta model options computing what the (checked) HF ``config`` computes
    (``token_types``: the segment table the import keeps, ``weights.token_types``; ``bert_pairs``:
    its tokenizer puts one separator between a pair's texts)."""
    pre_ln = config["model_type"] == MEGATRON
    return dict(
        encoder_layers=config["num_hidden_layers"],
        encoder_embed_dim=config["hidden_size"],
        encoder_ffn_embed_dim=config["intermediate_size"],
        encoder_attention_heads=config["num_attention_heads"],
        encoder_normalize_before=pre_ln,
        layernorm_embedding=not pre_ln,
        layer_norm_eps=float(config.get("layer_norm_eps", 1e-12)),
        activation_fn=ACTIVATIONS[config.get("hidden_act", "gelu")],
        dropout=float(config.get("hidden_dropout_prob", 0.1)),
        attention_dropout=float(config.get("attention_probs_dropout_prob", 0.1)),
        max_positions=max_positions,
        untie_weights_roberta=untied,
        token_types=token_types,
        bert_pairs=bool(bert_pairs),
    )


def encoder_config(hub) -> Dict:
    """config.json fields of a loaded bio_roberta's encoder as the HF class computing it: RoBERTa
    (post-LN), RobertaPreLayerNorm (pre-LN with an embedding LayerNorm) or MegatronBERT (pre-LN
    without one, positions from row 0 of its table, fairseq's from row ``pad + 1``); refused where
    no HF class computes it exactly."""
    args, encoder = hub.model.args, hub.model.encoder.sentence_encoder
    pre_ln, embedding_norm = (
        bool(args.encoder_normalize_before),
        encoder.layernorm_embedding is not None,
    )
    if not pre_ln and not embedding_norm:
        raise HFConvertError(
            "post-LN model without an embedding LayerNorm: HF's RoBERTa and BERT always normalise the embeddings, so "
            "no HF class computes this model exactly"
        )
    if args.activation_fn not in HF_ACTIVATIONS:
        raise HFConvertError(
            f"activation_fn {args.activation_fn!r} has no HF equivalent ({', '.join(HF_ACTIVATIONS)})"
        )
    dictionary = hub.task.source_dictionary
    model_type = "roberta" if not pre_ln else PRE_LN if embedding_norm else MEGATRON
    config = {"model_type": model_type, "pad_token_id": dictionary.pad()}
    return {
        **config,
        "vocab_size": len(dictionary),
        "hidden_size": encoder.embed_tokens.embedding_dim,
        "num_hidden_layers": len(encoder.layers),
        "num_attention_heads": encoder.layers[0].self_attn.num_heads,
        "intermediate_size": encoder.layers[0].fc1.out_features,
        "hidden_act": HF_ACTIVATIONS[args.activation_fn],
        "hidden_dropout_prob": float(args.dropout),
        "attention_probs_dropout_prob": float(args.attention_dropout),
        # fairseq's table starts with the rows before its first position (padding_idx + 1)
        "max_position_embeddings": encoder.embed_positions.weight.size(0)
        - (dictionary.pad() + 1)
        + position_offset(config),
        "type_vocab_size": args.token_types or 1,
        "initializer_range": 0.02,
        "layer_norm_eps": float(encoder.layers[0].final_layer_norm.eps),
        "position_embedding_type": "absolute",
        "bos_token_id": dictionary.bos(),
        "eos_token_id": dictionary.eos(),
    }


def write_config(config: Dict, path: Path) -> None:
    """``config`` as transformers writes its own config.json: through the model type's config class,
    which takes every field (ours under ``fairseq_bio`` too) and adds its version and its own
    defaults."""
    import transformers

    transformers.AutoConfig.for_model(**config).to_json_file(str(path))

"""An HF ELECTRA pair (generator ``ElectraForMaskedLM``, discriminator ``ElectraForPreTraining``)
<-> ``bio_electra``, both directions: what the two config.json files must say, and the parameter
maps.

ELECTRA trains the two with one set of embeddings (word, position, token-type and their LayerNorm),
which HF stores in both directories; bio_electra holds them once (``SHARED``), so the import takes
them only when the two copies are equal, folds the segment-0 token type into the positions as the
BERT import does, and maps ``embeddings_project`` (the projection from the embedding width, in the
generator of every size and in ELECTRA-small's discriminator) onto each encoder's ``embed_proj``.
The heads: ``discriminator_predictions.dense`` / ``dense_prediction`` are
``discriminator_head.dense`` / ``out_proj`` (the config's ``hidden_act`` between them), and
``generator_predictions.dense`` / ``LayerNorm`` plus ``generator_lm_head`` (tied to the word
embeddings, its own bias) are ``generator_head`` (gelu between dense and LayerNorm, always).
bio_electra applies one activation in both encoders and both heads, so pairs whose ``hidden_act`` is
not gelu are refused.
"""

from pathlib import Path
from typing import Dict, Tuple

import torch

from .common import HFConvertError
from .config import bio_roberta_options, electra_embedding_size
from .vocab import HFVocab
from .weights import (
    FAIRSEQ_BUFFERS,
    HF_BUFFERS,
    ConvertedModel,
    HFModel,
    base_model_names,
    encoder_name_map,
    fairseq_positions,
    read_hf_weights,
    segment_table,
)

PARTS = ("discriminator", "generator")
HF_CLASSES = {"discriminator": "ElectraForPreTraining", "generator": "ElectraForMaskedLM"}
# HF embedding parameters the two models share (bio_electra: discriminator.embed_tokens /
# embed_positions / layernorm_embedding; the token types are folded into the positions).
SHARED_EMBEDDINGS = tuple(
    f"embeddings.{name}"
    for name in (
        "word_embeddings.weight",
        "position_embeddings.weight",
        "token_type_embeddings.weight",
        "LayerNorm.weight",
        "LayerNorm.bias",
    )
)
# Config fields that must be equal in the two config.json files (with ElectraConfig's defaults).
SHARED_FIELDS = {
    "vocab_size": None,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
    "hidden_act": "gelu",
    "pad_token_id": 0,
}
# Head parameters: HF name -> bio_electra name.
HEADS = {
    "discriminator": {
        "discriminator_predictions.dense": "discriminator_head.dense",
        "discriminator_predictions.dense_prediction": "discriminator_head.out_proj",
    },
    "generator": {
        "generator_predictions.dense": "generator_head.dense",
        "generator_predictions.LayerNorm": "generator_head.layer_norm",
    },
}


def check_pair_configs(configs: Dict[str, dict], paths: Dict[str, Path]) -> None:
    """Refuse, in one line naming the file and field, a pair bio_electra cannot compute exactly."""
    for part in PARTS:
        if configs[part]["model_type"] != "electra":
            raise HFConvertError(
                f'{paths[part]}: field "model_type": {configs[part]["model_type"]!r}; the {part} of an ELECTRA pair '
                "is an ELECTRA model"
            )
        act = configs[part].get("hidden_act", "gelu")
        if act != "gelu":
            raise HFConvertError(
                f'{paths[part]}: field "hidden_act": {act!r}; bio_electra applies one activation in the layers and '
                "both heads, and HF's generator head always applies gelu"
            )
    disc, gen = configs["discriminator"], configs["generator"]
    differing = [
        key
        for key, default in SHARED_FIELDS.items()
        if disc.get(key, default) != gen.get(key, default)
    ]
    if electra_embedding_size(disc) != electra_embedding_size(gen):
        differing.insert(0, "embedding_size")
    if differing:
        key = differing[0]
        raise HFConvertError(
            f'{paths["generator"]}: field "{key}": {gen.get(key)!r}, but the discriminator\'s is {disc.get(key)!r}; '
            "an ELECTRA pair shares its embeddings, vocabulary and these settings"
        )


def bio_electra_options(configs: Dict[str, dict], max_positions: int, token_types: int) -> Dict:
    """The bio_electra model options computing what the (checked) pair of configs computes: the
    discriminator's as a bio_roberta encoder's (the settings the pair shares included, the token
    types it keeps), the generator's sizes and the embedding width.
    """
    disc, gen = configs["discriminator"], configs["generator"]
    options = bio_roberta_options(disc, max_positions, untied=False, token_types=token_types)
    # the generator's output is always tied to the shared embeddings; pairs are BERT's with token
    # types, RoBERTa's without (no bert_pairs option)
    del options["untie_weights_roberta"], options["bert_pairs"]
    return dict(
        options,
        generator_layers=gen["num_hidden_layers"],
        generator_embed_dim=gen["hidden_size"],
        generator_ffn_embed_dim=gen["intermediate_size"],
        generator_attention_heads=gen["num_attention_heads"],
        embedding_dim=electra_embedding_size(disc),
    )


# ------------------------------------------------------------------------------------------ HF -> bio_electra


def electra_pair_to_fairseq(
    configs: Dict[str, dict],
    weights: Dict[str, Dict[str, torch.Tensor]],
    vocab: HFVocab,
    paths: Dict[str, Path],
) -> ConvertedModel:
    """Map the pair's parameters onto bio_electra's (``configs``, ``weights`` and ``paths`` of the
    weight files keyed by part): rows in fairseq dictionary order, the shared embeddings once, both
    heads."""
    states = {part: base_model_names(weights[part], "electra") for part in PARTS}
    used = {part: set(HF_BUFFERS) for part in PARTS}

    def take(part, name):
        if name not in states[part]:
            raise HFConvertError(
                f"{paths[part]}: parameter {name!r} is missing (the {part} is an {HF_CLASSES[part]})"
            )
        used[part].add(name)
        return states[part][name]

    for name in SHARED_EMBEDDINGS:
        disc, gen = take("discriminator", name), take("generator", name)
        if disc.shape != gen.shape or not torch.equal(disc, gen):
            diff = (
                f"max |diff| {(disc - gen).abs().max().item():.2e}"
                if disc.shape == gen.shape
                else "other shape"
            )
            raise HFConvertError(
                f"{paths['generator']}: {name} differs from the discriminator's ({diff}); bio_electra shares the "
                "embeddings, as ELECTRA trains them: not the generator of this discriminator"
            )
    word = take("discriminator", "embeddings.word_embeddings.weight")
    rows, width = word.shape
    disc_config = configs["discriminator"]
    if rows != disc_config["vocab_size"] or len(vocab.tokens) != rows:
        raise HFConvertError(
            f"{paths['discriminator']}: embeddings.word_embeddings.weight has {rows} rows, config.json vocab_size is "
            f"{disc_config['vocab_size']} and {vocab.source} has {len(vocab.tokens)} tokens (HF ids must map one to "
            "one onto fairseq ids)"
        )
    if width != electra_embedding_size(disc_config):
        raise HFConvertError(
            f"{paths['discriminator']}: embeddings have width {width} but config.json embedding_size is "
            f"{electra_embedding_size(disc_config)}"
        )
    order = torch.tensor(vocab.fairseq_order())
    positions = fairseq_positions(
        take("discriminator", "embeddings.position_embeddings.weight"),
        take("discriminator", "embeddings.token_type_embeddings.weight"),
        disc_config,
        paths["discriminator"],
    )
    out = {
        "discriminator.embed_tokens.weight": word[order],
        "discriminator.embed_positions.weight": positions,
    }
    types, segments = segment_table(
        take("discriminator", "embeddings.token_type_embeddings.weight"),
        disc_config,
        vocab,
        paths["discriminator"],
    )
    if segments is not None:  # type 0 is in the positions, the others as differences from it
        out["discriminator.segment_embeddings.weight"] = segments
    for p in ("weight", "bias"):
        out[f"discriminator.layernorm_embedding.{p}"] = take(
            "discriminator", f"embeddings.LayerNorm.{p}"
        )

    for part in PARTS:
        config = configs[part]
        projected = config["hidden_size"] != width
        if projected != ("embeddings_project.weight" in states[part]):
            raise HFConvertError(
                f"{paths[part]}: embeddings_project {'missing' if projected else 'present'} with embedding_size "
                f"{width} and hidden_size {config['hidden_size']}"
            )
        if projected:
            for p in ("weight", "bias"):
                out[f"{part}.embed_proj.{p}"] = take(part, f"embeddings_project.{p}")
        for hf, fs in encoder_name_map(config["num_hidden_layers"], model_type="electra"):
            if not hf.startswith("embeddings."):  # the embedding LayerNorm is shared: taken above
                out[fs.replace("encoder.sentence_encoder.", f"{part}.", 1)] = take(part, hf)
        for hf, fs in HEADS[part].items():
            for p in ("weight", "bias"):
                out[f"{fs}.{p}"] = take(part, f"{hf}.{p}")

    out["generator_head.bias"] = take("generator", "generator_lm_head.bias")[order]
    output = states["generator"].get("generator_lm_head.weight")
    used["generator"].add("generator_lm_head.weight")
    if output is not None and not torch.equal(output, word):
        raise HFConvertError(
            f"{paths['generator']}: generator_lm_head.weight is not the word embeddings; bio_electra ties the "
            "generator's output layer to the shared embeddings, as ELECTRA does"
        )
    for part in PARTS:
        unknown = sorted(set(states[part]) - used[part])
        if unknown:
            raise HFConvertError(
                f"{paths[part]}: parameter {unknown[0]!r} has no place in bio_electra ({len(unknown)} such)"
            )
    options = bio_electra_options(configs, positions.size(0) - 2, types)
    return ConvertedModel(out, options, True, [])


# ------------------------------------------------------------------------------------------ bio_electra -> HF


def electra_pair_from_fairseq(model, dictionary) -> Dict[str, HFModel]:
    """A loaded bio_electra as the HF pair: {"discriminator": ElectraForPreTraining, "generator":
    ElectraForMaskedLM}, each an ``HFModel`` (config.json fields and parameters; HF ids are
    fairseq's).
    """
    cfg = model.cfg
    if cfg.encoder_normalize_before:
        raise HFConvertError(
            "pre-LN bio_electra: HF's ELECTRA is post-LN only, so no HF class computes it exactly"
        )
    if not cfg.layernorm_embedding:
        raise HFConvertError(
            "bio_electra without an embedding LayerNorm: HF's ELECTRA always normalises embeddings"
        )
    if str(cfg.activation_fn) != "gelu":
        raise HFConvertError(
            f"activation_fn {str(cfg.activation_fn)!r}: HF's ELECTRA generator head always applies gelu, and "
            "bio_electra applies its one activation there too; only gelu models are exported exactly"
        )
    state = {k: v.detach().float() for k, v in model.state_dict().items()}
    positions = state["discriminator.embed_positions.weight"]
    embeddings = {
        "embeddings.word_embeddings.weight": state["discriminator.embed_tokens.weight"],
        "embeddings.position_embeddings.weight": positions[
            2:
        ],  # HF counts positions from 0, fairseq from 2
        # type 0 is in the positions: its row is zero, the others the segment table's differences
        "embeddings.token_type_embeddings.weight": state.get(
            "discriminator.segment_embeddings.weight", torch.zeros(1, positions.size(1))
        ),
        "embeddings.LayerNorm.weight": state["discriminator.layernorm_embedding.weight"],
        "embeddings.LayerNorm.bias": state["discriminator.layernorm_embedding.bias"],
    }
    used = {
        "discriminator.embed_tokens.weight",
        "discriminator.embed_positions.weight",
        "discriminator.segment_embeddings.weight",
        "discriminator.layernorm_embedding.weight",
        "discriminator.layernorm_embedding.bias",
    }
    hf = {}
    for part in PARTS:
        encoder = getattr(model, part)
        layers = len(encoder.layers)
        params = {f"electra.{name}": tensor for name, tensor in embeddings.items()}
        for p in ("weight", "bias"):
            if encoder.embed_proj is not None:
                params[f"electra.embeddings_project.{p}"] = state[f"{part}.embed_proj.{p}"]
                used.add(f"{part}.embed_proj.{p}")
        for hf_name, fs in encoder_name_map(layers, model_type="electra"):
            if not hf_name.startswith("embeddings."):
                fs = fs.replace("encoder.sentence_encoder.", f"{part}.", 1)
                params[f"electra.{hf_name}"] = state[fs]
                used.add(fs)
        for hf_name, fs in HEADS[part].items():
            for p in ("weight", "bias"):
                params[f"{hf_name}.{p}"] = state[f"{fs}.{p}"]
                used.add(f"{fs}.{p}")
        config = _electra_config(encoder, dictionary, cfg, positions.size(0) - 2)
        config["architectures"] = [HF_CLASSES[part]]
        if part == "generator":
            params["generator_lm_head.bias"] = state[
                "generator_head.bias"
            ]  # the weight: tied to the embeddings
            used.add("generator_head.bias")
            config["tie_word_embeddings"] = True
        hf[part] = HFModel(config, params)
    left = [k for k in state if k not in used and not k.endswith(FAIRSEQ_BUFFERS)]
    if left:
        raise HFConvertError(
            f"parameter {left[0]!r} has no place in the HF ELECTRA pair ({len(left)} such)"
        )
    return hf


def _electra_config(encoder, dictionary, cfg, max_positions: int) -> Dict:
    layer = encoder.layers[0]
    return {
        "model_type": "electra",
        "vocab_size": len(dictionary),
        "embedding_size": encoder.embed_tokens.embedding_dim,
        "hidden_size": layer.fc1.in_features,
        "num_hidden_layers": len(encoder.layers),
        "num_attention_heads": layer.self_attn.num_heads,
        "intermediate_size": layer.fc1.out_features,
        "hidden_act": "gelu",
        "hidden_dropout_prob": float(cfg.dropout),
        "attention_probs_dropout_prob": float(cfg.attention_dropout),
        "max_position_embeddings": max_positions,
        "type_vocab_size": cfg.token_types or 1,
        "initializer_range": 0.02,
        "layer_norm_eps": float(layer.final_layer_norm.eps),
        "position_embedding_type": "absolute",
        "pad_token_id": dictionary.pad(),
        "bos_token_id": dictionary.bos(),
        "eos_token_id": dictionary.eos(),
    }


def read_pair_weights(
    dirs: Dict[str, Path]
) -> Tuple[Dict[str, Dict[str, torch.Tensor]], Dict[str, Path]]:
    """(weights, weight-file paths) of the pair's directories, each keyed by part."""
    weights, paths = {}, {}
    for part in PARTS:
        weights[part], paths[part] = read_hf_weights(dirs[part])
    return weights, paths

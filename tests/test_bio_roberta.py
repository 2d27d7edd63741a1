"""bio_roberta: sizes, pre-LN, and per-layer states / attention maps on request (2-layer, 32-dim)."""

import pytest
import torch
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.models import build_model
from helpers import DictionaryTask, make_dictionary, model_args
from omegaconf import OmegaConf, open_dict

import fairseq_bio  # noqa: F401
from fairseq_bio.models.bio_roberta import ARCHITECTURES, BioRobertaConfig, BioRobertaModel

SMALL = dict(encoder_layers=2, encoder_embed_dim=32, encoder_ffn_embed_dim=64, encoder_attention_heads=4)


@pytest.fixture(scope="module")
def task():
    dictionary, _ = make_dictionary([f"w{i}" for i in range(40)])
    return DictionaryTask(dictionary)


def small_model(task, **overrides):
    torch.manual_seed(0)
    model = BioRobertaModel.build_model(model_args("bio_roberta_tiny", **{**SMALL, **overrides}), task)
    return model.eval()


def batch(task, lengths=(7, 5)):
    d = task.source_dictionary
    tokens = torch.full((len(lengths), max(lengths)), d.pad())
    g = torch.Generator().manual_seed(1)
    for row, n in enumerate(lengths):
        tokens[row, 0] = d.bos()
        tokens[row, 1 : n - 1] = torch.randint(d.nspecial, len(d) - 1, (n - 2,), generator=g)
        tokens[row, n - 1] = d.eos()
    return tokens


def test_shapes_and_extras_only_on_request(task):
    model = small_model(task)
    tokens = batch(task)
    B, T = tokens.shape
    logits, extra = model(tokens)
    assert logits.shape == (B, T, len(task.source_dictionary))
    assert extra["inner_states"] is None and extra["attn"] is None

    features, extra = model(tokens, features_only=True, return_all_hiddens=True, return_attn=True)
    assert features.shape == (B, T, 32)
    assert len(extra["inner_states"]) == 3 and all(s.shape == (T, B, 32) for s in extra["inner_states"])
    assert len(extra["attn"]) == 2
    for attn in extra["attn"]:
        assert attn.shape == (B, 4, T, T)
        torch.testing.assert_close(attn.sum(-1), torch.ones(B, 4, T))
        # No attention to padding (row 1 has 5 real tokens).
        assert attn[1, :, :, 5:].abs().max() == 0


def test_attention_maps_path_computes_the_same_states(task):
    model = small_model(task)
    tokens = batch(task)
    plain, _ = model(tokens, features_only=True)
    with_maps, extra = model(tokens, features_only=True, return_attn=True)
    torch.testing.assert_close(plain, with_maps)
    # The maps are differentiable, for attention-transfer distillation losses.
    model.train()
    _, extra = model(tokens, features_only=True, return_attn=True)
    extra["attn"][0].sum().backward()
    assert model.encoder.sentence_encoder.layers[0].self_attn.q_proj.weight.grad.abs().sum() > 0


def test_masked_tokens_only_project_those_positions(task):
    model = small_model(task)
    tokens = batch(task)
    masked = torch.zeros_like(tokens, dtype=torch.bool)
    masked[0, 2] = masked[1, 3] = True
    logits, _ = model(tokens, masked_tokens=masked)
    full, _ = model(tokens)
    torch.testing.assert_close(logits, full[masked])


def test_pre_layernorm_ordering(task):
    post = small_model(task)
    pre = small_model(task, encoder_normalize_before=True)
    assert post.encoder.sentence_encoder.layernorm_embedding is not None
    assert post.encoder.sentence_encoder.layer_norm is None
    assert pre.encoder.sentence_encoder.layernorm_embedding is None  # Megatron: no embedding LN
    assert pre.encoder.sentence_encoder.layer_norm is not None  # ... but a final one
    assert all(layer.normalize_before for layer in pre.encoder.sentence_encoder.layers)
    tokens = batch(task)
    assert not torch.allclose(post(tokens)[0], pre(tokens)[0])


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_named_sizes_argparse_and_hydra(task, arch):
    """--arch X (argparse) and model._name=X (hydra) build the same sizes; explicit values win."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    sizes = ARCHITECTURES[arch]
    args = model_args(arch)
    assert {k: getattr(args, k) for k in sizes} == sizes
    hydra_cfg = OmegaConf.merge(OmegaConf.structured(BioRobertaConfig), {"_name": arch, "encoder_layers": 1})
    with open_dict(hydra_cfg):
        ARCH_CONFIG_REGISTRY[arch](hydra_cfg)  # what fairseq.models.build_model does for an arch name
    assert hydra_cfg.encoder_layers == 1
    assert hydra_cfg.encoder_embed_dim == sizes["encoder_embed_dim"]


def test_build_through_fairseq_registry(task):
    """fairseq's own build_model with a hydra-style config naming the model, not an arch: base sizes."""
    cfg = OmegaConf.create({"_name": "bio_roberta", **SMALL, "encoder_layers": None})
    model = build_model(cfg, task)
    assert isinstance(model, BioRobertaModel)
    assert len(model.encoder.sentence_encoder.layers) == ARCHITECTURES["bio_roberta_base"]["encoder_layers"]


def test_argparse_namespace_converts(task):
    cfg = convert_namespace_to_omegaconf(
        model_args("bio_roberta_large", task="bio_masked_lm", data="x", encoder_layers=2, encoder_embed_dim=32)
    )
    assert cfg.model.encoder_attention_heads == ARCHITECTURES["bio_roberta_large"]["encoder_attention_heads"]

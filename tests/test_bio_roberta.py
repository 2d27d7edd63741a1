"""bio_roberta: sizes, pre-LN, and per-layer states / attention maps on request (2-layer,
32-dim)."""

import pytest
import torch
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.models import build_model
from helpers.small_models import SMALL, model_args, small_model, small_task
from omegaconf import OmegaConf, open_dict

import fairseq_bio  # noqa: F401
from fairseq_bio.models.bio_roberta import ARCHITECTURES, BioRobertaConfig, BioRobertaModel


@pytest.fixture(scope="module")
def task():
    return small_task()


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
    assert len(extra["inner_states"]) == 3 and all(
        s.shape == (T, B, 32) for s in extra["inner_states"]
    )
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
    hydra_cfg = OmegaConf.merge(
        OmegaConf.structured(BioRobertaConfig), {"_name": arch, "encoder_layers": 1}
    )
    with open_dict(hydra_cfg):
        ARCH_CONFIG_REGISTRY[arch](
            hydra_cfg
        )  # what fairseq.models.build_model does for an arch name
    assert hydra_cfg.encoder_layers == 1
    assert hydra_cfg.encoder_embed_dim == sizes["encoder_embed_dim"]


def test_build_through_fairseq_registry(task):
    """fairseq's own build_model with a hydra-style config naming the model, not an arch: base
    sizes."""
    cfg = OmegaConf.create({"_name": "bio_roberta", **SMALL, "encoder_layers": None})
    model = build_model(cfg, task)
    assert isinstance(model, BioRobertaModel)
    assert (
        len(model.encoder.sentence_encoder.layers)
        == ARCHITECTURES["bio_roberta_base"]["encoder_layers"]
    )


def test_argparse_namespace_converts(task):
    cfg = convert_namespace_to_omegaconf(
        model_args(
            "bio_roberta_large",
            task="bio_masked_lm",
            data="x",
            encoder_layers=2,
            encoder_embed_dim=32,
        )
    )
    assert (
        cfg.model.encoder_attention_heads
        == ARCHITECTURES["bio_roberta_large"]["encoder_attention_heads"]
    )


def _layer_and_input(task, attention_dropout):
    """The first layer of a small model (only attention dropout on) and its input ``T x B x C`` with
    a pad mask."""
    model = small_model(
        task, attention_dropout=attention_dropout, dropout=0.0, activation_dropout=0.0
    )
    encoder = model.encoder.sentence_encoder
    tokens = batch(task)
    x, _ = encoder.forward_embedding(tokens)
    return encoder.layers[0], x.transpose(0, 1), tokens.eq(task.source_dictionary.pad())


def test_attention_maps_are_fairseqs_attention_in_eval_mode(task):
    """Eval: the maps path's output equals fairseq's MultiheadAttention (need_weights=False) and its
    maps equal the per-head weights torch's F.multi_head_attention_forward gives for the same
    parameters."""
    import torch.nn.functional as F

    layer, x, pad = _layer_and_input(task, attention_dropout=0.1)
    layer.eval()
    attn = layer.self_attn
    out, maps = layer._attention_with_maps(x, pad, None)
    fairseq_out, _ = attn(query=x, key=x, value=x, key_padding_mask=pad, need_weights=False)
    torch.testing.assert_close(out, fairseq_out, rtol=0, atol=1e-6)
    _, torch_maps = F.multi_head_attention_forward(
        x,
        x,
        x,
        attn.embed_dim,
        attn.num_heads,
        torch.empty([0]),
        torch.cat((attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias)),
        None,
        None,
        False,
        0.1,
        attn.out_proj.weight,
        attn.out_proj.bias,
        False,
        pad,
        need_weights=True,
        use_separate_proj_weight=True,
        q_proj_weight=attn.q_proj.weight,
        k_proj_weight=attn.k_proj.weight,
        v_proj_weight=attn.v_proj.weight,
        average_attn_weights=False,
    )
    assert maps.shape == (2, 4, 7, 7)
    torch.testing.assert_close(maps, torch_maps, rtol=0, atol=1e-6)
    # The whole layer and encoder: the same states with and without maps.
    plain, _ = layer(x, encoder_padding_mask=pad)
    with_maps, _ = layer(x, encoder_padding_mask=pad, need_attn=True)
    torch.testing.assert_close(plain, with_maps, rtol=0, atol=1e-6)


def test_attention_maps_in_training_come_before_dropout(task):
    """Training with attention dropout 0.1: the maps are distributions, 0 on padding columns and the
    same as in eval mode, while the values are still mixed through dropped-out weights (the output
    depends on the seed and is on average the eval output: inverted dropout)."""
    layer, x, pad = _layer_and_input(task, attention_dropout=0.1)
    layer.eval()
    eval_out, eval_maps = layer._attention_with_maps(x, pad, None)
    layer.train()
    outs = []
    for seed in range(400):
        torch.manual_seed(seed)
        out, maps = layer._attention_with_maps(x, pad, None)
        if seed < 2:
            torch.testing.assert_close(maps.sum(-1), torch.ones(2, 4, 7))
            assert maps[1, :, :, 5:].abs().max() == 0  # row 1 has 5 real tokens
            torch.testing.assert_close(maps, eval_maps, rtol=0, atol=1e-6)
        outs.append(out.detach())
    assert (outs[0] - outs[1]).abs().max() > 1e-3  # dropout still acts on the mixing
    assert (outs[0] - eval_out).abs().max() > 1e-3
    mean = torch.stack(outs).mean(0)
    assert (mean - eval_out).abs().max() < 0.1 * eval_out.abs().max()
    # ... and the maps carry gradients (attention-transfer losses train the student through them)
    maps.sum().backward()
    assert layer.self_attn.k_proj.weight.grad.abs().sum() > 0


def test_encoder_maps_in_training_match_eval_without_other_dropout(task):
    """Through the whole encoder: with only attention dropout on, every layer's maps in training
    equal eval's in the first layer (later layers see dropped-out mixing) and are distributions in
    all."""
    model = small_model(task, attention_dropout=0.1, dropout=0.0, activation_dropout=0.0)
    tokens = batch(task)
    _, eval_extra = model(tokens, features_only=True, return_attn=True)
    model.train()
    torch.manual_seed(0)
    _, extra = model(tokens, features_only=True, return_attn=True)
    torch.testing.assert_close(extra["attn"][0], eval_extra["attn"][0], rtol=0, atol=1e-6)
    for maps in extra["attn"]:
        torch.testing.assert_close(maps.sum(-1), torch.ones(2, 4, 7))
        assert maps[1, :, :, 5:].abs().max() == 0

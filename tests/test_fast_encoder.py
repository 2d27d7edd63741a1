"""The fast encoder (fused QKV + scaled_dot_product_attention, padded LM head, cached masking
tables, bio_adamw, optional torch.compile) computes what stock fairseq RoBERTa computes, and
checkpoints move both ways.

The reference is fairseq's own ``roberta`` model (its ``MultiheadAttention`` forward: three
projections, q scaled after its bias) built with the same sizes, whose state dict is loaded into
``bio_roberta``; per-head attention maps are checked against torch's
``F.multi_head_attention_forward`` with the stock layer's parameters. Dropout is off unless a test
says otherwise; fp32 tolerance 1e-5 relative.
"""

import argparse

import pytest
import torch
import torch.nn.functional as F
from fairseq.models import ARCH_CONFIG_REGISTRY
from fairseq.models.roberta import RobertaModel
from helpers.small_models import DictionaryTask, make_dictionary
from helpers.tensors import assert_same_gradients, close

import fairseq_bio  # noqa: F401
from fairseq_bio.models.bio_roberta import BioRobertaLMHead, BioRobertaModel, padded_linear
from fairseq_bio.modules.masking import BatchMasker

SIZES = dict(
    encoder_layers=2, encoder_embed_dim=48, encoder_ffn_embed_dim=96, encoder_attention_heads=4
)
NO_DROPOUT = dict(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
VOCAB = 45  # with the 4 specials and <mask>: 50 symbols, not a multiple of 64 (nor of 8)


@pytest.fixture(scope="module")
def task():
    dictionary, _ = make_dictionary([f"w{i}" for i in range(VOCAB)])
    return DictionaryTask(dictionary)


def _args(arch, pre_ln, **overrides):
    layout = dict(encoder_normalize_before=pre_ln, layernorm_embedding=not pre_ln)
    args = argparse.Namespace(
        arch=arch, _name=arch, max_positions=64, **{**SIZES, **NO_DROPOUT, **layout, **overrides}
    )
    ARCH_CONFIG_REGISTRY[arch](args)
    return args


def stock_and_bio(task, pre_ln=False, seed=0, **overrides):
    """(stock fairseq ``roberta``, ``bio_roberta`` holding the stock model's state dict), both in
    eval mode."""
    torch.manual_seed(seed)
    stock = RobertaModel.build_model(_args("roberta", pre_ln, **overrides), task).eval()
    bio = BioRobertaModel.build_model(_args("bio_roberta_tiny", pre_ln, **overrides), task).eval()
    assert {k: v.shape for k, v in bio.state_dict().items()} == {
        k: v.shape for k, v in stock.state_dict().items()
    }
    bio.load_state_dict(stock.state_dict())
    return stock, bio


def tokens_and_mask(task, padded, seed=1):
    """``B x T`` tokens (rows of different lengths when ``padded``) and a ``B x T`` bool of
    positions to predict."""
    d = task.source_dictionary
    lengths = (19, 11, 16) if padded else (19, 19, 19)
    g = torch.Generator().manual_seed(seed)
    tokens = torch.full((len(lengths), max(lengths)), d.pad())
    for row, n in enumerate(lengths):
        tokens[row, :n] = torch.randint(d.nspecial, len(d) - 1, (n,), generator=g)
        tokens[row, 0], tokens[row, n - 1] = d.bos(), d.eos()
    masked = (torch.rand(tokens.shape, generator=g) < 0.3) & tokens.ne(d.pad())
    return tokens, masked


def reference_maps(stock, inner_states, tokens):
    """Per-layer ``B x H x T x T`` attention probabilities of the stock layers (torch's per-head
    weights)."""
    pad = tokens.eq(stock.encoder.sentence_encoder.padding_idx)
    maps = []
    for layer, x in zip(stock.encoder.sentence_encoder.layers, inner_states):
        if layer.normalize_before:
            x = layer.self_attn_layer_norm(x)
        a = layer.self_attn
        _, weights = F.multi_head_attention_forward(
            x,
            x,
            x,
            a.embed_dim,
            a.num_heads,
            torch.empty([0]),
            torch.cat((a.q_proj.bias, a.k_proj.bias, a.v_proj.bias)),
            None,
            None,
            False,
            0.0,
            a.out_proj.weight,
            a.out_proj.bias,
            False,
            pad if pad.any() else None,
            need_weights=True,
            use_separate_proj_weight=True,
            q_proj_weight=a.q_proj.weight,
            k_proj_weight=a.k_proj.weight,
            v_proj_weight=a.v_proj.weight,
            average_attn_weights=False,
        )
        maps.append(weights)
    return maps


@pytest.mark.parametrize("pre_ln", [False, True], ids=["post-LN", "pre-LN"])
@pytest.mark.parametrize("padded", [False, True], ids=["packed", "padded"])
def test_outputs_and_gradients_equal_stock_roberta(task, pre_ln, padded):
    """Final states, every layer's states, MLM logits at the masked positions, attention maps, and
    the gradients of a loss over logits and maps: bio_roberta (fast path, and the maps path) = stock
    fairseq roberta.
    """
    stock, bio = stock_and_bio(task, pre_ln)
    tokens, masked = tokens_and_mask(task, padded)

    s_feat, s_extra = stock(tokens, features_only=True, return_all_hiddens=True)
    b_feat, b_extra = bio(tokens, features_only=True, return_all_hiddens=True)
    close(b_feat, s_feat)
    assert len(b_extra["inner_states"]) == len(s_extra["inner_states"]) == 3
    for b_state, s_state in zip(b_extra["inner_states"], s_extra["inner_states"]):
        close(b_state, s_state)

    # MLM logits at the masked positions only, weighted by fixed random numbers, plus the attention
    # maps: one loss whose gradients reach every parameter through both paths.
    g = torch.Generator().manual_seed(2)
    s_logits, s_extra = stock(tokens, masked_tokens=masked, return_all_hiddens=True)
    b_logits, b_extra = bio(tokens, masked_tokens=masked, return_all_hiddens=True, return_attn=True)
    assert b_logits.shape == (int(masked.sum()), len(task.source_dictionary))
    close(b_logits, s_logits)
    s_maps = reference_maps(stock, s_extra["inner_states"], tokens)
    for b_map, s_map in zip(b_extra["attn"], s_maps):
        close(b_map, s_map)
        if padded:
            assert b_map[1, :, :, 11:].abs().max() == 0  # row 1 has 11 real tokens
    weights = torch.randn(s_logits.shape, generator=g)
    map_weights = [torch.randn(m.shape, generator=g) for m in s_maps]
    (s_logits * weights).sum().add(
        sum((m * w).sum() for m, w in zip(s_maps, map_weights))
    ).backward()
    (b_logits * weights).sum().add(
        sum((m * w).sum() for m, w in zip(b_extra["attn"], map_weights))
    ).backward()
    assert (
        assert_same_gradients(bio, stock) >= 30
    )  # embeddings, every layer's projections/norms/FFN, the LM head

    # The fast path alone (no maps asked for) gives the same gradients too.
    bio.zero_grad()
    stock.zero_grad()
    (stock(tokens, masked_tokens=masked)[0] * weights).sum().backward()
    (bio(tokens, masked_tokens=masked)[0] * weights).sum().backward()
    assert_same_gradients(bio, stock)


def test_checkpoints_load_both_ways(task, tmp_path):
    """A bio_roberta state dict (as saved in a checkpoint) loads into stock fairseq roberta and
    gives its outputs; a stock one loads into bio_roberta (every other test). Keys and shapes are
    stock fairseq's: q_proj/k_proj/v_proj.
    """
    torch.manual_seed(5)
    bio = BioRobertaModel.build_model(_args("bio_roberta_tiny", False), task).eval()
    torch.save({"model": bio.state_dict()}, tmp_path / "checkpoint.pt")
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=True)["model"]
    assert "encoder.sentence_encoder.layers.0.self_attn.q_proj.weight" in state
    assert not [k for k in state if "qkv" in k or "_orig_mod" in k]
    torch.manual_seed(6)
    stock = RobertaModel.build_model(_args("roberta", False), task).eval()
    stock.load_state_dict(state)
    tokens, masked = tokens_and_mask(task, padded=True)
    close(bio(tokens, masked_tokens=masked)[0], stock(tokens, masked_tokens=masked)[0])
    close(bio(tokens, features_only=True)[0], stock(tokens, features_only=True)[0])


def test_checkpoint_config_from_before_the_options_builds(task):
    """A model config saved before compile_encoder_layers / compile_model / lm_head_vocab_multiple
    existed builds with their defaults (eager layers, padding to 64 on CUDA)."""
    args = _args(
        "roberta", False
    )  # fairseq's roberta defaults only: none of bio_roberta's newer options
    args.arch = args._name = "bio_roberta_tiny"
    for key in ("compile_encoder_layers", "compile_model", "lm_head_vocab_multiple"):
        assert not hasattr(args, key)
    model = BioRobertaModel.build_model(args, task)
    assert (
        args.compile_encoder_layers is False
        and args.compile_model is False
        and args.lm_head_vocab_multiple == 64
    )
    assert (
        isinstance(model.encoder.lm_head, BioRobertaLMHead)
        and model.encoder.lm_head.vocab_multiple == 64
    )


def test_training_with_attention_dropout_equals_stock_under_the_same_seed(task):
    """Training mode with dropout 0.1 everywhere (CPU: the explicit attention path, which draws its
    attention-dropout mask as torch's SDPA math path does): the same seed gives stock's outputs and
    gradients."""
    stock, bio = stock_and_bio(task, dropout=0.1, attention_dropout=0.1)
    stock.train()
    bio.train()
    tokens, masked = tokens_and_mask(task, padded=True)
    torch.manual_seed(11)
    s_logits = stock(tokens, masked_tokens=masked)[0]
    torch.manual_seed(11)
    b_logits = bio(tokens, masked_tokens=masked)[0]
    close(b_logits, s_logits)
    torch.manual_seed(12)
    other = bio(tokens, masked_tokens=masked)[0]
    assert (other - b_logits).abs().max() > 1e-3  # dropout acts
    s_logits.sum().backward()
    b_logits.sum().backward()
    assert_same_gradients(bio, stock)


class CountingSDPA:
    """Wraps torch's scaled_dot_product_attention, recording whether each call had a mask and
    dropout."""

    def __init__(self):
        self.calls = []
        self.real = F.scaled_dot_product_attention

    def __call__(self, *args, **kwargs):
        self.calls.append((kwargs.get("attn_mask") is not None, kwargs.get("dropout_p", 0.0)))
        return self.real(*args, **kwargs)


def test_fused_attention_is_the_default_path_and_packed_blocks_get_no_mask(task, monkeypatch):
    """Eval and dropout-free training go through scaled_dot_product_attention, without a mask on
    packed blocks and with one on padded batches; asking for maps, or CPU training with attention
    dropout, takes the explicit path.
    """
    _, bio = stock_and_bio(task)
    sdpa = CountingSDPA()
    monkeypatch.setattr(F, "scaled_dot_product_attention", sdpa)
    packed, _ = tokens_and_mask(task, padded=False)
    padded, _ = tokens_and_mask(task, padded=True)
    bio(packed)
    assert sdpa.calls == [(False, 0.0)] * 2
    sdpa.calls.clear()
    bio.train()
    bio(padded)
    assert sdpa.calls == [(True, 0.0)] * 2
    sdpa.calls.clear()
    bio(packed, return_attn=True)
    assert sdpa.calls == []
    _, dropping = stock_and_bio(task, attention_dropout=0.1)
    dropping.train()(packed)
    assert (
        sdpa.calls == []
    )  # CPU: torch's SDPA has no fused kernel with dropout; the explicit path is faster
    dropping.eval()(packed)
    assert sdpa.calls == [(False, 0.0)] * 2


def test_padded_vocabulary_matmul_equals_the_plain_one():
    """The LM head's CUDA path: logits and gradients of the matmul on a weight padded to a multiple
    of 64 equal the plain matmul's; the padding columns never appear."""
    torch.manual_seed(0)
    x = torch.randn(7, 16, requires_grad=True)
    weight = torch.randn(50, 16, requires_grad=True)
    bias = torch.randn(50, requires_grad=True)
    padded = padded_linear(x, weight, bias, 64)
    assert padded.shape == (7, 50)
    plain = F.linear(x, weight, bias)
    close(padded, plain)
    g = torch.randn(7, 50)
    grads_padded = torch.autograd.grad((padded * g).sum(), (x, weight, bias))
    grads_plain = torch.autograd.grad((plain * g).sum(), (x, weight, bias))
    for a, b in zip(grads_padded, grads_plain):
        close(a, b)
    assert padded_linear(x, weight, bias, 1).shape == (7, 50)


def test_masking_tables_are_copied_to_a_device_once(task):
    """The masker and word-boundary tables are cached per device, not copied per batch."""
    from fairseq_bio.data.word_boundaries import WordBoundaries

    d = task.source_dictionary
    boundaries = WordBoundaries.from_bpe(d, {"_name": "bert"})
    masker = BatchMasker(d, d.index("<mask>"), word_boundaries=boundaries)
    tokens, _ = tokens_and_mask(task, padded=True)
    first = masker(tokens, 0.3, torch.Generator().manual_seed(0))
    tables, word_tables = masker.tables(tokens.device), boundaries.tables(tokens.device)
    second = masker(tokens, 0.3, torch.Generator().manual_seed(0))
    assert (
        masker.tables(tokens.device) is tables and boundaries.tables(tokens.device) is word_tables
    )
    assert len(masker._tables) == 1 and len(boundaries._on_device) == 1
    for a, b in zip(first, second):
        assert torch.equal(a, b)


def test_bio_adamw_is_fairseqs_adam_update():
    """bio_adamw (torch's fused AdamW, through fairseq's registry) and fairseq's own adam make the
    same updates over five steps with weight decay, on parameters with well-scaled gradients (eps
    tiny against them, so the two epsilon placements agree); the foreach kernel equals the fused
    one."""
    from fairseq.optim import build_optimizer
    from omegaconf import OmegaConf

    def run(name, **extra):
        g = torch.Generator().manual_seed(0)
        params = [
            torch.nn.Parameter(torch.randn(shape, generator=g))
            for shape in [(50, 48), (48,), (3, 96, 48)]
        ]
        cfg = OmegaConf.create(
            {
                "_name": name,
                "adam_betas": "(0.9, 0.98)",
                "adam_eps": 1e-12,
                "weight_decay": 0.01,
                "lr": [1e-2],
                **extra,
            }
        )
        optimizer = build_optimizer(cfg, params)
        initial = [p.detach().clone() for p in params]
        for step in range(5):
            optimizer.zero_grad()
            for p in params:
                p.grad = (
                    torch.randn(p.shape, generator=g) + 0.5
                )  # a drift, so the moments accumulate
            optimizer.set_lr(1e-2 * (step + 1) / 5)  # as fairseq's schedulers do
            optimizer.step()
        return optimizer, [(p.detach(), p.detach() - p0) for p, p0 in zip(params, initial)]

    _, reference = run("adam", tpu=False)
    fused_opt, fused = run("bio_adamw")
    _, foreach = run("bio_adamw", fused=False)
    assert type(fused_opt).__name__ == "BioAdamW" and fused_opt.optimizer.defaults["fused"]
    assert fused_opt.optimizer.defaults["betas"] == (0.9, 0.98)
    for (ref, moved), (fu, _), (fe, _) in zip(reference, fused, foreach):
        assert (
            moved.abs().mean() > 1e-2
        )  # Adam's steps are ~lr each, a wrong rule is off by more than 1e-5 * |p|
        close(fu, ref)
        close(fe, fu)


@pytest.mark.parametrize("max_norm", [0.0, 0.5, 1e6])
def test_bio_adamw_gradient_norm_is_fairseqs_in_one_kernel_per_group(max_norm):
    """bio_adamw's clip_grad_norm (what the fp16/bf16 wrappers call on the master copies) gives
    fairseq's norm and clipped gradients (clip 0: measured only; 0.5: clipped; 1e6: left) over fp32
    and bf16 gradients, an aggregate function applied first, through one ``_foreach_norm`` per dtype
    where fairseq runs a norm per parameter; an inf gradient gives an inf norm (the fp16 overflow
    check reads it)."""
    from fairseq import utils
    from torch.profiler import profile

    from fairseq_bio.optim.bio_adamw import foreach_grad_norm

    def params():
        g = torch.Generator().manual_seed(0)
        shapes = [(50, 48), (48,), (3, 96, 48), (7,)]
        dtypes = [torch.float32] * 3 + [torch.bfloat16]  # a second dtype group
        made = [
            torch.nn.Parameter(torch.randn(s, generator=g).to(d)) for s, d in zip(shapes, dtypes)
        ]
        for i, p in enumerate(made):
            p.grad = (torch.randn(p.shape, generator=g) * (i + 1)).to(p.dtype)
        return made

    def calls(function, ps):
        with profile() as prof:
            norm = function(ps, max_norm, lambda n: n * 2)
        names = [e.name for e in prof.events()]
        return (
            norm,
            names.count("aten::_foreach_norm"),
            sum(n in ("aten::norm", "aten::linalg_vector_norm") for n in names),
        )

    ours, theirs = params(), params()
    norm, foreach, _ = calls(foreach_grad_norm, ours)
    expected, foreach_f, single_f = calls(utils.clip_grad_norm_, theirs)
    torch.testing.assert_close(norm, expected, rtol=1e-6, atol=0)
    assert norm.dtype == torch.float32 and float(norm) > 100
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-6, atol=0)
    clipped = max_norm == 0.5
    assert torch.equal(ours[0].grad, params()[0].grad) != clipped  # clipped only below the norm
    # one multi-tensor norm per dtype where fairseq calls one per parameter, then one of the norms
    # (torch's CPU _foreach_norm is itself a loop of norms: the kernels are saved on CUDA)
    assert (foreach, foreach_f, single_f) == (2, 0, len(ours) + 1)

    broken = params()
    broken[1].grad[3] = float("inf")
    assert torch.isinf(foreach_grad_norm(broken, 0.0))


def test_bio_adamw_refuses_bad_betas():
    from fairseq_bio.optim.bio_adamw import parse_betas

    assert parse_betas("(0.9, 0.98)") == (0.9, 0.98) and parse_betas([0.9, 0.999]) == (0.9, 0.999)
    with pytest.raises(ValueError, match=r"optimizer.adam_betas='0.9': not a pair of numbers"):
        parse_betas("0.9")


@pytest.mark.parametrize("key", ["compile_encoder_layers", "compile_model"])
def test_compiled_model_equals_eager_on_cpu(task, key):
    """model.compile_encoder_layers=true (each layer) and model.compile_model=true (the whole model,
    padding and the masked positions its graph breaks) train on CPU (inductor): eager's logits and
    gradients, and the state dict keeps its keys; either refuses checkpoint_activations and the
    other."""
    _, eager = stock_and_bio(task)
    torch.manual_seed(0)
    compiled = BioRobertaModel.build_model(_args("bio_roberta_tiny", False, **{key: True}), task)
    compiled.load_state_dict(eager.state_dict())
    assert compiled.state_dict().keys() == eager.state_dict().keys()
    compiled.train()
    eager.train()
    tokens, masked = tokens_and_mask(task, padded=key == "compile_model")
    weights = torch.randn(
        int(masked.sum()), len(task.source_dictionary), generator=torch.Generator().manual_seed(3)
    )
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    logits = compiled(tokens, masked_tokens=masked)[0]
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > graphs  # it did compile
    close(logits, eager(tokens, masked_tokens=masked)[0], rtol=1e-4)  # inductor reorders reductions
    (logits * weights).sum().backward()
    (eager(tokens, masked_tokens=masked)[0] * weights).sum().backward()
    assert_same_gradients(compiled, eager, rtol=1e-4)
    with pytest.raises(ValueError, match=f"{key}=true with checkpoint_activations"):
        BioRobertaModel.build_model(
            _args("bio_roberta_tiny", False, **{key: True}, checkpoint_activations=True), task
        )
    with pytest.raises(
        ValueError, match="compile_encoder_layers=true with model.compile_model=true"
    ):
        BioRobertaModel.build_model(
            _args("bio_roberta_tiny", False, compile_encoder_layers=True, compile_model=True), task
        )


@pytest.mark.parametrize("offload", [False, True])
def test_activation_checkpointing_gives_the_same_training_step(task, offload):
    """model.checkpoint_activations=true (and offload_activations, which implies it) recomputes each
    layer in the backward pass: the same logits and gradients as the plain model, and the same
    state-dict keys, so checkpoints move freely between the two."""
    _, plain = stock_and_bio(task)
    option = {"offload_activations": True} if offload else {"checkpoint_activations": True}
    torch.manual_seed(0)
    saving = BioRobertaModel.build_model(_args("bio_roberta_tiny", False, **option), task)
    assert saving.state_dict().keys() == plain.state_dict().keys()
    saving.load_state_dict(plain.state_dict())
    saving.train()
    plain.train()
    calls = {
        "saving": 0,
        "plain": 0,
    }  # runs of the first layer's feed-forward: twice when recomputed
    for name, model in (("saving", saving), ("plain", plain)):
        fc1 = next(m for n, m in model.named_modules() if n.endswith("layers.0.fc1"))
        fc1.register_forward_hook(lambda *_, name=name: calls.__setitem__(name, calls[name] + 1))
    tokens, masked = tokens_and_mask(task, padded=True)
    weights = torch.randn(
        int(masked.sum()), len(task.source_dictionary), generator=torch.Generator().manual_seed(4)
    )
    logits, reference = (
        saving(tokens, masked_tokens=masked)[0],
        plain(tokens, masked_tokens=masked)[0],
    )
    close(logits, reference)
    (logits * weights).sum().backward()
    (reference * weights).sum().backward()
    assert_same_gradients(saving, plain)
    assert calls == {"saving": 2, "plain": 1}

"""The token-classification head on bio_roberta (2 layers, 32 wide): shapes, loss/prediction with
and without CRF, saving and loading the fairseq way beside sentence heads, and layer-wise
learning-rate scales."""

import pytest
import torch
from helpers.small_models import build, small_task, tokens

import fairseq_bio  # noqa: F401
from fairseq_bio.data.tagging_dataset import IGNORE
from fairseq_bio.errors import BioConfigError
from fairseq_bio.modules.tagging_head import TokenClassificationHead
from fairseq_bio.tasks import fine_tuning

LABELS = ["O", "B-Disease", "I-Disease"]


@pytest.fixture(scope="module")
def task():
    return small_task()


@pytest.mark.parametrize("crf", [False, True])
def test_scores_loss_and_predictions(task, crf):
    model = build(task)
    model.register_tagging_head("tags", 3, crf=crf)
    model.classification_heads["tags"].constrain(LABELS)
    x = tokens(task)
    scores, _ = model(x, features_only=True, classification_head_name="tags")
    assert scores.shape == (3, 9, 3)
    target = torch.full(x.shape, IGNORE)
    target[:, 1:4] = torch.tensor([1, 2, 0])
    head = model.classification_heads["tags"]
    loss = head.loss(scores, target, IGNORE)
    assert loss.ndim == 0 and loss > 0
    loss.backward()
    assert model.encoder.sentence_encoder.layers[0].fc1.weight.grad.abs().sum() > 0
    positions = target.ne(IGNORE)
    predicted = head.predict(scores.detach(), positions)
    assert ((predicted >= 0) == positions).all()
    if crf:  # BIO constraints: never I-Disease right after O
        rows = [predicted[r][positions[r]].tolist() for r in range(3)]
        assert all(not (a == 0 and b == 2) for row in rows for a, b in zip([0] + row, row))
    else:
        assert torch.equal(predicted[positions], scores.argmax(-1)[positions])


def test_token_heads_round_trip_beside_sentence_heads(task, tmp_path):
    model = build(task)
    model.register_tagging_head("tags", 3, crf=True)
    model.register_classification_head("sentence", num_classes=2)
    state = model.state_dict()
    assert (
        "classification_heads.tags.crf.transitions" in state
        and "classification_heads.sentence.dense.weight" in state
    )

    # load_checkpoint_heads: an empty model re-creates both heads from the state dict alone
    fresh = build(task, load_checkpoint_heads=True, seed=1)
    fresh.load_state_dict(dict(state), strict=True)
    assert isinstance(fresh.classification_heads["tags"], TokenClassificationHead)
    assert fresh.classification_heads["tags"].crf is not None
    x = tokens(task)
    a = model(x, features_only=True, classification_head_name="tags")[0]
    b = fresh(x, features_only=True, classification_head_name="tags")[0]
    assert torch.equal(a, b)

    # without it, heads the model lacks are dropped (fairseq's rule for sentence heads), the rest
    # loads strictly
    plain = build(task, seed=2)
    plain.load_state_dict(dict(state), strict=True)
    assert len(plain.classification_heads) == 0

    # a pretrained encoder (no heads) loads into a model with a new head, which keeps its fresh
    # weights
    encoder_state = {k: v for k, v in state.items() if not k.startswith("classification_heads.")}
    tagger = build(task, seed=3)
    tagger.register_tagging_head("tags", 5)
    before = tagger.classification_heads["tags"].out_proj.weight.clone()
    tagger.load_state_dict(dict(encoder_state), strict=True)
    assert torch.equal(tagger.classification_heads["tags"].out_proj.weight, before)

    # a head of another size is replaced by the current one, not loaded into
    tagger.load_state_dict(dict(state), strict=True)
    assert tagger.classification_heads["tags"].out_proj.out_features == 5


def test_layer_wise_lr_scales(task):
    model = build(task)
    model.register_tagging_head("tags", 3)
    scales = fine_tuning.layer_scales(model, 0.8)
    assert scales["encoder.sentence_encoder.embed_tokens.weight"] == pytest.approx(0.8**3)
    assert scales["encoder.sentence_encoder.layers.0.fc1.weight"] == pytest.approx(0.8**2)
    assert scales["encoder.sentence_encoder.layers.1.fc1.weight"] == pytest.approx(0.8)
    assert scales["classification_heads.tags.out_proj.weight"] == 1.0
    with pytest.raises(BioConfigError, match="must lie in"):
        fine_tuning.apply_layer_lr_decay(model, 1.5)
    fine_tuning.apply_layer_lr_decay(model, 0.8)
    layer0 = model.encoder.sentence_encoder.layers[0].fc1.weight
    assert layer0.optim_overrides == {"optimizer": {"lr_scale": pytest.approx(0.64)}}


def test_lm_head_is_frozen_but_embeddings_train(task):
    model = build(task)
    fine_tuning.freeze_lm_head(model)
    assert model.encoder.sentence_encoder.embed_tokens.weight.requires_grad
    assert (
        not model.encoder.lm_head.dense.weight.requires_grad
        and not model.encoder.lm_head.bias.requires_grad
    )


def _composite(model, weight_decay=0.01, lr=1e-3):
    """fairseq's composite optimizer as the fine-tuning recipes configure it (one default group of
    adam), in a config root with the values its groups interpolate (common.tpu, optimization.lr)."""
    from fairseq.optim import build_optimizer
    from omegaconf import OmegaConf

    group = {
        "lr_float": lr,
        "optimizer": {
            "_name": "adam",
            "adam_betas": "(0.9,0.999)",
            "adam_eps": 1e-8,
            "weight_decay": weight_decay,
        },
        "lr_scheduler": {
            "_name": "polynomial_decay",
            "warmup_updates": 0,
            "total_num_update": 10,
            "end_learning_rate": 0.0,
            "power": 1.0,
            "lr": [lr],
        },
    }
    root = OmegaConf.create(
        {
            "common": {"tpu": False},
            "optimization": {"lr": [lr], "max_update": 10},
            "optimizer": {
                "_name": "composite",
                "dynamic_groups": True,
                "groups": {"default": group},
            },
        }
    )
    return build_optimizer(root.optimizer, [p for p in model.parameters() if p.requires_grad])


def test_head_learns_at_its_own_rate_beside_layer_decay(task):
    """task.head_lr_scale: every parameter of the task's head (linear, BiLSTM, CRF transitions) gets
    the scale on top of its layer-wise rate (1 for heads), in fairseq's own composite optimizer; the
    encoder keeps its rates and the frozen LM head stays out; a scale <= 0 is a one-line error."""
    model = build(task)
    model.register_tagging_head("tags", 3, lstm_layers=1, lstm_hidden_size=8, crf=True)
    fine_tuning.freeze_lm_head(model)
    fine_tuning.apply_layer_lr_decay(model, 0.8)
    fine_tuning.exempt_from_weight_decay(model)
    scaled = set(fine_tuning.scale_head_lr(model, 20.0))
    head = {
        n
        for n, p in model.named_parameters()
        if n.startswith("classification_heads.") and p.requires_grad
    }
    assert scaled == head and "classification_heads.tags.crf.transitions" in head
    assert "classification_heads.tags.lstm.weight_ih_l0" in head
    scales, names = fine_tuning.layer_scales(model, 0.8), {
        id(p): n for n, p in model.named_parameters()
    }
    seen = set()
    for group in _composite(model).param_groups:
        for p in group["params"]:
            name = names[id(p)]
            seen.add(name)
            assert group["lr"] == pytest.approx(
                1e-3 * scales[name] * (20.0 if name in head else 1.0)
            ), name
    assert head < seen and not any("lm_head.dense" in n for n in seen)
    for bad in (0.0, -1.0):
        with pytest.raises(BioConfigError, match=rf"^task.head_lr_scale={bad}: must be > 0$"):
            fine_tuning.scale_head_lr(model, bad)


@pytest.mark.parametrize("decay", [1.0, 0.8])
def test_biases_and_layer_norms_are_exempt_from_weight_decay(task, decay):
    """Through fairseq's own composite optimizer (with fairseq_repairs' fix of its ignored
    weight_decay_scale): biases and LayerNorm weights get weight decay 0, every other weight the
    recipe's 0.01, each at its layer-wise lr; a step with zero gradients (AdamW: only the decay
    moves a weight) shrinks the decayed weights and leaves the exempt ones. The BiLSTM head's biases
    (bias_ih_l0, bias_hh_l0_reverse, ...) count as biases, as in HF's Trainer.
    """
    model = build(task)
    model.register_tagging_head("tags", 3, lstm_layers=1, lstm_hidden_size=8)
    fine_tuning.freeze_lm_head(model)
    if decay != 1.0:
        fine_tuning.apply_layer_lr_decay(model, decay)
    exempt = set(fine_tuning.exempt_from_weight_decay(model))
    names = {id(p): n for n, p in model.named_parameters()}
    assert "encoder.sentence_encoder.layers.0.self_attn_layer_norm.weight" in exempt
    assert (
        "encoder.sentence_encoder.layers.0.fc1.bias" in exempt
        and "classification_heads.tags.out_proj.bias" in exempt
    )
    assert "encoder.sentence_encoder.layers.0.fc1.weight" not in exempt
    lstm = "classification_heads.tags.lstm."
    assert {
        lstm + n for n in ("bias_ih_l0", "bias_hh_l0", "bias_ih_l0_reverse", "bias_hh_l0_reverse")
    } <= exempt
    assert lstm + "weight_ih_l0" not in exempt and lstm + "weight_hh_l0_reverse" not in exempt
    optimizer = _composite(model)
    scales = fine_tuning.layer_scales(model, decay)
    seen = set()
    for group in optimizer.param_groups:
        for p in group["params"]:
            name = names[id(p)]
            seen.add(name)
            assert group["weight_decay"] == (0.0 if name in exempt else 0.01), name
            assert group["lr"] == pytest.approx(1e-3 * scales[name]), name
    assert seen == {n for n, p in model.named_parameters() if p.requires_grad}
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    for p in model.parameters():
        if p.requires_grad:
            p.grad = torch.zeros_like(p)
    optimizer.step()
    for n, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if n in exempt:
            assert torch.equal(p, before[n]), n
        elif before[n].abs().sum() > 0:
            expected = before[n] * (1 - 1e-3 * scales[n] * 0.01)
            assert torch.allclose(p, expected, rtol=1e-6, atol=1e-9), n


def test_per_parameter_options_refuse_an_optimizer_that_ignores_them(task):
    """Layer decay, the weight-decay exemption and the head's rate are per-parameter overrides that
    only fairseq's composite optimizer reads: with plain fairseq adam the first update refuses,
    naming every option set.
    """
    from types import SimpleNamespace

    from fairseq.optim import build_optimizer
    from omegaconf import OmegaConf

    plain = SimpleNamespace(layer_lr_decay=1.0, exempt_from_weight_decay=False, head_lr_scale=1.0)
    assert fine_tuning.per_parameter_options(plain) == []
    cfg = SimpleNamespace(layer_lr_decay=0.8, exempt_from_weight_decay=True, head_lr_scale=10.0)
    options = fine_tuning.per_parameter_options(cfg)
    assert options == [
        "task.layer_lr_decay=0.8",
        "task.exempt_from_weight_decay=true",
        "task.head_lr_scale=10.0",
    ]
    model = build(task)
    root = OmegaConf.create(
        {
            "common": {"tpu": False},
            "optimization": {"lr": [1e-3]},
            "optimizer": {"_name": "adam", "lr": "${optimization.lr}", "tpu": "${common.tpu}"},
        }
    )
    adam = build_optimizer(root.optimizer, list(model.parameters()))  # fairseq's own adam
    with pytest.raises(
        BioConfigError,
        match=r"^task.layer_lr_decay=0.8, task.exempt_from_weight_decay="
        r"true, task.head_lr_scale=10.0: needs optimizer=composite .*not FairseqAdam$",
    ):
        fine_tuning.check_optimizer_groups(adam, ", ".join(options))
    fine_tuning.check_optimizer_groups(_composite(model), ", ".join(options))  # composite: accepted

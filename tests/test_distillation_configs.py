"""The distillation presets compose (in-process, as fairseq-hydra-train composes them) to the
papers' weights, temperatures and student architectures, and the criterion sees the student's size
through its interpolations."""

import pytest
import yaml
from helpers.distillation import composed
from helpers.hydra_configs import CONFIG_DIR, no_shared_keys

WEIGHTS = (
    "mlm_weight",
    "kl_weight",
    "temperature",
    "cos_weight",
    "embed_weight",
    "hidden_weight",
    "attn_weight",
)


@pytest.mark.parametrize(
    "name, weights, extra, student",
    [
        # bio-lm sec. 7: MLM 5.0, KL 2.0 at T = 2, cosine 1.0; base student (its sizes from the
        # architecture)
        ("distill_biolm", (5.0, 2.0, 2.0, 1.0, 0.0, 0.0, 0.0), {}, (12, 768, 3072, 12)),
        # seed 004 eq. 4: alpha_1 = 2.0 (MLM), alpha_2 = 5.0 (KL), alpha_3 = 1.0 (cosine)
        ("distill_distilbiobert", (2.0, 5.0, 2.0, 1.0, 0.0, 0.0, 0.0), {}, (6, 768, 3072, 12)),
        # eq. 9, every lambda 1: embedding MSE + per-layer hidden and attention MSE + output term;
        # eq. 7's W_e apart from eq. 6's W_h, eq. 8's output term averaged over all N input tokens
        (
            "distill_tinybiobert",
            (0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0),
            {
                "hidden_loss": "mse",
                "attn_loss": "mse",
                "kl_positions": "all",
                "embed_projection": "own",
            },
            (4, 312, 1200, 12),
        ),
        # eq. 11: alpha_1 = 1.0 (MLM), alpha_2 = 5.0 (KL), alpha_3 = 3.0 x (hidden cosine +
        # attention KL) per layer
        (
            "distill_compactbiobert",
            (1.0, 5.0, 1.0, 0.0, 0.0, 3.0, 3.0),
            {"hidden_loss": "cosine", "attn_loss": "kl"},
            (6, 768, 3072, 12),
        ),
    ],
)
def test_presets_carry_the_papers_losses_and_students(name, weights, extra, student):
    cfg = composed(name)
    crit = cfg.criterion
    assert crit._name == "bio_distillation" and crit.teacher == "/teacher.pt"
    assert tuple(crit[w] for w in WEIGHTS) == weights
    extra = {
        "kl_positions": "masked",
        "embed_projection": "shared",
        **extra,
    }  # DistilBERT's KL; one W_h
    assert {k: crit[k] for k in extra} == extra
    assert cfg.task._name == "bio_masked_lm" and not cfg.task.mask_whole_words
    from fairseq_bio.criterions.bio_distillation import student_sizes

    assert (
        student_sizes(crit) == student[:2]
    )  # the criterion sees the student's size through model.*
    model = cfg.model
    sizes = (
        model.encoder_layers,
        model.encoder_embed_dim,
        model.encoder_ffn_embed_dim,
        model.encoder_attention_heads,
    )
    if name == "distill_biolm":
        assert (
            model._name == "bio_roberta_base" and sizes == (None,) * 4
        )  # base: the architecture's sizes
    else:
        assert sizes == student
    # the papers' students keep BERT's dropout, attention included (the attention terms compare maps
    # before it)
    assert model.dropout == 0.1 and model.attention_dropout == 0.1


def test_schedules_and_batches():
    biolm = composed("distill_biolm")
    assert biolm.optimization.max_update == 50000 and biolm.lr_scheduler.warmup_updates == 2500
    assert (
        biolm.optimization.lr == [5e-4]
        and biolm.dataset.batch_size * biolm.optimization.update_freq[0] == 8192
    )
    for name, warmup, decay in (
        ("distill_distilbiobert", 5000, 0.0),
        ("distill_tinybiobert", 10000, 1e-4),
        ("distill_compactbiobert", 5000, 1e-4),
    ):
        cfg = composed(name)
        assert cfg.optimization.max_update == 100000 and cfg.lr_scheduler.warmup_updates == warmup
        assert cfg.optimizer.weight_decay == decay and cfg.task.tokens_per_sample == 256
        assert cfg.dataset.batch_size * cfg.optimization.update_freq[
            0
        ] == 192 and cfg.optimization.lr == [5e-4]


def test_every_criterion_option_is_overridable():
    from fairseq_bio.criterions.bio_distillation import BioDistillationConfig

    listed = yaml.safe_load((CONFIG_DIR / "recipe" / "distill.yaml").read_text())["criterion"]
    own = {
        f for f in BioDistillationConfig.__dataclass_fields__ if not f.startswith("student_")
    }  # and _name
    assert set(listed) == own
    cfg = composed(
        "distill_tinybiobert",
        "criterion.layer_map='3,6,9,12'",
        "criterion.kl_positions=masked",
        "criterion.embed_projection=shared",
    )  # fmt: skip  (the authors' script's choices)
    assert cfg.criterion.layer_map == "3,6,9,12" and cfg.criterion.kl_positions == "masked"
    assert cfg.criterion.embed_projection == "shared"


@pytest.mark.parametrize(
    "name",
    ["distill_biolm", "distill_distilbiobert", "distill_tinybiobert", "distill_compactbiobert"],
)
def test_primary_and_recipes_never_set_the_same_key(name):
    """The recipe comes after the primary config (fairseq-hydra-train merges its schema with the
    primary), so a key both set would silently take the recipe's value."""
    no_shared_keys(name)

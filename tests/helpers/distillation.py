"""Distillation in tests: a tiny bio_roberta teacher saved in fairseq's layout over a 24-word
vocabulary, and the distillation presets composed as fairseq-hydra-train composes them."""

import torch
from helpers import hydra_configs
from omegaconf import OmegaConf

SYMBOLS = [f"w{i}" for i in range(24)]
TEACHER = dict(
    encoder_layers=2, encoder_embed_dim=32, encoder_ffn_embed_dim=64, encoder_attention_heads=4
)


def write_dict(directory, symbols):
    directory.mkdir(parents=True, exist_ok=True)
    lines = [f"{s} {len(symbols) - i}" for i, s in enumerate(symbols)]
    (directory / "dict.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return directory


def setup_task(data_dir):
    from fairseq import tasks

    from fairseq_bio.tasks.bio_masked_lm import BioMaskedLMConfig

    cfg = OmegaConf.structured(BioMaskedLMConfig(data=str(data_dir), max_update=10, seed=1))
    cfg._name = "bio_masked_lm"
    return tasks.setup_task(cfg)


def build_model(task, sizes, seed, **extra):
    from fairseq_bio.models.bio_roberta import BioRobertaConfig, BioRobertaModel

    cfg = OmegaConf.structured(
        BioRobertaConfig(**{"max_positions": 16, "attention_dropout": 0.0, **sizes, **extra})
    )
    cfg._name = "bio_roberta"
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return BioRobertaModel.build_model(cfg, task)


def save_teacher(directory, symbols=SYMBOLS, seed=0, sizes=TEACHER, head=False):
    """A bio_roberta checkpoint in fairseq's layout with its dict.txt beside it (and a sentence
    head)."""
    from fairseq_bio.hf import encoder_checkpoint, encoder_checkpoint_cfg

    write_dict(directory, symbols)
    cfg = encoder_checkpoint_cfg(
        str(directory), {**sizes, "max_positions": 16}, tokens_per_sample=16
    )
    model = build_model(setup_task(directory), sizes, seed)
    if head:
        model.register_classification_head("sentence", num_classes=3)
    path = directory / "teacher.pt"
    torch.save(encoder_checkpoint(cfg, model.state_dict(), {}), path)
    return path


def composed(name, *overrides):
    """A distillation preset's config as ``hydra_configs.composed`` gives it, its data and teacher
    set (``/data``, ``/teacher.pt``)."""
    return hydra_configs.composed(
        name, "task.data=/data", "criterion.teacher=/teacher.pt", *overrides
    )

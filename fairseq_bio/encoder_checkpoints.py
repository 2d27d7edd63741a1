"""fairseq checkpoints on both sides of a conversion: the bio_roberta encoder checkpoint an import (or
fairseq-bio-extract-encoder, fairseq-bio-init-student) writes and the bio_electra one an ELECTRA pair import writes,
in fairseq's layout, with the model options a run restoring them must set; and reading the checkpoint an export
starts from, with its vocabulary."""

import os
from pathlib import Path
from typing import Dict, List, Optional

import torch

from .files import atomic_path

# Model options that decide the parameter shapes or the computation: a training run restoring an imported
# checkpoint must set them (on top of any primary config).
STRUCTURAL_OPTIONS = ("encoder_layers", "encoder_embed_dim", "encoder_ffn_embed_dim", "encoder_attention_heads",
                      "encoder_normalize_before", "layernorm_embedding", "layer_norm_eps", "activation_fn",
                      "max_positions", "untie_weights_roberta")  # fmt: skip
# The same for a bio_electra checkpoint: both encoders' sizes and the shared embedding width.
ELECTRA_STRUCTURAL_OPTIONS = ("encoder_layers", "encoder_embed_dim", "encoder_ffn_embed_dim", "encoder_attention_heads",
                              "generator_layers", "generator_embed_dim", "generator_ffn_embed_dim",
                              "generator_attention_heads", "embedding_dim", "encoder_normalize_before",
                              "layernorm_embedding", "layer_norm_eps", "activation_fn", "max_positions")  # fmt: skip


def hydra_model_overrides(options: Dict, keys=STRUCTURAL_OPTIONS) -> List[str]:
    """``++model.<key>=<value>`` for fairseq-hydra-train (``++`` adds keys a primary config does not list)."""
    return [f"++model.{key}={str(options[key]).lower() if isinstance(options[key], bool) else options[key]}"
            for key in keys]  # fmt: skip


def encoder_checkpoint_cfg(data_dir: str, options: Dict, tokens_per_sample: int) -> Dict:
    """A complete fairseq config (plain containers) of a ``bio_roberta`` + ``bio_masked_lm`` checkpoint."""
    from .models.bio_roberta import BioRobertaConfig
    from .tasks.bio_masked_lm import BioMaskedLMConfig

    task = BioMaskedLMConfig(data=data_dir, tokens_per_sample=tokens_per_sample)
    return _checkpoint_cfg(("bio_masked_lm", task), ("bio_roberta", BioRobertaConfig(**options)),
                           ("masked_lm", {"tpu": False}))  # fmt: skip


def electra_checkpoint_cfg(data_dir: str, options: Dict, tokens_per_sample: int) -> Dict:
    """A complete fairseq config (plain containers) of a ``bio_electra`` model + task + criterion checkpoint."""
    from .criterions.bio_electra import BioElectraCriterionConfig
    from .models.bio_electra import BioElectraConfig
    from .tasks.bio_electra import BioElectraTaskConfig

    task = BioElectraTaskConfig(data=data_dir, tokens_per_sample=tokens_per_sample)
    return _checkpoint_cfg(("bio_electra", task), ("bio_electra", BioElectraConfig(**options)),
                           ("bio_electra", BioElectraCriterionConfig()))  # fmt: skip


def _checkpoint_cfg(*sections) -> Dict:
    """FairseqConfig with the task, model and criterion given as (registered name, dataclass or dict) pairs."""
    from fairseq.dataclass.configs import FairseqConfig
    from omegaconf import OmegaConf, open_dict

    cfg = OmegaConf.structured(FairseqConfig)
    with open_dict(cfg):
        for key, (name, options) in zip(("task", "model", "criterion"), sections):
            cfg[key] = OmegaConf.structured(options) if not isinstance(options, dict) else OmegaConf.create(options)
            cfg[key]._name = name
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)


def encoder_checkpoint(cfg: Dict, model_state: Dict[str, torch.Tensor], extra: Dict,
                       criterion_name: str = "MaskedLmLoss") -> Dict:  # fmt: skip
    """fairseq's checkpoint layout (what ``Trainer.state_dict`` writes) at update 0, without optimizer state
    (``criterion_name``: the class name of the checkpoint's criterion)."""
    return {
        "args": None,
        "cfg": cfg,
        "model": model_state,
        "criterion": None,
        "optimizer_history": [
            {"criterion_name": criterion_name, "optimizer_name": "FairseqAdam", "lr_scheduler_state": {},
             "num_updates": 0}
        ],  # fmt: skip
        "task_state": {},
        "extra_state": {"train_iterator": {"epoch": 1, "iterations_in_epoch": 0}, "previous_training_time": 0.0,
                        **extra},  # fmt: skip
    }


def save_encoder_checkpoint(state: Dict, out: Path, vocab_dir: str, error=ValueError, by: Optional[str] = None) -> None:
    """Write ``state`` to ``out`` with the vocabulary (dict.txt, bpe.json) beside it; the checkpoint appears only
    once complete (temp file, then rename), recorded as made by command ``by``. A different dict.txt already in that
    directory raises ``error``."""
    import filecmp

    from .tasks.fine_tuning import DICT_TXT, copy_vocab

    out.parent.mkdir(parents=True, exist_ok=True)
    beside = out.parent / DICT_TXT
    if beside.exists() and not filecmp.cmp(beside, Path(vocab_dir) / DICT_TXT, shallow=False):
        raise error(f"{beside}: a different vocabulary is already there; choose another output directory")
    with atomic_path(out, by) as tmp:
        torch.save(state, tmp)
        copy_vocab(vocab_dir, str(out.parent))


def build_model(cfg: Dict, data_dir: str):
    """The ``bio_masked_lm`` task (dictionary from ``data_dir``) and its freshly built ``bio_roberta``."""
    from fairseq import tasks
    from omegaconf import OmegaConf

    import fairseq_bio  # noqa: F401  (registration)

    cfg = OmegaConf.create(cfg)
    cfg.task.data = data_dir
    task = tasks.setup_task(cfg.task)
    return task, task.build_model(cfg.model)


# ------------------------------------------------------------------------------------------------- reading


def find_vocab_dir(checkpoint: Path, state: Dict, data: Optional[str]) -> Path:
    """Where dict.txt and bpe.json of the checkpoint's vocabulary are: ``data`` when given, else beside the
    checkpoint (an encoder checkpoint, or a fine-tuned run's save_dir), else its ``task.vocab`` or the first
    directory of its ``task.data``."""
    from .hf.common import HFConvertError  # here: the hf package imports this module

    if data is not None:
        candidates = [Path(data)]
    else:
        task = checkpoint_section(state, "task")
        first = str(task.get("data") or "").split(os.pathsep)[0]
        candidates = [checkpoint.parent] + [Path(d) for d in (task.get("vocab"), first) if d]
    for directory in candidates:
        if (directory / "dict.txt").is_file() and (directory / "bpe.json").is_file():
            return directory
    raise HFConvertError(
        f"{checkpoint}: no dict.txt + bpe.json in {' or '.join(map(str, candidates))} (pass --vocab <vocabulary dir>)"
    )


def checkpoint_section(state: Dict, name: str) -> Dict:
    """Section ``name`` of a loaded checkpoint's settings as a dict."""
    # Hydra-trained checkpoints hold plain dicts; argparse-trained ones an argparse.Namespace per section.
    cfg = state.get("cfg") or {}
    section = cfg.get(name) if isinstance(cfg, dict) else None
    if section is None and state.get("args") is not None:
        section = state["args"]
    return section if isinstance(section, dict) else vars(section) if section is not None else {}


def load_fairseq_model(checkpoint: Path, vocab_dir: Path):
    """The checkpoint as fairseq's hub interface (BPE from the vocabulary's bpe.json), in eval mode."""
    from .models.bio_roberta import BioRobertaModel

    # ``vocab`` points a fine-tuning task at the vocabulary (other tasks have no such option and ignore it).
    hub = BioRobertaModel.from_pretrained(
        str(checkpoint.parent), checkpoint.name, data_name_or_path=str(vocab_dir), vocab=str(vocab_dir)
    )
    return hub.eval()

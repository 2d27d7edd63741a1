"""fairseq checkpoints on both sides of a conversion: the bio_roberta encoder checkpoint an import
(or fairseq-bio-extract-encoder, fairseq-bio-init-student) writes and the bio_electra one an ELECTRA
pair import writes, in fairseq's layout, with the model options a run restoring them must set.
Reading one back for inference: ``checkpoint_fit.load_for_inference``."""

import argparse
import filecmp
from pathlib import Path
from typing import Dict, List, Optional

import torch
from fairseq.data import Dictionary
from fairseq.dataclass.configs import FairseqConfig
from fairseq.tasks import setup_task
from omegaconf import OmegaConf, open_dict

from .checkpoint_fit import ELECTRA_STRUCTURAL_OPTIONS  # noqa: F401  (also read from here)
from .checkpoint_fit import DICT_TXT, RECORD, STRUCTURAL_OPTIONS, dictionary_record
from .criterions.bio_electra import BioElectraCriterionConfig
from .data.dictionary import load_dictionary
from .files import atomic_path
from .models.bio_electra import BioElectraConfig
from .models.bio_roberta import (
    BioRobertaConfig,
    apply_architecture,
    read_bio_roberta_checkpoint,
)
from .tasks.bio_electra import BioElectraTaskConfig
from .tasks.bio_masked_lm import BioMaskedLMConfig
from .tasks.fine_tuning import copy_vocab, resolve_vocab


def hydra_model_overrides(options: Dict, keys=STRUCTURAL_OPTIONS) -> List[str]:
    """``++model.<key>=<value>`` for fairseq-hydra-train (``++`` adds keys a primary config does not
    list)."""
    return [
        f"++model.{key}={str(options[key]).lower() if isinstance(options[key], bool) else options[key]}"
        for key in keys
    ]


def encoder_checkpoint_cfg(data_dir: str, options: Dict, tokens_per_sample: int) -> Dict:
    """A complete fairseq config (plain containers) of a ``bio_roberta`` + ``bio_masked_lm``
    checkpoint."""
    task = BioMaskedLMConfig(data=data_dir, tokens_per_sample=tokens_per_sample)
    return _checkpoint_cfg(
        ("bio_masked_lm", task),
        ("bio_roberta", BioRobertaConfig(**options)),
        ("masked_lm", {"tpu": False}),
    )


def electra_checkpoint_cfg(data_dir: str, options: Dict, tokens_per_sample: int) -> Dict:
    """A complete fairseq config (plain containers) of a ``bio_electra`` model + task + criterion
    checkpoint."""
    task = BioElectraTaskConfig(data=data_dir, tokens_per_sample=tokens_per_sample)
    return _checkpoint_cfg(
        ("bio_electra", task),
        ("bio_electra", BioElectraConfig(**options)),
        ("bio_electra", BioElectraCriterionConfig()),
    )


def _checkpoint_cfg(*sections) -> Dict:
    """FairseqConfig with the task, model and criterion given as (registered name, dataclass or
    dict) pairs."""
    cfg = OmegaConf.structured(FairseqConfig)
    with open_dict(cfg):
        for key, (name, options) in zip(("task", "model", "criterion"), sections):
            cfg[key] = (
                OmegaConf.structured(options)
                if not isinstance(options, dict)
                else OmegaConf.create(options)
            )
            cfg[key]._name = name
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)


def encoder_checkpoint(
    cfg: Dict,
    model_state: Dict[str, torch.Tensor],
    extra: Dict,
    criterion_name: str = "MaskedLmLoss",
) -> Dict:
    """fairseq's checkpoint layout (what ``Trainer.state_dict`` writes) at update 0, without
    optimizer state (``criterion_name``: the class name of the checkpoint's criterion)."""
    return {
        "args": None,
        "cfg": cfg,
        "model": model_state,
        "criterion": None,
        "optimizer_history": [
            {
                "criterion_name": criterion_name,
                "optimizer_name": "FairseqAdam",
                "lr_scheduler_state": {},
                "num_updates": 0,
            }
        ],
        "task_state": {},
        "extra_state": {
            "train_iterator": {"epoch": 1, "iterations_in_epoch": 0},
            "previous_training_time": 0.0,
            **extra,
        },
    }


def save_encoder_checkpoint(
    state: Dict, out: Path, vocab_dir: str, error=ValueError, by: Optional[str] = None
) -> None:
    """Write ``state`` to ``out`` with the vocabulary (dict.txt, bpe.json) beside it and the record
    of its dictionary in it (``checkpoint_fit``); the checkpoint appears only once complete (temp
    file, then rename), recorded as made by command ``by``. A different dict.txt already in that
    directory raises ``error``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    beside = out.parent / DICT_TXT
    if beside.exists() and not filecmp.cmp(beside, Path(vocab_dir) / DICT_TXT, shallow=False):
        raise error(
            f"{beside}: a different vocabulary is already there; choose another output directory"
        )
    extra = state.setdefault("extra_state", {})
    if (
        RECORD not in extra
    ):  # the dictionary the tasks build from that dict.txt, as their checkpoints record it
        extra[RECORD] = vocabulary_record(Path(vocab_dir) / DICT_TXT, beside)
    with atomic_path(out, by) as tmp:
        torch.save(state, tmp)
        copy_vocab(vocab_dir, str(out.parent))


def random_init_checkpoint(
    checkpoint: Path, out: Path, seed: int = 1, error=ValueError, by: Optional[str] = None
) -> Path:
    """The architecture of the ``bio_roberta`` ``checkpoint`` (its structural options, vocabulary
    and positions) freshly built with fairseq's initialisation under ``seed``, written to ``out`` as
    an encoder checkpoint at update 0 with that vocabulary beside it: the random-init side of a
    pretrained-against-random comparison, which every consumer of encoder checkpoints (fine-tuning,
    the BLURB runner) takes as it takes the pretrained one.
    """
    state, _, recorded = read_bio_roberta_checkpoint(str(checkpoint), str(checkpoint), error)
    model_cfg = argparse.Namespace(**recorded)
    apply_architecture(model_cfg, recorded.get("_name"))
    options = {key: getattr(model_cfg, key) for key in STRUCTURAL_OPTIONS}
    vocab_dir = resolve_vocab(None, str(checkpoint))
    cfg = encoder_checkpoint_cfg(vocab_dir, options, tokens_per_sample=options["max_positions"])
    torch.manual_seed(seed)
    _, model = build_model(cfg, vocab_dir)
    extra = {"random_init": {"architecture_of": str(Path(checkpoint).absolute()), "seed": seed}}
    save_encoder_checkpoint(
        encoder_checkpoint(cfg, model.state_dict(), extra), Path(out), vocab_dir, error, by=by
    )
    return Path(out)


def vocabulary_record(dict_file, recorded_as=None) -> Dict:
    """The dictionary record (``checkpoint_fit``) of the dictionary a task builds from ``dict_file``
    (its symbols and ``<mask>``), naming ``recorded_as`` (default ``dict_file``): the copy that goes
    beside the checkpoint.
    """
    dictionary = load_dictionary(dict_file, Dictionary)
    dictionary.add_symbol("<mask>")
    return dictionary_record(dictionary, str(recorded_as or dict_file))


def build_model(cfg: Dict, data_dir: str):
    """The ``bio_masked_lm`` task (dictionary from ``data_dir``) and its freshly built
    ``bio_roberta``."""
    cfg = OmegaConf.create(cfg)
    cfg.task.data = data_dir
    task = setup_task(cfg.task)
    return task, task.build_model(cfg.model)

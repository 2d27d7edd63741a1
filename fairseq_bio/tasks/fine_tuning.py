"""What every fine-tuning task shares (nothing here is registered): finding the encoder's
vocabulary, checking that an encoder checkpoint fits it, copying the vocabulary next to the
fine-tuned checkpoints, layer-wise learning-rate decay, and ``FineTuningTask``, the base of the
tasks that put a head on an encoder checkpoint.

An *encoder checkpoint* is any fairseq checkpoint of ``bio_roberta`` (pretrained with
``bio_masked_lm``, an ELECTRA discriminator, a distilled student, an imported HF model, or a model
fine-tuned here) whose vocabulary, ``dict.txt`` and ``bpe.json``, lies next to it or in the data
directory it records. Fine-tuning starts from one with ``checkpoint.restore_file`` (plus the reset
flags the fine-tuning configs set) or ``checkpoint.finetune_from_model``; nothing else about where
it came from matters.
"""

import logging
import os
import shutil
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from fairseq.data import Dictionary
from fairseq.dataclass import FairseqDataclass
from fairseq.tasks import FairseqTask
from omegaconf import II
from torch import nn

from ..checkpoint_fit import (
    DICT_TXT,
    RECORD,
    check_dictionary,
    check_start_kept,
    check_whole,
    dictionary_record,
    has_vocab,
    recorded_vocab_dirs,
    start_checkpoint_path,
)
from ..data.dictionary import load_dictionary
from ..data.pair_format import PairFormat
from ..data.tagging_dataset import WordEncoder
from ..data.tokenizer_files import BPE_JSON, bpe_file_options, load_bpe_json
from ..errors import BioConfigError
from ..files import atomic_path

logger = logging.getLogger(__name__)


def resolve_vocab(explicit: Optional[str], encoder: Optional[str]) -> str:
    """The directory holding ``dict.txt`` + ``bpe.json``: ``explicit``, else beside the encoder
    checkpoint, else the vocabulary the checkpoint itself records (``task.vocab``, or the first
    ``task.data`` dir).
    """
    if explicit:
        if not has_vocab(explicit):
            raise BioConfigError(f"task.vocab={explicit}: needs {DICT_TXT} and {BPE_JSON}")
        return explicit
    if not encoder:
        raise BioConfigError(
            "no vocabulary: give the encoder checkpoint (checkpoint.restore_file=... or "
            "checkpoint.finetune_from_model=...) or the directory with its dict.txt and bpe.json (task.vocab=...)"
        )
    if not os.path.exists(encoder):
        raise BioConfigError(f"{encoder}: encoder checkpoint not found")
    beside = os.path.dirname(os.path.abspath(encoder))
    if has_vocab(beside):
        return beside
    recorded = recorded_vocab_dirs(encoder)
    for directory in recorded:
        if has_vocab(directory):
            return directory
    raise BioConfigError(
        f"{encoder}: no {DICT_TXT} + {BPE_JSON} beside it or in the directories it records "
        f"({', '.join(recorded) or 'none'}); give task.vocab=<dir with the pretraining dict.txt and bpe.json>"
    )


# What fixes an encoder's shape and computation; a fine-tuning run takes these from its encoder
# checkpoint, so the fine-tuning config never has to repeat the encoder's size.
ARCHITECTURE_KEYS = (
    "encoder_layers",
    "encoder_embed_dim",
    "encoder_ffn_embed_dim",
    "encoder_attention_heads",
    "encoder_normalize_before",
    "layernorm_embedding",
    "activation_fn",
    "max_positions",
    "untie_weights_roberta",
    "layer_norm_eps",
    "token_types",
    "bert_pairs",
)


def adopt_encoder_architecture(model_cfg, encoder: str) -> None:
    """Set ``model_cfg``'s architecture keys to those the encoder checkpoint was built with."""
    from omegaconf import OmegaConf

    from ..checkpoints import load_checkpoint

    state = load_checkpoint(encoder)
    recorded = (state.get("cfg") or {}).get("model") or state.get("args")
    if recorded is None:
        raise BioConfigError(f"{encoder}: records no model configuration (cfg.model)")
    struct = OmegaConf.is_config(model_cfg) and OmegaConf.is_struct(model_cfg)
    if struct:
        OmegaConf.set_struct(model_cfg, False)
    changed = []
    for key in ARCHITECTURE_KEYS:
        value = recorded.get(key) if hasattr(recorded, "get") else getattr(recorded, key, None)
        if value is not None and getattr(model_cfg, key, None) != value:
            setattr(model_cfg, key, value)
            changed.append(f"{key}={value}")
    if struct:
        OmegaConf.set_struct(model_cfg, True)
    if changed:
        logger.info("model architecture from %s: %s", encoder, ", ".join(changed))


def load_vocab(vocab_dir: str):
    """(dictionary with the ``<mask>`` every bio encoder was pretrained with, bpe.json spec)."""
    dictionary = load_dictionary(os.path.join(vocab_dir, DICT_TXT), Dictionary)
    dictionary.add_symbol("<mask>")
    return dictionary, load_bpe_json(os.path.join(vocab_dir, BPE_JSON))


def check_encoder_fits(encoder: str, dictionary, vocab_dir: str) -> None:
    """Refuse an encoder checkpoint that is no encoder, a shard, or trained with another dictionary
    than ``vocab_dir``'s (its recorded one, else its embedding rows and the dict.txt of the data it
    records).
    """
    from ..checkpoints import read_state

    state = read_state(encoder)
    weights = state.get("model") or {}
    embed = weights.get("encoder.sentence_encoder.embed_tokens.weight")
    if embed is None and "discriminator.embed_tokens.weight" in weights:
        raise BioConfigError(
            f"{encoder}: an ELECTRA checkpoint; extract its discriminator first: "
            f"fairseq-bio-extract-encoder --checkpoint {encoder} --out <dir>/discriminator.pt, then fine-tune from "
            "<dir>/discriminator.pt"
        )
    if embed is None:
        raise BioConfigError(
            f"{encoder}: not an encoder checkpoint (no encoder.sentence_encoder.embed_tokens)"
        )
    check_whole(encoder, state)  # a shard's rows are not a vocabulary's
    check_dictionary(
        encoder,
        state,
        dictionary,
        os.path.join(vocab_dir, DICT_TXT),
        rows=len(dictionary),
        verb="was pretrained",
    )


def copy_vocab(vocab_dir: str, save_dir: str) -> None:
    """Put ``dict.txt``, ``bpe.json`` and the BPE files beside the fine-tuned checkpoints (each
    written to a temp name and renamed), so that they are encoder checkpoints in their own right."""
    if not save_dir or os.path.abspath(vocab_dir) == os.path.abspath(save_dir):
        return
    os.makedirs(save_dir, exist_ok=True)
    spec = load_bpe_json(os.path.join(vocab_dir, BPE_JSON))
    files = [os.path.join(vocab_dir, DICT_TXT), os.path.join(vocab_dir, BPE_JSON)]
    files += [spec[key] for key in bpe_file_options(spec)]
    for src in files:
        rel = os.path.relpath(src, vocab_dir)
        if rel.startswith(".."):
            raise BioConfigError(f"{vocab_dir}/{BPE_JSON}: names {src}, outside its directory")
        with atomic_path(os.path.join(save_dir, rel)) as tmp:
            shutil.copyfile(src, tmp)


def layer_scales(model, decay: float):
    """{parameter name: lr scale}: ``decay ** (distance from the top)``, embeddings lowest, the
    heads (and a pre-LN final layer norm) at 1 (BioELECTRA, Tables 6-7)."""
    layers = len(model.encoder.sentence_encoder.layers)
    scales = {}
    for name, _ in model.named_parameters():
        if ".layers." in name:
            depth = int(name.split(".layers.")[1].split(".")[0]) + 1
        elif any(
            part in name for part in ("embed_tokens", "embed_positions", "layernorm_embedding")
        ):
            depth = 0
        else:
            depth = layers + 1
        scales[name] = decay ** (layers + 1 - depth)
    return scales


def optimizer_overrides(param) -> Dict[str, float]:
    """The parameter's own settings for fairseq's composite optimizer
    (``param.optim_overrides["optimizer"]``), created empty when it has none: each per-parameter
    option (lr scale, weight-decay scale) writes its key there, beside the others'."""
    overrides = getattr(param, "optim_overrides", None) or {}
    param.optim_overrides = overrides
    return overrides.setdefault("optimizer", {})


def apply_layer_lr_decay(model, decay: float) -> None:
    """Scale each parameter's learning rate through fairseq's composite optimizer
    (``optim_overrides``)."""
    if not 0.0 < decay <= 1.0:
        raise BioConfigError(f"task.layer_lr_decay={decay}: must lie in (0, 1]")
    scales = layer_scales(model, decay)
    for name, param in model.named_parameters():
        optimizer_overrides(param)["lr_scale"] = scales[name]


def scale_head_lr(model, scale: float) -> List[str]:
    """The task heads' parameters (``classification_heads``: a classifier, a BiLSTM, a CRF's
    transitions, all new and random) learn at ``scale`` x the rate they would have (times any
    ``apply_layer_lr_decay`` scale), through fairseq's composite optimizer (``optim_overrides``).
    Returns their names."""
    if not scale > 0:
        raise BioConfigError(f"task.head_lr_scale={scale}: must be > 0")
    names = []
    for name, param in model.named_parameters():
        if name.startswith("classification_heads.") and param.requires_grad:
            settings = optimizer_overrides(param)
            settings["lr_scale"] = settings.get("lr_scale", 1.0) * scale
            names.append(name)
    return names


def exempt_from_weight_decay(model) -> List[str]:
    """Give every bias and LayerNorm weight no weight decay, as BERT's recipe and HF's ``Trainer``
    do, through fairseq's composite optimizer (``optim_overrides``: ``weight_decay_scale`` 0, kept
    beside any lr scale of ``apply_layer_lr_decay``; ``patches.fairseq_repairs`` makes fairseq apply
    it). A bias is any parameter whose own name starts with ``bias``: ``nn.Linear``'s ``bias`` and
    ``nn.LSTM``'s ``bias_ih_l0`` / ``bias_hh_l0_reverse`` alike. Returns the exempted parameters'
    names."""
    norms = {
        f"{name}.weight"
        for name, module in model.named_modules()
        if isinstance(module, nn.LayerNorm)
    }
    exempt = []
    for name, param in model.named_parameters():
        if name.rpartition(".")[2].startswith("bias") or name in norms:
            optimizer_overrides(param)["weight_decay_scale"] = 0.0
            exempt.append(name)
    return exempt


def per_parameter_options(cfg) -> List[str]:
    """The task options that set per-parameter optimizer overrides (as ``key=value``), which only
    fairseq's ``composite`` optimizer reads."""
    options = []
    if cfg.layer_lr_decay != 1.0:
        options.append(f"task.layer_lr_decay={cfg.layer_lr_decay}")
    if cfg.exempt_from_weight_decay:
        options.append("task.exempt_from_weight_decay=true")
    if cfg.head_lr_scale != 1.0:
        options.append(f"task.head_lr_scale={cfg.head_lr_scale}")
    return options


def check_optimizer_groups(optimizer, options: str) -> None:
    """Refuse to train when the optimizer ignores per-parameter settings (anything but
    ``composite``)."""
    from fairseq.optim.composite import FairseqCompositeOptimizer

    inner = (
        getattr(optimizer, "fp32_optimizer", None)
        or getattr(optimizer, "wrapped_optimizer", None)
        or optimizer
    )
    if not isinstance(inner, FairseqCompositeOptimizer):
        raise BioConfigError(
            f"{options}: needs optimizer=composite (fairseq's per-group settings; the fine-tuning configs use it), "
            f"not {type(inner).__name__}"
        )


def freeze_lm_head(model) -> None:
    """The pretraining head stays in the checkpoint (so a fine-tuned model is still an encoder
    checkpoint) but is not trained: no optimizer state for it and no unused-parameter trouble under
    DDP."""
    lm_head = getattr(model.encoder, "lm_head", None)
    if lm_head is not None:
        for name, param in lm_head.named_parameters():
            if name != "weight":  # tied to the input embeddings, which are trained
                param.requires_grad_(False)


@dataclass
class FineTuningConfig(FairseqDataclass):
    """The options every fine-tuning task has (its own dataclass adds the data and head options)."""

    vocab: Optional[str] = field(
        default=None,
        metadata={
            "help": "directory with the encoder's dict.txt and bpe.json (default: beside the encoder checkpoint, "
            "else the data directory it records)"
        },
    )
    layer_lr_decay: float = field(
        default=1.0,
        metadata={
            "help": "lr x decay^(distance from the top layer), embeddings lowest (BioELECTRA: 0.8); needs "
            "optimizer=composite"
        },
    )
    head_lr_scale: float = field(
        default=1.0,
        metadata={
            "help": "lr x this for the task's head (new and random: a BiLSTM or a CRF learns little at an encoder's "
            "rate in a short run); needs optimizer=composite"
        },
    )
    head_hidden_layers: int = field(
        default=0,
        metadata={
            "help": "fully connected layers (linear -> ReLU -> dropout) between the head's input and its output "
            "layer (BioMegatron Tables 1-2: num-fc-layers, which counts the output layer too); 0: none"
        },
    )
    head_hidden_size: int = field(
        default=0,
        metadata={
            "help": "width of task.head_hidden_layers (BioMegatron's fc-hidden-size); 0: the encoder's"
        },
    )
    exempt_from_weight_decay: bool = field(
        default=False,
        metadata={
            "help": "no weight decay on biases and LayerNorm weights (BERT's recipe, HF Trainer's default; the "
            "fine-tuning recipes set it); needs optimizer=composite"
        },
    )
    cache_dir: Optional[str] = field(
        default=None,
        metadata={
            "help": "where encoded texts are cached (default: <checkpoint.save_dir>/encoded)"
        },
    )
    max_positions: Optional[int] = field(
        default=None,
        metadata={"help": "tokens per window, specials included (default: the model's positions)"},
    )
    restore_file: str = II("checkpoint.restore_file")
    finetune_from_model: Optional[str] = II("checkpoint.finetune_from_model")
    save_dir: str = II("checkpoint.save_dir")
    max_tokens: Optional[int] = II("dataset.max_tokens")
    seed: int = II("common.seed")


class FineTuningTask(FairseqTask):
    """A head on an encoder checkpoint: the encoder's vocabulary and BPE, the checks that the
    checkpoint fits them, the head added by ``register_head``, layer-wise lr decay, windows as long
    as the model's positions, and no example ever dropped for its length. Subclasses read their
    files and build their datasets.
    """

    task_name = "fine-tuning"  # the registered name, for messages

    def __init__(self, cfg: FineTuningConfig, dictionary, bpe_spec, vocab_dir: str):
        super().__init__(cfg)
        self.dictionary = dictionary
        self.bpe_spec = bpe_spec
        self.vocab_dir = vocab_dir
        self.labels: List[str] = []
        self._word_encoder = None
        self.window: Optional[int] = (
            None  # tokens per window: set by build_model from the model's positions
        )
        # how a pair becomes a row: set by build_model from the model's token types
        self.pair_format = PairFormat()
        self._dictionary_record = None  # get_checkpoint_dict's, made once
        if cfg.head_hidden_layers < 0 or cfg.head_hidden_size < 0:
            raise BioConfigError(
                f"task.head_hidden_layers={cfg.head_hidden_layers}, task.head_hidden_size={cfg.head_hidden_size}: "
                "must be >= 0"
            )
        if cfg.head_hidden_size and not cfg.head_hidden_layers:
            raise BioConfigError(
                f"task.head_hidden_size={cfg.head_hidden_size} sizes hidden layers: set task.head_hidden_layers >= 1 too"
            )

    def set_labels(self, labels: Sequence[str]) -> None:
        self.labels = list(labels)
        self.label_ids = {label: i for i, label in enumerate(self.labels)}

    @classmethod
    def encoder_vocab(cls, cfg: FineTuningConfig, from_checkpoint: bool):
        """(dictionary, bpe spec, vocabulary dir) of the encoder the run starts from (or of the
        fine-tuned run); a training run's ``checkpoint.save_dir`` is checked first (it must not hold
        that encoder).
        """
        if not from_checkpoint:

            # before the task writes its encoded cache or vocabulary there; the reset flags, which a
            # task does not see, are checked when fairseq loads the checkpoint
            check_start_kept(cfg, cls.task_name)
        encoder = start_checkpoint_path(cfg.restore_file, cfg.finetune_from_model)
        vocab = cfg.vocab
        if not vocab and from_checkpoint and has_vocab(cfg.save_dir):
            vocab = cfg.save_dir  # a fine-tuned run copies its vocabulary beside its checkpoints
        vocab_dir = resolve_vocab(vocab, encoder)
        dictionary, bpe_spec = load_vocab(vocab_dir)
        logger.info(
            "dictionary: %d types, bpe %s, from %s", len(dictionary), bpe_spec["_name"], vocab_dir
        )
        return dictionary, bpe_spec, vocab_dir

    @property
    def source_dictionary(self):
        return self.dictionary

    @property
    def target_dictionary(self):
        return self.dictionary

    @property
    def word_encoder(self) -> WordEncoder:
        if self._word_encoder is None:
            self._word_encoder = WordEncoder(self.dictionary, self.bpe_spec)
        return self._word_encoder

    def get_checkpoint_dict(self):
        """What fairseq adds to every checkpoint's ``extra_state``: the record of the dictionary,
        which a later run or command compares with the one it is given (``checkpoint_fit``)."""

        if self._dictionary_record is None:  # the dictionary is fixed once the task is set up
            self._dictionary_record = dictionary_record(
                self.dictionary, os.path.join(self.vocab_dir, DICT_TXT)
            )
        return {RECORD: self._dictionary_record}

    def register_head(self, model) -> None:
        """Add the task's head to ``model`` (a ``bio_roberta``) under ``self.cfg.head_name``."""
        raise NotImplementedError

    def hidden_layer_options(self, model) -> Dict[str, int]:
        """The head's ``hidden_layers`` and ``hidden_size`` (the encoder's width unless given)."""
        layers = self.cfg.head_hidden_layers
        size = (self.cfg.head_hidden_size or model.args.encoder_embed_dim) if layers else 0
        return {"hidden_layers": layers, "hidden_size": size}

    def build_model(self, cfg, from_checkpoint=False):
        if not self.labels:
            raise BioConfigError(
                f"{self.task_name}: no labels (from the train file, task.labels or a checkpoint)"
            )
        encoder = start_checkpoint_path(self.cfg.restore_file, self.cfg.finetune_from_model)
        if not from_checkpoint and encoder:
            check_encoder_fits(encoder, self.dictionary, self.vocab_dir)
            adopt_encoder_architecture(cfg, encoder)
        model = super().build_model(cfg, from_checkpoint)
        self.register_head(model)
        freeze_lm_head(model)
        if self.cfg.layer_lr_decay != 1.0:
            apply_layer_lr_decay(model, self.cfg.layer_lr_decay)
        if self.cfg.exempt_from_weight_decay:
            exempt_from_weight_decay(model)
        if self.cfg.head_lr_scale != 1.0:
            scale_head_lr(model, self.cfg.head_lr_scale)
        self.window = min(
            self.cfg.max_positions or model.args.max_positions, model.args.max_positions
        )
        self.pair_format = PairFormat.of(model.args)
        if not from_checkpoint:
            copy_vocab(self.vocab_dir, self.cfg.save_dir)
        return model

    def check_window(self) -> None:
        if self.window is None:
            raise BioConfigError(
                f"{self.task_name}: build the model before the datasets (windows need its positions)"
            )

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        options = per_parameter_options(self.cfg) if update_num == 0 else []
        if options:
            check_optimizer_groups(optimizer, ", ".join(options))
        return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)

    @property
    def cache_dir(self) -> Optional[str]:
        return self.cfg.cache_dir or (
            os.path.join(self.cfg.save_dir, "encoded") if self.cfg.save_dir else None
        )

    def vocab_fingerprint(self):
        """(dict.txt bytes, BPE spec without directories): what an encoding depends on besides the
        text."""
        with open(os.path.join(self.vocab_dir, DICT_TXT), "rb") as f:
            vocab = f.read()
        return vocab, {
            k: (v if k == "_name" else os.path.basename(str(v))) for k, v in self.bpe_spec.items()
        }

    def filter_indices_by_size(
        self, indices, dataset, max_positions=None, ignore_invalid_inputs=False
    ):
        return indices  # long inputs are windowed, never dropped

    def max_positions(self):
        return None

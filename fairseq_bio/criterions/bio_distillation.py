"""bio_distillation: task-agnostic knowledge distillation of a ``bio_roberta`` student from a frozen
``bio_roberta`` teacher on the masked-LM task (bio-lm sec. 7; DistilBioBERT, TinyBioBERT and
CompactBioBERT, Rohanian et al. 2022 eq. 1-11), as weighted loss terms from
``fairseq_bio.modules.distillation``."""

import logging
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
from fairseq import metrics, utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from omegaconf import II, MISSING
from torch import nn

from ..errors import BioConfigError
from ..modules import distillation as losses
from ..modules.masking import flat_positions, take_positions

logger = logging.getLogger(__name__)

DICT_TXT = "dict.txt"
# Logged per term (unweighted, natural log); "loss" is their weighted sum, the quantity optimised.
TERMS = ("mlm_loss", "kl_loss", "cos_loss", "embed_loss", "hidden_loss", "attn_loss")


@dataclass
class BioDistillationConfig(FairseqDataclass):
    teacher: str = field(
        default=MISSING,
        metadata={
            "help": "the frozen teacher: a bio_roberta checkpoint (its dict.txt beside it or in its task.data)"
        },
    )
    teacher_vocab: Optional[str] = field(
        default=None,
        metadata={
            "help": "directory with the teacher's dict.txt, when it is not found from the teacher"
        },
    )
    mlm_weight: float = field(
        default=5.0, metadata={"help": "weight of the student's MLM cross-entropy (eq. 1)"}
    )
    kl_weight: float = field(
        default=2.0,
        metadata={"help": "weight of KL(teacher || student) on the MLM outputs, times T^2 (eq. 2)"},
    )
    temperature: float = field(
        default=2.0, metadata={"help": "T: softmax temperature of the KL term"}
    )
    kl_positions: ChoiceEnum(["masked", "all"]) = field(
        default="masked",
        metadata={"help": "KL over the masked positions (DistilBERT) or every non-pad token"},
    )
    cos_weight: float = field(
        default=1.0,
        metadata={
            "help": "weight of 1 - cos between last hidden states over non-pad tokens (eq. 3; a learned "
            "projection when the widths differ, bio-lm sec. 7)"
        },
    )
    embed_weight: float = field(
        default=0.0,
        metadata={"help": "weight of the embedding-layer MSE (TinyBERT eq. 7, lambda_0)"},
    )
    embed_projection: ChoiceEnum(["shared", "own"]) = field(
        default="shared",
        metadata={
            "help": "when the widths differ, the embedding term's projection: shared: the layer terms' W_h (TinyBERT's "
            "and TinyBioBERT's code, one fit_dense); own: a W_e of its own (seed 004 eq. 7)"
        },
    )
    hidden_weight: float = field(
        default=0.0,
        metadata={
            "help": "weight of the per-layer hidden-state term, summed over student layers (eq. 6 / 10)"
        },
    )
    hidden_loss: ChoiceEnum(["mse", "cosine"]) = field(
        default="mse",
        metadata={
            "help": "per-layer hidden-state term: MSE (TinyBERT) or 1 - cos (CompactBioBERT)"
        },
    )
    attn_weight: float = field(
        default=0.0,
        metadata={
            "help": "weight of the per-head attention-map term (maps before attention dropout), summed over student "
            "layers (eq. 6 / 10)"
        },
    )
    attn_loss: ChoiceEnum(["mse", "kl"]) = field(
        default="mse",
        metadata={
            "help": "attention term: MSE (TinyBERT) or KL(teacher || student) (CompactBioBERT)"
        },
    )
    layer_map: str = field(
        default="",
        metadata={
            "help": "teacher layers (1-based, comma-separated) matched to student layers 1..M; empty: uniform "
            "g(l) = l * N / M"
        },
    )
    student_layers: Optional[int] = II("model.encoder_layers")
    student_embed_dim: Optional[int] = II("model.encoder_embed_dim")
    student_arch: Optional[str] = II("model._name")


@register_criterion("bio_distillation", dataclass=BioDistillationConfig)
class BioDistillationCriterion(FairseqCriterion):
    """Weighted sum of per-batch mean loss terms (``sample_size`` is 1 per batch, like
    ``bio_electra``); a term of weight 0 is not computed, and the teacher's attention maps or hidden
    states are only asked for when a term needs them.

    The teacher is loaded here, once, frozen (eval mode, no gradients) and moved to the student's
    device and dtype at its first use. It is deliberately not a submodule: it is neither in this
    criterion's ``state_dict`` nor in ``parameters()``, so fairseq never saves it or hands it to the
    optimizer, and it is loaded again from ``criterion.teacher`` when a run resumes. The learned
    projections (when widths differ) are this criterion's parameters: fairseq trains them with the
    student and saves them under the checkpoint's ``criterion`` key, so the checkpoint's ``model``
    is the plain student.
    """

    def __init__(self, cfg: BioDistillationConfig, task):
        super().__init__(task)
        self.cfg = cfg
        self.weights = {
            "mlm_loss": cfg.mlm_weight,
            "kl_loss": cfg.kl_weight,
            "cos_loss": cfg.cos_weight,
            "embed_loss": cfg.embed_weight,
            "hidden_loss": cfg.hidden_weight,
            "attn_loss": cfg.attn_weight,
        }
        for term, weight in self.weights.items():
            if weight < 0:
                raise BioConfigError(
                    f"criterion.{term.replace('_loss', '_weight')}={weight}: must be >= 0"
                )
        if not any(self.weights.values()):
            raise BioConfigError("criterion: every weight is 0, nothing to train")
        if cfg.temperature <= 0:
            raise BioConfigError(f"criterion.temperature={cfg.temperature}: must be > 0")
        self.on = {term for term, weight in self.weights.items() if weight > 0}

        teacher, teacher_dict_file = load_teacher(cfg.teacher, cfg.teacher_vocab)
        check_same_dictionary(
            teacher.encoder.dictionary,
            teacher_dict_file,
            task.source_dictionary,
            task_dict_file(task),
        )
        object.__setattr__(
            self, "_teacher", teacher
        )  # not a submodule: never saved, never optimised
        encoder = teacher.encoder.sentence_encoder
        self.teacher_layers = len(encoder.layers)
        self.teacher_dim = encoder.embed_tokens.embedding_dim

        self.student_layers, self.student_dim = student_sizes(cfg)
        self.layer_map: List[int] = []
        if self.on & {"hidden_loss", "attn_loss"}:
            try:
                self.layer_map = losses.parse_layer_map(
                    cfg.layer_map, self.student_layers, self.teacher_layers
                )
            except ValueError as e:
                raise BioConfigError(f"criterion.layer_map: {e}") from None
        # Learned projections student width -> teacher width: bio-lm sec. 7's for the last hidden
        # states; TinyBERT's W_h for the layer terms, which the embedding term shares (TinyBERT's
        # and TinyBioBERT's code) or has its own W_e (seed 004 eq. 7:
        # criterion.embed_projection=own).
        project = self.student_dim != self.teacher_dim
        self.last_projection = (
            nn.Linear(self.student_dim, self.teacher_dim)
            if project and "cos_loss" in self.on
            else None
        )
        own_embed = cfg.embed_projection == "own" and "embed_loss" in self.on
        layers = project and bool(
            self.on & ({"hidden_loss"} if own_embed else {"embed_loss", "hidden_loss"})
        )
        self.layer_projection = nn.Linear(self.student_dim, self.teacher_dim) if layers else None
        self.embed_projection = (
            nn.Linear(self.student_dim, self.teacher_dim) if project and own_embed else None
        )
        logger.info(
            "distilling from %s (%d x %d) into a %d x %d student: %s%s",
            cfg.teacher,
            self.teacher_layers,
            self.teacher_dim,
            self.student_layers,
            self.student_dim,
            ", ".join(f"{term[:-5]} x {self.weights[term]}" for term in TERMS if term in self.on),
            f", layers {self.layer_map}" if self.layer_map else "",
        )

    @property
    def teacher(self):
        """The frozen teacher (a ``BioRobertaModel``)."""
        return self._teacher

    @property
    def reads(self) -> Dict[str, str]:
        """The files the run reads besides its data ({option: path}), which its
        ``checkpoint.save_dir`` must not hold under a name fairseq writes there (checked before
        training: ``checkpoint_fit.check_run_start``).
        """
        return {"criterion.teacher": self.cfg.teacher}

    def load_state_dict(self, state_dict, strict=True):
        # A student initialised from an encoder checkpoint (fairseq-bio-init-student, a pretrained
        # model) has no criterion state: the projections then start from their initialisation.
        if not state_dict:
            logger.info(
                "no distillation projections in the checkpoint: they start from their initialisation"
            )
            return
        if self.embed_projection is not None and not any(
            k.startswith("embed_projection.") for k in state_dict
        ):
            # A run that shared W_h for the embedding term, resumed with a W_e of its own: W_e
            # starts as W_h was.
            state_dict = dict(state_dict)
            for name in ("weight", "bias"):
                if f"layer_projection.{name}" in state_dict:
                    state_dict[f"embed_projection.{name}"] = state_dict[
                        f"layer_projection.{name}"
                    ].clone()
            logger.info(
                "the checkpoint shares W_h with the embedding term: embed_projection starts as a copy of it"
            )
        return super().load_state_dict(state_dict, strict)

    def _teacher_like(self, model):
        """The teacher on the student's device and in its floating-point dtype."""
        teacher = self._teacher
        ref = next(p for p in model.parameters() if p.is_floating_point())
        mine = next(teacher.parameters())
        if mine.device != ref.device or mine.dtype != ref.dtype:
            teacher.to(device=ref.device, dtype=ref.dtype)
        return teacher

    def _check_student(self, encoder) -> None:
        layers, dim = len(encoder.layers), encoder.embed_tokens.embedding_dim
        if (layers, dim) != (self.student_layers, self.student_dim):
            raise BioConfigError(
                f"criterion: built for a {self.student_layers} x {self.student_dim} student (model.encoder_layers, "
                f"model.encoder_embed_dim) but the model is {layers} x {dim}"
            )

    def forward(self, model, sample, reduce=True):
        tokens = sample["net_input"]["src_tokens"]
        target = sample["target"]
        nonpad = tokens.ne(self.padding_idx)
        self._check_student(model.encoder.sentence_encoder)
        states = bool(self.on & {"embed_loss", "hidden_loss"})
        attn = "attn_loss" in self.on
        kl_all = "kl_loss" in self.on and self.cfg.kl_positions == "all"
        # the predicted positions as indices: one host read (their number sizes the heads), not one
        # per use
        positions = flat_positions(nonpad if kl_all else target.ne(self.padding_idx))

        features, extra = model(
            tokens, features_only=True, return_all_hiddens=states, return_attn=attn
        )
        logits = None
        if self.on & {"mlm_loss", "kl_loss"}:
            logits = model.encoder.output_layer(take_positions(features, positions))  # N x V
        teacher_out = None
        if self.on - {"mlm_loss"}:
            teacher = self._teacher_like(model)
            with torch.no_grad():
                t_features, t_extra = teacher(
                    tokens, features_only=True, return_all_hiddens=states, return_attn=attn
                )
                t_logits = None
                if "kl_loss" in self.on:
                    t_logits = teacher.encoder.output_layer(take_positions(t_features, positions))
            teacher_out = (t_features, t_extra, t_logits)

        terms: Dict[str, torch.Tensor] = {}
        if "mlm_loss" in self.on:
            terms["mlm_loss"] = losses.mlm_loss(
                logits, take_positions(target, positions), self.padding_idx
            )
        if teacher_out is not None:
            t_features, t_extra, t_logits = teacher_out
            if "kl_loss" in self.on:
                terms["kl_loss"] = losses.kl_loss(logits, t_logits, self.cfg.temperature)
            if "cos_loss" in self.on:
                terms["cos_loss"] = losses.cosine_loss(
                    features, t_features, nonpad, self.last_projection
                )
            if states:
                s_states = [
                    s.transpose(0, 1) for s in extra["inner_states"]
                ]  # T x B x C -> B x T x C
                t_states = [s.transpose(0, 1) for s in t_extra["inner_states"]]
                if "embed_loss" in self.on:
                    projection = (
                        self.embed_projection
                        if self.embed_projection is not None
                        else self.layer_projection
                    )
                    terms["embed_loss"] = losses.hidden_mse(
                        s_states[0], t_states[0], nonpad, projection
                    )
                if "hidden_loss" in self.on:
                    per_layer = (
                        losses.hidden_mse if self.cfg.hidden_loss == "mse" else losses.cosine_loss
                    )
                    terms["hidden_loss"] = sum(
                        per_layer(s_states[l], t_states[g], nonpad, self.layer_projection)
                        for l, g in enumerate(self.layer_map, start=1)
                    )
            if attn:
                per_head = (
                    losses.attention_mse if self.cfg.attn_loss == "mse" else losses.attention_kl
                )
                terms["attn_loss"] = sum(
                    per_head(extra["attn"][l - 1], t_extra["attn"][g - 1], nonpad)
                    for l, g in enumerate(self.layer_map, start=1)
                )
        loss = sum(self.weights[term] * value for term, value in terms.items())

        logging_output = {
            "loss": loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": tokens.size(0),
            "sample_size": 1,
            **{term: value.data for term, value in terms.items()},
        }
        return loss, 1, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        batches = sum(log.get("sample_size", 0) for log in logging_outputs)
        for key in ("loss",) + TERMS:
            if any(key in log for log in logging_outputs):
                total = sum(
                    log.get(key, 0) for log in logging_outputs
                )  # tensors stay on their device
                metrics.log_scalar(key, total / max(batches, 1), batches, round=4)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True


def student_sizes(cfg: BioDistillationConfig):
    """(layers, width) of the student the config describes (unset sizes from the architecture, as
    the model does)."""
    from argparse import Namespace

    from ..models.bio_roberta import apply_architecture

    sizes = Namespace(encoder_layers=cfg.student_layers, encoder_embed_dim=cfg.student_embed_dim)
    apply_architecture(sizes, cfg.student_arch)
    return sizes.encoder_layers, sizes.encoder_embed_dim


def task_dict_file(task) -> str:
    data = getattr(getattr(task, "cfg", None), "data", None)
    return os.path.join(utils.split_paths(data)[0], DICT_TXT) if data else "the task's dictionary"


def _teacher_dict_file(path: str, state: dict, explicit: Optional[str]) -> str:
    """The teacher's dict.txt: in ``explicit``, beside the checkpoint, or in the data/vocab
    directory it records."""
    if explicit:
        candidates = [explicit]
    else:
        task = (state.get("cfg") or {}).get("task") or {}
        candidates = [os.path.dirname(os.path.abspath(path))]
        candidates += [task["vocab"]] if task.get("vocab") else []
        candidates += [utils.split_paths(task["data"])[0]] if task.get("data") else []
    for directory in candidates:
        if os.path.isfile(os.path.join(directory, DICT_TXT)):
            return os.path.join(directory, DICT_TXT)
    raise BioConfigError(
        f"criterion.teacher={path}: no {DICT_TXT} in {', '.join(candidates)}; give criterion.teacher_vocab=<dir with "
        "the teacher's dict.txt>"
    )


def load_teacher(path: str, teacher_vocab: Optional[str] = None):
    """(frozen teacher in eval mode on the CPU, its dict.txt) from a bio_roberta checkpoint, loaded
    with ``weights_only=True`` through ``fairseq_bio.checkpoints``."""
    from fairseq.data import Dictionary
    from omegaconf import OmegaConf

    from ..checkpoint_fit import check_fits
    from ..data.dictionary import load_dictionary
    from ..models.bio_roberta import BioRobertaModel, read_bio_roberta_checkpoint

    state, weights, model_cfg = read_bio_roberta_checkpoint(path, f"criterion.teacher={path}")
    dict_file = _teacher_dict_file(path, state, teacher_vocab)
    dictionary = load_dictionary(dict_file, Dictionary)
    dictionary.add_symbol("<mask>")  # as the masked-LM task the teacher was trained with
    # its recorded dictionary, else its embedding rows; a shard is refused, not blamed on the
    # dictionary
    check_fits(f"criterion.teacher={path}", state, dictionary, dict_file, rows=len(dictionary))
    model_cfg = OmegaConf.create(dict(model_cfg))
    teacher = BioRobertaModel.build_model(model_cfg, _Vocabulary(dictionary))
    teacher.load_state_dict(weights, strict=True, model_cfg=model_cfg)
    teacher.eval()
    teacher.requires_grad_(False)
    return teacher, dict_file


class _Vocabulary:
    """What a model's build_model reads from a task."""

    def __init__(self, dictionary):
        self.source_dictionary = self.target_dictionary = dictionary


def check_same_dictionary(teacher_dict, teacher_file: str, student_dict, student_file: str) -> None:
    """Refuse dictionaries that differ, naming both and the first differing symbol."""
    from ..checkpoint_fit import first_difference

    a, b = teacher_dict.symbols, student_dict.symbols
    if a == b:
        return
    first = first_difference(a, b, "the teacher's", "the task's")
    raise BioConfigError(
        f"teacher and student dictionaries differ: {teacher_file} (teacher) vs {student_file} (task): {first}"
    )

"""bio_extractive_qa: extractive question answering (BioASQ factoid in SQuAD v1.1 form, as BioBERT
distributes it; SQuAD itself) fine-tuning any encoder checkpoint:
``<s> question </s></s> context window </s>`` rows (BERT's ``<s> question </s> context window </s>``
with segment ids for a model with token types), a start/end span head on every context piece,
contexts windowed with a doc stride (``data/qa_dataset.py`` says how, and what the windows that do
not hold the answer learn), the SQuAD JSON read directly and encoded with the encoder's BPE
(cached).

Sequential fine-tuning (BioMegatron's SQuAD -> BioASQ): a run started from a QA checkpoint
(``checkpoint.restore_file`` or ``checkpoint.finetune_from_model``) takes its span head as well when
``task.restore_head`` says so (default: when the checkpoint has a span head of the same name and
shape); the log says which happened. SQuAD v2.0 (``task.version_2_with_negative``): unanswerable
questions are read and trained towards ``<s>`` in every window, and answered "" when the null score
beats the best span by more than ``task.null_score_diff_threshold``."""

import logging
import os
from dataclasses import dataclass, field
from typing import Optional

from fairseq.tasks import register_task
from omegaconf import MISSING

from ..checkpoint_fit import start_checkpoint_path
from ..checkpoints import read_state
from ..data.qa_dataset import CACHE_VERSION, EncodedQA, ExtractiveQADataset, OffsetEncoder
from ..data.squad import SquadFile, read_squad
from ..data.tagging_dataset import fingerprint
from ..errors import BioConfigError, BioFileNotFoundError
from ..modules.tagging_head import head_options
from . import fine_tuning

logger = logging.getLogger(__name__)

# The span head's two outputs per piece, in model order (saved in the task state like other tasks'
# labels).
SPAN_OUTPUTS = ("start", "end")
# a finetune_from_model run resumes from it when it exists (fairseq's rule)
LAST_CHECKPOINT = "checkpoint_last.pt"


def checkpoint_head(path: str, name: str) -> Optional[dict]:
    """The shape (``TokenClassificationHead.options``) of the token head ``name`` in a checkpoint,
    or None; read without the tensors' bytes."""
    state = read_state(path) or {}
    prefix = f"classification_heads.{name}."
    params = {k: v for k, v in (state.get("model") or {}).items() if k.startswith(prefix)}
    if (
        prefix + "out_proj.weight" not in params or prefix + "dense.weight" in params
    ):  # none, or a sentence head
        return None
    return head_options(params, prefix)


@dataclass
class BioExtractiveQAConfig(fine_tuning.FineTuningConfig):
    data: str = field(
        default=MISSING, metadata={"help": "directory with the SQuAD-format split files"}
    )
    train_file: str = field(
        default="train.json", metadata={"help": "file of the train split, in task.data"}
    )
    valid_file: str = field(
        default="dev.json", metadata={"help": "file of the valid split, in task.data"}
    )
    test_file: str = field(
        default="test.json", metadata={"help": "file of the test split; other splits: <split>.json"}
    )
    doc_stride: int = field(
        default=128,
        metadata={
            "help": "context pieces between the starts of consecutive windows (BERT's run_squad)"
        },
    )
    max_query_length: int = field(
        default=64, metadata={"help": "question pieces kept (the rest are cut)"}
    )
    max_answer_length: int = field(
        default=30, metadata={"help": "longest predicted answer, in pieces"}
    )
    n_best: int = field(
        default=20,
        metadata={
            "help": "start and end candidates per window, and answers the probabilities cover"
        },
    )
    top_answers: int = field(
        default=5, metadata={"help": "ranked answers per question (BioASQ factoid: 5)"}
    )
    head_dropout: float = field(
        default=0.0,
        metadata={
            "help": "dropout before the span layer and after hidden layers (BERT's QA: none)"
        },
    )
    head_name: str = field(
        default="bio_qa", metadata={"help": "name of the span head in classification_heads"}
    )
    data_source: str = field(
        default="",
        metadata={"help": "where to get the data, said when a split file is missing (gated sets)"},
    )
    restore_head: Optional[bool] = field(
        default=None,
        metadata={
            "help": "take the span head of the checkpoint the run starts from (sequential QA fine-tuning, e.g. SQuAD "
            "-> BioASQ): true (the checkpoint must have one of the same name and shape), false (a new, randomly "
            "initialised head), null (restored when the checkpoint has a matching one, else new); logged"
        },
    )
    version_2_with_negative: bool = field(
        default=False,
        metadata={
            "help": "SQuAD v2.0: read unanswerable questions (is_impossible, empty answers); predict no answer"
        },
    )
    null_score_diff_threshold: float = field(
        default=0.0,
        metadata={
            "help": "SQuAD v2.0: answer \"\" when the null score minus the best span's score exceeds this (BERT's and "
            "HF's run_qa default 0; fairseq-bio-predict prints the best one on a dev file)"
        },
    )


@register_task("bio_extractive_qa", dataclass=BioExtractiveQAConfig)
class BioExtractiveQATask(fine_tuning.FineTuningTask):
    """Span extraction fine-tuning, scored per question (SQuAD EM/F1, BioASQ factoid strict/lenient
    accuracy and MRR over all the question's windows) by the criterion."""

    cfg: BioExtractiveQAConfig
    task_name = "bio_extractive_qa"

    def __init__(self, cfg: BioExtractiveQAConfig, dictionary, bpe_spec, vocab_dir: str):
        super().__init__(cfg, dictionary, bpe_spec, vocab_dir)
        for name in (
            "doc_stride",
            "max_query_length",
            "max_answer_length",
            "n_best",
            "top_answers",
        ):
            if getattr(cfg, name) < 1:
                raise BioConfigError(f"task.{name}={getattr(cfg, name)}: must be at least 1")
        self.set_labels(SPAN_OUTPUTS)
        self._offset_encoder = None

    def state_dict(self):
        """Saved in every checkpoint (``task_state``): what the head's outputs are."""
        return {"labels": list(self.labels), "kind": "extractive_qa"}

    def load_state_dict(self, state_dict):
        if state_dict.get("kind", "extractive_qa") != "extractive_qa":
            raise BioConfigError(
                f"the checkpoint's head is {state_dict['kind']}, not an extractive-QA one"
            )

    @classmethod
    def setup_task(cls, cfg: BioExtractiveQAConfig, from_checkpoint: bool = False, **kwargs):
        dictionary, bpe_spec, vocab_dir = cls.encoder_vocab(cfg, from_checkpoint)
        task = cls(cfg, dictionary, bpe_spec, vocab_dir)
        train = task.split_file("train")
        if not from_checkpoint and not os.path.exists(train):
            raise task._missing(train, "train")  # before a model is built for nothing
        return task

    def register_head(self, model) -> None:
        # A token head with two outputs (start, end) per position: HF's qa_outputs Linear(d, 2).
        model.register_tagging_head(
            self.cfg.head_name,
            len(SPAN_OUTPUTS),
            dropout=self.cfg.head_dropout,
            **self.hidden_layer_options(model),
        )

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        start = start_checkpoint_path(self.cfg.restore_file, self.cfg.finetune_from_model)
        resuming = self.cfg.finetune_from_model and os.path.exists(
            os.path.join(self.cfg.save_dir, LAST_CHECKPOINT)
        )
        if (
            not from_checkpoint and start and not resuming
        ):  # the first load is the checkpoint the run starts from
            self.choose_head(model, start)
        return model

    def choose_head(self, model, checkpoint: str) -> None:
        """Whether the run starts with the span head of ``checkpoint`` (``task.restore_head``),
        logged; a head it does not take is initialised when the checkpoint is loaded
        (``reinitialise_on_load``)."""
        setting = {None: "null", True: "true", False: "false"}[self.cfg.restore_head]
        name, option = self.cfg.head_name, f"task.restore_head={setting}"
        found = checkpoint_head(checkpoint, name)
        expected = model.classification_heads[name].options()
        fits = found == expected
        if self.cfg.restore_head and not fits:
            has = f"a span head {name} of {found}" if found else f"no span head {name}"
            raise BioConfigError(f"{option}: {checkpoint} has {has}, this run's is {expected}")
        if fits and self.cfg.restore_head is not False:
            logger.info("span head %s: restored from %s (%s)", name, checkpoint, option)
            return
        why = (
            "not asked for"
            if fits
            else (f"its {name} is {found}, this run's {expected}" if found else f"no {name}")
        )
        logger.info(
            "span head %s: initialised, not restored from %s (%s: %s)",
            name,
            checkpoint,
            option,
            why,
        )
        if found:
            model.reinitialise_on_load(
                name
            )  # a same-shape head would be kept; a different one is dropped anyway

    @property
    def offset_encoder(self) -> OffsetEncoder:
        if self._offset_encoder is None:
            self._offset_encoder = OffsetEncoder(self.word_encoder)
        return self._offset_encoder

    # ---- reading ----------------------------------------------------------------------------------------------

    def split_file(self, split: str) -> str:
        names = {
            "train": self.cfg.train_file,
            "valid": self.cfg.valid_file,
            "test": self.cfg.test_file,
        }
        return os.path.join(self.cfg.data, names.get(split) or f"{split}.json")

    def _missing(self, path: str, split: str) -> BioFileNotFoundError:
        hint = f"; {self.cfg.data_source}" if self.cfg.data_source else ""
        return BioFileNotFoundError(
            f"{path}: not found (split {split}; task.data={self.cfg.data}){hint}"
        )

    def read_file(self, path: str, require_answers=True) -> SquadFile:
        """The questions and contexts of a SQuAD file (``require_answers``: as ``read_squad``;
        unanswerable questions with ``task.version_2_with_negative``)."""
        if not os.path.exists(path):
            raise BioFileNotFoundError(f"{path}: not found")
        return read_squad(
            path, require_answers, allow_unanswerable=self.cfg.version_2_with_negative
        )

    def encode(self, squad: SquadFile) -> EncodedQA:
        """Questions and contexts encoded with the encoder's BPE (piece character spans included),
        through the cache."""
        vocab, spec = self.vocab_fingerprint()
        texts = [[ex.question for ex in squad.examples], squad.contexts]
        key = fingerprint(vocab, spec, CACHE_VERSION, self.cfg.max_query_length, texts)
        return EncodedQA.cached(
            self.offset_encoder, squad, self.cfg.max_query_length, self.cache_dir, key
        )

    def build_dataset(self, squad: SquadFile, shuffle: bool = False) -> ExtractiveQADataset:
        self.check_window()
        stride = self.cfg.doc_stride
        return ExtractiveQADataset(
            squad,
            self.encode(squad),
            self.dictionary,
            self.window,
            stride,
            shuffle=shuffle,
            seed=self.cfg.seed,
            pair_format=self.pair_format,
        )

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        path = self.split_file(split)
        if not os.path.exists(path):
            raise self._missing(path, split)
        dataset = self.build_dataset(self.read_file(path), shuffle=split == "train")
        dataset.max_tokens = self.cfg.max_tokens
        windows = sum(dataset.windows(i) for i in range(len(dataset)))
        logger.info(
            "%s (%s): %d questions (%d unanswerable) on %d contexts, %d windows of <= %d tokens (doc stride %d); %d "
            "first answers begin or end inside a piece",
            path,
            split,
            len(dataset),
            dataset.squad.unanswerable,
            len(dataset.squad.contexts),
            windows,
            self.window,
            self.cfg.doc_stride,
            dataset.unaligned_answers(),
        )
        short = sum(
            dataset.context_room(len(dataset.encoded.question(i))) < self.cfg.doc_stride
            for i in range(len(dataset))
        )
        if short:
            logger.warning(
                "%s: %d questions leave fewer than task.doc_stride=%d context pieces in a row of %d tokens: their "
                "windows follow each other without overlap (lower task.doc_stride for overlap)",
                path,
                short,
                self.cfg.doc_stride,
                self.window,
            )
        self.datasets[split] = dataset
        return dataset

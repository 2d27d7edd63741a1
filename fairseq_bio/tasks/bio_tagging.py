"""bio_tagging: word-level sequence labelling (NER, PICO) on the CoNLL files users have, fine-tuning
any encoder checkpoint; words are encoded with the encoder's own BPE (cached), long sentences
windowed, never cut."""

import logging
import os
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

import numpy as np
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task
from omegaconf import MISSING

from ..data.conll import Sentence, TaggingDataError, merge_types, parse_type_merge, read_conll
from ..data.tag_schemes import convert_tags, label_set, normalize_scheme, to_bio
from ..data.tagging_dataset import EncodedWords, TaggingDataset, fingerprint
from ..errors import BioConfigError, BioFileNotFoundError
from . import fine_tuning

logger = logging.getLogger(__name__)

TAG_SCHEME_CHOICES = ChoiceEnum(["bio", "iob2", "io", "bioes", "bioul"])
UNKNOWN_TAG_CHOICES = ChoiceEnum(["error", "o"])


@dataclass
class BioTaggingConfig(fine_tuning.FineTuningConfig):
    data: str = field(
        default=MISSING, metadata={"help": "directory with the CoNLL files (token<TAB>tag)"}
    )
    train_file: str = field(
        default="train.tsv", metadata={"help": "file of the train split, in task.data"}
    )
    valid_file: str = field(
        default="devel.tsv", metadata={"help": "file of the valid split, in task.data"}
    )
    test_file: str = field(
        default="test.tsv", metadata={"help": "file of the test split; other splits: <split>.tsv"}
    )
    tag_scheme: TAG_SCHEME_CHOICES = field(
        default="bio",
        metadata={
            "help": "scheme the model learns (files in any scheme are converted): bio, io or bioes (PubMedBERT Table 11)"
        },
    )
    label_all_subtokens: bool = field(
        default=False,
        metadata={
            "help": "train on every piece of a word (BioMegatron; later pieces of B-X learn I-X) instead of the "
            "first; the word's prediction is its first piece's either way (bio and io schemes)"
        },
    )
    unknown_tags: UNKNOWN_TAG_CHOICES = field(
        default="error",
        metadata={
            "help": "a valid/test tag whose type never occurs in train: error, or o (read it as O)"
        },
    )
    merge_types: str = field(
        default="",
        metadata={
            "help": "rename entity types as files are read (labels, metrics and predictions see the new ones): NAME "
            "merges every type into NAME (PubMedBERT's JNLPBA: entity; bare B/I tags too, as in BioBERT's files); "
            "OLD=NEW,... renames the types listed"
        },
    )
    labels: str = field(
        default="",
        metadata={
            "help": "comma-separated labels in model order; empty: from the train file (checkpoints save it)"
        },
    )
    crf: bool = field(
        default=False, metadata={"help": "a linear-chain CRF over the labelled positions"}
    )
    crf_constraints: bool = field(
        default=True,
        metadata={"help": "forbid transitions the scheme rules out (I-X after O ...) in the CRF"},
    )
    lstm_layers: int = field(
        default=0,
        metadata={
            "help": "BiLSTM layers between the encoder and the tagging layer (PubMedBERT Table 10's Bi-LSTM; with "
            "task.crf: BiLSTM-CRF); 0: the linear head"
        },
    )
    lstm_hidden_size: int = field(
        default=0,
        metadata={
            "help": "hidden size of each LSTM direction; 0: half the encoder's width (the BiLSTM's output is as wide "
            "as the encoder's)"
        },
    )
    head_dropout: float = field(
        default=0.1,
        metadata={
            "help": "dropout before the tagging layer (and before, between and after BiLSTM and hidden layers)"
        },
    )
    head_name: str = field(
        default="bio_tagging", metadata={"help": "name of the head in classification_heads"}
    )


@register_task("bio_tagging", dataclass=BioTaggingConfig)
class BioTaggingTask(fine_tuning.FineTuningTask):
    """Token classification fine-tuning and scoring (entity P/R/F1 as conlleval, word-level macro F1
    for PICO)."""

    cfg: BioTaggingConfig
    task_name = "bio_tagging"

    def __init__(
        self,
        cfg: BioTaggingConfig,
        dictionary,
        bpe_spec,
        vocab_dir: str,
        labels: Optional[List[str]],
    ):
        super().__init__(cfg, dictionary, bpe_spec, vocab_dir)
        self.scheme = normalize_scheme(cfg.tag_scheme)
        if cfg.label_all_subtokens and self.scheme == "bioes":
            raise BioConfigError(
                "task.label_all_subtokens needs tag_scheme bio or io (a word's later pieces have no BIOES label)"
            )
        if cfg.lstm_layers < 0 or cfg.lstm_hidden_size < 0:
            raise BioConfigError(
                f"task.lstm_layers={cfg.lstm_layers}, task.lstm_hidden_size={cfg.lstm_hidden_size}: must be >= 0"
            )
        if cfg.lstm_hidden_size and not cfg.lstm_layers:
            raise BioConfigError(
                f"task.lstm_hidden_size={cfg.lstm_hidden_size} sizes a BiLSTM: set task.lstm_layers >= 1 too"
            )
        if labels is not None:
            self.set_labels(labels)

    def set_labels(self, labels: Sequence[str]) -> None:
        super().set_labels(labels)
        self.types = sorted({label[2:] for label in self.labels if label != "O"})

    def state_dict(self):
        """Saved in every checkpoint (``task_state``): the label list in model order, so that
        prediction and later fine-tuning need no train file."""
        return {"labels": list(self.labels)}

    def load_state_dict(self, state_dict):
        if state_dict.get("labels"):
            self.set_labels(state_dict["labels"])

    @classmethod
    def setup_task(cls, cfg: BioTaggingConfig, from_checkpoint: bool = False, **kwargs):
        dictionary, bpe_spec, vocab_dir = cls.encoder_vocab(cfg, from_checkpoint)
        scheme = normalize_scheme(cfg.tag_scheme)
        labels = None
        if cfg.labels:
            labels = cfg.labels.split(",")
        elif not from_checkpoint:  # a checkpoint brings its labels in its task state
            train = os.path.join(cfg.data, cfg.train_file)
            sentences = _read_tagged(train, cfg)
            labels = label_set([s.tags for s in sentences], scheme)
        if labels is not None:
            logger.info("%d labels (%s): %s", len(labels), scheme, " ".join(labels))
        return cls(cfg, dictionary, bpe_spec, vocab_dir, labels)

    def register_head(self, model) -> None:
        hidden = self.cfg.lstm_hidden_size or max(model.args.encoder_embed_dim // 2, 1)
        model.register_tagging_head(
            self.cfg.head_name,
            len(self.labels),
            dropout=self.cfg.head_dropout,
            crf=self.cfg.crf,
            lstm_layers=self.cfg.lstm_layers,
            lstm_hidden_size=hidden if self.cfg.lstm_layers else 0,
            **self.hidden_layer_options(model),
        )
        if self.cfg.crf and self.cfg.crf_constraints:
            model.classification_heads[self.cfg.head_name].constrain(self.labels)

    def split_file(self, split: str) -> str:
        names = {
            "train": self.cfg.train_file,
            "valid": self.cfg.valid_file,
            "test": self.cfg.test_file,
        }
        return os.path.join(self.cfg.data, names.get(split, f"{split}.tsv"))

    def read_split(
        self, path: str, require_tags: bool = True, predicting: bool = False
    ) -> List[Sentence]:
        """Sentences of a CoNLL file with tags checked against the label set (unknown types: error
        or O); the error says what to do in training, or, ``predicting`` with a trained model, about
        the file."""
        sentences = _read_tagged(path, self.cfg, require_tags)
        if sentences[0].tags is not None:
            _check_tags(
                sentences,
                path,
                known_types=set(self.types),
                unknown_to_o=self.cfg.unknown_tags == "o",
                unknown_hint=PREDICT_UNKNOWN_HINT if predicting else TRAIN_UNKNOWN_HINT,
            )
        return sentences

    def encode(self, sentences: Sequence[Sentence], path: Optional[str] = None) -> EncodedWords:
        """Words of ``sentences`` encoded with the encoder's BPE, through the cache when ``path``
        names a file."""
        key = None
        if path is not None:
            with open(path, "rb") as f:
                content = f.read()
            key = fingerprint(content, *self.vocab_fingerprint(), 1)
        words = [s.words for s in sentences]
        return EncodedWords.cached(
            self.word_encoder, words, self.cache_dir if key else None, key or ""
        )

    def build_dataset(
        self, sentences: Sequence[Sentence], encoded: EncodedWords, shuffle: bool
    ) -> TaggingDataset:
        self.check_window()
        labels = gold = None
        if sentences and sentences[0].tags is not None:
            gold = [s.tags for s in sentences]
            labels = [
                np.asarray(
                    [self.label_ids[t] for t in convert_tags(tags, self.scheme)], dtype=np.int64
                )
                for tags in gold
            ]
        continuation = None
        if self.cfg.label_all_subtokens:
            continuation = np.asarray(
                [
                    self.label_ids[label if label == "O" else "I-" + label[2:]]
                    for label in self.labels
                ],
                dtype=np.int64,
            )
        return TaggingDataset(
            encoded,
            self.dictionary,
            self.window,
            labels=labels,
            continuation_labels=continuation,
            gold_tags=gold,
            shuffle=shuffle,
            seed=self.cfg.seed,
        )

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        path = self.split_file(split)
        if not os.path.exists(path):
            raise BioFileNotFoundError(
                f"{path}: not found (split {split}; task.data={self.cfg.data})"
            )
        sentences = self.read_split(path)
        dataset = self.build_dataset(
            sentences, self.encode(sentences, path), shuffle=split == "train"
        )
        dataset.max_tokens = self.cfg.max_tokens
        logger.info(
            "%s: %d sentences, %d words", path, len(sentences), sum(len(s.words) for s in sentences)
        )
        self.datasets[split] = dataset
        return dataset

    def predictions_to_tags(self, label_ids: Sequence[int]) -> List[str]:
        """Predicted label ids of a sentence's words -> BIO tags (IO runs become one entity)."""
        return to_bio([self.labels[i] for i in label_ids], self.scheme)


def _type_merge(cfg: BioTaggingConfig):
    """The renaming of ``task.merge_types`` (None: types kept); a one-line error for a malformed
    value."""
    try:
        return parse_type_merge(cfg.merge_types)
    except ValueError as e:
        raise BioConfigError(f"task.merge_types={cfg.merge_types!r}: {e}") from None


def _read_tagged(path: str, cfg: BioTaggingConfig, require_tags: bool = True) -> List[Sentence]:
    """Sentences of a CoNLL file, their tags checked and their types renamed by ``task.merge_types``
    (logged)."""
    sentences = read_conll(path, require_tags=require_tags)
    if sentences[0].tags is None:
        return sentences
    rename = _type_merge(cfg)
    # One name for every type also types bare B/I tags (BioBERT's NER files); a mapping leaves them
    # as errors.
    _check_tags(sentences, path, untyped_ok=rename is not None and bool(rename("")))
    if rename is not None:
        renamed = merge_types(sentences, rename)
        summary = (
            ", ".join(f"{old} -> {new}: {n}" for (old, new), n in sorted(renamed.items())) or "none"
        )
        logger.info(
            "%s: entities renamed by task.merge_types=%s (%s)", path, cfg.merge_types, summary
        )
    return sentences


TRAIN_UNKNOWN_HINT = "task.unknown_tags=o reads it as O"
PREDICT_UNKNOWN_HINT = (
    "the model never learned it, so its gold tags cannot be scored: make them O in the file"
)


def _check_tags(
    sentences: Sequence[Sentence],
    path: str,
    known_types=None,
    unknown_to_o: bool = False,
    untyped_ok: bool = False,
    unknown_hint: str = TRAIN_UNKNOWN_HINT,
) -> None:
    """Every tag is O or <prefix>-<type> (``untyped_ok``: or a bare prefix); with ``known_types``, a
    type outside it is an error or becomes O."""
    replaced = 0
    for sentence in sentences:
        for i, (tag, line) in enumerate(zip(sentence.tags, sentence.lines)):
            if tag == "O":
                continue
            if untyped_ok and tag in ("B", "I", "E", "S", "L", "U"):
                continue
            if len(tag) < 3 or tag[1] != "-" or tag[0] not in "BIESLU":
                hint = (
                    "; untyped tags (BioBERT's files) need task.merge_types=NAME"
                    if tag in ("B", "I")
                    else ""
                )
                raise TaggingDataError(
                    f"{path}:{line}: tag {tag!r} is neither O nor B-/I-/E-/S-/L-/U-<type>{hint}"
                )
            if known_types is not None and tag[2:] not in known_types:
                if not unknown_to_o:
                    raise TaggingDataError(
                        f"{path}:{line}: tag {tag!r}: type {tag[2:]!r} never occurs in the train file (types: "
                        f"{', '.join(sorted(known_types)) or 'none'}); {unknown_hint}"
                    )
                sentence.tags[i] = "O"
                replaced += 1
    if replaced:
        logger.warning(
            "%s: %d tags of types unseen in train read as O (task.unknown_tags=o)", path, replaced
        )

"""bio_sentence_prediction: sentence- and document-level fine-tuning (relation extraction, HoC,
BIOSSES, PubMedQA, NLI) on the files users have, from any encoder checkpoint: one text or a pair, a
[CLS]-pooled head (fairseq's ``register_classification_head``) for single-label, multi-label
(sigmoid) or regression outputs; texts encoded with the encoder's own BPE (cached) and windowed when
longer than its positions, never cut.

Relation extraction with entity markers (``task.entity_representation``, PubMedBERT Table 12):
``marker_cls`` and ``marker_start`` wrap the relation's two entities (offsets from the rows, or
their placeholders) in ``[E1] ... [/E1]``, ``[E2] ... [/E2]``, four tokens appended to the encoder's
dictionary (their embedding rows added when the encoder checkpoint is restored, each the mean of its
rows); ``marker_start`` classifies the concatenated top states of ``[E1]`` and ``[E2]`` instead of
[CLS]. ``mention_pool`` (the text as given: dummified placeholders or the original mentions at their
offsets) and ``marker_mention`` (with the markers) classify each entity mention's states max-pooled
and concatenated (Table 12's MENTION). ``task.group_documents``: rows are sentences of documents
(BLUE's HoC), scored per document."""

import copy
import logging
import os
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

import numpy as np
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task
from omegaconf import MISSING

from ..checkpoint_fit import DICT_TXT
from ..data.class_balance import BALANCED, balanced_oversampling, parse_oversampling
from ..data.sentence_files import (
    ENTITY_MARKERS,
    FORMATS,
    KINDS,
    START_MARKERS,
    Example,
    SentenceDataError,
    attach_entities,
    check_examples,
    entity_words,
    file_format,
    read_jsonl,
    read_pubmedqa,
    read_tsv,
)
from ..data.sentence_windows import (
    MarkerWordEncoder,
    RepeatedExamples,
    SentencePredictionDataset,
    WindowError,
)
from ..data.tagging_dataset import EncodedWords, fingerprint
from ..errors import BioConfigError, BioFileNotFoundError
from ..metrics.classification import NEGATIVE_LABELS, document_id
from ..modules.entity_head import (
    EntityStartClassificationHead,
    MentionPoolClassificationHead,
    grow_vocab_rows_on_load,
)
from ..modules.sentence_head import SentenceClassificationHead
from . import fine_tuning

logger = logging.getLogger(__name__)

CACHE_VERSION = 1
UNKNOWN_LABEL_CHOICES = ChoiceEnum(["error", "skip"])
ENTITY_REPRESENTATIONS = (
    "dummy_cls",
    "marker_cls",
    "marker_start",
    "mention_pool",
    "marker_mention",
)
MARKED = (
    "marker_cls",
    "marker_start",
    "marker_mention",
)  # the representations that insert [E1] ... [/E2]
MENTION_POOLED = (
    "mention_pool",
    "marker_mention",
)  # those whose head max-pools the entity mentions' states
ENTITY_PLACEHOLDER_CHECKS = ("pair", "any")
# fairseq's split names -> the keys of PubMedQA's split file (blurb_split.json: train / dev / test)
PUBMEDQA_SPLITS = {"valid": "dev"}


@dataclass
class BioSentencePredictionConfig(fine_tuning.FineTuningConfig):
    data: str = field(default=MISSING, metadata={"help": "directory with the split files"})
    kind: ChoiceEnum(KINDS) = field(
        default="classification",
        metadata={
            "help": "classification (one label, softmax), multilabel (0/1 per label, sigmoid) or regression"
        },
    )
    format: ChoiceEnum(FORMATS) = field(
        default="auto",
        metadata={
            "help": "tsv, jsonl, or pubmedqa (ori_pqal.json + task.split_file); auto: from the extension"
        },
    )
    train_file: str = field(
        default="train.tsv", metadata={"help": "file of the train split, in task.data"}
    )
    valid_file: Optional[str] = field(
        default="dev.tsv",
        metadata={"help": "file of the valid split (null with task.valid_from_train)"},
    )
    test_file: str = field(
        default="test.tsv", metadata={"help": "file of the test split; other splits: <split>.<ext>"}
    )
    valid_from_train: int = field(
        default=0,
        metadata={"help": "hold out the last N rows of the train file as the valid split (GAD)"},
    )
    split_file: str = field(
        default="blurb_split.json",
        metadata={
            "help": "format=pubmedqa: JSON of split -> PMIDs in task.data (valid reads its 'dev' list)"
        },
    )
    text_fields: str = field(
        default="sentence",
        metadata={"help": "comma-separated text column(s)/field(s): one text, or a pair"},
    )
    label_field: str = field(
        default="label", metadata={"help": "label column/field (a score, or a 0/1 list)"}
    )
    id_field: str = field(default="id", metadata={"help": "id field of JSON lines, when present"})
    labels: str = field(
        default="",
        metadata={
            "help": "comma-separated class names in model order (multilabel: names of the positions); empty: "
            "sorted from the train file (checkpoints save them)"
        },
    )
    unknown_labels: UNKNOWN_LABEL_CHOICES = field(
        default="error",
        metadata={
            "help": "a train row whose label is outside task.labels: error, or skip it (valid/test: error)"
        },
    )
    negative_labels: str = field(
        default=",".join(sorted(NEGATIVE_LABELS)),
        metadata={
            "help": "classes left out of the micro P/R/F1 (relation extraction's no-relation classes)"
        },
    )
    entity_markers: str = field(
        default="",
        metadata={
            "help": "comma-separated dummified entities (placeholders; a '-' in the name: both entities in one "
            "mention, as @DRUG-DRUG$); relation extraction checks each row for them (task.entity_placeholders), "
            "and with entity markers, rows without offsets take their entities from these"
        },
    )
    entity_placeholders: ChoiceEnum(ENTITY_PLACEHOLDER_CHECKS) = field(
        default="pair",
        metadata={
            "help": "pair: each row holds its relation's two placeholders, two different ones once each or the "
            "only one twice (GAD: @GENE$ and @DISEASE$; DDI: @DRUG$ twice), or one combined placeholder alone; "
            "any: at least one of them"
        },
    )
    entity_representation: ChoiceEnum(ENTITY_REPRESENTATIONS) = field(
        default="dummy_cls",
        metadata={
            "help": "relation extraction (PubMedBERT Table 12): dummy_cls (the text as given, [CLS] head); "
            "mention_pool (the text as given, head on the two entity mentions' states, each max-pooled, "
            "concatenated: MENTION); marker_cls / marker_start / marker_mention: [E1] [/E1] [E2] [/E2] added to the "
            "dictionary around the two entities, and the [CLS] head / head on the concatenated [E1] and [E2] "
            "states / head on the max-pooled mentions between the markers"
        },
    )
    entities_field: str = field(
        default="entities",
        metadata={
            "help": "JSON-lines field with the two entities' character offsets ([{start, end, type}, ...])"
        },
    )
    group_documents: bool = field(
        default=False,
        metadata={
            "help": "multilabel rows are sentences of documents (BLUE's HoC): a row's document is its id up to the "
            "first '_'; metrics OR the labels per document and score documents"
        },
    )
    min_score: Optional[float] = field(
        default=None, metadata={"help": "regression: lowest valid gold score"}
    )
    max_score: Optional[float] = field(
        default=None, metadata={"help": "regression: highest valid gold score"}
    )
    threshold: float = field(
        default=0.5, metadata={"help": "multilabel: a label is predicted when its sigmoid > this"}
    )
    data_source: str = field(
        default="",
        metadata={
            "help": "where to get the data, said when a split file is missing (licence-gated sets)"
        },
    )
    head_dropout: Optional[float] = field(
        default=None,
        metadata={
            "help": "dropout in the head (before and after its dense and hidden layers); None: model.pooler_dropout"
        },
    )
    head_name: str = field(
        default="bio_sentence", metadata={"help": "name of the head in classification_heads"}
    )
    window_overlap: bool = field(
        default=False,
        metadata={
            "help": "windows of a long text overlap by about half (twice the rows); default: consecutive"
        },
    )
    oversample: str = field(
        default="",
        metadata={
            "help": "single-label classification: repeat each train example of a class k times (BioMegatron sec. "
            "5.5's oversampling of minority classes): 'balanced' (k = round(n_largest / n_class)), or whole numbers "
            "k1,k2,... in task.labels order or label=k,...; empty: every example once"
        },
    )


def _names(value: str) -> List[str]:
    return [v.strip() for v in value.split(",") if v.strip()] if value else []


@register_task("bio_sentence_prediction", dataclass=BioSentencePredictionConfig)
class BioSentencePredictionTask(fine_tuning.FineTuningTask):
    """Single-label, multi-label and regression fine-tuning over texts or text pairs, scored at
    corpus level (micro F1 over positive classes, BLURB's HoC F1, Pearson, accuracy and macro F1) by
    the criterion.
    """

    cfg: BioSentencePredictionConfig
    task_name = "bio_sentence_prediction"

    def __init__(
        self, cfg: BioSentencePredictionConfig, dictionary, bpe_spec, vocab_dir: str, labels
    ):
        super().__init__(cfg, dictionary, bpe_spec, vocab_dir)
        self.kind = str(cfg.kind)
        self.text_fields = _names(cfg.text_fields)
        if not 1 <= len(self.text_fields) <= 2:
            raise BioConfigError(
                f"task.text_fields={cfg.text_fields}: one text field, or two (a pair)"
            )
        self.negatives = set(_names(cfg.negative_labels))
        self.representation = str(cfg.entity_representation)
        self.marker_ids = {}
        self.model_dictionary = (
            dictionary  # what the model embeds: the encoder's dictionary, plus any markers
        )
        if self.uses_entities and len(self.text_fields) != 1:
            raise BioConfigError(
                f"task.entity_representation={self.representation} reads the entities of one text, not a pair "
                f"(task.text_fields={cfg.text_fields})"
            )
        if self.representation in MARKED:
            self.model_dictionary = copy.deepcopy(dictionary)
            for marker in ENTITY_MARKERS:
                if marker in dictionary.indices:
                    raise BioConfigError(
                        f"{vocab_dir}/{DICT_TXT} already has {marker!r}, the entity marker token"
                    )
                self.marker_ids[marker] = self.model_dictionary.add_symbol(marker)
            logger.info(
                "entity markers %s: ids %s after the encoder's %d (task.entity_representation=%s)",
                " ".join(self.marker_ids),
                ",".join(map(str, self.marker_ids.values())),
                len(dictionary),
                self.representation,
            )
        if cfg.oversample.strip() and self.kind != "classification":
            raise BioConfigError(
                f"task.oversample={cfg.oversample}: task.kind={self.kind} has no classes to oversample "
                "(single-label classification only)"
            )
        if cfg.group_documents and self.kind != "multilabel":
            raise BioConfigError(
                f"task.group_documents needs task.kind=multilabel, not {self.kind}"
            )
        if labels is not None:
            self.set_labels(labels)

    @property
    def uses_entities(self) -> bool:
        """Whether rows need their relation's two entities (offsets, or placeholders): every
        representation but dummy_cls."""
        return self.representation != "dummy_cls"

    @property
    def source_dictionary(self):
        """The encoder's dictionary with the entity markers appended (``self.dictionary``: the
        encoder's own, which its checkpoint must fit and which the BPE encodes into)."""
        return self.model_dictionary

    @property
    def target_dictionary(self):
        return self.model_dictionary

    @property
    def start_marker_ids(self) -> List[int]:
        """Dictionary ids of ``[E1]`` and ``[E2]`` (marker_start pools their states)."""
        return [self.marker_ids[m] for m in START_MARKERS]

    @property
    def num_outputs(self) -> int:
        return 1 if self.kind == "regression" else len(self.labels)

    def state_dict(self):
        """Saved in every checkpoint (``task_state``): the labels in model order and the kind of
        head (and the marker tokens the embeddings end with)."""
        state = {"labels": list(self.labels), "kind": self.kind}
        if self.marker_ids:
            state["entity_markers"] = list(self.marker_ids)
        return state

    def load_state_dict(self, state_dict):
        if state_dict.get("kind") and state_dict["kind"] != self.kind:
            raise BioConfigError(
                f"the checkpoint's head is {state_dict['kind']}, the task's task.kind={self.kind}"
            )
        if state_dict.get("labels"):
            self.set_labels(state_dict["labels"])

    @classmethod
    def setup_task(cls, cfg: BioSentencePredictionConfig, from_checkpoint: bool = False, **kwargs):
        dictionary, bpe_spec, vocab_dir = cls.encoder_vocab(cfg, from_checkpoint)
        task = cls(cfg, dictionary, bpe_spec, vocab_dir, None)
        if not from_checkpoint and not os.path.exists(task.split_file("train")):
            raise task._missing(
                task.split_file("train"), "train"
            )  # before a model is built for nothing
        labels = _names(cfg.labels) or None
        if task.kind == "regression":
            labels = ["score"]
        elif not labels and not from_checkpoint:  # a checkpoint brings its labels in its task state
            train = task.read_split("train", check=False)
            if task.kind == "classification":
                check_examples(train, task.split_file("train"), "classification", task.text_fields)
                labels = sorted({ex.label for ex in train})
            else:
                first = train[0].label
                width = len(first) if isinstance(first, list) else None
                check_examples(
                    train, task.split_file("train"), "multilabel", task.text_fields, width=width
                )
                labels = [str(i) for i in range(width)]
        if labels is not None:
            task.set_labels(labels)
            logger.info("%s: %d labels: %s", task.kind, len(labels), " ".join(labels))
        return task

    def register_head(self, model) -> None:
        pair_heads = {"marker_start": EntityStartClassificationHead}
        pair_heads.update((name, MentionPoolClassificationHead) for name in MENTION_POOLED)
        dropout = (
            model.args.pooler_dropout if self.cfg.head_dropout is None else self.cfg.head_dropout
        )
        if self.representation in pair_heads:
            if self.cfg.head_hidden_layers:
                raise BioConfigError(
                    f"task.head_hidden_layers={self.cfg.head_hidden_layers}: the [CLS] head's option; "
                    f"task.entity_representation={self.representation}'s head has none"
                )
            model.classification_heads[self.cfg.head_name] = pair_heads[self.representation](
                model.args.encoder_embed_dim,
                self.num_outputs,
                activation_fn=model.args.pooler_activation_fn,
                pooler_dropout=dropout,
            )
        elif self.cfg.head_hidden_layers or self.cfg.head_dropout is not None:
            model.classification_heads[self.cfg.head_name] = SentenceClassificationHead(
                model.args.encoder_embed_dim,
                self.num_outputs,
                activation_fn=model.args.pooler_activation_fn,
                pooler_dropout=dropout,
                **self.hidden_layer_options(model),
            )
        else:
            model.register_classification_head(self.cfg.head_name, num_classes=self.num_outputs)
        model.classification_heads[self.cfg.head_name].train(
            model.training
        )  # a head made while loading: eval()

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        if self.marker_ids:  # the encoder checkpoint restored next has no rows for the markers
            grow_vocab_rows_on_load(model, len(self.marker_ids), self.dictionary.pad())
        return model

    # ---- reading ----------------------------------------------------------------------------------------------

    def split_file(self, split: str) -> str:
        """The file a split reads (format=pubmedqa: every split reads the train file, selected by
        task.split_file)."""
        if str(self.cfg.format) == "pubmedqa":
            return os.path.join(self.cfg.data, self.cfg.train_file)
        if split == "valid" and self.cfg.valid_from_train:
            return os.path.join(self.cfg.data, self.cfg.train_file)
        names = {
            "train": self.cfg.train_file,
            "valid": self.cfg.valid_file,
            "test": self.cfg.test_file,
        }
        name = names.get(split) or f"{split}{os.path.splitext(self.cfg.train_file)[1]}"
        return os.path.join(self.cfg.data, name)

    def _missing(self, path: str, split: str) -> BioFileNotFoundError:
        hint = f"; {self.cfg.data_source}" if self.cfg.data_source else ""
        return BioFileNotFoundError(
            f"{path}: not found (split {split}; task.data={self.cfg.data}){hint}"
        )

    def read_split(
        self, split: str, check: bool = True, require_labels: bool = True
    ) -> List[Example]:
        """Examples of a split, their labels normalised and checked (train rows outside task.labels
        may be skipped with task.unknown_labels=skip)."""
        path = self.split_file(split)
        if not os.path.exists(path):
            raise self._missing(path, split)
        label_field = self.cfg.label_field if require_labels else None
        fmt = file_format(path, str(self.cfg.format))
        if fmt == "pubmedqa":
            split_path = os.path.join(self.cfg.data, self.cfg.split_file)
            if not os.path.exists(split_path):
                raise self._missing(split_path, split)
            examples = read_pubmedqa(
                path, split_path, PUBMEDQA_SPLITS.get(split, split), label_field
            )
        elif fmt == "tsv":
            examples = read_tsv(path, self.text_fields, label_field, self.cfg.id_field)
        else:
            entities = self.cfg.entities_field if self.uses_entities else None
            examples = read_jsonl(path, self.text_fields, label_field, self.cfg.id_field, entities)
        if self.cfg.valid_from_train and fmt != "pubmedqa" and split in ("train", "valid"):
            n = self.cfg.valid_from_train
            if n >= len(examples):
                raise SentenceDataError(
                    f"{path}: task.valid_from_train={n} but the file has {len(examples)} rows"
                )
            examples = examples[-n:] if split == "valid" else examples[:-n]
        if not check:
            return examples
        labels = self.labels if self.kind == "classification" else None
        if labels and split == "train" and self.cfg.unknown_labels == "skip":
            known = set(labels)
            kept = [ex for ex in examples if ex.label is None or str(ex.label).strip() in known]
            if len(kept) < len(examples):
                logger.warning(
                    "%s: %d rows with labels outside %s skipped (task.unknown_labels=skip)",
                    path,
                    len(examples) - len(kept),
                    ",".join(labels),
                )
            if not kept:
                raise SentenceDataError(
                    f"{path}: every row's label is outside task.labels ({','.join(labels)}), so "
                    "task.unknown_labels=skip leaves no training rows"
                )
            examples = kept
        strict = str(self.cfg.entity_placeholders) == "pair"
        check_examples(
            examples,
            path,
            self.kind,
            self.text_fields,
            labels=labels,
            width=len(self.labels) if self.kind == "multilabel" else None,
            score_range=(self.cfg.min_score, self.cfg.max_score),
            # rows whose entities are read are checked for their two entities below (offsets, or
            # these placeholders)
            entity_markers=() if self.uses_entities else _names(self.cfg.entity_markers),
            label_names=self.labels if self.kind == "multilabel" else None,
            strict_placeholders=strict,
        )
        if self.uses_entities:
            attach_entities(
                examples,
                path,
                _names(self.cfg.entity_markers),
                strict,
                markers=bool(self.marker_ids),
            )
        if self.cfg.group_documents:
            for ex in examples:
                if not ex.id:
                    raise SentenceDataError(
                        f"{path}:{ex.line}: no row id (task.id_field={self.cfg.id_field}); task.group_documents "
                        "reads each sentence's document from it"
                    )
        for ex in examples:
            ex.source = path
        return examples

    def documents(self, examples: Sequence[Example]) -> Optional[np.ndarray]:
        """Per example, the index of its document (first-seen order) with task.group_documents; else
        None."""
        if not self.cfg.group_documents:
            return None
        index = {}
        return np.asarray(
            [index.setdefault(document_id(ex.id), len(index)) for ex in examples], dtype=np.int64
        )

    def words(self, ex: Example, field_index: int) -> List[str]:
        """The words of one text of an example, entity markers included when the task adds them."""
        if self.uses_entities:
            return self.entity_words(ex)[0]
        return ex.texts[field_index].split()

    def entity_words(self, ex: Example):
        """(words, the two mentions' ``[start, end)`` words) of a relation's text, cut at its
        entities' offsets and with the entity markers when the task adds them."""
        if not ex.entities:
            raise SentenceDataError(
                f"{ex.source}:{ex.line}: no entities attached (read it with read_split)"
            )
        return entity_words(ex.texts[0], ex.entities, markers=bool(self.marker_ids))

    def targets(self, examples: Sequence[Example]) -> Optional[np.ndarray]:
        """Label ids (B), 0/1 rows (B x K, float) or scores (B, float) of labelled examples; None
        when unlabelled."""
        if not examples or examples[0].label is None:
            return None
        if self.kind == "classification":
            return np.asarray([self.label_ids[ex.label] for ex in examples], dtype=np.int64)
        return np.asarray([ex.label for ex in examples], dtype=np.float32)

    def encode(self, examples: Sequence[Example]) -> List[EncodedWords]:
        """Per text field, the examples' words encoded with the encoder's BPE, through the cache."""
        vocab, spec = self.vocab_fingerprint()
        encoder = (
            MarkerWordEncoder(self.word_encoder, self.marker_ids)
            if self.marker_ids
            else self.word_encoder
        )
        encoded = []
        for field_index in range(len(self.text_fields)):
            words = [self.words(ex, field_index) for ex in examples]
            key = fingerprint(vocab, spec, CACHE_VERSION, "sentence", self.marker_ids, words)
            encoded.append(EncodedWords.cached(encoder, words, self.cache_dir, key))
        return encoded

    def build_dataset(
        self, examples: Sequence[Example], shuffle: bool
    ) -> SentencePredictionDataset:
        self.check_window()
        encoded = self.encode(examples)
        focus = mentions = None
        if (
            self.representation in MENTION_POOLED
        ):  # the dataset finds their pieces (and keeps them in one window)
            mentions = [self.entity_words(ex)[1] for ex in examples]
        if (
            self.marker_ids
        ):  # first and last marker word of each relation: one window must hold them
            focus = []
            for i in range(len(examples)):
                marks = [
                    w
                    for w, word in enumerate(self.words(examples[i], 0))
                    if word in self.marker_ids
                ]
                focus.append((marks[0], marks[-1]))
        try:
            return SentencePredictionDataset(
                encoded,
                self.dictionary,
                self.window,
                targets=self.targets(examples),
                overlap=self.cfg.window_overlap,
                shuffle=shuffle,
                seed=self.cfg.seed,
                focus=focus,
                documents=self.documents(examples),
                mentions=mentions,
                pair_format=self.pair_format,
            )
        except WindowError as e:
            ex = examples[e.index]
            raise SentenceDataError(f"{ex.source}:{ex.line}: {e}") from None

    def oversampling(self, examples: List[Example]) -> np.ndarray:
        """Which train example each position of the oversampled split is: example j of class c named
        k_c times (``task.oversample``), in file order."""
        spec = self.cfg.oversample.strip()
        option = f"task.oversample={spec}"
        targets = self.targets(examples)
        if spec == BALANCED:
            factors = balanced_oversampling(targets.tolist(), self.labels, option)
        else:
            factors = parse_oversampling(spec, self.labels, option)
        index = np.repeat(np.arange(len(examples)), np.asarray(factors, dtype=np.int64)[targets])
        counts = np.bincount(targets, minlength=len(self.labels))
        logger.info(
            "%s: %d train examples oversampled to %d (%s): %s",
            self.split_file("train"),
            len(examples),
            len(index),
            option,
            ", ".join(f"{name} {n} x {k}" for name, n, k in zip(self.labels, counts, factors)),
        )
        return index

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        examples = self.read_split(split)
        dataset = self.build_dataset(examples, shuffle=split == "train")
        if split == "train" and self.cfg.oversample.strip():
            dataset = RepeatedExamples(dataset, self.oversampling(examples))
        dataset.max_tokens = self.cfg.max_tokens
        windows = sum(dataset.windows(i) for i in range(len(dataset)))
        logger.info(
            "%s (%s): %d examples, %d windows of <= %d tokens, first text cut in %d pairs",
            self.split_file(split),
            split,
            len(dataset),
            windows,
            self.window,
            dataset.truncated,
        )
        self.datasets[split] = dataset
        return dataset

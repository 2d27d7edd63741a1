"""bio_tagging: word-level sequence labelling (NER, PICO) on the CoNLL files users have, fine-tuning any
encoder checkpoint; words are encoded with the encoder's own BPE (cached), long sentences windowed, never cut."""

import logging
import os
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

import numpy as np
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.tasks import FairseqTask, register_task
from omegaconf import II, MISSING

from ..data.conll import Sentence, TaggingDataError, read_conll
from ..data.tag_schemes import convert_tags, label_set, normalize_scheme, to_bio
from ..data.tagging_dataset import EncodedWords, TaggingDataset, WordEncoder, fingerprint
from . import fine_tuning

logger = logging.getLogger(__name__)

TAG_SCHEME_CHOICES = ChoiceEnum(["bio", "iob2", "io", "bioes", "bioul"])
UNKNOWN_TAG_CHOICES = ChoiceEnum(["error", "o"])


@dataclass
class BioTaggingConfig(FairseqDataclass):
    data: str = field(default=MISSING, metadata={"help": "directory with the CoNLL files (token<TAB>tag)"})
    train_file: str = field(default="train.tsv", metadata={"help": "file of the train split, in task.data"})
    valid_file: str = field(default="devel.tsv", metadata={"help": "file of the valid split, in task.data"})
    test_file: str = field(default="test.tsv", metadata={"help": "file of the test split; other splits: <split>.tsv"})
    vocab: Optional[str] = field(
        default=None,
        metadata={
            "help": "directory with the encoder's dict.txt and bpe.json (default: beside the encoder checkpoint, "
            "else the data directory it records)"
        },
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
        metadata={"help": "a valid/test tag whose type never occurs in train: error, or o (read it as O)"},
    )
    labels: str = field(
        default="",
        metadata={"help": "comma-separated labels in model order; empty: from the train file (checkpoints save it)"},
    )
    crf: bool = field(default=False, metadata={"help": "a linear-chain CRF over the labelled positions"})
    crf_constraints: bool = field(
        default=True, metadata={"help": "forbid transitions the scheme rules out (I-X after O ...) in the CRF"}
    )
    head_dropout: float = field(default=0.1, metadata={"help": "dropout before the tagging layer"})
    head_name: str = field(default="bio_tagging", metadata={"help": "name of the head in classification_heads"})
    layer_lr_decay: float = field(
        default=1.0,
        metadata={
            "help": "lr x decay^(distance from the top layer), embeddings lowest (BioELECTRA: 0.8); needs optimizer=composite"
        },
    )
    cache_dir: Optional[str] = field(
        default=None, metadata={"help": "where encoded words are cached (default: <checkpoint.save_dir>/encoded)"}
    )
    max_positions: Optional[int] = field(
        default=None, metadata={"help": "tokens per window, <s> and </s> included (default: the model's positions)"}
    )
    restore_file: str = II("checkpoint.restore_file")
    finetune_from_model: Optional[str] = II("checkpoint.finetune_from_model")
    save_dir: str = II("checkpoint.save_dir")
    max_tokens: Optional[int] = II("dataset.max_tokens")
    seed: int = II("common.seed")


@register_task("bio_tagging", dataclass=BioTaggingConfig)
class BioTaggingTask(FairseqTask):
    """Token classification fine-tuning and scoring (entity P/R/F1 as conlleval, word-level macro F1 for PICO)."""

    cfg: BioTaggingConfig

    def __init__(self, cfg: BioTaggingConfig, dictionary, bpe_spec, vocab_dir: str, labels: Optional[List[str]]):
        super().__init__(cfg)
        self.dictionary = dictionary
        self.bpe_spec = bpe_spec
        self.vocab_dir = vocab_dir
        self.scheme = normalize_scheme(cfg.tag_scheme)
        if cfg.label_all_subtokens and self.scheme == "bioes":
            raise fine_tuning.FineTuningError(
                "task.label_all_subtokens needs tag_scheme bio or io (a word's later pieces have no BIOES label)"
            )
        self.labels: List[str] = []
        if labels is not None:
            self.set_labels(labels)
        self._word_encoder = None
        self.window: Optional[int] = None  # tokens per window: set by build_model from the model's positions

    def set_labels(self, labels: Sequence[str]) -> None:
        self.labels = list(labels)
        self.label_ids = {label: i for i, label in enumerate(self.labels)}
        self.types = sorted({label[2:] for label in self.labels if label != "O"})

    def state_dict(self):
        """Saved in every checkpoint (``task_state``): the label list in model order, so that prediction and
        later fine-tuning need no train file."""
        return {"labels": list(self.labels)}

    def load_state_dict(self, state_dict):
        if state_dict.get("labels"):
            self.set_labels(state_dict["labels"])

    @classmethod
    def setup_task(cls, cfg: BioTaggingConfig, from_checkpoint: bool = False, **kwargs):
        encoder = fine_tuning.encoder_checkpoint(cfg.restore_file, cfg.finetune_from_model)
        vocab = cfg.vocab
        if not vocab and from_checkpoint and fine_tuning.has_vocab(cfg.save_dir):
            vocab = cfg.save_dir  # a fine-tuned run copies its vocabulary beside its checkpoints
        vocab_dir = fine_tuning.resolve_vocab(vocab, encoder)
        dictionary, bpe_spec = fine_tuning.load_vocab(vocab_dir)
        logger.info("dictionary: %d types, bpe %s, from %s", len(dictionary), bpe_spec["_name"], vocab_dir)
        scheme = normalize_scheme(cfg.tag_scheme)
        labels = None
        if cfg.labels:
            labels = cfg.labels.split(",")
        elif not from_checkpoint:  # a checkpoint brings its labels in its task state
            train = os.path.join(cfg.data, cfg.train_file)
            sentences = read_conll(train)
            _check_tags(sentences, train)
            labels = label_set([s.tags for s in sentences], scheme)
        if labels is not None:
            logger.info("%d labels (%s): %s", len(labels), scheme, " ".join(labels))
        return cls(cfg, dictionary, bpe_spec, vocab_dir, labels)

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

    def build_model(self, cfg, from_checkpoint=False):
        if not self.labels:
            raise fine_tuning.FineTuningError(
                "bio_tagging: no labels (from the train file, task.labels or a checkpoint)"
            )
        encoder = fine_tuning.encoder_checkpoint(self.cfg.restore_file, self.cfg.finetune_from_model)
        if not from_checkpoint and encoder:
            fine_tuning.check_encoder_fits(encoder, self.dictionary, self.vocab_dir)
            fine_tuning.adopt_encoder_architecture(cfg, encoder)
        model = super().build_model(cfg, from_checkpoint)
        model.register_tagging_head(
            self.cfg.head_name, len(self.labels), dropout=self.cfg.head_dropout, crf=self.cfg.crf
        )
        if self.cfg.crf and self.cfg.crf_constraints:
            model.classification_heads[self.cfg.head_name].constrain(self.labels)
        fine_tuning.freeze_lm_head(model)
        if self.cfg.layer_lr_decay != 1.0:
            fine_tuning.apply_layer_lr_decay(model, self.cfg.layer_lr_decay)
        self.window = min(self.cfg.max_positions or model.args.max_positions, model.args.max_positions)
        if not from_checkpoint:
            fine_tuning.copy_vocab(self.vocab_dir, self.cfg.save_dir)
        return model

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        if self.cfg.layer_lr_decay != 1.0 and update_num == 0:
            fine_tuning.check_optimizer_groups(optimizer, self.cfg.layer_lr_decay)
        return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)

    def split_file(self, split: str) -> str:
        names = {"train": self.cfg.train_file, "valid": self.cfg.valid_file, "test": self.cfg.test_file}
        return os.path.join(self.cfg.data, names.get(split, f"{split}.tsv"))

    def read_split(self, path: str, require_tags: bool = True) -> List[Sentence]:
        """Sentences of a CoNLL file with tags checked against the label set (unknown types: error or O)."""
        sentences = read_conll(path, require_tags=require_tags)
        if sentences[0].tags is not None:
            _check_tags(sentences, path, known_types=set(self.types), unknown_to_o=self.cfg.unknown_tags == "o")
        return sentences

    def encode(self, sentences: Sequence[Sentence], path: Optional[str] = None) -> EncodedWords:
        """Words of ``sentences`` encoded with the encoder's BPE, through the cache when ``path`` names a file."""
        key = None
        if path is not None:
            with open(path, "rb") as f:
                content = f.read()
            with open(os.path.join(self.vocab_dir, fine_tuning.DICT_TXT), "rb") as f:
                vocab = f.read()
            spec = {k: (v if k == "_name" else os.path.basename(str(v))) for k, v in self.bpe_spec.items()}
            key = fingerprint(content, vocab, spec, 1)
        cache_dir = self.cfg.cache_dir or (os.path.join(self.cfg.save_dir, "encoded") if self.cfg.save_dir else None)
        words = [s.words for s in sentences]
        return EncodedWords.cached(self.word_encoder, words, cache_dir if key else None, key or "")

    def build_dataset(self, sentences: Sequence[Sentence], encoded: EncodedWords, shuffle: bool) -> TaggingDataset:
        if self.window is None:
            raise fine_tuning.FineTuningError(
                "bio_tagging: build the model before the datasets (windows need its positions)"
            )
        labels = gold = None
        if sentences and sentences[0].tags is not None:
            gold = [s.tags for s in sentences]
            labels = [
                np.asarray([self.label_ids[t] for t in convert_tags(tags, self.scheme)], dtype=np.int64)
                for tags in gold
            ]
        continuation = None
        if self.cfg.label_all_subtokens:
            continuation = np.asarray(
                [self.label_ids[label if label == "O" else "I-" + label[2:]] for label in self.labels], dtype=np.int64
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
            raise FileNotFoundError(f"{path}: not found (split {split}; task.data={self.cfg.data})")
        sentences = self.read_split(path)
        dataset = self.build_dataset(sentences, self.encode(sentences, path), shuffle=split == "train")
        dataset.max_tokens = self.cfg.max_tokens
        logger.info("%s: %d sentences, %d words", path, len(sentences), sum(len(s.words) for s in sentences))
        self.datasets[split] = dataset
        return dataset

    def filter_indices_by_size(self, indices, dataset, max_positions=None, ignore_invalid_inputs=False):
        return indices  # long sentences are windowed, never dropped

    def max_positions(self):
        return None

    def predictions_to_tags(self, label_ids: Sequence[int]) -> List[str]:
        """Predicted label ids of a sentence's words -> BIO tags (IO runs become one entity)."""
        return to_bio([self.labels[i] for i in label_ids], self.scheme)


def _check_tags(sentences: Sequence[Sentence], path: str, known_types=None, unknown_to_o: bool = False) -> None:
    """Every tag is O or <prefix>-<type>; with ``known_types``, a type outside it is an error or becomes O."""
    replaced = 0
    for sentence in sentences:
        for i, (tag, line) in enumerate(zip(sentence.tags, sentence.lines)):
            if tag == "O":
                continue
            if len(tag) < 3 or tag[1] != "-" or tag[0] not in "BIESLU":
                raise TaggingDataError(f"{path}:{line}: tag {tag!r} is neither O nor B-/I-/E-/S-/L-/U-<type>")
            if known_types is not None and tag[2:] not in known_types:
                if not unknown_to_o:
                    raise TaggingDataError(
                        f"{path}:{line}: tag {tag!r}: type {tag[2:]!r} never occurs in the train file (types: "
                        f"{', '.join(sorted(known_types)) or 'none'}); task.unknown_tags=o reads it as O"
                    )
                sentence.tags[i] = "O"
                replaced += 1
    if replaced:
        logger.warning("%s: %d tags of types unseen in train read as O (task.unknown_tags=o)", path, replaced)

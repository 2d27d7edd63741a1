"""Word-level tagging data: words encoded with the model's own BPE, sentences windowed so that
nothing is cut.

A sample is one sentence. The collater turns each sentence into one or more rows
``<s> pieces </s>``: a sentence whose pieces do not fit in the encoder's positions is split at word
boundaries into windows that overlap by about half a window, and every word is *owned* by exactly
one window, the one where it has the most context on its poorer side. Training uses every window as
an example; scoring and prediction read each word from its owner, so every input word gets exactly
one prediction.
"""

import hashlib
import json
import logging
import os
from argparse import Namespace
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
from fairseq.data import FairseqDataset

from ..files import atomic_write

from .batching import LengthSortedExamples

logger = logging.getLogger(__name__)

IGNORE = -100  # target of positions that carry no label
CACHE_VERSION = 1


class WordEncoder:
    """Dictionary ids of single words with a fairseq BPE, as the pretraining data encoded them
    (memoised)."""

    def __init__(self, dictionary, bpe_spec: Mapping[str, Any]):
        from fairseq.data import encoders

        self.dictionary = dictionary
        self.spec = dict(bpe_spec)
        name = self.spec["_name"]
        self.bpe = encoders.build_bpe(
            Namespace(bpe=name, **{k: v for k, v in self.spec.items() if k != "_name"})
        )
        # Byte-level BPE marks a word that follows a space; fairseq encodes a line without a leading
        # space.
        self.space_prefix = name == "gpt2"
        self._cache: Dict[Tuple[str, bool], List[int]] = {}

    def encode(self, word: str, first: bool) -> List[int]:
        """Ids of ``word`` (``first``: it opens its sentence); never empty (``<unk>`` when the BPE
        gives nothing)."""
        key = (word, first and self.space_prefix)
        ids = self._cache.get(key)
        if ids is None:
            text = word if key[1] or not self.space_prefix else " " + word
            pieces = self.bpe.encode(text)
            ids = self.dictionary.encode_line(
                pieces, append_eos=False, add_if_not_exist=False
            ).tolist()
            ids = ids or [self.dictionary.unk()]
            self._cache[key] = ids
        return ids

    def encode_sentence(self, words: Sequence[str]) -> List[List[int]]:
        return [self.encode(w, i == 0) for i, w in enumerate(words)]


def fingerprint(*parts: Any) -> str:
    """A short hash of strings/bytes/JSON-able values, for cache keys."""
    h = hashlib.sha1()
    for part in parts:
        if isinstance(part, bytes):
            h.update(part)
        elif isinstance(part, str):
            h.update(part.encode("utf-8"))
        else:
            h.update(json.dumps(part, sort_keys=True).encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]


class EncodedWords:
    """Sentences of words as ragged arrays: ``pieces`` (all ids), ``word_starts`` (per word, into
    pieces, with a final end), ``sentence_starts`` (per sentence, into words, with a final end)."""

    def __init__(self, pieces: np.ndarray, word_starts: np.ndarray, sentence_starts: np.ndarray):
        self.pieces, self.word_starts, self.sentence_starts = pieces, word_starts, sentence_starts

    @classmethod
    def encode(cls, encoder: WordEncoder, sentences: Sequence[Sequence[str]]) -> "EncodedWords":
        pieces: List[int] = []
        word_starts = [0]
        sentence_starts = [0]
        for words in sentences:
            for ids in encoder.encode_sentence(words):
                pieces.extend(ids)
                word_starts.append(len(pieces))
            sentence_starts.append(len(word_starts) - 1)
        return cls(
            np.asarray(pieces, dtype=np.int32),
            np.asarray(word_starts, dtype=np.int64),
            np.asarray(sentence_starts, dtype=np.int64),
        )

    @classmethod
    def cached(
        cls, encoder: WordEncoder, sentences, cache_dir: Optional[str], key: str
    ) -> "EncodedWords":
        """``encode`` through an ``.npz`` cache in ``cache_dir`` (written atomically), keyed by
        ``key``."""
        path = os.path.join(cache_dir, f"encoded-{key}.npz") if cache_dir else None
        if path and os.path.exists(path):
            with np.load(path, allow_pickle=False) as z:
                logger.info("reusing encoded words from %s", path)
                return cls(z["pieces"], z["word_starts"], z["sentence_starts"])
        encoded = cls.encode(encoder, sentences)
        if path:
            os.makedirs(cache_dir, exist_ok=True)
            with atomic_write(path, "wb") as f:
                np.savez(
                    f,
                    pieces=encoded.pieces,
                    word_starts=encoded.word_starts,
                    sentence_starts=encoded.sentence_starts,
                )
        return encoded

    def __len__(self):
        return len(self.sentence_starts) - 1

    def sentence(self, i: int) -> List[np.ndarray]:
        """The piece ids of each word of sentence ``i``."""
        ws = self.word_starts
        a, b = self.sentence_starts[i], self.sentence_starts[i + 1]
        return [self.pieces[ws[w] : ws[w + 1]] for w in range(a, b)]

    def piece_counts(self, i: int) -> np.ndarray:
        a, b = self.sentence_starts[i], self.sentence_starts[i + 1]
        return np.diff(self.word_starts[a : b + 1])


def plan_windows(counts: Sequence[int], capacity: int) -> Tuple[List[Tuple[int, int]], List[int]]:
    """Word windows ``[(start, end)]`` whose pieces fit in ``capacity`` and the owning window of
    every word.

    Windows advance by about half a window and always leave no word uncovered; a word is owned by
    the window where min(pieces before it, pieces after it) is largest (the earlier window on ties).
    A single word longer than ``capacity`` gets a window of its own (its pieces beyond ``capacity``
    are not encoded; its first piece, which carries its label, always is).
    """
    n = len(counts)
    if n == 0:
        return [], []
    offsets = np.concatenate([[0], np.cumsum(counts)])
    if offsets[-1] <= capacity:
        return [(0, n)], [0] * n
    windows = []
    start = 0
    while True:
        end = int(np.searchsorted(offsets, offsets[start] + capacity, side="right")) - 1
        end = max(end, start + 1)
        windows.append((start, end))
        if end >= n:
            break
        target = offsets[start] + max(capacity // 2, 1)
        nxt = int(np.searchsorted(offsets, target, side="left"))
        start = min(max(nxt, start + 1), end)
    owner = [0] * n
    best = [-1] * n
    for k, (a, b) in enumerate(windows):
        for w in range(a, b):
            context = min(offsets[w] - offsets[a], offsets[b] - offsets[w + 1])
            if context > best[w]:
                best[w], owner[w] = context, k
    return windows, owner


class TaggingDataset(LengthSortedExamples, FairseqDataset):
    """Sentences (``EncodedWords``) with optional word label ids and gold tags, collated into
    windows."""

    def __init__(
        self,
        encoded: EncodedWords,
        dictionary,
        max_positions: int,
        labels: Optional[Sequence[np.ndarray]] = None,
        continuation_labels: Optional[np.ndarray] = None,
        gold_tags: Optional[Sequence[Sequence[str]]] = None,
        shuffle: bool = False,
        seed: int = 1,
    ):
        self.encoded = encoded
        self.dictionary = dictionary
        self.capacity = max_positions - 2  # <s> and </s>
        if self.capacity < 1:
            raise ValueError(f"max_positions {max_positions} leaves no room for words")
        self.labels = labels
        self.continuation = (
            continuation_labels  # label id -> label of a word's later pieces; None: first only
        )
        self.gold_tags = gold_tags
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 1
        self.max_tokens: Optional[int] = (
            None  # set by the task: a sentence never counts as more than a batch
        )
        self._sizes = np.array([self._size(i) for i in range(len(encoded))], dtype=np.int64)
        self._clipped_warned = False

    def _size(self, i: int) -> int:
        counts = self.encoded.piece_counts(i)
        windows, _ = plan_windows(counts, self.capacity)
        return sum(min(int(counts[a:b].sum()), self.capacity) + 2 for a, b in windows) or 2

    def __len__(self):
        return len(self.encoded)

    def __getitem__(self, index):
        return {
            "id": index,
            "words": self.encoded.sentence(index),
            "labels": None if self.labels is None else self.labels[index],
            "gold": None if self.gold_tags is None else self.gold_tags[index],
        }

    def collater(self, samples):
        return collate_windows(
            samples, self.dictionary, self.capacity, self.continuation, self._warn_clipped
        )

    def _warn_clipped(self, sample_id, word):
        if not self._clipped_warned:
            logger.warning(
                "sentence %d: word %d has more pieces than fit in a window; only its first %d pieces are encoded "
                "(its label sits on the first); further such words are not reported",
                sample_id,
                word,
                self.capacity,
            )
            self._clipped_warned = True


def collate_windows(
    samples, dictionary, capacity: int, continuation=None, on_clipped=None
) -> Dict[str, Any]:
    """Rows ``<s> pieces </s>`` (one per window) with ``target`` label ids (IGNORE where none),
    ``positions`` (R x T bool: where labels sit, first pieces or all pieces of words), and for every
    word of every sentence the one position that predicts it: ``owned`` (R x T bool), ``word_index``
    (R x T, -1 elsewhere), ``row_sentence`` (R)."""
    if not samples:
        return {}
    bos, eos, pad = dictionary.bos(), dictionary.eos(), dictionary.pad()
    rows, targets, owned_rows, word_rows, label_rows, row_sentence = [], [], [], [], [], []
    for s, sample in enumerate(samples):
        words = sample["words"]
        labels = sample.get("labels")
        counts = [len(w) for w in words]
        windows, owner = plan_windows(counts, capacity)
        for k, (a, b) in enumerate(windows):
            tokens, target, owned, word_index, labelled = [bos], [IGNORE], [False], [-1], [False]
            for w in range(a, b):
                pieces = words[w]
                if len(pieces) > capacity:
                    pieces = pieces[:capacity]
                    if on_clipped is not None:
                        on_clipped(sample["id"], w)
                label = IGNORE if labels is None else int(labels[w])
                later = (
                    IGNORE
                    if (continuation is None or label == IGNORE)
                    else int(continuation[label])
                )
                tokens.extend(int(p) for p in pieces)
                target.extend([label] + [later] * (len(pieces) - 1))
                owned.extend([owner[w] == k] + [False] * (len(pieces) - 1))
                word_index.extend([w] + [-1] * (len(pieces) - 1))
                labelled.extend([True] + [continuation is not None] * (len(pieces) - 1))
            tokens.append(eos)
            target.append(IGNORE)
            owned.append(False)
            word_index.append(-1)
            labelled.append(False)
            rows.append(tokens)
            targets.append(target)
            owned_rows.append(owned)
            word_rows.append(word_index)
            label_rows.append(labelled)
            row_sentence.append(s)
    width = max(len(r) for r in rows)

    def padded(seqs, fill, dtype):
        out = torch.full((len(seqs), width), fill, dtype=dtype)
        for i, seq in enumerate(seqs):
            out[i, : len(seq)] = torch.tensor(seq, dtype=dtype)
        return out

    src_tokens = padded(rows, pad, torch.long)
    has_labels = any(sample.get("labels") is not None for sample in samples)
    batch = {
        "id": torch.tensor([sample["id"] for sample in samples], dtype=torch.long),
        "nsentences": len(samples),
        "ntokens": sum(len(r) for r in rows),
        "net_input": {
            "src_tokens": src_tokens,
            "src_lengths": torch.tensor([len(r) for r in rows]),
        },
        "owned": padded(owned_rows, False, torch.bool),
        "word_index": padded(word_rows, -1, torch.long),
        "positions": padded(label_rows, False, torch.bool),
        "row_sentence": torch.tensor(row_sentence, dtype=torch.long),
        "num_words": [len(sample["words"]) for sample in samples],
        "gold": [sample.get("gold") for sample in samples],
    }
    if has_labels:
        batch["target"] = padded(targets, IGNORE, torch.long)
    return batch


def word_predictions(batch: Mapping[str, Any], row_predictions: torch.Tensor) -> List[List[int]]:
    """Per sentence of ``batch``, the prediction of every word read from its owning window
    (``row_predictions`` is R x T); raises if a word has no prediction or more than one."""
    owned = batch["owned"]
    rows, cols = owned.nonzero(as_tuple=True)
    sentences = batch["row_sentence"][rows].tolist()
    words = batch["word_index"][rows, cols].tolist()
    values = row_predictions[rows, cols].tolist()
    out: List[List[Optional[int]]] = [[None] * n for n in batch["num_words"]]
    for s, w, v in zip(sentences, words, values):
        if out[s][w] is not None:
            raise AssertionError(f"word {w} of sentence {s} predicted twice")
        out[s][w] = v
    for s, preds in enumerate(out):
        if any(p is None for p in preds):
            raise AssertionError(f"sentence {s}: a word has no prediction")
    return out

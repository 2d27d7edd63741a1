"""Sentence-level examples (one text, or a pair) as rows of the encoder's positions, windowed so
nothing is cut.

A single text becomes ``<s> text </s>``, a pair the model family's format (``PairFormat``):
RoBERTa's ``<s> a </s></s> b </s>``, or BERT's ``<s> a </s> b </s>`` with segment ids for a model
with token types. A text longer than the positions (a HoC abstract, a PubMedQA context) is split at
word boundaries into windows (``plan_rows``); a relation with entity markers is the one window
centred on them (``centred_window``). Every window is one row, and an example's prediction is the
mean of its rows' head outputs (``pool_windows``), in training and in scoring alike, so it is
deterministic and every window counts."""

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from fairseq.data import FairseqDataset

from ..errors import BioError
from .batching import LengthSortedExamples
from .pair_format import PairFormat
from .tagging_dataset import EncodedWords, plan_windows

Window = Tuple[int, int]  # [start, end) words of the windowed text


def consecutive_windows(counts: Sequence[int], capacity: int) -> List[Window]:
    """Word windows ``[(start, end)]`` that follow each other, each as full as ``capacity`` pieces
    allow (a single word longer than ``capacity`` gets a window of its own, its pieces beyond
    ``capacity`` left out).
    """
    windows, start, used = [], 0, 0
    for w, n in enumerate(counts):
        if w > start and used + n > capacity:
            windows.append((start, w))
            start, used = w, 0
        used += n
    if len(counts):
        windows.append((start, len(counts)))
    return windows


def plan_rows(
    first: Sequence[int],
    second: Optional[Sequence[int]],
    max_positions: int,
    overlap: bool = False,
    pair_format: PairFormat = PairFormat(),
) -> Tuple[Optional[int], List[Window], int]:
    """(pieces of the first text kept in every row of a pair, word windows over the windowed text,
    pieces one window holds) for texts with these per-word piece counts.

    Windows follow each other, each word in exactly one (``consecutive_windows``), or with
    ``overlap`` overlap by about half a window (``plan_windows``, as tagging does: twice the rows).
    A pair windows its second text and repeats the first in every window: the first keeps at least
    half the room, and only its first pieces when it is longer still. A pair's special tokens are
    ``pair_format``'s (4 RoBERTa's, 3 BERT's)."""
    windows = (
        (lambda counts, room: plan_windows(counts, room)[0]) if overlap else consecutive_windows
    )
    if second is None:
        capacity = max_positions - 2  # <s> text </s>
        if capacity < 1:
            raise ValueError(f"max_positions {max_positions} leaves no room for text")
        return None, windows(first, capacity), capacity
    capacity = max_positions - pair_format.specials  # <s> a </s></s> b </s> or <s> a </s> b </s>
    if capacity < 2:
        raise ValueError(f"max_positions {max_positions} leaves no room for a pair")
    len_a, len_b = int(sum(first)), int(sum(second))
    keep = len_a if len_a + len_b <= capacity else min(len_a, max(capacity // 2, capacity - len_b))
    room = capacity - keep
    return keep, windows(second, room), room


class WindowError(BioError, ValueError):
    """An example that cannot become rows as asked (``index``: which)."""

    def __init__(self, index: int, message: str):
        super().__init__(message)
        self.index = index


def centred_window(counts: Sequence[int], capacity: int, first: int, last: int) -> Optional[Window]:
    """The word window ``[a, b)`` holding words ``first..last`` within ``capacity`` pieces, grown
    one word at a time on alternate sides (so centred on them) while it fits; None when those words
    alone do not fit.
    """
    a, b = first, last + 1
    used = int(sum(counts[a:b]))
    if used > capacity:
        return None
    left = True
    while a > 0 or b < len(counts):
        grow_left = a > 0 and (left or b >= len(counts))
        n = counts[a - 1] if grow_left else counts[b]
        if used + n > capacity:
            break
        used += n
        a, b = (a - 1, b) if grow_left else (a, b + 1)
        left = not left
    return a, b


class MarkerWordEncoder:
    """A ``WordEncoder`` whose marker words (``[E1]`` ...) are their own dictionary ids; the first
    other word opens the sentence (byte-level BPE: no space before it), so the pieces between
    markers are the unmarked text's.
    """

    def __init__(self, encoder, marker_ids: Dict[str, int]):
        self.encoder = encoder
        self.marker_ids = dict(marker_ids)

    def encode_sentence(self, words: Sequence[str]) -> List[List[int]]:
        first = next((i for i, w in enumerate(words) if w not in self.marker_ids), -1)
        return [
            [self.marker_ids[w]] if w in self.marker_ids else self.encoder.encode(w, i == first)
            for i, w in enumerate(words)
        ]


def pool_windows(rows: torch.Tensor, row_example: torch.Tensor, n: int) -> torch.Tensor:
    """Mean of the ``R x K`` row outputs over each example's rows: ``n x K``."""
    sums = rows.new_zeros((n,) + tuple(rows.shape[1:])).index_add_(0, row_example, rows)
    counts = torch.bincount(row_example, minlength=n).clamp(min=1).to(rows.dtype)
    return sums / counts.view(-1, *([1] * (rows.dim() - 1)))


class SentencePredictionDataset(LengthSortedExamples, FairseqDataset):
    """Encoded texts (one ``EncodedWords`` per text field) with optional targets, as window rows.

    A relation with entity markers (``focus``: the words from its first marker to its last) is one
    row whatever its length: the whole text when it fits, else the window centred on the markers; a
    relation whose markers alone do not fit is refused (``WindowError``), never cut. With
    ``mentions`` (each entity's words, for a head that max-pools them) the focus is, unless given,
    the words from the first mention to the last, and each row carries the mentions' token spans
    (``mentions``: ``R x 2 x 2``, ``[start, end)`` positions in the row). Sentences of documents
    (``documents``: BLUE's HoC) are ordered by document when not shuffled, and batches never split
    a document, so per-batch document-level statistics add up to the corpus's. A pair's rows are in
    ``pair_format`` (the model's: ``PairFormat.of(model.args)``)."""

    def __init__(
        self,
        texts: Sequence[EncodedWords],
        dictionary,
        max_positions: int,
        targets: Optional[np.ndarray] = None,
        overlap: bool = False,
        shuffle: bool = False,
        seed: int = 1,
        focus: Optional[Sequence[Tuple[int, int]]] = None,
        documents: Optional[np.ndarray] = None,
        mentions: Optional[Sequence[Sequence[Window]]] = None,
        pair_format: PairFormat = PairFormat(),
    ):
        if not 1 <= len(texts) <= 2:
            raise ValueError(f"one text or a pair, not {len(texts)} texts")
        if focus is not None and len(texts) != 1:
            raise ValueError("entity markers (focus) mark one text, not a pair")
        if mentions is not None and len(texts) != 1:
            raise ValueError("entity mentions are spans of one text, not a pair")
        self.focus_name = (
            "entity markers"  # what the focus words are, for the error when they do not fit
        )
        if mentions is not None and focus is None:  # the words from the first mention to the last
            focus = [(min(s for s, _ in spans), max(e for _, e in spans) - 1) for spans in mentions]
            self.focus_name = "entity mentions"
        self.mentions = mentions
        # per example: (first, last) word of its markers or mentions, which one window must hold
        self.focus = focus
        self.documents = None if documents is None else np.asarray(documents, dtype=np.int64)
        self.first = texts[0]
        self.second = texts[1] if len(texts) == 2 else None
        self.dictionary = dictionary
        self.max_positions = max_positions
        self.pair_format = pair_format
        self.targets = targets
        self.overlap = overlap
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 1
        self.max_tokens: Optional[int] = (
            None  # set by the task: an example never counts as more than a batch
        )
        self.plans = [self._plan(i) for i in range(len(self.first))]
        self._sizes = np.array(
            [sum(self._row_length(i, w) for w in plan[1]) for i, plan in enumerate(self.plans)]
        )
        self.truncated = sum(
            self.cut(i) for i in range(len(self.plans))
        )  # pairs whose first text was cut

    def _plan(self, i: int):
        second = None if self.second is None else self.second.piece_counts(i)
        if self.focus is not None:
            counts, capacity = self.first.piece_counts(i), self.max_positions - 2
            window = centred_window(counts, capacity, *self.focus[i])
            if window is None:
                first, last = self.focus[i]
                raise WindowError(
                    i,
                    f"the {self.focus_name} span {int(sum(counts[first : last + 1]))} pieces, more than one window of "
                    f"{self.max_positions} tokens holds (task.max_positions); a relation is never cut",
                )
            if self.mentions is not None:
                for k, (start, end) in enumerate(self.mentions[i], 1):
                    if not counts[start:end].sum():
                        raise WindowError(
                            i, f"entity {k}'s mention (words {start}-{end}) encodes to no pieces"
                        )
            return None, [window], capacity
        return plan_rows(
            self.first.piece_counts(i), second, self.max_positions, self.overlap, self.pair_format
        )

    def cut(self, i: int) -> bool:
        """Whether pair ``i``'s first text is cut (kept to its first pieces in every row: it alone
        overflows)."""
        keep = self.plans[i][0]
        return keep is not None and keep < self._len(i)

    def _len(self, i: int) -> int:
        return int(self.first.piece_counts(i).sum())

    def _row_length(self, i: int, window: Window) -> int:
        keep, _, room = self.plans[i]
        text = self.first if self.second is None else self.second
        pieces = min(int(text.piece_counts(i)[window[0] : window[1]].sum()), room)
        return pieces + (2 if keep is None else keep + self.pair_format.specials)

    def windows(self, i: int) -> int:
        """Rows (windows) example ``i`` becomes."""
        return len(self.plans[i][1])

    def __len__(self):
        return len(self.first)

    def __getitem__(self, index):
        keep, windows, room = self.plans[index]
        text = self.first if self.second is None else self.second
        words = text.sentence(index)
        prefix = []
        if keep is not None:
            prefix = [int(p) for w in self.first.sentence(index) for p in w][:keep]
        rows = []
        for a, b in windows:
            pieces = [int(p) for w in words[a:b] for p in w][
                :room
            ]  # a single over-long word is clipped
            rows.append((prefix, pieces))
        target = None if self.targets is None else self.targets[index]
        item = {"id": index, "rows": rows, "target": target}
        if self.mentions is not None:  # one window (the focus): the mentions' pieces, after <s>
            counts, (a, _) = self.first.piece_counts(index), windows[0]
            offset = [1 + int(counts[a:w].sum()) for w in range(a, windows[0][1] + 1)]
            item["mentions"] = [[[offset[s - a], offset[e - a]] for s, e in self.mentions[index]]]
        if self.documents is not None:
            item["document"] = int(self.documents[index])
        return item

    def collater(self, samples):
        pair = self.pair_format if self.second is not None else None
        return collate_rows(samples, self.dictionary, pair)

    def ordered_indices(self):
        """Documents' sentences together, in document order, when scoring; otherwise
        length-sorted."""
        if self.documents is None or self.shuffle:
            return super().ordered_indices()
        return np.argsort(self.documents, kind="mergesort")

    def batch_by_size(
        self, indices, max_tokens=None, max_sentences=None, required_batch_size_multiple=1
    ):
        """fairseq's batches, or when scoring documents, whole documents per batch (one over the
        limits alone)."""
        if self.documents is None or self.shuffle:
            return super().batch_by_size(
                indices, max_tokens, max_sentences, required_batch_size_multiple
            )
        indices = np.asarray(indices, dtype=np.int64)
        starts = np.flatnonzero(np.diff(self.documents[indices], prepend=-1) != 0)
        batches, batch, width = [], [], 0
        for doc in np.split(indices, starts[1:]):
            doc_width = max(self.num_tokens(int(i)) for i in doc)
            wider = max(width, doc_width)
            full = (max_sentences and len(batch) + len(doc) > max_sentences) or (
                max_tokens and wider * (len(batch) + len(doc)) > max_tokens
            )
            if batch and full:
                batches.append(np.asarray(batch, dtype=np.int64))
                batch, wider = [], doc_width
            batch.extend(int(i) for i in doc)
            width = wider
        if batch:
            batches.append(np.asarray(batch, dtype=np.int64))
        return batches


class RepeatedExamples(LengthSortedExamples, FairseqDataset):
    """A dataset's examples, example ``index[i]`` at position ``i`` (``task.oversample``: an example
    of class c named k_c times). The examples are encoded and planned once; only the positions
    repeat, so batching, shuffling and size-sorting treat every repeat as an example of its own, as
    if the examples had been repeated.
    """

    def __init__(self, dataset: SentencePredictionDataset, index: Sequence[int]):
        self.dataset = dataset
        self.index = np.asarray(index, dtype=np.int64)
        self._sizes = dataset.sizes[self.index]
        self.shuffle, self.seed, self.epoch = dataset.shuffle, dataset.seed, 1
        self.max_tokens: Optional[int] = None
        self.truncated = sum(dataset.cut(int(i)) for i in self.index)

    def windows(self, i: int) -> int:
        return self.dataset.windows(int(self.index[i]))

    def __len__(self):
        return len(self.index)

    def __getitem__(self, index):
        return {**self.dataset[int(self.index[index])], "id": index}

    def collater(self, samples):
        return self.dataset.collater(samples)


def collate_rows(
    samples: Sequence[Dict[str, Any]], dictionary, pair: Optional[PairFormat]
) -> Dict[str, Any]:
    """``src_tokens`` (R x T, one row per window; pairs in the format ``pair``, None for single
    texts), ``segment_labels`` (R x T, pairs in BERT's format only), ``row_example`` (R: the sample
    each row belongs to) and, when the samples have them, ``target`` (B, or B x K for multi-label)
    and ``mentions`` (R x 2 x 2 token spans).
    """
    if not samples:
        return {}
    bos, eos, pad = dictionary.bos(), dictionary.eos(), dictionary.pad()
    rows, segments, row_example = [], [], []
    for s, sample in enumerate(samples):
        for prefix, pieces in sample["rows"]:
            if pair is None:
                tokens, ids = PairFormat().row(bos, eos, pieces, None)
            else:
                tokens, ids = pair.row(bos, eos, prefix, pieces)
            rows.append(tokens)
            segments.append(ids)
            row_example.append(s)
    width = max(len(r) for r in rows)
    src_tokens = torch.full((len(rows), width), pad, dtype=torch.long)
    segment_labels = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (r, ids) in enumerate(zip(rows, segments)):
        src_tokens[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        segment_labels[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    batch = {
        "id": torch.tensor([sample["id"] for sample in samples], dtype=torch.long),
        "nsentences": len(samples),
        "ntokens": sum(len(r) for r in rows),
        "net_input": {
            "src_tokens": src_tokens,
            "src_lengths": torch.tensor([len(r) for r in rows]),
        },
        "row_example": torch.tensor(row_example, dtype=torch.long),
    }
    if pair is not None and pair.segments:
        batch["net_input"]["segment_labels"] = segment_labels
    if samples[0].get("target") is not None:
        batch["target"] = torch.as_tensor(
            np.stack([np.asarray(sample["target"]) for sample in samples])
        )
    if "mentions" in samples[0]:
        batch["mentions"] = torch.tensor(
            [row for sample in samples for row in sample["mentions"]], dtype=torch.long
        )
    if "document" in samples[0]:
        batch["document"] = torch.tensor(
            [sample["document"] for sample in samples], dtype=torch.long
        )
    return batch

"""Extractive-QA data: questions and contexts encoded with the encoder's own BPE, every context
piece knowing the exact characters it covers, contexts windowed with a doc stride, and the n-best
answer spans decoded back to text.

Windows, training targets and decoding follow BERT's ``run_squad.py`` (as BioBERT ran it) and HF's
``run_qa``, SQuAD v2.0's null answer included. An answer is always a context substring,
``context[start_char(first piece):end_char(last piece)]`` (docs/fine-tuning.md, "Extractive
QA")."""

import logging
import os
import unicodedata
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
from fairseq.data import FairseqDataset

from ..files import atomic_write

from .batching import LengthSortedExamples
from .pair_format import PairFormat
from .squad import SquadFile, context_words, gold_texts
from .tagging_dataset import WordEncoder

logger = logging.getLogger(__name__)

CACHE_VERSION = 1
Span = Tuple[int, int]
NO_ANSWER: Span = (
    -1,
    -1,
)  # the target of an unanswerable question: inside no window, so every window targets <s>


# ------------------------------------------------------------------------------------------- piece offsets


class OffsetEncoder:
    """Dictionary ids of words (as ``WordEncoder``) with each piece's character span in the word.

    Contexts are split at whitespace into words, each encoded as the sentence tasks encode words (a
    space before every word but the first for byte-level BPE). Byte-level BPE counts each token's
    bytes; WordPiece, SentencePiece and subword-nmt pieces are found in the word after the
    tokenizer's own normalisation (lower case and accents stripped for uncased WordPiece, NFKC for
    SentencePiece), and a piece that cannot be found (``[UNK]``) covers what lies between its
    neighbours."""

    def __init__(self, word_encoder: WordEncoder):
        self.words = word_encoder
        self.name = word_encoder.spec["_name"]
        self.bpe = word_encoder.bpe
        self.normalize = _normalizer(self.name, self.bpe)
        self._cache: Dict[Tuple[str, bool], Tuple[List[int], List[Span]]] = {}

    def encode(self, word: str, first: bool) -> Tuple[List[int], List[Span]]:
        """(ids, ``[(start, end)]`` character spans in ``word``) of one word (``first``: it opens
        its text)."""
        key = (word, first and self.words.space_prefix)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        space = self.words.space_prefix and not key[1]
        pieces = self.bpe.encode(" " + word if space else word).split()
        ids = self.words.dictionary.encode_line(
            " ".join(pieces), append_eos=False, add_if_not_exist=False
        ).tolist()
        if not ids:  # the BPE gave nothing (WordEncoder's rule): the word is one <unk>
            ids, spans = [self.words.dictionary.unk()], [(0, len(word))]
        elif self.name == "gpt2":
            spans = _byte_spans(
                word, [len(self.bpe.bpe.decoder[int(p)]) for p in pieces], 1 if space else 0
            )
        else:
            spans = _aligned_spans(word, [self._surface(p) for p in pieces], self.normalize)
        if len(ids) != len(spans):
            raise AssertionError(f"word {word!r}: {len(ids)} ids but {len(spans)} piece spans")
        self._cache[key] = (ids, spans)
        return ids, spans

    def _surface(self, piece: str) -> Optional[str]:
        """The text a piece stands for, as the normalised word spells it (None: unknown)."""
        if self.name == "bert":
            if piece == "[UNK]":
                return None
            return piece[2:] if piece.startswith("##") else piece
        if self.name == "sentencepiece":
            if piece.startswith("<") and piece.endswith(">"):  # <unk>, byte fallback
                return None
            return self.normalize_text(piece.replace("\u2581", ""))
        if self.name in ("subword_nmt", "fastbpe"):
            return piece[:-2] if piece.endswith("@@") else piece
        return piece

    def normalize_text(self, text: str) -> str:
        return "".join(self.normalize(ch) for ch in text)


def _normalizer(name: str, bpe):
    """Per character, what the tokenizer turns it into before splitting it into pieces."""
    if name == "bert":
        tokenizer = bpe.bert_tokenizer
        backend = getattr(getattr(tokenizer, "backend_tokenizer", None), "normalizer", None)
        if (
            backend is not None
        ):  # a fast tokenizer (transformers >= 5): its own normaliser, character by character
            return backend.normalize_str
        basic = tokenizer.basic_tokenizer
        lower = bool(basic.do_lower_case)
        strip = lower if basic.strip_accents is None else bool(basic.strip_accents)

        def bert(ch: str) -> str:
            if ch == "\ufffd" or (unicodedata.category(ch).startswith("C") and ch not in "\t\n\r"):
                return ""  # BERT's _clean_text drops control characters
            ch = ch.lower() if lower else ch
            if strip:
                ch = "".join(
                    c for c in unicodedata.normalize("NFD", ch) if unicodedata.category(c) != "Mn"
                )
            return ch

        return bert
    if name == "sentencepiece":
        return lambda ch: unicodedata.normalize("NFKC", ch)
    return lambda ch: ch


def _byte_spans(word: str, byte_lengths: Sequence[int], lead: int) -> List[Span]:
    """Character spans of byte-level tokens of ``word`` (``lead``: a space byte before the word)."""
    char_of_byte = []
    for i, ch in enumerate(word):
        char_of_byte.extend([i] * len(ch.encode("utf-8")))
    spans, offset = [], -lead
    for n in byte_lengths:
        a, b = max(offset, 0), min(offset + n, len(char_of_byte))
        offset += n
        if b <= a:  # the space alone
            spans.append((0, 0) if not spans else (spans[-1][1], spans[-1][1]))
            continue
        spans.append(
            (char_of_byte[a], char_of_byte[b - 1] + 1)
        )  # a token cutting a character keeps all of it
    return spans


def _aligned_spans(word: str, surfaces: Sequence[Optional[str]], normalize) -> List[Span]:
    """Character spans of pieces whose texts (normalised; None: unknown) follow each other in
    ``word``."""
    chars, origin = [], []
    for i, ch in enumerate(word):
        for c in normalize(ch):
            chars.append(c)
            origin.append(i)
    text = "".join(chars)
    found: List[Optional[Span]] = []
    cursor = 0
    for surface in surfaces:
        at = text.find(surface, cursor) if surface else -1
        if at < 0:
            found.append(None)
            continue
        found.append((origin[at], origin[at + len(surface) - 1] + 1))
        cursor = at + len(surface)
    spans: List[Span] = []
    for k, span in enumerate(found):
        if (
            span is None
        ):  # between its neighbours: from the previous piece's end to the next found piece's start
            start = spans[-1][1] if spans else 0
            end = next((s[0] for s in found[k + 1 :] if s is not None), len(word))
            span = (start, max(start, end))
        spans.append(span)
    return spans


# ---------------------------------------------------------------------------------------------- encoded files


class EncodedQA:
    """A SQuAD file's questions and contexts as ragged arrays: ``question_pieces`` /
    ``question_offsets`` (per question, cut to the longest question the task takes),
    ``context_pieces`` with ``char_starts`` / ``char_ends`` / ``context_offsets`` (per context)."""

    FIELDS = (
        "question_pieces",
        "question_offsets",
        "context_pieces",
        "char_starts",
        "char_ends",
        "context_offsets",
    )

    def __init__(self, **arrays: np.ndarray):
        for name in self.FIELDS:
            setattr(self, name, arrays[name])

    @classmethod
    def encode(cls, encoder: OffsetEncoder, squad: SquadFile, max_query_length: int) -> "EncodedQA":
        q_pieces, q_offsets = [], [0]
        for ex in squad.examples:
            ids = [
                i for k, w in enumerate(ex.question.split()) for i in encoder.encode(w, k == 0)[0]
            ]
            q_pieces.extend(ids[:max_query_length])
            q_offsets.append(len(q_pieces))
        c_pieces, starts, ends, c_offsets = [], [], [], [0]
        for context in squad.contexts:
            for k, (word, a, _) in enumerate(context_words(context)):
                ids, spans = encoder.encode(word, k == 0)
                c_pieces.extend(ids)
                starts.extend(a + s for s, _ in spans)
                ends.extend(a + e for _, e in spans)
            c_offsets.append(len(c_pieces))
        return cls(
            question_pieces=np.asarray(q_pieces, dtype=np.int32),
            question_offsets=np.asarray(q_offsets, dtype=np.int64),
            context_pieces=np.asarray(c_pieces, dtype=np.int32),
            char_starts=np.asarray(starts, dtype=np.int64),
            char_ends=np.asarray(ends, dtype=np.int64),
            context_offsets=np.asarray(c_offsets, dtype=np.int64),
        )

    @classmethod
    def cached(
        cls, encoder, squad: SquadFile, max_query_length: int, cache_dir: Optional[str], key: str
    ):
        """``encode`` through an ``.npz`` in ``cache_dir`` keyed by ``key`` (written to a temp name,
        then renamed)."""
        path = os.path.join(cache_dir, f"qa-{key}.npz") if cache_dir else None
        if path and os.path.exists(path):
            with np.load(path, allow_pickle=False) as z:
                logger.info("reusing encoded questions and contexts from %s", path)
                return cls(**{name: z[name] for name in cls.FIELDS})
        encoded = cls.encode(encoder, squad, max_query_length)
        if path:
            os.makedirs(cache_dir, exist_ok=True)
            with atomic_write(path, "wb") as f:
                np.savez(f, **{name: getattr(encoded, name) for name in cls.FIELDS})
        return encoded

    def question(self, i: int) -> np.ndarray:
        return self.question_pieces[self.question_offsets[i] : self.question_offsets[i + 1]]

    def context(self, c: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(piece ids, char starts, char ends) of context ``c``."""
        a, b = self.context_offsets[c], self.context_offsets[c + 1]
        return self.context_pieces[a:b], self.char_starts[a:b], self.char_ends[a:b]


# ---------------------------------------------------------------------------------------------------- windows


def doc_windows(n: int, capacity: int, stride: int) -> List[Span]:
    """Context piece windows ``[(start, end)]``: at most ``capacity`` pieces, starting every
    ``stride`` pieces (never more than ``capacity``, so no piece is skipped), the last one reaching
    the end. ``stride`` has BERT's meaning, the step between window starts, not HF's overlap."""
    if capacity < 1:
        raise ValueError(f"no room for context pieces (capacity {capacity})")
    step = max(1, min(stride, capacity))
    windows, start = [], 0
    while True:
        end = min(start + capacity, n)
        windows.append((start, end))
        if end >= n:
            return windows
        start += step


def max_context_windows(windows: Sequence[Span], n: int) -> np.ndarray:
    """``n``: the window each context piece has the most context in (BERT's
    ``_check_is_max_context``: min(pieces left, pieces right) + 0.01 x window length; the earlier
    window on ties). An answer may only start at a piece in the window it belongs to."""
    best = np.full(n, -1.0)
    owner = np.zeros(n, dtype=np.int64)
    for k, (a, b) in enumerate(windows):
        p = np.arange(a, b)
        score = np.minimum(p - a, b - 1 - p) + 0.01 * (b - a)
        better = score > best[a:b]
        best[a:b] = np.where(better, score, best[a:b])
        owner[a:b] = np.where(better, k, owner[a:b])
    return owner


def answer_pieces(starts: np.ndarray, ends: np.ndarray, start: int, end: int) -> Span:
    """(first, last) context piece covering the characters ``[start, end)``."""
    first = int(np.searchsorted(ends, start, side="right"))
    last = int(np.searchsorted(starts, end, side="left")) - 1
    return first, max(first, last)


class ExtractiveQADataset(LengthSortedExamples, FairseqDataset):
    """SQuAD questions (each with all its windows), collated into rows ``<s> question </s></s>
    window </s>`` (a model with token types: BERT's ``<s> question </s> window </s>``, the window
    segment 1; ``pair_format``): the question cut to ``max_query_length`` pieces, the window as long
    as the rest of the positions allow.

    Each window is its own training example (BERT's ``run_squad``, HF's ``run_qa``): a window that
    holds the whole first gold answer points its start and end at the answer's first and last
    piece, every other window (and every window of a SQuAD v2.0 unanswerable question) at ``<s>``,
    which the span head may also score."""

    def __init__(
        self,
        squad: SquadFile,
        encoded: EncodedQA,
        dictionary,
        max_positions: int,
        doc_stride: int,
        shuffle: bool = False,
        seed: int = 1,
        pair_format: PairFormat = PairFormat(),
    ):
        self.squad, self.encoded, self.dictionary = squad, encoded, dictionary
        self.pair_format = pair_format
        self.max_positions, self.doc_stride = max_positions, doc_stride
        self.shuffle, self.seed, self.epoch = shuffle, seed, 1
        self.max_tokens: Optional[int] = (
            None  # set by the task: a question never counts as more than a batch
        )
        self.plans = [self._plan(i) for i in range(len(squad.examples))]
        self._sizes = np.array(
            [sum(b - a + len(q) + pair_format.specials for a, b in w) for q, w, _ in self.plans],
            dtype=np.int64,
        )
        self.targets = (
            [self._target(i) for i in range(len(squad.examples))] if squad.labelled else None
        )

    def _plan(self, i: int):
        question = self.encoded.question(i)
        capacity = self.context_room(len(question))
        if capacity < 1:
            raise ValueError(
                f"{self.max_positions} positions leave no room for the context after a question of {len(question)} "
                "pieces: lower task.max_query_length"
            )
        n = len(self.encoded.context(self.squad.examples[i].context_index)[0])
        windows = doc_windows(n, capacity, self.doc_stride)
        return question, windows, max_context_windows(windows, n)

    def context_room(self, question: int) -> int:
        """Context pieces a row holds beside a question of ``question`` pieces."""
        return self.max_positions - question - self.pair_format.specials

    def _target(self, i: int) -> Span:
        """(first, last) context piece of the question's first gold answer (``NO_ANSWER`` when it
        has none)."""
        ex = self.squad.examples[i]
        if not ex.answers:
            return NO_ANSWER
        _, starts, ends = self.encoded.context(ex.context_index)
        return answer_pieces(starts, ends, ex.answers[0].start, ex.answers[0].end)

    def windows(self, i: int) -> int:
        """Rows question ``i`` becomes."""
        return len(self.plans[i][1])

    def unaligned_answers(self) -> int:
        """Questions whose first gold answer starts or ends inside a piece (it can only be predicted
        wider)."""
        count = 0
        for i, ex in enumerate(self.squad.examples):
            if not ex.answers:
                continue
            _, starts, ends = self.encoded.context(ex.context_index)
            first, last = self.targets[i]
            count += int(starts[first] != ex.answers[0].start or ends[last] != ex.answers[0].end)
        return count

    def __len__(self):
        return len(self.squad.examples)

    def __getitem__(self, index):
        ex = self.squad.examples[index]
        question, windows, owner = self.plans[index]
        pieces, starts, ends = self.encoded.context(ex.context_index)
        return {
            "id": index,
            "question": question,
            "pieces": pieces,
            "windows": windows,
            "owner": owner,
            "target": None if self.targets is None else self.targets[index],
            "context": (self.squad.context(ex), starts, ends),
            "gold": gold_texts(ex) if ex.answers is not None else None,
        }

    def collater(self, samples):
        return collate_qa(samples, self.dictionary, self.pair_format)


def collate_qa(
    samples: Sequence[Mapping[str, Any]], dictionary, pair_format: PairFormat = PairFormat()
) -> Dict[str, Any]:
    """Rows (one per window, in ``pair_format``; ``segment_labels`` R x T in BERT's) with
    ``span_mask`` (R x T: context positions, where answers may start and end), ``max_context``
    (R x T: context positions whose piece belongs to this window), ``context_column`` (R: where the
    window begins in its row), ``window_start`` (R: its first context piece), ``row_example`` (R)
    and, for labelled samples, ``start_positions`` / ``end_positions`` (R; 0 = ``<s>`` when the
    window does not hold the answer, and in every window of an unanswerable question)."""
    if not samples:
        return {}
    bos, eos, pad = dictionary.bos(), dictionary.eos(), dictionary.pad()
    rows, segments, row_example, columns, window_starts, owned, targets = ([] for _ in range(7))
    for s, sample in enumerate(samples):
        question = [int(p) for p in sample["question"]]
        column = len(question) + pair_format.specials - 1  # after <s> q </s>(</s>)
        for k, (a, b) in enumerate(sample["windows"]):
            tokens, ids = pair_format.row(
                bos, eos, question, [int(p) for p in sample["pieces"][a:b]]
            )
            rows.append(tokens)
            segments.append(ids)
            row_example.append(s)
            columns.append(column)
            window_starts.append(a)
            owned.append(sample["owner"][a:b] == k)
            if sample["target"] is not None:
                first, last = sample["target"]
                inside = a <= first and last < b
                targets.append((column + first - a, column + last - a) if inside else (0, 0))
    width = max(len(r) for r in rows)
    src_tokens = torch.full((len(rows), width), pad, dtype=torch.long)
    span_mask = torch.zeros((len(rows), width), dtype=torch.bool)
    max_context = torch.zeros((len(rows), width), dtype=torch.bool)
    segment_labels = torch.zeros((len(rows), width), dtype=torch.long)
    for r, (tokens, ids, column, own) in enumerate(zip(rows, segments, columns, owned)):
        src_tokens[r, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        segment_labels[r, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        span_mask[r, column : column + len(own)] = True
        max_context[r, column : column + len(own)] = torch.from_numpy(own)
    batch = {
        "id": torch.tensor([sample["id"] for sample in samples], dtype=torch.long),
        "nsentences": len(samples),
        "ntokens": sum(len(r) for r in rows),
        "net_input": {
            "src_tokens": src_tokens,
            "src_lengths": torch.tensor([len(r) for r in rows]),
        },
        "span_mask": span_mask,
        "max_context": max_context,
        "context_column": torch.tensor(columns, dtype=torch.long),
        "window_start": torch.tensor(window_starts, dtype=torch.long),
        "row_example": torch.tensor(row_example, dtype=torch.long),
        "contexts": [sample["context"] for sample in samples],
        "gold": [sample["gold"] for sample in samples],
    }
    if pair_format.segments:
        batch["net_input"]["segment_labels"] = segment_labels
    if targets and len(targets) == len(rows):
        positions = torch.tensor(targets, dtype=torch.long)
        batch["start_positions"], batch["end_positions"] = positions[:, 0], positions[:, 1]
    return batch


# ---------------------------------------------------------------------------------------------------- decoding


def best_answers(
    start_logits: torch.Tensor,
    end_logits: torch.Tensor,
    batch: Mapping[str, Any],
    n_best: int = 20,
    max_answer_length: int = 30,
    top: int = 5,
) -> List[List[Dict[str, Any]]]:
    """Per question of ``batch``, up to ``top`` answers, best first: ``text`` (exactly
    ``context[start:end]``), ``start`` / ``end`` (characters), ``score`` (start + end logit) and
    ``probability`` (softmax over the question's distinct n-best answers). Candidates: the
    ``n_best`` best start and end positions of each window's context, end >= start, at most
    ``max_answer_length`` pieces, the start piece in the window it belongs to; answers that differ
    only in case are one (the best scored), empty ones are skipped. ``start_logits`` /
    ``end_logits``: R x T.
    """
    start_logits, end_logits = (
        start_logits.detach().float().cpu(),
        end_logits.detach().float().cpu(),
    )
    span_mask, max_context = batch["span_mask"].cpu(), batch["max_context"].cpu()
    columns, window_starts = batch["context_column"].tolist(), batch["window_start"].tolist()
    row_example = batch["row_example"].tolist()
    candidates: List[List[Tuple[float, int, int]]] = [[] for _ in batch["contexts"]]
    for r, s in enumerate(row_example):
        column, n = columns[r], int(span_mask[r].sum())
        starts, ends = start_logits[r, column : column + n], end_logits[r, column : column + n]
        owned = max_context[r, column : column + n].tolist()
        k = min(n_best, n)
        top_starts = torch.topk(starts, k).indices.tolist()
        top_ends = torch.topk(ends, k).indices.tolist()
        start_values, end_values = starts.tolist(), ends.tolist()
        for i in top_starts:
            if not owned[i]:
                continue
            for j in top_ends:
                if j < i or j - i + 1 > max_answer_length:
                    continue
                base = window_starts[r]
                candidates[s].append((start_values[i] + end_values[j], base + i, base + j))
    out = []
    for s, found in enumerate(candidates):
        text, char_starts, char_ends = batch["contexts"][s]
        found.sort(key=lambda c: (-c[0], c[1], c[2]))
        answers, seen = [], set()
        for score, first, last in found:
            a, b = int(char_starts[first]), int(char_ends[last])
            answer = text[a:b]
            key = answer.lower()
            if not answer.strip() or key in seen:
                continue
            seen.add(key)
            answers.append({"text": answer, "start": a, "end": b, "score": score})
            if len(answers) == n_best:
                break
        if answers:
            probabilities = torch.softmax(
                torch.tensor([a["score"] for a in answers], dtype=torch.float64), 0
            )
            for answer, p in zip(answers, probabilities.tolist()):
                answer["probability"] = p
        out.append(answers[:top])
    return out


def null_score_diffs(
    answers: Sequence[Sequence[Mapping[str, Any]]],
    start_logits: torch.Tensor,
    end_logits: torch.Tensor,
    batch,
) -> List[Optional[float]]:
    """Per question of ``batch``, its null score minus the score of its best span
    (``answers[s][0]``; None when it has no span): the null score is the smallest ``<s>`` start +
    end logit over the question's windows (BERT's ``run_squad`` and HF's ``run_qa`` for SQuAD v2.0).
    ``start_logits`` / ``end_logits``: R x T."""
    null = (start_logits[:, 0] + end_logits[:, 0]).detach().float().cpu()
    rows = batch["row_example"].cpu()
    diffs: List[Optional[float]] = []
    for s, ranked in enumerate(answers):
        best_null = float(null[rows == s].min())
        diffs.append(best_null - ranked[0]["score"] if ranked else None)
    return diffs


def v2_predictions(
    answers: Sequence[Sequence[Mapping[str, Any]]],
    diffs: Sequence[Optional[float]],
    threshold: float,
) -> List[str]:
    """SQuAD v2.0 answers: "" (no answer) where the null score diff exceeds ``threshold`` or no span
    was found, else the best span's text (the official ``evaluate-v2.0.py``'s
    ``pred_na = na_prob > thresh``)."""
    return [
        "" if diff is None or diff > threshold else ranked[0]["text"]
        for ranked, diff in zip(answers, diffs)
    ]

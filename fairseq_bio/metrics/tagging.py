"""Tagging metrics: entity-level P/R/F1 with conlleval semantics, and word-level macro F1 for PICO.

Entities are conlleval.pl's chunks with seqeval's BIOES rules (``get_entities``), read per sentence
and micro-averaged over all chunks (conlleval's ``FB1``, seqeval's ``f1_score`` default). PICO is
BLURB's word-level F1 per element, averaged (``token_macro_f1``, as EBM-NLP's evaluation). Every
score comes from summable counts, so batches add up to corpus-level scores."""

from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from .sums import Sums

Entity = Tuple[str, int, int]

# Chunk prefixes conlleval knows, plus BIOES's S; BIOUL's L/U are read as E/S.
PREFIXES = frozenset({"B", "I", "E", "S", "O", ".", "[", "]"})
PREFIX_ALIASES = {"L": "E", "U": "S"}
OUTSIDE = "O"
# PAR+INT: a word inside two PICO elements' spans (word-level scores count it for each;
# entity-level scores see the joint type as a type of its own)
JOINT = "+"


@lru_cache(maxsize=4096)
def split_tag(tag: str) -> Tuple[str, str]:
    """(prefix, type) of a tag, split at the first hyphen as conlleval does (``B-Disease`` ->
    ``B``, ``Disease``; ``O`` and bare ``B``/``I`` have the empty type); ``L``/``U`` come back as
    ``E``/``S``."""
    prefix, _, type_ = tag.partition("-")
    prefix = PREFIX_ALIASES.get(prefix, prefix)
    if prefix not in PREFIXES:
        raise ValueError(f"tag {tag!r} is not O or a B-/I-/E-/S-/L-/U- tag")
    return prefix, type_


def _chunk_ends(prev: str, tag: str, prev_type: str, type_: str) -> bool:
    """conlleval's endOfChunk (with seqeval's BIOES rules): a chunk ended between the previous word
    and this one: the previous tag is ``E``, ``S``, ``[`` or ``]``; the previous tag is ``B`` or
    ``I`` and this one is ``B``, ``S`` or ``O``; or the type changes after any tag but ``O`` and
    ``.``."""
    if prev in ("E", "S", "[", "]"):
        return True
    if prev in ("B", "I") and tag in ("B", "S", "O"):
        return True
    return prev not in ("O", ".") and prev_type != type_


def _chunk_starts(prev: str, tag: str, prev_type: str, type_: str) -> bool:
    """conlleval's startOfChunk (with seqeval's BIOES rules): a chunk starts at this word: at
    ``B``, ``S``, ``[`` and ``]`` (one-word chunks, conlleval's correction of 1998-12-22); at ``I``
    or ``E`` after ``O``, ``E`` or ``S``; and at any tag but ``O`` and ``.`` whose type differs
    from the previous one's (``.`` never starts one)."""
    if tag in ("B", "S", "[", "]"):
        return True
    if tag in ("I", "E") and prev in ("O", "E", "S"):
        return True
    return tag not in ("O", ".") and prev_type != type_


def get_entities(tags: Sequence[str]) -> List[Entity]:
    """Chunks of one sentence as ``(type, start, end_exclusive)``, in order, by conlleval's rules.

    So an ``I-X`` after ``O`` or after another type starts a chunk (IOB1-style input), ``B-X B-X``
    is two chunks, ``E-X`` without a ``B-X`` is a chunk of its own, and BIOUL's ``L``/``U`` read as
    ``E``/``S``. Where conlleval.pl and seqeval disagree or are undefined (inputs no tagging scheme
    produces): ``E-X B-X`` is two chunks (seqeval; conlleval.pl neither ends nor starts one there);
    a chunk that starts while another is open closes the open one (conlleval.pl counts both as
    found and neither as correct); an ``O`` word and the end of the sentence close whatever is open
    (conlleval.pl keeps a bare ``B`` chunk open across ``. O``)."""
    chunks = []
    prev, prev_type = OUTSIDE, ""
    begin, begin_type = -1, ""  # the open chunk; -1: none
    for i, tag in enumerate(tags):
        try:
            prefix, type_ = split_tag(tag)
        except (ValueError, AttributeError, TypeError):
            raise ValueError(f"word {i}: tag {tag!r} is not O or a B-/I-/E-/S-/L-/U- tag") from None
        starts = _chunk_starts(prev, prefix, prev_type, type_)
        if begin >= 0 and (
            starts or prefix == OUTSIDE or _chunk_ends(prev, prefix, prev_type, type_)
        ):
            chunks.append((begin_type, begin, i))
            begin = -1
        if starts:
            begin, begin_type = i, type_
        prev, prev_type = prefix, type_
    if begin >= 0:
        chunks.append((begin_type, begin, len(tags)))
    return chunks


@dataclass
class SpanCounts(Sums):
    """Summable counts: gold items, predicted items, and predicted items that are correct."""

    gold: int = 0
    pred: int = 0
    correct: int = 0

    def prf(self) -> Tuple[float, float, float]:
        """(precision, recall, F1) of these counts."""
        return prf(self.correct, self.pred, self.gold)


def prf(correct: float, pred: float, gold: float) -> Tuple[float, float, float]:
    """(precision, recall, F1); 0.0 where a denominator is 0."""
    precision = correct / pred if pred else 0.0
    recall = correct / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def _sentence_pairs(
    gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]
) -> Iterable[Tuple[list, list]]:
    """Pairs of (gold, predicted) tag lists, checked to be sentences of equal length."""
    gold, pred = list(gold), list(pred)
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold sentences but {len(pred)} predicted sentences")
    for i, (g, p) in enumerate(zip(gold, pred)):
        if isinstance(g, str) or isinstance(p, str):
            raise ValueError(
                f"sentence {i}: expected a list of tags, got the string {g if isinstance(g, str) else p!r}"
            )
        g, p = list(g), list(p)
        if len(g) != len(p):
            raise ValueError(f"sentence {i}: {len(g)} gold tags but {len(p)} predicted tags")
        yield g, p


def _entities(tags: list, sentence: int, side: str) -> List[Entity]:
    try:
        return get_entities(tags)
    except ValueError as e:
        raise ValueError(f"sentence {sentence} ({side}), {e}") from None


def span_counts_by_type(
    gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]
) -> Dict[str, SpanCounts]:
    """Entity counts per type (types sorted), over sentences scored separately (no chunk runs
    across sentences); a predicted chunk is correct when its type, start and end equal a gold
    chunk's."""
    counts: Dict[str, SpanCounts] = {}
    for i, (g, p) in enumerate(_sentence_pairs(gold, pred)):
        gold_chunks, pred_chunks = _entities(g, i, "gold"), _entities(p, i, "predicted")
        correct = set(gold_chunks).intersection(pred_chunks)
        for chunks, field in ((gold_chunks, "gold"), (pred_chunks, "pred"), (correct, "correct")):
            for type_, _, _ in chunks:
                c = counts.setdefault(type_, SpanCounts())
                setattr(c, field, getattr(c, field) + 1)
    return dict(sorted(counts.items()))


def span_counts(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> SpanCounts:
    """Entity counts (gold, predicted, correct) over sentences scored separately."""
    return sum(span_counts_by_type(gold, pred).values(), SpanCounts())


def span_prf(
    gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]
) -> Tuple[float, float, float]:
    """Entity-level micro (precision, recall, F1), as conlleval and seqeval's default mode."""
    return span_counts(gold, pred).prf()


def word_label(tag: str) -> str:
    """A word's label for word-level scores: the tag's type (prefix stripped), or ``O`` outside any
    type."""
    try:
        prefix, type_ = split_tag(tag)
    except (ValueError, AttributeError, TypeError):
        raise ValueError(f"tag {tag!r} is not O or a B-/I-/E-/S-/L-/U- tag") from None
    return OUTSIDE if prefix in (OUTSIDE, ".") else type_


def element_types(types: Iterable[str]) -> List[str]:
    """The word-level labels of entity types, sorted: a joint type (``PAR+INT``: a word of two PICO
    elements) counts as each of its parts."""
    return sorted({part for type_ in types for part in type_.split(JOINT)})


def token_counts(
    gold_tags: Sequence[Sequence[str]], pred_tags: Sequence[Sequence[str]]
) -> Dict[str, SpanCounts]:
    """Word counts per label (prefix stripped, ``O`` included; labels sorted), summable.

    A word in two elements' spans (PubMedBERT §4.2: "a token may belong to more than one element";
    about 3 % of PIO words) keeps both when the data joins their types (``I-PAR+INT``,
    ``fairseq-bio-convert-tagging ebm-nlp --overlap joint``): the tagger learns the joint type as
    one more class, and here the word is a gold / predicted / correct word of every part it holds
    (per label, a binary column: scikit-learn's multi-label F1 over MultiLabelBinarizer rows)."""
    counts: Dict[str, SpanCounts] = {}
    for i, (g, p) in enumerate(_sentence_pairs(gold_tags, pred_tags)):
        for j, (gt, pt) in enumerate(zip(g, p)):
            try:
                gl, pl = set(word_label(gt).split(JOINT)), set(word_label(pt).split(JOINT))
            except ValueError as e:
                raise ValueError(f"sentence {i}, word {j}: {e}") from None
            for label in gl:
                counts.setdefault(label, SpanCounts()).gold += 1
            for label in pl:
                counts.setdefault(label, SpanCounts()).pred += 1
            for label in gl & pl:
                counts[label].correct += 1
    return dict(sorted(counts.items()))


def token_macro_f1(
    gold: Sequence[Sequence[str]],
    pred: Sequence[Sequence[str]],
    exclude: Sequence[str] = (OUTSIDE,),
    labels: Optional[Sequence[str]] = None,
) -> float:
    """Word-level macro F1 (BLURB PICO): mean per-label word F1 over ``labels`` (default: every
    label seen in gold or predictions) minus ``exclude``; 0.0 when no label is left.

    BLURB §4.1: "For each of the PIO elements in an abstract, we tally the F1 score at the word
    level, and then compute the final score as the average among PIO elements in the dataset" (Gu
    et al. 2020). EBM-NLP's ``models/eval.py`` (github.com/bepnye/EBM-NLP) scores each element over
    the words of all test documents with its "No Label" class left out. Per label L, over all words
    of all sentences, ``F1_L = 2 * correct_L / (gold_L + pred_L)`` (0 when both are 0), so the
    result equals ``sklearn.metrics.f1_score(words_gold, words_pred, average="macro",
    labels=...)``. Outside words are labelled ``O``, so an entity type must not be called ``O``
    (BLURB's PICO types are ``PAR``, ``INT``, ``OUT``)."""
    counts = token_counts(gold, pred)
    chosen = [
        label
        for label in element_types(counts if labels is None else labels)
        if label not in exclude
    ]
    if not chosen:
        return 0.0
    return sum(counts.get(label, SpanCounts()).prf()[2] for label in chosen) / len(chosen)


def span_report(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> str:
    """conlleval's summary: token accuracy, entity P/R/F1 overall and per type (percentages)."""
    pairs = list(_sentence_pairs(gold, pred))
    tokens = sum(len(g) for g, _ in pairs)
    right = sum(gt == pt for g, p in pairs for gt, pt in zip(g, p))
    by_type = span_counts_by_type([g for g, _ in pairs], [p for _, p in pairs])
    total = sum(by_type.values(), SpanCounts())
    p, r, f = (100 * x for x in total.prf())
    lines = [
        f"processed {tokens} tokens with {total.gold} phrases; found: {total.pred} phrases; correct: {total.correct}.",
        f"accuracy: {100 * right / max(tokens, 1):6.2f}%; precision: {p:6.2f}%; recall: {r:6.2f}%; FB1: {f:6.2f}",
    ]
    width = max((len(t) for t in by_type), default=0)
    for type_, c in by_type.items():
        p, r, f = (100 * x for x in c.prf())
        lines.append(
            f"{type_:>{width}}: precision: {p:6.2f}%; recall: {r:6.2f}%; FB1: {f:6.2f}  {c.pred}"
        )
    return "\n".join(lines)

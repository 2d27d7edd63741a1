"""Sentence- and document-level classification metrics for BLURB and BLUE, each from summable
counts.

Relation extraction: micro P/R/F1 over the positive classes (``micro_prf``). PubMedQA, BioASQ
yes/no and MedNLI: accuracy and macro F1 (``accuracy``, ``macro_f1``). HoC: BLURB's F1 over
(abstract, hallmark) cells (``hoc_prf``) and BLUE's example-based F1 (``blue_hoc_prf``). Each
function names the reference it matches."""

from collections.abc import Mapping as MappingABC
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Dict, Hashable, Iterable, List, Mapping, Optional, Sequence, Tuple

from .sums import Sums
from .tagging import SpanCounts

# The negative class of every RE release BLURB and BLUE use: BLURB's seqcls files and GAD ("0"),
# ChemProt and i2b2-2010 ("false"), BLUE's DDI TSVs ("DDI-false").
# BLURB's data-generation TSVs say "false" (ChemProt), "DDI-false" (DDI) and "0" (GAD); the seqcls
# files made from them (michiyasunaga/LinkBERT ``scripts/preprocess_blurb.py``;
# ``../shared/data/re``) rename every negative to "0". A label is negative when it or its ``str()``
# is listed, so integer class ids work too.
NEGATIVE_LABELS = frozenset({"0", "false", "DDI-false"})


def _aligned(gold: Sequence, pred: Sequence, what: str = "labels") -> Tuple[list, list]:
    """Gold and predicted sequences as lists, checked to be the same length."""
    gold, pred = list(gold), list(pred)
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold {what} but {len(pred)} predicted {what}")
    return gold, pred


def is_negative(label: Hashable, negatives: Iterable = NEGATIVE_LABELS) -> bool:
    """Whether ``label`` (or its ``str()``) names a negative (no-relation) class."""
    negatives = negatives if isinstance(negatives, (set, frozenset)) else set(negatives)
    return label in negatives or str(label) in negatives


# ---------------------------------------------------------------------------------------------------------------
# Single-label classification: per-class counts -> RE micro F1, accuracy, macro F1


@dataclass
class AccuracyCounts(Sums):
    """Summable counts: examples and correctly predicted examples."""

    correct: int = 0
    total: int = 0

    def value(self) -> float:
        """Accuracy; 0.0 for no examples."""
        return self.correct / self.total if self.total else 0.0


def class_counts(gold: Sequence[Hashable], pred: Sequence[Hashable]) -> Dict[Hashable, SpanCounts]:
    """Per-class counts (gold, predicted, correct) of single-label predictions, labels sorted by
    ``str``."""
    gold, pred = _aligned(gold, pred)
    counts: Dict[Hashable, SpanCounts] = {}
    for g, p in zip(gold, pred):
        counts.setdefault(g, SpanCounts()).gold += 1
        counts.setdefault(p, SpanCounts()).pred += 1
        if g == p:
            counts[g].correct += 1
    return dict(sorted(counts.items(), key=lambda kv: str(kv[0])))


def add_class_counts(*many: Mapping[Hashable, SpanCounts]) -> Dict[Hashable, SpanCounts]:
    """Per-class counts of several batches added label by label."""
    total: Dict[Hashable, SpanCounts] = {}
    for counts in many:
        for label, c in counts.items():
            total[label] = total.get(label, SpanCounts()) + c
    return dict(sorted(total.items(), key=lambda kv: str(kv[0])))


def positive_counts_from(
    counts: Mapping[Hashable, SpanCounts], negatives: Iterable = NEGATIVE_LABELS
) -> SpanCounts:
    """Counts pooled over the positive classes of per-class counts (RE micro average)."""
    negatives = set(negatives)
    return sum(
        (c for label, c in counts.items() if not is_negative(label, negatives)), SpanCounts()
    )


def positive_counts(
    gold: Sequence[Hashable], pred: Sequence[Hashable], negatives: Iterable = NEGATIVE_LABELS
) -> SpanCounts:
    """RE counts: gold positives, predicted positives, and predicted positives equal to gold
    (summable)."""
    return positive_counts_from(class_counts(gold, pred), negatives)


def micro_prf(
    gold: Sequence[Hashable], pred: Sequence[Hashable], negatives: Iterable = NEGATIVE_LABELS
) -> Tuple[float, float, float]:
    """Micro (precision, recall, F1) over the positive classes (BLURB/BLUE relation extraction).

    BLURB scores ChemProt, DDI and GAD by "micro F1" (Gu et al. 2020, Table 3) over every class but
    the negative one; LinkBERT's ``PRF1`` (``src/seqcls/run_seqcls.py``) counts, over examples i,
    correct = #{pred_i == gold_i, pred_i positive}, pred = #{pred_i positive}, gold = #{gold_i
    positive}, which is ``sklearn.metrics.f1_score(gold, pred, labels=<positive labels>,
    average="micro")``. BLUE's ``eval_rel.py`` / ``ddi/eval_ddi.py`` / ``i2b2_2010/eval_i2b2.py``
    (ncbi-nlp/BLUE_Benchmark) compute the same average over the classes left after dropping
    ``false`` / ``DDI-false``."""
    return positive_counts(gold, pred, negatives).prf()


def micro_f1(
    gold: Sequence[Hashable], pred: Sequence[Hashable], negatives: Iterable = NEGATIVE_LABELS
) -> float:
    """Micro F1 over the positive classes (BLURB/BLUE relation extraction)."""
    return micro_prf(gold, pred, negatives)[2]


def accuracy_from(counts: Mapping[Hashable, SpanCounts]) -> float:
    """Accuracy of per-class counts: correct over gold examples; 0.0 for none."""
    total = sum(c.gold for c in counts.values())
    return sum(c.correct for c in counts.values()) / total if total else 0.0


def accuracy_counts(gold: Sequence[Hashable], pred: Sequence[Hashable]) -> AccuracyCounts:
    """Summable accuracy counts of single-label predictions."""
    gold, pred = _aligned(gold, pred)
    return AccuracyCounts(sum(g == p for g, p in zip(gold, pred)), len(gold))


def accuracy(gold: Sequence[Hashable], pred: Sequence[Hashable]) -> float:
    """Fraction of predictions equal to gold; 0.0 for no examples."""
    return accuracy_counts(gold, pred).value()


def macro_f1_from(
    counts: Mapping[Hashable, SpanCounts], labels: Optional[Sequence[Hashable]] = None
) -> float:
    """Mean per-class F1 over ``labels`` (default: every class seen in gold or predictions); 0.0
    when none."""
    chosen = list(counts if labels is None else labels)
    if not chosen:
        return 0.0
    return sum(counts.get(label, SpanCounts()).prf()[2] for label in chosen) / len(chosen)


def macro_f1(
    gold: Sequence[Hashable], pred: Sequence[Hashable], labels: Optional[Sequence[Hashable]] = None
) -> float:
    """Macro F1 as pubmedqa/pubmedqa's ``evaluation.py`` (``f1_score(average="macro")``): mean
    per-class F1 over the classes seen in gold or predictions (that script's other score is
    ``accuracy``)."""
    return macro_f1_from(class_counts(gold, pred), labels)


# ---------------------------------------------------------------------------------------------------------------
# Multi-label document classification (HoC)


def _binary_rows(
    rows: Sequence[Sequence[Any]], side: str, width: Optional[int] = None
) -> List[Tuple[int, ...]]:
    """Rows of 0/1 labels as int tuples, all of one width; one-line errors name the row and
    column."""
    out = []
    for i, row in enumerate(rows):
        if isinstance(row, (str, bytes)) or not isinstance(row, Iterable):
            raise ValueError(f"{side} row {i}: expected a list of 0/1 labels, got {row!r}")
        row = tuple(row)
        width = len(row) if width is None else width
        if len(row) != width:
            raise ValueError(f"{side} row {i}: {len(row)} labels, expected {width}")
        for j, v in enumerate(row):
            if v not in (0, 1):
                raise ValueError(f"{side} row {i}, label {j}: {v!r} is not 0 or 1")
        out.append(tuple(int(v) for v in row))
    return out


def document_id(row_id: Any) -> str:
    """The abstract a BLURB/BLUE HoC row belongs to: its id up to the first ``_`` (``"12345_3"`` ->
    ``"12345"``)."""
    return str(row_id).split("_", 1)[0]


def group_by_document(
    ids: Sequence[Any], gold: Sequence[Sequence[int]], pred: Sequence[Sequence[int]]
) -> Tuple[List[str], List[Tuple[int, ...]], List[Tuple[int, ...]]]:
    """Rows ORed per abstract (first-seen order), as both HoC scripts do: (documents, gold rows,
    predicted rows)."""
    gold, pred = _aligned(gold, pred, "rows")
    ids = list(ids)
    if len(ids) != len(gold):
        raise ValueError(f"{len(ids)} ids but {len(gold)} rows")
    gold, pred = _binary_rows(gold, "gold"), _binary_rows(
        pred, "predicted", len(gold[0]) if gold else None
    )
    docs: Dict[str, List[List[int]]] = {}
    for row_id, g, p in zip(ids, gold, pred):
        doc = docs.setdefault(document_id(row_id), [[0] * len(g), [0] * len(p)])
        doc[0] = [a | b for a, b in zip(doc[0], g)]
        doc[1] = [a | b for a, b in zip(doc[1], p)]
    return list(docs), [tuple(g) for g, _ in docs.values()], [tuple(p) for _, p in docs.values()]


def _documents(gold, pred, ids) -> Tuple[List[Tuple[int, ...]], List[Tuple[int, ...]]]:
    if ids is not None:
        _, gold, pred = group_by_document(ids, gold, pred)
        return gold, pred
    gold, pred = _aligned(gold, pred, "rows")
    gold = _binary_rows(gold, "gold")
    return gold, _binary_rows(pred, "predicted", len(gold[0]) if gold else None)


def multilabel_counts(
    gold: Sequence[Sequence[int]],
    pred: Sequence[Sequence[int]],
    ids: Optional[Sequence[Any]] = None,
) -> List[SpanCounts]:
    """Per-label counts over documents (rows ORed per abstract when ``ids`` are given); summable per
    label."""
    gold, pred = _documents(gold, pred, ids)
    width = len(gold[0]) if gold else 0
    counts = [SpanCounts() for _ in range(width)]
    for g, p in zip(gold, pred):
        for c, gv, pv in zip(counts, g, p):
            c.gold += gv
            c.pred += pv
            c.correct += gv & pv
    return counts


def add_multilabel_counts(*many: Sequence[SpanCounts]) -> List[SpanCounts]:
    """Per-label counts of several batches added label by label."""
    widths = {len(counts) for counts in many}
    if len(widths) > 1:
        raise ValueError(f"per-label counts of different widths: {sorted(widths)}")
    return [sum(column, SpanCounts()) for column in zip(*many)]


def hoc_prf_from(
    counts: Sequence[SpanCounts], average: str = "micro"
) -> Tuple[float, float, float]:
    """HoC (precision, recall, F1) of per-label counts: pooled cells (``micro``, BLURB) or mean per
    label (``macro``: what one third-party BLURB evaluator, a "BioNLP Benchmarking" package's
    ``HoCEvaluator``, reports under the name ``average_micro_f1``; here for comparison)."""
    if average == "micro":
        return sum(counts, SpanCounts()).prf()
    if average == "macro":
        if not counts:
            return 0.0, 0.0, 0.0
        per_label = [c.prf() for c in counts]
        return tuple(sum(x[k] for x in per_label) / len(per_label) for k in range(3))
    raise ValueError(f"average must be 'micro' or 'macro', not {average!r}")


def hoc_prf(
    gold: Sequence[Sequence[int]],
    pred: Sequence[Sequence[int]],
    ids: Optional[Sequence[Any]] = None,
    average: str = "micro",
) -> Tuple[float, float, float]:
    """BLURB's HoC (precision, recall, F1): rows ORed per abstract, then micro over all (abstract,
    hallmark) cells.

    Gu et al. §4.5: "average micro F1 across the ten cancer hallmarks". The public BLURB
    implementation (michiyasunaga/LinkBERT ``src/seqcls/utils_hoc.py`` ``eval_hoc``, whose scores
    are on the BLURB leaderboard and which SciFive and others cite) ORs the ten binary labels of
    all sentence rows of one abstract (id ``<PMID>_<n>`` up to the first ``_``), then pools every
    cell: correct = #{pred[d,h] = gold[d,h] = 1}, pred = #{pred[d,h] = 1}, gold = #{gold[d,h] = 1},
    i.e. ``sklearn.metrics.f1_score(Y_gold, Y_pred, average="micro")`` on the abstracts x 10
    indicator matrix. The abstract-level files here (``../shared/data/hoc``, one row per PMID) make
    the grouping the identity."""
    return hoc_prf_from(multilabel_counts(gold, pred, ids), average)


def hoc_f1(
    gold: Sequence[Sequence[int]],
    pred: Sequence[Sequence[int]],
    ids: Optional[Sequence[Any]] = None,
    average: str = "micro",
) -> float:
    """BLURB's HoC score (LinkBERT ``eval_hoc``): F1 pooled over all (abstract, hallmark) cells."""
    return hoc_prf(gold, pred, ids, average)[2]


@dataclass
class ExampleSums(Sums):
    """Summable example-based sums: per-document precision and recall added up, and the document
    count."""

    precision: float = 0.0
    recall: float = 0.0
    total: int = 0

    def prf(self) -> Tuple[float, float, float]:
        """(mean precision, mean recall, their harmonic mean) as BLUE's eval_hoc.py; zeros for no
        documents."""
        if not self.total:
            return 0.0, 0.0, 0.0
        p, r = self.precision / self.total, self.recall / self.total
        return p, r, 2 * p * r / (p + r) if p + r else 0.0


def example_based_sums(
    gold: Sequence[Sequence[int]],
    pred: Sequence[Sequence[int]],
    ids: Optional[Sequence[Any]] = None,
) -> ExampleSums:
    """BLUE HoC sums over abstracts (rows ORed per abstract given ``ids``); an abstract without gold
    is an error."""
    docs = None
    if ids is not None:
        docs, gold, pred = group_by_document(ids, gold, pred)
    else:
        gold, pred = _documents(gold, pred, None)
    sums = ExampleSums()
    for i, (g, p) in enumerate(zip(gold, pred)):
        n_gold, n_pred = sum(g), sum(p)
        both = sum(a & b for a, b in zip(g, p))
        if not n_gold:
            where = f"abstract {docs[i]}" if docs else f"row {i}"
            raise ValueError(
                f"{where}: no gold hallmark; BLUE's example-based F1 is undefined for it (BLUE drops them)"
            )
        sums.precision += both / n_pred if n_pred else 0.0
        sums.recall += both / n_gold
        sums.total += 1
    return sums


def blue_hoc_prf(
    gold: Sequence[Sequence[int]],
    pred: Sequence[Sequence[int]],
    ids: Optional[Sequence[Any]] = None,
) -> Tuple[float, float, float]:
    """BLUE's HoC (precision, recall, F1): example-based over abstracts, F1 of the mean precision
    and recall.

    Peng et al. 2019 report "the example-based F1-score on the abstract level"; BLUE's
    ``eval_hoc.py`` groups rows by abstract as BLURB's does and computes, over abstracts d with
    gold set G_d and predicted set P_d, P = mean_d |G_d & P_d| / |P_d| (0 when P_d is empty), R =
    mean_d |G_d & P_d| / |G_d| and F1 = 2PR / (P + R), not the mean per-abstract F1. BLUE dropped
    the abstracts with no hallmark and its script divides by |G_d|; here such an abstract is a
    one-line error."""
    return example_based_sums(gold, pred, ids).prf()


def blue_hoc_f1(
    gold: Sequence[Sequence[int]],
    pred: Sequence[Sequence[int]],
    ids: Optional[Sequence[Any]] = None,
) -> float:
    """BLUE's HoC score: example-based F1 on the abstract level (ncbi-nlp/BLUE_Benchmark
    eval_hoc.py)."""
    return blue_hoc_prf(gold, pred, ids)[2]


# ---------------------------------------------------------------------------------------------------------------
# Flat logging outputs: fairseq sums every key of the logging outputs, so summable statistics travel
# as flat keys


def log_fields(stats: Any, prefix: str) -> Dict[str, float]:
    """Flat logging-output keys: ``{prefix}{field}``, or ``{prefix}{field}_{label}`` for a dict or
    list of stats."""
    if is_dataclass(stats):
        return {f"{prefix}{f.name}": getattr(stats, f.name) for f in fields(stats)}
    items = stats.items() if isinstance(stats, MappingABC) else enumerate(stats)
    out: Dict[str, float] = {}
    for label, value in items:
        out.update({f"{prefix}{f.name}_{label}": getattr(value, f.name) for f in fields(value)})
    return out


def from_log_fields(
    cls: type, totals: Mapping[str, float], prefix: str, labels: Optional[Sequence] = None
) -> Any:
    """Summed statistics back from flat totals (missing keys count 0): one ``cls``, or a dict of
    them per label."""

    def one(suffix: str):
        # fairseq hands sums back as floats: cast each to its field's type (that of its default)
        return cls(
            **{
                f.name: type(f.default)(totals.get(f"{prefix}{f.name}{suffix}", 0))
                for f in fields(cls)
            }
        )

    if labels is None:
        return one("")
    return {label: one(f"_{label}") for label in labels}


__all__ = [
    "NEGATIVE_LABELS",
    "AccuracyCounts",
    "ExampleSums",
    "accuracy",
    "accuracy_counts",
    "accuracy_from",
    "add_class_counts",
    "add_multilabel_counts",
    "blue_hoc_f1",
    "blue_hoc_prf",
    "class_counts",
    "document_id",
    "example_based_sums",
    "from_log_fields",
    "group_by_document",
    "hoc_f1",
    "hoc_prf",
    "hoc_prf_from",
    "is_negative",
    "log_fields",
    "macro_f1",
    "macro_f1_from",
    "micro_f1",
    "micro_prf",
    "multilabel_counts",
    "positive_counts",
    "positive_counts_from",
]

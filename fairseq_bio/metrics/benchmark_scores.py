"""The BLURB, BLUE and bio-lm benchmark metrics: a benchmark's datasets (``Benchmark`` /
``BenchmarkTask``: task type and metric), every metric of a prediction file's predictions
(``prediction_scores``), trivial baselines and the aggregate.

Which datasets each benchmark has, and their metrics, is the dataset table
``hydra_configs/runner/datasets.yaml`` (``fairseq_bio.runner.datasets`` builds the benchmarks from
it). Scores are averaged as given, so give every dataset on one scale (the papers' tables and the
runner use percent)."""

import math
import numbers
import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

from .classification import (
    NEGATIVE_LABELS,
    accuracy,
    example_based_sums,
    group_by_document,
    hoc_prf_from,
    macro_f1,
    micro_prf,
    multilabel_counts,
)
from .similarity import pearson
from .tagging import span_prf, token_macro_f1

NER = "ner"
SEQUENCE_LABELLING = "sequence_labelling"  # bio-lm's two task types
TEXT_CLASSIFICATION = "classification"
PICO = "pico"
RELATION_EXTRACTION = "relation_extraction"
SENTENCE_SIMILARITY = "sentence_similarity"
DOCUMENT_CLASSIFICATION = "document_classification"
QUESTION_ANSWERING = "question_answering"
INFERENCE = "inference"

# What predictions are: tag sequences (tagging), one label (classification), a 0/1 row (multilabel),
# a score.
TAGS, CLASSIFICATION, MULTILABEL, REGRESSION = (
    "tagging",
    "classification",
    "multilabel",
    "regression",
)
COUNTS = ("documents",)  # keys of prediction_scores that are counts, not fractions


@dataclass(frozen=True)
class Metric:
    """A benchmark metric: what it is, the kind of predictions it scores, and its key in
    ``prediction_scores`` (the name the fine-tuning criteria log it under)."""

    description: str
    kind: str
    key: str

    @property
    def example_based(self) -> bool:
        return self.key.startswith("example_")


METRICS = {
    "entity_f1": Metric(
        "entity-level micro F1, conlleval semantics (metrics.tagging.span_prf)", TAGS, "f1"
    ),
    "word_macro_f1": Metric(
        "word-level macro F1 over the PIO labels (metrics.tagging.token_macro_f1)",
        TAGS,
        "word_macro_f1",
    ),
    "micro_f1": Metric(
        "micro F1 over the positive classes (metrics.classification.micro_f1)", CLASSIFICATION, "f1"
    ),
    "pearson": Metric("Pearson's r (metrics.similarity.pearson)", REGRESSION, "pearson"),
    "hoc_micro_f1": Metric(
        "BLURB HoC: micro F1 over all (abstract, hallmark) cells (metrics.classification.hoc_f1)",
        MULTILABEL,
        "f1",
    ),
    "hoc_example_f1": Metric(
        "BLUE HoC: example-based F1 on the abstract level (metrics.classification.blue_hoc_f1)",
        MULTILABEL,
        "example_f1",
    ),
    "accuracy": Metric("accuracy (metrics.classification.accuracy)", CLASSIFICATION, "accuracy"),
    "macro_f1": Metric(
        "macro F1 over the classes (metrics.classification.macro_f1)", CLASSIFICATION, "macro_f1"
    ),
}


def prediction_scores(
    kind: str,
    gold: Sequence,
    pred: Sequence,
    ids: Optional[Sequence[Any]] = None,
    negatives: Any = NEGATIVE_LABELS,
    labels: Optional[Sequence] = None,
    example_based: bool = False,
) -> Dict[str, Any]:
    """Every metric of predictions of one ``kind`` against gold (fractions), keyed as the
    fine-tuning criteria log them; the one computation of a test score from predictions
    (fairseq-bio-predict prints it, fairseq-bio-blurb reports it).

    - tagging: entity ``precision`` / ``recall`` / ``f1`` (conlleval) and ``word_macro_f1`` (over
      ``labels``, default those seen);
    - classification: ``accuracy``, ``macro_f1`` (over ``labels``, default those seen) and
      ``precision`` / ``recall`` / ``f1`` micro over the classes not in ``negatives``;
    - multilabel: ``precision`` / ``recall`` / ``f1`` pooled over (document, label) cells and
      ``macro_f1`` (mean per label), rows ORed per document when ``ids`` are given; with
      ``example_based`` BLUE's ``example_precision`` / ``example_recall`` / ``example_f1`` over the
      documents with a gold label, and their count ``documents``;
    - regression: ``pearson``.
    """
    if kind == TAGS:
        scores = dict(zip(("precision", "recall", "f1"), span_prf(gold, pred)))
        scores["word_macro_f1"] = token_macro_f1(gold, pred, labels=labels)
        return scores
    if kind == CLASSIFICATION:
        scores = {"accuracy": accuracy(gold, pred), "macro_f1": macro_f1(gold, pred, labels)}
        scores.update(zip(("precision", "recall", "f1"), micro_prf(gold, pred, negatives)))
        return scores
    if kind == REGRESSION:
        return {"pearson": pearson(pred, gold)}
    if kind != MULTILABEL:
        raise ValueError(
            f"unknown kind of predictions {kind!r}; known: {TAGS}, {CLASSIFICATION}, {MULTILABEL}, "
            f"{REGRESSION}"
        )
    if ids is not None:
        _, gold, pred = group_by_document(ids, gold, pred)
    counts = multilabel_counts(gold, pred)
    scores = dict(zip(("precision", "recall", "f1"), hoc_prf_from(counts)))
    scores["macro_f1"] = hoc_prf_from(counts, "macro")[2]
    if (
        example_based
    ):  # BLUE's script divides by zero on a document without a gold label; the criterion skips it
        labelled = [(g, p) for g, p in zip(gold, pred) if any(g)]
        sums = example_based_sums([g for g, _ in labelled], [p for _, p in labelled])
        scores.update(zip(("example_precision", "example_recall", "example_f1"), sums.prf()))
        scores["documents"] = sums.total
    return scores


def percentages(scores: Mapping[str, Any]) -> Dict[str, Any]:
    """``prediction_scores`` x 100, as the criteria log them and the reports show them (counts left
    as they are)."""
    return {k: v if k in COUNTS else 100 * v for k, v in scores.items()}


def dataset_key(name: str) -> str:
    """A dataset name compared loosely: lower case, letters and digits only (``"BC5-chem"`` ->
    ``"bc5chem"``)."""
    return re.sub(r"[^0-9a-z]", "", str(name).lower())


@dataclass(frozen=True)
class BenchmarkTask:
    """One dataset of a benchmark: its registry name, display title, task type and headline
    metric."""

    name: str
    title: str
    task_type: str
    metric: str
    aliases: Tuple[str, ...] = ()
    negatives: Tuple[str, ...] = ()
    clinical: bool = False
    extra_metrics: Tuple[str, ...] = ()

    def __post_init__(self):
        for metric in (self.metric,) + self.extra_metrics:
            if metric not in METRICS:
                raise ValueError(
                    f"{self.name}: unknown metric {metric!r}; known: {', '.join(METRICS)}"
                )

    @property
    def kind(self) -> str:
        """What this dataset's predictions are (``prediction_scores``' kinds)."""
        return METRICS[self.metric].kind

    @property
    def key(self) -> str:
        """The key of this dataset's metric in ``prediction_scores`` (and in the criteria's
        logs)."""
        return METRICS[self.metric].key

    def scores(
        self, gold: Sequence, pred: Sequence, metric: Optional[str] = None, **options: Any
    ) -> Dict[str, Any]:
        """``prediction_scores`` of gold and predicted labels, tag lists, label rows or scores, as
        ``metric`` (default this dataset's) needs them; ``options``: ``ids`` (rows of documents),
        ``negatives`` (default this dataset's), ``labels``."""
        spec = self._metric(metric)
        negatives = options.get("negatives", self.negatives or NEGATIVE_LABELS)
        return prediction_scores(
            spec.kind,
            gold,
            pred,
            options.get("ids"),
            negatives,
            options.get("labels"),
            spec.example_based,
        )

    def score(
        self, gold: Sequence, pred: Sequence, metric: Optional[str] = None, **options: Any
    ) -> float:
        """This dataset's metric (a fraction) of gold and predicted labels, tag lists, label rows or
        scores."""
        return self.scores(gold, pred, metric, **options)[self._metric(metric).key]

    def _metric(self, metric: Optional[str]) -> Metric:
        if (metric or self.metric) not in METRICS:
            raise ValueError(f"{self.name}: unknown metric {metric!r}; known: {', '.join(METRICS)}")
        return METRICS[metric or self.metric]

    def trivial_baseline(
        self, gold: Sequence, metric: Optional[str] = None, **options: Any
    ) -> "TrivialBaseline":
        """The best score (a fraction) of a model that learned nothing: the best of the constant
        answers (``constant_answers``) scored by this dataset's own metric against ``gold``."""
        metric = metric or self.metric
        best = None
        for what, pred in constant_answers(
            gold, regression=self._metric(metric).kind == REGRESSION
        ):
            value = self.score(gold, pred, metric, **options)
            if best is None or value > best.score:
                best = TrivialBaseline(value, what)
        return best or TrivialBaseline(0.0, "no examples")


@dataclass(frozen=True)
class TrivialBaseline:
    """What the same answer for every example scores (a fraction), and that answer in words."""

    score: float
    prediction: str


def constant_answers(gold: Sequence, regression: bool = False):
    """``(what, predictions)`` of each constant answer a model that learned nothing can give, from
    the gold labels' own values: every example one class (each class of gold); every word one tag
    (each tag of gold); every label row all 0, all 1 or the per-label majority (multi-label); every
    score the gold mean (regression: Pearson 0).
    """
    gold = list(gold)
    if not gold:
        return
    if regression:
        mean = statistics.fmean(float(g) for g in gold)
        yield f"every score the gold mean ({mean:.2f})", [mean] * len(gold)
        return
    first = gold[0]
    if isinstance(first, (list, tuple)) and any(
        isinstance(v, str) for s in gold for v in s
    ):  # tag sequences
        for tag in sorted({v for s in gold for v in s}, key=lambda t: (t != "O", t)):
            yield f"every word tagged {tag!r}", [[tag] * len(s) for s in gold]
        return
    if isinstance(first, (list, tuple)):  # multi-label rows of 0/1
        width = len(first)
        majority = [int(2 * sum(row[k] for row in gold) > len(gold)) for k in range(width)]
        yield "every label row all 0 (no label)", [[0] * width for _ in gold]
        yield "every label row all 1 (every label)", [[1] * width for _ in gold]
        yield f"every label row the per-label majority {majority}", [list(majority) for _ in gold]
        return
    for label in sorted(set(gold), key=str):
        yield f"every prediction {label!r}", [label] * len(gold)


AGGREGATES = ("by_type", "mean")
STATISTICS = ("mean", "median")
DOMAINS = {False: "pubmed", True: "clinical"}  # per_domain's keys, by BenchmarkTask.clinical


@dataclass(frozen=True)
class Benchmark:
    """A benchmark: its datasets in table order, how their scores combine (``by_type`` or ``mean``),
    which statistic of a dataset's runs is its result (``mean`` or ``median``) and whether the score
    comes with per-domain means (PubMed / clinical, bio-lm's Table 2).

    BLURB (Gu et al. 2020, §4) is ``by_type``: "We group the datasets by their task types, compute
    the average score for each task type, and report the macro average among the task types", so
    the five NER sets together weigh as much as BIOSSES alone. BLUE (Peng et al. 2019) and bio-lm
    (Lewis et al. 2020, Table 2) take the plain ``mean`` over their datasets; bio-lm's summary rows
    are plain means per task type and per domain too. The statistic is the mean for BLURB and BLUE
    (PubMedBERT §6.2 reports the mean over five seeds, ten for BIOSSES, PubMedQA and BioASQ) and
    the median for bio-lm (§5.2: "report the median result on the test sets")."""

    name: str
    tasks: Tuple[BenchmarkTask, ...]
    aggregate: str
    task_types: Tuple[str, ...]
    statistic: str = "mean"
    domain_means: bool = False

    def __post_init__(self):
        if self.aggregate not in AGGREGATES:
            raise ValueError(
                f"{self.name}: aggregate must be 'by_type' or 'mean', not {self.aggregate!r}"
            )
        if self.statistic not in STATISTICS:
            raise ValueError(
                f"{self.name}: statistic must be 'mean' or 'median', not {self.statistic!r}"
            )
        seen: Dict[str, str] = {}
        for task in self.tasks:
            if task.task_type not in self.task_types:
                raise ValueError(
                    f"{self.name}: {task.name} has task type {task.task_type!r} not in {self.task_types}"
                )
            for name in (task.name, task.title) + task.aliases:
                key = dataset_key(name)
                if seen.get(key, task.name) != task.name:
                    raise ValueError(
                        f"{self.name}: {name!r} names both {seen[key]} and {task.name}"
                    )
                seen[key] = task.name

    def task(self, name: str) -> BenchmarkTask:
        """The dataset called ``name`` (its name, title or an alias, compared loosely); one-line
        error if none."""
        key = dataset_key(name)
        for task in self.tasks:
            if key in {dataset_key(n) for n in (task.name, task.title) + task.aliases}:
                return task
        raise ValueError(
            f"unknown {self.name} dataset {name!r}; known: {', '.join(t.name for t in self.tasks)}"
        )

    def names(self, types: Optional[Sequence[str]] = None) -> Tuple[str, ...]:
        """Dataset names in table order, optionally only those of some task types."""
        return tuple(t.name for t in self.tasks if types is None or t.task_type in types)

    def score(self, results: Mapping[str, Union[float, Sequence[float], None]]) -> "BenchmarkScore":
        """The aggregate of per-dataset results (a number, per-run numbers, or ``None``: missing).

        With a dataset missing the score is *partial*, with the task types it covers and those it
        covers only in part: a ``by_type`` score is then the macro average over the covered types,
        a ``mean`` score the average over the present datasets, never presented as the full
        benchmark's."""
        given: Dict[str, float] = {}
        named: Dict[str, str] = {}
        for name, value in results.items():
            task = self.task(name)
            if task.name in named:
                raise ValueError(
                    f"{self.name} dataset {task.name} given twice, as {named[task.name]!r} and {name!r}"
                )
            named[task.name] = name
            if value is not None:
                given[task.name] = summarize_runs(value, f"{self.name} {name}").value(
                    self.statistic
                )
        datasets = {t.name: given[t.name] for t in self.tasks if t.name in given}
        missing = tuple(t.name for t in self.tasks if t.name not in given)
        per_type: Dict[str, float] = {}
        incomplete = []
        for task_type in self.task_types:
            names = self.names([task_type])
            present = [datasets[n] for n in names if n in datasets]
            if present:
                per_type[task_type] = statistics.fmean(present)
                if len(present) < len(names):
                    incomplete.append(task_type)
        per_domain: Dict[str, float] = {}
        for clinical, domain in DOMAINS.items() if self.domain_means else ():
            present = [
                datasets[t.name]
                for t in self.tasks
                if t.clinical == clinical and t.name in datasets
            ]
            if present:
                per_domain[domain] = statistics.fmean(present)
        if not datasets:
            score = None
        elif self.aggregate == "by_type":
            score = statistics.fmean(per_type.values())
        else:
            score = statistics.fmean(datasets.values())
        return BenchmarkScore(
            benchmark=self.name,
            score=score,
            partial=bool(missing),
            datasets=datasets,
            per_type=per_type,
            per_domain=per_domain,
            missing=missing,
            covered_types=tuple(per_type),
            incomplete_types=tuple(incomplete),
            missing_types=tuple(t for t in self.task_types if t not in per_type),
            titles={t.name: t.title for t in self.tasks},
        )


@dataclass(frozen=True)
class RunSummary:
    """Per-dataset results over seeds: count, mean, sample standard deviation (0 for one run) and
    median."""

    n: int
    mean: float
    std: float
    median: float

    def value(self, statistic: str = "mean") -> float:
        """The ``mean`` or the ``median``."""
        if statistic not in STATISTICS:
            raise ValueError(f"unknown statistic {statistic!r}; known: {', '.join(STATISTICS)}")
        return self.median if statistic == "median" else self.mean


def summarize_runs(values: Union[float, Sequence[float]], name: str = "result") -> RunSummary:
    """Mean, standard deviation and median of one dataset's per-seed results; one-line error for bad
    values."""
    values = [values] if isinstance(values, (numbers.Real, str)) else list(values)
    if not values:
        raise ValueError(f"{name}: no results")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
            raise ValueError(f"{name}: {v!r} is not a finite number")
    values = [float(v) for v in values]
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return RunSummary(len(values), statistics.fmean(values), std, statistics.median(values))


@dataclass(frozen=True)
class BenchmarkScore:
    """A benchmark's aggregate with what it covers: per-dataset, per-type (and per-domain) averages,
    and what is missing."""

    benchmark: str
    score: Optional[float]
    partial: bool
    datasets: Dict[str, float]
    per_type: Dict[str, float]
    missing: Tuple[str, ...]
    covered_types: Tuple[str, ...]
    incomplete_types: Tuple[str, ...]
    missing_types: Tuple[str, ...]
    titles: Dict[str, str] = field(default_factory=dict)
    per_domain: Dict[str, float] = field(
        default_factory=dict
    )  # pubmed / clinical, for a benchmark with domain_means

    def summary(self) -> str:
        """One line: the score, and when partial the types it covers and the datasets it lacks."""
        if self.score is None:
            return f"{self.benchmark} score: none (no dataset results)"
        line = f"{self.benchmark} score {self.score:.2f}"
        if not self.partial:
            return line
        n_types = len(self.covered_types) + len(self.missing_types)
        missing = ", ".join(self.titles.get(name, name) for name in self.missing)
        parts = [
            f"covers {len(self.covered_types)} of {n_types} task types ({', '.join(self.covered_types)})"
        ]
        if self.incomplete_types:
            parts.append(f"in part: {', '.join(self.incomplete_types)}")
        parts.append(f"missing: {missing}")
        return f"{line} (PARTIAL: {'; '.join(parts)})"

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready dict of every field."""
        return {
            "benchmark": self.benchmark,
            "score": self.score,
            "partial": self.partial,
            "datasets": dict(self.datasets),
            "per_type": dict(self.per_type),
            "per_domain": dict(self.per_domain),
            "missing": list(self.missing),
            "covered_types": list(self.covered_types),
            "incomplete_types": list(self.incomplete_types),
            "missing_types": list(self.missing_types),
        }


__all__ = [
    "METRICS",
    "Benchmark",
    "BenchmarkScore",
    "BenchmarkTask",
    "Metric",
    "RunSummary",
    "TrivialBaseline",
    "constant_answers",
    "dataset_key",
    "percentages",
    "prediction_scores",
    "summarize_runs",
]

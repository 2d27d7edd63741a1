"""The BLURB and BLUE benchmarks: which datasets, of which task type, scored by which metric, and the aggregate.

**BLURB** (Gu et al. 2020, §4 and Table 3): 13 datasets in six task types. "We group the datasets by their task
types, compute the average score for each task type, and report the macro average among the task types":

    BLURB = mean over the six types t of ( mean over the datasets d of type t of score_d )

so the five NER sets together weigh as much as BIOSSES alone. Fed the per-dataset numbers of seed 001's Table 6 this
reproduces its BLURB scores (e.g. 81.10 for PubMedBERT, 75.99 for BERT-uncased) to 0.01.

**BLUE** (Peng et al. 2019, ncbi-nlp/BLUE_Benchmark README): ten datasets in five task types, four of them clinical
(MedSTS, ShARe/CLEFE, i2b2-2010, MedNLI: licence-gated, so users bring them), with BLUE's own dataset versions
(its DDI and ChemProt TSVs, its sentence-level HoC) and metrics (HoC: example-based F1, not BLURB's micro F1);
the BLUE score is the plain average over the ten datasets.

**Partial scores.** A dataset that is missing (absent, or ``None``) is listed, and the score is marked *partial*
with the task types it covers and those it covers only in part: BLURB's score is then the macro average over the
covered types, BLUE's the average over the present datasets, never presented as the full benchmark's.

Scores are averaged as given, so give every dataset on one scale (the papers' tables and the runner use percent).
A dataset's value may be a list of per-seed results; its mean is used (PubMedBERT §6.2 reports the mean over five
seeds, ten for BIOSSES, PubMedQA and BioASQ).
"""

import math
import numbers
import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

from .classification import NEGATIVE_LABELS, accuracy, blue_hoc_f1, hoc_f1, macro_f1, micro_f1
from .similarity import pearson
from .tagging import span_prf, token_macro_f1

NER = "ner"
PICO = "pico"
RELATION_EXTRACTION = "relation_extraction"
SENTENCE_SIMILARITY = "sentence_similarity"
DOCUMENT_CLASSIFICATION = "document_classification"
QUESTION_ANSWERING = "question_answering"
INFERENCE = "inference"

# Metric name -> what it is; every name is scored by BenchmarkTask.score.
METRICS = {
    "entity_f1": "entity-level micro F1, conlleval semantics (metrics.tagging.span_prf)",
    "word_macro_f1": "word-level macro F1 over the PIO labels (metrics.tagging.token_macro_f1)",
    "micro_f1": "micro F1 over the positive classes (metrics.classification.micro_f1)",
    "pearson": "Pearson's r (metrics.similarity.pearson)",
    "hoc_micro_f1": "BLURB HoC: micro F1 over all (abstract, hallmark) cells (metrics.classification.hoc_f1)",
    "hoc_example_f1": "BLUE HoC: example-based F1 on the abstract level (metrics.classification.blue_hoc_f1)",
    "accuracy": "accuracy (metrics.classification.accuracy)",
    "macro_f1": "macro F1 over the classes (metrics.classification.macro_f1)",
}


def dataset_key(name: str) -> str:
    """A dataset name compared loosely: lower case, letters and digits only (``"BC5-chem"`` -> ``"bc5chem"``)."""
    return re.sub(r"[^0-9a-z]", "", str(name).lower())


@dataclass(frozen=True)
class BenchmarkTask:
    """One dataset of a benchmark: its registry name, display title, task type and headline metric."""

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
                raise ValueError(f"{self.name}: unknown metric {metric!r}; known: {', '.join(METRICS)}")

    def score(self, gold: Sequence, pred: Sequence, metric: Optional[str] = None, **options: Any) -> float:
        """This dataset's metric (a fraction) of gold and predicted labels, tag lists, label rows or scores."""
        metric = metric or self.metric
        if metric == "entity_f1":
            return span_prf(gold, pred)[2]
        if metric == "word_macro_f1":
            return token_macro_f1(gold, pred, **options)
        if metric == "micro_f1":
            return micro_f1(gold, pred, options.get("negatives", self.negatives or NEGATIVE_LABELS))
        if metric == "pearson":
            return pearson(pred, gold)
        if metric == "hoc_micro_f1":
            return hoc_f1(gold, pred, options.get("ids"))
        if metric == "hoc_example_f1":
            return blue_hoc_f1(gold, pred, options.get("ids"))
        if metric == "accuracy":
            return accuracy(gold, pred)
        if metric == "macro_f1":
            return macro_f1(gold, pred, options.get("labels"))
        raise ValueError(f"{self.name}: unknown metric {metric!r}")

    def trivial_baseline(self, gold: Sequence, metric: Optional[str] = None, **options: Any) -> "TrivialBaseline":
        """The best score (a fraction) of a model that learned nothing: the best of the constant answers
        (``constant_answers``) scored by this dataset's own metric against ``gold``."""
        metric = metric or self.metric
        best = None
        for what, pred in constant_answers(gold, regression=metric == "pearson"):
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
    """``(what, predictions)`` of each constant answer a model that learned nothing can give, from the gold labels'
    own values: every example one class (each class of gold); every word one tag (each tag of gold); every label row
    all 0, all 1 or the per-label majority (multi-label); every score the gold mean (regression: Pearson 0)."""
    gold = list(gold)
    if not gold:
        return
    if regression:
        mean = statistics.fmean(float(g) for g in gold)
        yield f"every score the gold mean ({mean:.2f})", [mean] * len(gold)
        return
    first = gold[0]
    if isinstance(first, (list, tuple)) and any(isinstance(v, str) for s in gold for v in s):  # tag sequences
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


@dataclass(frozen=True)
class Benchmark:
    """A benchmark: its datasets in table order and how their scores combine (``by_type`` or ``mean``)."""

    name: str
    tasks: Tuple[BenchmarkTask, ...]
    aggregate: str
    task_types: Tuple[str, ...]

    def __post_init__(self):
        if self.aggregate not in ("by_type", "mean"):
            raise ValueError(f"{self.name}: aggregate must be 'by_type' or 'mean', not {self.aggregate!r}")
        seen: Dict[str, str] = {}
        for task in self.tasks:
            if task.task_type not in self.task_types:
                raise ValueError(f"{self.name}: {task.name} has task type {task.task_type!r} not in {self.task_types}")
            for name in (task.name, task.title) + task.aliases:
                key = dataset_key(name)
                if seen.get(key, task.name) != task.name:
                    raise ValueError(f"{self.name}: {name!r} names both {seen[key]} and {task.name}")
                seen[key] = task.name

    def task(self, name: str) -> BenchmarkTask:
        """The dataset called ``name`` (its name, title or an alias, compared loosely); one-line error if none."""
        key = dataset_key(name)
        for task in self.tasks:
            if key in {dataset_key(n) for n in (task.name, task.title) + task.aliases}:
                return task
        raise ValueError(f"unknown {self.name} dataset {name!r}; known: {', '.join(t.name for t in self.tasks)}")

    def names(self, types: Optional[Sequence[str]] = None) -> Tuple[str, ...]:
        """Dataset names in table order, optionally only those of some task types."""
        return tuple(t.name for t in self.tasks if types is None or t.task_type in types)

    def score(self, results: Mapping[str, Union[float, Sequence[float], None]]) -> "BenchmarkScore":
        """The benchmark score of per-dataset results (marked partial when datasets are missing)."""
        return benchmark_score(results, self)


BLURB = Benchmark(
    name="BLURB",
    aggregate="by_type",
    task_types=(NER, PICO, RELATION_EXTRACTION, SENTENCE_SIMILARITY, DOCUMENT_CLASSIFICATION, QUESTION_ANSWERING),
    tasks=(
        BenchmarkTask("bc5-chem", "BC5-chem", NER, "entity_f1", ("bc5cdr-chem", "bc5cdr-chemical")),
        BenchmarkTask("bc5-disease", "BC5-disease", NER, "entity_f1", ("bc5cdr-disease",)),
        BenchmarkTask("ncbi-disease", "NCBI-disease", NER, "entity_f1", ("ncbi",)),
        BenchmarkTask("bc2gm", "BC2GM", NER, "entity_f1"),
        BenchmarkTask("jnlpba", "JNLPBA", NER, "entity_f1"),
        BenchmarkTask("ebm-pico", "EBM PICO", PICO, "word_macro_f1", ("pico", "ebm-nlp")),
        BenchmarkTask("chemprot", "ChemProt", RELATION_EXTRACTION, "micro_f1", negatives=("false", "0")),
        BenchmarkTask("ddi", "DDI", RELATION_EXTRACTION, "micro_f1", negatives=("0", "DDI-false")),
        BenchmarkTask("gad", "GAD", RELATION_EXTRACTION, "micro_f1", negatives=("0",)),
        BenchmarkTask("biosses", "BIOSSES", SENTENCE_SIMILARITY, "pearson"),
        BenchmarkTask("hoc", "HoC", DOCUMENT_CLASSIFICATION, "hoc_micro_f1"),
        BenchmarkTask("pubmedqa", "PubMedQA", QUESTION_ANSWERING, "accuracy", extra_metrics=("macro_f1",)),
        BenchmarkTask("bioasq", "BioASQ", QUESTION_ANSWERING, "accuracy", ("bioasq-yesno",)),
    ),
)

BLUE = Benchmark(
    name="BLUE",
    aggregate="mean",
    task_types=(SENTENCE_SIMILARITY, NER, RELATION_EXTRACTION, DOCUMENT_CLASSIFICATION, INFERENCE),
    tasks=(
        BenchmarkTask("medsts", "MedSTS", SENTENCE_SIMILARITY, "pearson", clinical=True),
        BenchmarkTask("biosses", "BIOSSES", SENTENCE_SIMILARITY, "pearson"),
        BenchmarkTask("bc5cdr-disease", "BC5CDR-disease", NER, "entity_f1", ("bc5-disease",)),
        BenchmarkTask("bc5cdr-chemical", "BC5CDR-chemical", NER, "entity_f1", ("bc5-chem", "bc5cdr-chem")),
        BenchmarkTask("share-clefe", "ShARe/CLEFE", NER, "entity_f1", ("shareclef", "clefe"), clinical=True),
        BenchmarkTask("ddi", "DDI", RELATION_EXTRACTION, "micro_f1", negatives=("DDI-false",)),
        BenchmarkTask("chemprot", "ChemProt", RELATION_EXTRACTION, "micro_f1", negatives=("false",)),
        BenchmarkTask(
            "i2b2-2010", "i2b2-2010", RELATION_EXTRACTION, "micro_f1", ("i2b2",), negatives=("false",), clinical=True
        ),
        BenchmarkTask("hoc", "HoC", DOCUMENT_CLASSIFICATION, "hoc_example_f1"),
        BenchmarkTask("mednli", "MedNLI", INFERENCE, "accuracy", clinical=True),
    ),
)

BENCHMARKS = {"blurb": BLURB, "blue": BLUE}


@dataclass(frozen=True)
class RunSummary:
    """Per-dataset results over seeds: count, mean, sample standard deviation (0 for one run) and median."""

    n: int
    mean: float
    std: float
    median: float


def summarize_runs(values: Union[float, Sequence[float]], name: str = "result") -> RunSummary:
    """Mean, standard deviation and median of one dataset's per-seed results; one-line error for bad values."""
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
    """A benchmark's aggregate with what it covers: per-dataset and per-type averages, and what is missing."""

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

    def summary(self) -> str:
        """One line: the score, and when partial the types it covers and the datasets it lacks."""
        if self.score is None:
            return f"{self.benchmark} score: none (no dataset results)"
        line = f"{self.benchmark} score {self.score:.2f}"
        if not self.partial:
            return line
        n_types = len(self.covered_types) + len(self.missing_types)
        missing = ", ".join(self.titles.get(name, name) for name in self.missing)
        parts = [f"covers {len(self.covered_types)} of {n_types} task types ({', '.join(self.covered_types)})"]
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
            "missing": list(self.missing),
            "covered_types": list(self.covered_types),
            "incomplete_types": list(self.incomplete_types),
            "missing_types": list(self.missing_types),
        }


def benchmark_score(
    results: Mapping[str, Union[float, Sequence[float], None]], benchmark: Union[Benchmark, str] = BLURB
) -> BenchmarkScore:
    """The aggregate of per-dataset results (a number, per-seed numbers, or ``None``: missing), partial if any miss."""
    if isinstance(benchmark, str):
        if benchmark.lower() not in BENCHMARKS:
            raise ValueError(f"unknown benchmark {benchmark!r}; known: {', '.join(BENCHMARKS)}")
        benchmark = BENCHMARKS[benchmark.lower()]
    given: Dict[str, float] = {}
    named: Dict[str, str] = {}
    for name, value in results.items():
        task = benchmark.task(name)
        if task.name in named:
            raise ValueError(f"{benchmark.name} dataset {task.name} given twice, as {named[task.name]!r} and {name!r}")
        named[task.name] = name
        if value is not None:
            given[task.name] = summarize_runs(value, f"{benchmark.name} {name}").mean
    datasets = {t.name: given[t.name] for t in benchmark.tasks if t.name in given}
    missing = tuple(t.name for t in benchmark.tasks if t.name not in given)
    per_type: Dict[str, float] = {}
    incomplete = []
    for task_type in benchmark.task_types:
        names = benchmark.names([task_type])
        present = [datasets[n] for n in names if n in datasets]
        if present:
            per_type[task_type] = statistics.fmean(present)
            if len(present) < len(names):
                incomplete.append(task_type)
    if not datasets:
        score = None
    elif benchmark.aggregate == "by_type":
        score = statistics.fmean(per_type.values())
    else:
        score = statistics.fmean(datasets.values())
    return BenchmarkScore(
        benchmark=benchmark.name,
        score=score,
        partial=bool(missing),
        datasets=datasets,
        per_type=per_type,
        missing=missing,
        covered_types=tuple(per_type),
        incomplete_types=tuple(incomplete),
        missing_types=tuple(t for t in benchmark.task_types if t not in per_type),
        titles={t.name: t.title for t in benchmark.tasks},
    )


def blurb_score(results: Mapping[str, Union[float, Sequence[float], None]]) -> BenchmarkScore:
    """BLURB: macro average over the six task types of the per-type mean of dataset results."""
    return benchmark_score(results, BLURB)


def blue_score(results: Mapping[str, Union[float, Sequence[float], None]]) -> BenchmarkScore:
    """BLUE: plain average of the ten dataset results (partial without the clinical sets)."""
    return benchmark_score(results, BLUE)


__all__ = [
    "BENCHMARKS",
    "BLUE",
    "BLURB",
    "METRICS",
    "Benchmark",
    "BenchmarkScore",
    "BenchmarkTask",
    "RunSummary",
    "benchmark_score",
    "blue_score",
    "blurb_score",
    "dataset_key",
    "summarize_runs",
]

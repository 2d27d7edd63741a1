"""Sentence/document-level metrics (RE micro F1, accuracy, macro F1, HoC as BLURB and as BLUE,
Pearson): hand-computed cases, and scikit-learn / scipy on the real label files in ../shared/data
with perturbed predictions, to 1e-9."""

import csv
import json
import random
from pathlib import Path

import pytest

from fairseq_bio.metrics.classification import (
    AccuracyCounts,
    ExampleSums,
    accuracy,
    accuracy_counts,
    accuracy_from,
    add_class_counts,
    add_multilabel_counts,
    blue_hoc_prf,
    class_counts,
    example_based_sums,
    from_log_fields,
    group_by_document,
    hoc_f1,
    hoc_prf,
    hoc_prf_from,
    is_negative,
    log_fields,
    macro_f1,
    macro_f1_from,
    micro_f1,
    micro_prf,
    multilabel_counts,
    positive_counts,
    positive_counts_from,
)
from fairseq_bio.metrics.similarity import PearsonSums, pearson, pearson_sums
from fairseq_bio.metrics.tagging import SpanCounts

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TOL = 1e-9


def need(path: Path) -> Path:
    if not path.is_file():
        pytest.skip(f"{path} is missing (shared data)")
    return path


def json_lines(path: Path):
    with open(need(path), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def perturb(labels, label_set, rate, seed):
    """Each label replaced by a random one of ``label_set`` with probability ``rate`` (seeded)."""
    rng = random.Random(seed)
    label_set = sorted(label_set)
    return [rng.choice(label_set) if rng.random() < rate else label for label in labels]


def batches(items, size):
    return [items[i : i + size] for i in range(0, len(items), size)]


@pytest.fixture(scope="module")
def gad_gold():
    with open(need(DATA / "re" / "GAD" / "test.tsv"), newline="", encoding="utf-8") as f:
        return [row["label"] for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]


@pytest.fixture(scope="module")
def ddi_gold():
    return [row["label"] for row in json_lines(DATA / "re" / "DDI" / "test.json")]


@pytest.fixture(scope="module")
def hoc_test():
    rows = json_lines(DATA / "hoc" / "test.json")
    return [row["id"] for row in rows], [row["label"] for row in rows]


@pytest.fixture(scope="module")
def pubmedqa_gold():
    with open(need(DATA / "pubmedqa" / "test_ground_truth.json"), encoding="utf-8") as f:
        return list(json.load(f).values())


@pytest.fixture(scope="module")
def biosses_gold():
    scores = []
    for split in ("train", "dev", "test"):
        with open(need(DATA / "biosses" / f"{split}.tsv"), newline="", encoding="utf-8") as f:
            scores += [float(row["score"]) for row in csv.DictReader(f, delimiter="\t")]
    return scores


# --- relation extraction: micro over the positive classes --------------------------------------------------------


def test_re_micro_by_hand():
    gold = ["0", "A", "B", "A", "0", "B"]
    pred = ["A", "A", "0", "B", "0", "B"]
    # positives: gold A,B,A,B (4); predicted A,A,B,B (4); correct: A at 1, B at 5 (2)
    assert positive_counts(gold, pred) == SpanCounts(gold=4, pred=4, correct=2)
    assert micro_prf(gold, pred) == pytest.approx((0.5, 0.5, 0.5))
    # the negative class never counts, even when right; integer ids and a named negative work alike
    assert positive_counts([0, 0, 1], [0, 1, 1]) == SpanCounts(gold=1, pred=2, correct=1)
    assert positive_counts(["DDI-false", "DDI-int"], ["DDI-false", "DDI-false"]) == SpanCounts(
        1, 0, 0
    )
    assert micro_f1(["none", "x"], ["x", "x"], negatives=["none"]) == pytest.approx(2 / 3)
    assert is_negative(0) and is_negative("false") and not is_negative("DDI-None")
    assert micro_prf(["0", "0"], ["0", "0"]) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("rate", [0.05, 0.3, 0.8])
def test_re_micro_matches_sklearn_on_real_gad_and_ddi(gad_gold, ddi_gold, rate):
    from sklearn.metrics import precision_recall_fscore_support

    for gold in (gad_gold, ddi_gold):
        labels = sorted(set(gold))
        positives = [label for label in labels if label != "0"]
        pred = perturb(gold, labels, rate, seed=int(rate * 100))
        expected = precision_recall_fscore_support(
            gold, pred, labels=positives, average="micro", zero_division=0
        )
        assert micro_prf(gold, pred) == pytest.approx(expected[:3], abs=TOL)
        # per-batch counts add up to the corpus counts (what the criterion logs and reduce_metrics
        # derives)
        parts = [positive_counts(g, p) for g, p in zip(batches(gold, 37), batches(pred, 37))]
        assert sum(parts, SpanCounts()) == positive_counts(gold, pred)
        per_class = add_class_counts(
            *[class_counts(g, p) for g, p in zip(batches(gold, 50), batches(pred, 50))]
        )
        assert per_class == class_counts(gold, pred)
        assert positive_counts_from(per_class) == positive_counts(gold, pred)
    assert len(set(ddi_gold)) == 5 and len(gad_gold) == 534


# --- accuracy and macro F1 (PubMedQA) ------------------------------------------------------------------------------


def test_accuracy_and_macro_f1_by_hand():
    gold = ["yes", "yes", "no", "maybe"]
    pred = ["yes", "no", "no", "no"]
    # yes: P 1, R 1/2, F 2/3; no: P 1/3, R 1, F 1/2; maybe: never predicted, F 0
    assert macro_f1(gold, pred) == pytest.approx((2 / 3 + 1 / 2 + 0) / 3)
    assert macro_f1(gold, pred, labels=["yes", "no"]) == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert accuracy(gold, pred) == 0.5
    assert accuracy_counts(gold, pred) + accuracy_counts(["no"], ["yes"]) == AccuracyCounts(
        correct=2, total=5
    )
    assert accuracy([], []) == 0.0 and macro_f1([], []) == 0.0


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_accuracy_and_macro_f1_match_sklearn_on_real_pubmedqa(pubmedqa_gold, rate):
    from sklearn.metrics import accuracy_score, f1_score

    gold = pubmedqa_gold
    pred = perturb(gold, {"yes", "no", "maybe"}, rate, seed=7)
    assert len(gold) == 500 and set(gold) == {"yes", "no", "maybe"}
    assert accuracy(gold, pred) == pytest.approx(accuracy_score(gold, pred), abs=TOL)
    assert macro_f1(gold, pred) == pytest.approx(f1_score(gold, pred, average="macro"), abs=TOL)
    counts = add_class_counts(
        *[class_counts(g, p) for g, p in zip(batches(gold, 16), batches(pred, 16))]
    )
    assert accuracy_from(counts) == pytest.approx(accuracy_score(gold, pred), abs=TOL)
    assert macro_f1_from(counts) == pytest.approx(f1_score(gold, pred, average="macro"), abs=TOL)
    # a class the model never predicts still counts (sklearn: classes seen in gold or predictions)
    only_yes = ["yes"] * len(gold)
    assert macro_f1(gold, only_yes) == pytest.approx(
        f1_score(gold, only_yes, average="macro", zero_division=0)
    )


# --- HoC as BLURB computes it: micro over (abstract, hallmark) cells ------------------------------------------------


def perturb_rows(rows, rate, seed):
    rng = random.Random(seed)
    return [[1 - v if rng.random() < rate else v for v in row] for row in rows]


def test_hoc_blurb_by_hand():
    gold = [[1, 0, 1], [0, 0, 0]]
    pred = [[1, 1, 0], [0, 0, 1]]
    # cells: correct 1, predicted 3, gold 2 -> P 1/3, R 1/2, F 0.4 (LinkBERT
    # utils_hoc.compute_p_r_f)
    assert hoc_prf(gold, pred) == pytest.approx((1 / 3, 1 / 2, 0.4))
    # macro over hallmarks: label 0 F 1, label 1 F 0 (P 0), label 2 F 0 -> 1/3
    assert hoc_prf(gold, pred, average="macro")[2] == pytest.approx(1 / 3)
    # sentence rows of one abstract are ORed first: two sentences of "7" with one hallmark each =
    # one abstract
    assert hoc_f1([[1, 0], [0, 1]], [[1, 0], [0, 0]], ids=["7_0", "7_1"]) == pytest.approx(
        2 * 1 * 0.5 / 1.5
    )
    assert group_by_document(
        ["7_0", "8_0", "7_1"], [[1, 0], [0, 0], [0, 1]], [[0, 0], [1, 0], [0, 0]]
    ) == (
        ["7", "8"],
        [(1, 1), (0, 0)],
        [(0, 0), (1, 0)],
    )


@pytest.mark.parametrize("rate", [0.03, 0.15, 0.5])
def test_hoc_blurb_matches_sklearn_on_real_hoc(hoc_test, rate):
    from sklearn.metrics import f1_score, precision_score, recall_score

    ids, gold = hoc_test
    assert len(gold) == 371 and all(len(row) == 10 for row in gold)
    pred = perturb_rows(gold, rate, seed=int(rate * 1000))
    expected = tuple(
        f(gold, pred, average="micro", zero_division=0)
        for f in (precision_score, recall_score, f1_score)
    )
    assert hoc_prf(gold, pred, ids) == pytest.approx(expected, abs=TOL)
    macro = f1_score(gold, pred, average="macro", zero_division=0)
    assert hoc_prf(gold, pred, ids, average="macro")[2] == pytest.approx(macro, abs=TOL)
    # summed per-batch, per-hallmark counts give the same corpus score
    parts = [multilabel_counts(g, p) for g, p in zip(batches(gold, 32), batches(pred, 32))]
    assert hoc_prf_from(add_multilabel_counts(*parts)) == pytest.approx(expected, abs=TOL)
    # the same abstracts split into sentence rows "<PMID>_<n>" (BLURB's raw HoC form) score the same
    rng = random.Random(1)
    split_ids, split_gold, split_pred = [], [], []
    for pmid, g, p in zip(ids, gold, pred):
        first = [rng.random() < 0.5 for _ in g]
        for n, keep in enumerate((first, [not k for k in first])):
            split_ids.append(f"{pmid}_{n}")
            split_gold.append([v if k else 0 for v, k in zip(g, keep)])
            split_pred.append([v if k else 0 for v, k in zip(p, keep)])
    assert hoc_prf(split_gold, split_pred, split_ids) == pytest.approx(expected, abs=TOL)
    # and it is a different number from BLUE's example-based F1 on the same abstracts
    kept = [i for i, g in enumerate(gold) if any(g)]
    g2, p2 = [gold[i] for i in kept], [pred[i] for i in kept]
    assert abs(hoc_f1(g2, p2) - blue_hoc_prf(g2, p2)[2]) > 1e-3


# --- HoC as BLUE computes it: example-based on the abstract level ---------------------------------------------------


def test_hoc_blue_by_hand():
    # BLUE's own test case (ncbi-nlp/BLUE_Benchmark blue/ext/pmetrics.py): recall 1, precision (1 +
    # 2/3 + 1) / 3
    gold = [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
    pred = [[1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    p, r, f = blue_hoc_prf(gold, pred)
    assert (p, r) == pytest.approx((8 / 9, 1.0))
    assert f == pytest.approx(
        2 * p * r / (p + r)
    )  # F1 of the means, not the mean of per-abstract F1s
    assert f != pytest.approx((1 + 0.8 + 1) / 3)
    # an abstract with nothing predicted has precision 0; sums add across batches
    sums = example_based_sums([[1, 0]], [[0, 0]]) + example_based_sums([[0, 1]], [[0, 1]])
    assert sums == ExampleSums(precision=1.0, recall=1.0, total=2)
    with pytest.raises(ValueError, match=r"^abstract 9: no gold hallmark"):
        example_based_sums([[1, 0], [0, 0]], [[1, 0], [1, 0]], ids=["8_0", "9_0"])


def test_hoc_blue_matches_sklearn_samples_on_real_hoc(hoc_test):
    from sklearn.metrics import precision_score, recall_score

    ids, gold = hoc_test
    kept = [
        i for i, g in enumerate(gold) if any(g)
    ]  # BLUE's HoC has no abstract without a hallmark
    ids, gold = [ids[i] for i in kept], [gold[i] for i in kept]
    pred = perturb_rows(gold, 0.2, seed=3)
    p = precision_score(gold, pred, average="samples", zero_division=0)
    r = recall_score(gold, pred, average="samples", zero_division=0)
    assert blue_hoc_prf(gold, pred, ids) == pytest.approx((p, r, 2 * p * r / (p + r)), abs=TOL)


def test_hoc_bad_rows_are_one_line_errors():
    with pytest.raises(ValueError, match=r"^predicted row 1, label 2: 2 is not 0 or 1$"):
        hoc_f1([[0, 0, 1], [1, 0, 0]], [[0, 0, 1], [1, 0, 2]])
    with pytest.raises(ValueError, match=r"^gold row 1: 2 labels, expected 3$"):
        hoc_f1([[0, 0, 1], [1, 0]], [[0, 0, 1], [1, 0, 0]])
    with pytest.raises(ValueError, match=r"^2 gold rows but 1 predicted rows$"):
        hoc_f1([[0], [1]], [[0]])
    with pytest.raises(ValueError, match=r"average must be"):
        hoc_prf([[1]], [[1]], average="weighted")
    with pytest.raises(ValueError, match=r"^3 gold labels but 2 predicted labels$"):
        micro_f1(["0", "1", "1"], ["0", "1"])


# --- Pearson ---------------------------------------------------------------------------------------------------------


def test_pearson_by_hand():
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # x = (0, 1, 2, 3), y = (0, 1, 1, 4): sum dx*dy = 6, sum dx^2 = 5, sum dy^2 = 9 -> r = 6 /
    # sqrt(45)
    r = 6 / 45**0.5
    assert pearson([0, 1, 2, 3], [0, 1, 1, 4]) == pytest.approx(r)
    assert pearson_sums([0, 1], [0, 1]) + pearson_sums([2, 3], [1, 4]) == pearson_sums(
        [0, 1, 2, 3], [0, 1, 1, 4]
    )
    # undefined (constant predictions, a single pair) is 0.0, not nan, so checkpoint selection stays
    # ordered
    assert (
        pearson([2.0, 2.0, 2.0], [0, 1, 4]) == 0.0
        and pearson_sums([2.0] * 3, [0, 1, 4]).value() == 0.0
    )
    assert pearson([1.0], [3.0]) == 0.0 and PearsonSums().value() == 0.0
    with pytest.raises(ValueError, match=r"^pair 1: non-finite score"):
        pearson([0.0, float("nan")], [1.0, 2.0])
    with pytest.raises(ValueError, match=r"^3 gold scores but 2 predicted scores$"):
        pearson([0.0, 1.0], [1.0, 2.0, 3.0])


@pytest.mark.parametrize("noise", [0.1, 1.0, 3.0])
def test_pearson_matches_scipy_on_real_biosses(biosses_gold, noise):
    from scipy.stats import pearsonr

    gold = biosses_gold
    assert len(gold) == 100 and all(0 <= g <= 4 for g in gold)
    rng = random.Random(int(noise * 10))
    pred = [g + rng.gauss(0, noise) for g in gold]
    expected = float(pearsonr(pred, gold)[0])
    assert pearson(pred, gold) == pytest.approx(expected, abs=TOL)
    sums = sum(
        (pearson_sums(p, g) for p, g in zip(batches(pred, 8), batches(gold, 8))), PearsonSums()
    )
    assert sums.value() == pytest.approx(expected, abs=TOL)


# --- flat logging outputs ------------------------------------------------------------------------------------------


def test_log_fields_round_trip_as_fairseq_sums_them(ddi_gold):
    pred = perturb(ddi_gold, set(ddi_gold), 0.3, seed=11)
    logs = []
    for g, p in zip(batches(ddi_gold, 500), batches(pred, 500)):
        log = log_fields(class_counts(g, p), "re_")
        log.update(log_fields(pearson_sums([len(x) for x in g], [len(x) for x in p]), "sim_"))
        logs.append(log)
    totals = {
        key: sum(log.get(key, 0) for log in logs) for log in logs for key in log
    }  # fairseq's summation
    labels = sorted(set(ddi_gold) | set(pred))
    counts = from_log_fields(SpanCounts, totals, "re_", labels)
    assert counts == class_counts(ddi_gold, pred)
    assert "re_correct_DDI-int" in totals
    sim = from_log_fields(PearsonSums, totals, "sim_")
    assert sim.value() == pytest.approx(
        pearson([len(x) for x in ddi_gold], [len(x) for x in pred]), abs=TOL
    )
    per_label = log_fields(multilabel_counts([[1, 0]], [[1, 1]]), "hoc_")
    assert per_label == {
        "hoc_gold_0": 1,
        "hoc_pred_0": 1,
        "hoc_correct_0": 1,
        "hoc_gold_1": 0,
        "hoc_pred_1": 1,
        "hoc_correct_1": 0,
    }

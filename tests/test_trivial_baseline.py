"""The trivial baseline of every BLURB/BLUE metric on hand-made gold: the best constant answer,
scored by the dataset's own metric, checked against numbers worked out by hand and against
scikit-learn; and the flag the runner puts beside a score at that baseline."""

import pytest
from sklearn.metrics import accuracy_score, f1_score

from fairseq_bio.runner.datasets import BLUE, BLURB
from fairseq_bio.runner.report import aggregate, render_markdown, trivial_flag
from fairseq_bio.metrics.benchmark_scores import constant_answers


def test_binary_relation_extraction_is_the_all_positive_f1():
    gold = [
        "1",
        "0",
        "1",
        "1",
        "0",
    ]  # 3 positives of 5: all '1' has P 3/5, R 1, F1 2*0.6/1.6 = 0.75
    baseline = BLURB.task("gad").trivial_baseline(gold)
    assert baseline.score == pytest.approx(0.75) and baseline.prediction == "every prediction '1'"
    assert baseline.score == pytest.approx(f1_score(gold, ["1"] * 5, pos_label="1"))


def test_multiclass_relation_extraction_is_the_best_single_type():
    gold = ["0", "DDI-effect", "DDI-advise", "0", "DDI-effect", "DDI-effect", "DDI-int"]
    # every 'DDI-effect': 3 correct of 7 predicted positive, 3 of the 5 gold positives found: F1 = 6
    # / 12 = 0.5
    baseline = BLURB.task("ddi").trivial_baseline(gold)
    assert (
        baseline.score == pytest.approx(0.5)
        and baseline.prediction == "every prediction 'DDI-effect'"
    )
    labels = ["DDI-advise", "DDI-effect", "DDI-int", "DDI-mechanism"]
    assert baseline.score == pytest.approx(
        f1_score(gold, ["DDI-effect"] * 7, labels=labels, average="micro")
    )
    # every '0' predicts no relation: F1 0, never the baseline
    assert BLURB.task("ddi").score(gold, ["0"] * 7) == 0.0


def test_ner_is_zero_every_word_o_unless_one_word_entities_pay():
    gold = [
        ["O", "B-Disease", "I-Disease", "O", "O"],
        ["O", "O", "O"],
    ]  # no constant tag finds a two-word entity
    baseline = BLURB.task("ncbi-disease").trivial_baseline(gold)
    assert baseline.score == 0.0 and baseline.prediction == "every word tagged 'O'"
    # with one-word entities every word B-Disease finds some: 6 predicted, 1 right, 2 gold: F1 2/8
    gold = [["O", "B-Disease", "I-Disease", "O"], ["B-Disease", "O"]]
    baseline = BLURB.task("ncbi-disease").trivial_baseline(gold)
    assert (
        baseline.score == pytest.approx(0.25)
        and baseline.prediction == "every word tagged 'B-Disease'"
    )


def test_multilabel_is_the_best_of_all_zero_all_one_and_majority_rows():
    gold = [[1, 1, 0], [1, 1, 0], [1, 1, 0], [0, 0, 1]]
    # majority row [1, 1, 0]: TP 6, FP 2, FN 1 -> F1 12 / 15; all ones: TP 7, FP 5 -> 14 / 19; all
    # zeros 0
    baseline = BLURB.task("hoc").trivial_baseline(gold, ids=["a", "b", "c", "d"])
    assert (
        baseline.score == pytest.approx(12 / 15)
        and "per-label majority [1, 1, 0]" in baseline.prediction
    )
    flat = [v for row in gold for v in row]
    assert baseline.score == pytest.approx(f1_score(flat, [1, 1, 0] * 4))
    # BLUE's example-based HoC F1 on the same rows, by its own metric
    blue = BLUE.task("hoc").trivial_baseline(gold, ids=["a", "b", "c", "d"])
    assert blue.score == pytest.approx(
        max(BLUE.task("hoc").score(gold, p, ids=list("abcd")) for _, p in constant_answers(gold))
    )


def test_similarity_is_pearson_zero_and_qa_the_majority_class():
    biosses = BLURB.task("biosses").trivial_baseline([0.2, 1.4, 3.0, 4.0])
    assert biosses.score == 0.0 and biosses.prediction == "every score the gold mean (2.15)"
    gold = ["yes", "no", "yes", "maybe", "yes"]
    pubmedqa = BLURB.task("pubmedqa").trivial_baseline(gold)
    assert pubmedqa.score == pytest.approx(0.6) == accuracy_score(gold, ["yes"] * 5)
    assert pubmedqa.prediction == "every prediction 'yes'"


def _record(name, test, baseline, seed=1):
    return {
        "dataset": name,
        "lr": 1e-3,
        "seed": seed,
        "dev_metric": test,
        "test_metric": test,
        "trivial_baseline": baseline,
        "trivial_prediction": "every prediction '1'",
        "wall_s": 1.0,
    }


def test_flag_within_one_point_and_below():
    assert trivial_flag(69.5, {"trivial_baseline": 68.96})["vs_trivial"] == "at"
    assert trivial_flag(67.0, {"trivial_baseline": 68.96})["vs_trivial"] == "below"
    assert trivial_flag(75.0, {"trivial_baseline": 68.96})["vs_trivial"] == "above"
    assert (
        trivial_flag(75.0, {})["vs_trivial"] is None
    )  # a result.json written before the baseline was kept
    results = aggregate(BLURB, [_record("gad", 68.96, 68.96), _record("ddi", 40.0, 12.0)], {})
    md = render_markdown({**results, "runs": []})
    assert "| GAD | relation_extraction | micro_f1 | 1 | 68.96 ± 0.00 ⚠ at trivial | 68.96 |" in md
    assert "- **GAD 68.96 is at the trivial baseline** (68.96: every prediction '1')" in md
    assert (
        "| DDI | relation_extraction | micro_f1 | 1 | 40.00 ± 0.00 | 12.00 |" in md
        and "**DDI" not in md
    )

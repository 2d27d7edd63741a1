"""SQuAD exact match / F1 (official normalisation), BioASQ factoid strict / lenient accuracy and MRR
(official BioASQ evaluator semantics) and BioBERT's merge of a question's snippet answers, on
hand-computed cases."""

import pytest

from fairseq_bio.metrics.qa import (
    FactoidSums,
    SquadSums,
    clean_factoid_answer,
    factoid_scores,
    factoid_sums,
    merge_snippet_answers,
    normalize_answer,
    snippet_question_id,
    squad_exact_match,
    squad_f1,
    squad_scores,
    squad_sums,
)


@pytest.mark.parametrize(
    "text, normalised",
    [
        ("The  Cat, sat!", "cat sat"),
        ("U.S.A.", "usa"),
        ("theory of the anthem", "theory of anthem"),  # articles only as whole words
        ("A an THE", ""),
        ("IL-6 (interleukin 6)", "il6 interleukin 6"),
        (
            "5\u2013fluorouracil",
            "5\u2013fluorouracil",
        ),  # only ASCII punctuation is removed, as the official script
        ("\tBRCA1\n", "brca1"),
    ],
)
def test_normalize_answer(text, normalised):
    assert normalize_answer(text) == normalised


def test_squad_exact_match_and_f1_by_hand():
    assert squad_exact_match("the BRCA1 gene.", ["BRCA1 gene"]) == 1.0
    assert squad_exact_match("BRCA1", ["BRCA1 gene"]) == 0.0
    # pred [big, red, dog], gold [red, dog, barked]: 2 shared tokens -> P = R = 2/3
    assert squad_f1("the big red dog", "red dog barked") == pytest.approx(2 / 3)
    # repeated tokens count as a bag: pred [dog, dog], gold [dog] -> 1 shared, P 1/2, R 1
    assert squad_f1("dog dog", "dog") == pytest.approx(2 / 3)
    # best over the gold answers
    assert squad_f1("red dog", ["cat", "red dog barked", "dog"]) == pytest.approx(0.8)
    assert squad_exact_match("Dog", ["cat", "the dog"]) == 1.0
    # an empty prediction scores 0 against a real answer; both empty (v2.0 unanswerable) scores 1
    assert squad_f1("", "dog") == 0.0 and squad_exact_match("", "dog") == 0.0
    assert squad_f1("", []) == 1.0 and squad_exact_match("the", [""]) == 1.0
    # a gold answer that normalises to nothing is dropped when another is left
    assert squad_exact_match("", ["a", "dog"]) == 0.0


def test_squad_sums_add_across_batches():
    preds = ["the big red dog", "BRCA1 gene", "", "p53"]
    golds = [["red dog barked"], ["brca1 gene"], ["tp53"], ["p53", "TP53"]]
    whole = squad_sums(preds, golds)
    assert whole == squad_sums(preds[:1], golds[:1]) + squad_sums(preds[1:], golds[1:])
    assert whole == SquadSums(exact=2.0, f1=2 / 3 + 2.0, total=4)
    assert squad_scores(preds, golds) == pytest.approx((0.5, (2 / 3 + 2) / 4))
    with pytest.raises(ValueError, match=r"^2 questions but 1 predictions$"):
        squad_sums(["x"], ["x", "y"])
    with pytest.raises(ValueError, match=r"^question 0: prediction None is not a string$"):
        squad_sums([None], ["x"])


def test_bioasq_factoid_by_hand():
    predictions = [
        ["Interleukin-6", "TNF"],  # rank 1, case-insensitive
        ["TNF", "IL1B", ["IL6", "il-6"], "x"],  # rank 3 through a synonym of the system answer
        ["nothing", "here"],  # no match
        ["a", "b", "c", "d", "e", "IL-6"],  # rank 6: past the five answers BioASQ allows
    ]
    golds = [["interleukin-6", "IL-6"], [["IL-6"], ["interleukin 6"]], ["IL-6"], "il-6"]
    assert factoid_scores(predictions, golds) == pytest.approx((1 / 4, 2 / 4, (1 + 1 / 3) / 4))
    assert factoid_scores(predictions, golds, max_answers=None) == pytest.approx(
        (1 / 4, 3 / 4, (1 + 1 / 3 + 1 / 6) / 4)
    )
    # no other normalisation than lower case (the official evaluator compares strings exactly)
    assert factoid_scores([["IL 6"], [" il-6"]], ["IL-6", "IL-6"]) == (0.0, 0.0, 0.0)
    # sums add across batches; an empty answer list scores 0 and still counts
    whole = factoid_sums(predictions + [[]], golds + ["x"])
    assert whole == factoid_sums(predictions[:2], golds[:2]) + factoid_sums(
        predictions[2:] + [[]], golds[2:] + ["x"]
    )
    assert whole == FactoidSums(strict=1, lenient=2, reciprocal_rank=1 + 1 / 3, total=5)
    assert FactoidSums().value() == (0.0, 0.0, 0.0)
    with pytest.raises(
        ValueError, match=r"^question 0: expected a ranked list of answers, got the string 'IL-6'$"
    ):
        factoid_sums(["IL-6"], ["IL-6"])
    with pytest.raises(
        ValueError, match=r"^question 0 gold: answer 6 is not a string or a list of strings$"
    ):
        factoid_sums([["IL-6"]], [[6]])


@pytest.mark.parametrize(
    "text, cleaned",
    [
        ("IL-6", "IL-6"),
        ("IL-6,", "IL-6"),
        ("IL-6.", "IL-6"),
        ("IL-6 ", "IL-6"),
        ("IL-6..", "IL-6."),  # one character only
        ("(IL-6)", "IL-6"),
        ("(IL-6).", "(IL-6)"),  # one rule only: the trailing full stop
        ("interleukin 6 (IL-6)", "interleukin 6 (IL-6)"),
        ("(a) and (b)", "(a) and (b)"),  # two pairs: not one enclosing pair
        ("interleukin 6 (IL", ""),  # unbalanced: dropped
        ("IL-6)", ""),
        ("", ""),
    ],
)
def test_clean_factoid_answer(text, cleaned):
    assert clean_factoid_answer(text) == cleaned


def test_snippet_question_id():
    assert snippet_question_id("55031181e9bde69634000014_002") == "55031181e9bde69634000014"
    assert snippet_question_id("q_1_10") == "q_1"
    assert snippet_question_id("55031181e9bde69634000014") == "55031181e9bde69634000014"
    assert snippet_question_id("q_x") == "q_x" and snippet_question_id("_1") == "_1"


def test_merge_snippet_answers_by_hand():
    snippets = [
        {"text": "TNF", "probability": 0.30},
        {"text": "IL-6.", "probability": 0.25},  # cleaned to IL-6
        {"text": "interleukin (IL", "probability": 0.20},  # unbalanced: dropped
        {"text": "x" * 101, "probability": 0.9},  # too long: dropped
        {"text": "il-6", "probability": 0.10},  # merged into IL-6 (first spelling kept): 0.35
        {"text": "(CRP)", "probability": 0.05},
        {"text": "a", "probability": 0.04},
        {"text": "b", "probability": 0.03},
        {"text": "c", "probability": 0.02},
    ]
    merged = merge_snippet_answers(snippets)
    assert [a["text"] for a in merged] == ["IL-6", "TNF", "CRP", "a", "b"]
    assert [a["probability"] for a in merged] == pytest.approx([0.35, 0.30, 0.05, 0.04, 0.03])
    assert len(merge_snippet_answers(snippets, max_answers=None)) == 6
    # ties keep the order they came in; nothing left gives no answers
    assert [
        a["text"]
        for a in merge_snippet_answers(
            [{"text": "b", "probability": 0.5}, {"text": "a", "probability": 0.5}]
        )
    ] == ["b", "a"]
    assert merge_snippet_answers([{"text": ")", "probability": 1.0}]) == []

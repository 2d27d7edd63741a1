"""The BLURB and BLUE registries and aggregates: the published BLURB scores are reproduced from the
published per-dataset numbers, missing datasets make a partial score that says what it covers, and
each registered metric is the one its benchmark uses."""

import json
import math
import statistics

import pytest
from helpers.blurb_tables import TABLE_6, parse_table

from fairseq_bio.runner.datasets import BLUE, BLURB, benchmark_score, blue_score, blurb_score
from fairseq_bio.metrics.benchmark_scores import (
    DOCUMENT_CLASSIFICATION,
    INFERENCE,
    NER,
    PICO,
    QUESTION_ANSWERING,
    RELATION_EXTRACTION,
    SENTENCE_SIMILARITY,
    summarize_runs,
)
from fairseq_bio.metrics.classification import blue_hoc_f1, hoc_f1, micro_f1


# More columns of the same form: seed 001 Tables 7 (Wiki+Books/PubMed vocabulary x
# WordPiece/whole-word masking), 8 (PubMed+PMC, and longer training) and 9 (adversarial
# pretraining); seed 003 (BioELECTRA, 003_c869dac8d00aa6e5.txt) Table 4 (P, P+F, P+F longer
# training, W+P).
OTHER_TABLES = parse_table(
    """
             T7-WB-WP T7-WB-WWM T7-PM-WP T8-PMC T8-PMC-LT T9-adv 003-P 003-PF 003-PF-LT 003-WP
BC5-chem        93.20 93.31 92.96 93.36 93.34 93.17 93.60 93.51 93.75 93.03
BC5-disease     85.00 85.28 84.72 85.62 85.76 85.48 85.84 85.55 85.32 84.66
NCBI-disease    88.39 88.53 87.26 88.34 88.04 87.99 89.38 88.43 88.73 88.45
BC2GM           83.65 83.93 83.19 84.39 84.37 84.07 84.69 84.61 84.68 83.90
JNLPBA          79.90 79.76 79.49 79.63 79.85 79.83 80.17 79.98 80.10 79.63
EBM PICO        73.30 73.52 73.44 73.64 73.72 72.92 74.26 73.88 73.86 73.33
ChemProt        75.04 76.70 75.72 76.96 76.80 77.04 78.20 77.76 76.76 77.06
DDI             81.30 82.60 80.84 83.56 82.06 83.62 82.76 83.53 82.34 79.68
GAD             79.48 80.30 79.34 82.24 81.58 81.48 83.70 84.18 85.67 83.16
BIOSSES         91.36 91.79 92.45 90.39 92.31 94.11 92.49 93.80 91.45 88.65
HoC             81.76 81.74 80.38 82.16 82.62 82.20 83.50 82.79 83.20 82.30
PubMedQA        52.20 55.92 54.76 61.02 60.02 53.30 64.02 63.80 62.21 61.20
BioASQ          73.69 76.41 78.51 83.43 87.20 82.71 88.57 91.42 91.50 90.01
BLURB score     79.00 79.87 79.51 80.93 81.45 80.68 82.47 82.72 82.24 80.96
"""
)


def without_score(column):
    return {name: value for name, value in column.items() if name != "BLURB score"}


@pytest.mark.parametrize("model", list(TABLE_6))
def test_reproduces_table_6_blurb_scores(model):
    results = dict(TABLE_6[model])
    published = results.pop("BLURB score")
    assert len(results) == 13
    score = blurb_score(results)
    assert not score.partial and score.missing == ()
    # the inputs are rounded to 0.01, so the score agrees with the published one to 0.01
    assert abs(score.score - published) <= 0.01, (model, score.score, published)
    assert score.summary() == f"BLURB score {score.score:.2f}"
    # a plain average over the 13 datasets would not reproduce the table: the macro over task types
    # matters
    assert abs(statistics.fmean(results.values()) - published) > 0.1


@pytest.mark.parametrize("column", list(OTHER_TABLES))
def test_reproduces_other_published_blurb_scores(column):
    results = dict(OTHER_TABLES[column])
    published = results.pop("BLURB score")
    assert abs(blurb_score(results).score - published) <= 0.01


def test_table_6_named_examples():
    assert round(blurb_score(without_score(TABLE_6["PubMedBERT"])).score, 2) == 81.10
    assert round(blurb_score(without_score(TABLE_6["BERT-uncased"])).score, 2) == 75.99
    per_type = blurb_score(without_score(TABLE_6["PubMedBERT"])).per_type
    assert per_type[NER] == pytest.approx((93.33 + 85.62 + 87.82 + 84.52 + 80.06) / 5)
    assert per_type[QUESTION_ANSWERING] == pytest.approx((55.84 + 87.56) / 2)


def test_registry_matches_table_3():
    assert len(BLURB.tasks) == 13 and [t.title for t in BLURB.tasks] == list(
        without_score(TABLE_6["PubMedBERT"])
    )
    by_type = {t: len(BLURB.names([t])) for t in BLURB.task_types}
    assert by_type == {
        NER: 5,
        PICO: 1,
        RELATION_EXTRACTION: 3,
        SENTENCE_SIMILARITY: 1,
        DOCUMENT_CLASSIFICATION: 1,
        QUESTION_ANSWERING: 2,
    }
    metrics = {t.title: t.metric for t in BLURB.tasks}
    assert metrics["NCBI-disease"] == "entity_f1" and metrics["EBM PICO"] == "word_macro_f1"
    assert (
        metrics["GAD"] == "micro_f1"
        and metrics["BIOSSES"] == "pearson"
        and metrics["HoC"] == "hoc_micro_f1"
    )
    assert metrics["PubMedQA"] == metrics["BioASQ"] == "accuracy"
    assert BLURB.task("pubmedqa").extra_metrics == ("macro_f1",)
    # names are matched loosely and through aliases
    assert BLURB.task("BC5CDR-chemical").name == BLURB.task("bc5_chem").name == "bc5-chem"
    assert BLURB.task("ncbi").title == "NCBI-disease"


def test_partial_blurb_lists_what_it_covers():
    full = without_score(TABLE_6["PubMedBERT"])
    # what this machine has: NCBI-disease, BC5-disease, GAD, DDI, BIOSSES, HoC, PubMedQA
    have = {
        k: full[k]
        for k in ("NCBI-disease", "BC5-disease", "GAD", "DDI", "BIOSSES", "HoC", "PubMedQA")
    }
    score = blurb_score({**have, "BioASQ": None})
    assert score.partial
    assert score.missing == ("bc5-chem", "bc2gm", "jnlpba", "ebm-pico", "chemprot", "bioasq")
    assert score.covered_types == (
        NER,
        RELATION_EXTRACTION,
        SENTENCE_SIMILARITY,
        DOCUMENT_CLASSIFICATION,
        QUESTION_ANSWERING,
    )
    assert score.missing_types == (PICO,)
    assert score.incomplete_types == (NER, RELATION_EXTRACTION, QUESTION_ANSWERING)
    expected = statistics.fmean([(85.62 + 87.82) / 2, (82.36 + 82.34) / 2, 92.30, 82.32, 55.84])
    assert score.score == pytest.approx(expected)
    summary = score.summary()
    assert summary.startswith(
        f"BLURB score {expected:.2f} (PARTIAL: covers 5 of 6 task types (ner, "
    )
    assert "in part: ner, relation_extraction, question_answering" in summary
    assert "missing: BC5-chem, BC2GM, JNLPBA, EBM PICO, ChemProt, BioASQ" in summary
    as_json = json.loads(json.dumps(score.to_dict()))
    assert as_json["partial"] is True and as_json["missing_types"] == ["pico"]
    assert blurb_score({}).score is None and "no dataset results" in blurb_score({}).summary()


def test_seeds_are_averaged_and_bad_results_refused():
    runs = summarize_runs([80.0, 82.0, 84.0, 90.0])
    assert (runs.n, runs.mean, runs.median) == (4, 84.0, 83.0)
    assert runs.std == pytest.approx(statistics.stdev([80.0, 82.0, 84.0, 90.0]))
    assert summarize_runs(75.5).std == 0.0
    score = blurb_score({"gad": [80.0, 84.0], "ddi": 81.0})
    assert score.datasets == {"ddi": 81.0, "gad": 82.0} or score.datasets == {
        "gad": 82.0,
        "ddi": 81.0,
    }
    assert score.per_type == {RELATION_EXTRACTION: 81.5} and score.score == 81.5
    with pytest.raises(ValueError, match=r"^unknown BLURB dataset 'mednli'; known: bc5-chem, "):
        blurb_score({"mednli": 80.0})
    with pytest.raises(
        ValueError, match=r"^BLURB dataset ncbi-disease given twice, as 'ncbi' and 'NCBI-disease'$"
    ):
        blurb_score({"ncbi": 88.0, "NCBI-disease": 87.0})
    with pytest.raises(ValueError, match=r"^BLURB gad: nan is not a finite number$"):
        blurb_score({"gad": math.nan})
    with pytest.raises(ValueError, match=r"^BLURB gad: no results$"):
        blurb_score({"gad": []})
    with pytest.raises(ValueError, match=r"^unknown benchmark 'glue'"):
        benchmark_score({}, "glue")


# BLUE README (ncbi-nlp/BLUE_Benchmark), baseline column NCBI_BERT(base) (P), in the README's row
# order.
BLUE_NCBI_BERT_BASE_P = {
    "MedSTS": 84.5,
    "BIOSSES": 89.3,
    "BC5CDR-disease": 86.6,
    "BC5CDR-chemical": 93.5,
    "ShARe/CLEFE": 75.4,
    "DDI": 78.1,
    "ChemProt": 72.5,
    "i2b2-2010": 74.4,
    "HoC": 85.3,
    "MedNLI": 82.2,
}


def test_blue_preset():
    assert len(BLUE.tasks) == 10 and [t.title for t in BLUE.tasks] == list(BLUE_NCBI_BERT_BASE_P)
    assert [t.title for t in BLUE.tasks if t.clinical] == [
        "MedSTS",
        "ShARe/CLEFE",
        "i2b2-2010",
        "MedNLI",
    ]
    assert (
        BLUE.task("hoc").metric == "hoc_example_f1" and BLURB.task("hoc").metric == "hoc_micro_f1"
    )
    assert (
        BLUE.task("ddi").negatives == ("DDI-false",) and BLUE.task("mednli").task_type == INFERENCE
    )
    full = blue_score(BLUE_NCBI_BERT_BASE_P)
    # the plain average of the ten (821.8 / 10), not a macro over task types
    assert not full.partial and full.score == pytest.approx(82.18)
    assert full.summary() == "BLUE score 82.18"
    biomedical = {k: v for k, v in BLUE_NCBI_BERT_BASE_P.items() if not BLUE.task(k).clinical}
    part = blue_score(biomedical)
    assert part.partial and part.score == pytest.approx(statistics.fmean(biomedical.values()))
    assert part.missing == (
        "medsts",
        "share-clefe",
        "i2b2-2010",
        "mednli",
    ) and part.missing_types == (INFERENCE,)
    assert "missing: MedSTS, ShARe/CLEFE, i2b2-2010, MedNLI" in part.summary()


def test_registered_metrics_are_the_benchmarks_own():
    gold = [[1, 0, 1], [0, 1, 0], [1, 1, 0]]
    pred = [[1, 0, 0], [0, 1, 1], [1, 1, 0]]
    assert BLURB.task("hoc").score(gold, pred) == hoc_f1(gold, pred)
    assert BLUE.task("hoc").score(gold, pred) == blue_hoc_f1(gold, pred)
    assert hoc_f1(gold, pred) != pytest.approx(blue_hoc_f1(gold, pred))
    assert BLURB.task("gad").score(["0", "1", "1"], ["1", "1", "0"]) == micro_f1(
        ["0", "1", "1"], ["1", "1", "0"]
    )
    assert BLUE.task("ddi").score(
        ["DDI-false", "DDI-int"], ["DDI-int", "DDI-int"]
    ) == pytest.approx(2 / 3)
    assert BLURB.task("biosses").score([0.0, 1.0, 4.0], [0.5, 1.0, 3.0]) > 0.9
    assert BLURB.task("pubmedqa").score(
        ["yes", "no"], ["yes", "yes"], metric="macro_f1"
    ) == pytest.approx(1 / 3)
    assert BLURB.task("ncbi").score([["B-Disease", "O"]], [["B-Disease", "O"]]) == 1.0
    assert BLURB.task("pico").score([["B-PAR", "O"]], [["I-PAR", "O"]]) == 1.0


def test_the_dataset_table_is_checked_in_one_line(tmp_path):
    """The shipped table is the benchmarks' own (every dataset has its recipe); a table with a bad
    entry is refused in one line naming the file and the entry."""
    from fairseq_bio.errors import BioConfigError
    from fairseq_bio.runner.datasets import RECIPES, load_table
    from fairseq_bio.runs import shipped_config_dir

    shipped = shipped_config_dir() / "runner" / "datasets.yaml"
    benchmarks, recipes = load_table(shipped)
    assert benchmarks["blurb"] == BLURB and benchmarks["blue"] == BLUE and recipes == RECIPES
    assert list(recipes["blurb"]) == list(BLURB.names()) and list(recipes["blue"]) == list(
        BLUE.names()
    )
    assert recipes["blurb"]["bc2gm"].overrides == (
        "optimization.max_epoch=50",
        "dataset.batch_size=32",
        "optimizer.groups.default.lr_float=6e-05",
        "optimization.lr=[6e-05]",
    )
    assert (
        recipes["blue"]["hoc"].alternative.preset == "hoc"
        and recipes["blue"]["hoc"].alternative.data == "blue/HoC"
    )
    (tmp_path / "sentence_task").mkdir()
    (tmp_path / "sentence_task" / "re_gad.yaml").write_text("{}\n")
    table = tmp_path / "blurb" / "datasets.yaml"
    table.parent.mkdir()
    gad = {
        "name": "gad",
        "title": "GAD",
        "task_type": "re",
        "metric": "micro_f1",
        "config": "bio_sentence_prediction",
        "preset": "re_gad",
        "data": "re/GAD",
        "source": "GAD",
    }
    for change, message in (
        ({"metric": "f1"}, "gad: unknown metric 'f1'; known: entity_f1, "),
        ({"preset": "re_ddi"}, "gad: preset 're_ddi' is not one of "),
        ({"epochs": 3}, "gad: epochs, batch_size, lr go together; only epochs given"),
        ({"colour": "red", "source": None}, "gad: unknown field(s) colour; missing source"),
        (
            {"config": "bio_tagging_ner", "preset": None},
            "gad: metric micro_f1 does not score the predictions of ",
        ),
    ):
        entry = {k: v for k, v in {**gad, **change}.items() if v is not None}
        spec = {"name": "T", "aggregate": "mean", "task_types": ["re"], "datasets": [entry]}
        table.write_text(json.dumps({"t": spec}))  # JSON is YAML
        with pytest.raises(BioConfigError) as e:
            load_table(table)
        assert str(e.value).startswith(f"{table}: t: {message}") and "\n" not in str(e.value), str(
            e.value
        )

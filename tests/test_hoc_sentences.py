"""BLUE's sentence-level HoC (task.group_documents, sentence_task=hoc_blue) on sentences of real HoC
abstracts: each abstract of the shared (BLURB, abstract-level) slice split into sentences that carry
its labels, written as BLUE's TSVs (index <PMID>_s<n>, sentence, labels). Labels read in both BLUE
text forms; the criterion ORs sentence rows per document and scores documents (BLUE's example-based
F1 and BLURB's micro F1), checked against a hand-computed case; a fairseq-hydra-train run validates
with every document whole in one batch and its logged metrics equal BLUE's formula on
fairseq-bio-predict's sentence rows; fairseq-bio-blurb --preset blue picks this form for TSVs."""

import csv
import json
import re

import pytest
import torch
from conftest import SHARED_DATA, fine_tune_sentence, logged

from fairseq_bio.data.sentence_files import (
    SentenceDataError,
    check_examples,
    parse_label_set,
    read_tsv,
)
from fairseq_bio.metrics.classification import blue_hoc_prf, hoc_prf

# BLUE's eval_hoc.py LABELS (the hoc_blue preset's task.labels, in this order)
HALLMARKS = [
    "activating invasion and metastasis",
    "avoiding immune destruction",
    "cellular energetics",
    "enabling replicative immortality",
    "evading growth suppressors",
    "genomic instability and mutation",
    "inducing angiogenesis",
    "resisting cell death",
    "sustaining proliferative signaling",
    "tumor promoting inflammation",
]
SPLITS = {
    "train": 40,
    "dev": 15,
    "test": 10,
}  # abstracts with at least one hallmark (BLUE has no others)


def sentences(abstract):
    """The shared HoC abstracts are tokenised: a sentence ends with a separate . ? or ! before a
    capital."""
    return [s for s in re.split(r"(?<= [.?!]) (?=[A-Z(\[])", abstract) if s.strip()]


@pytest.fixture(scope="module")
def blue_hoc(tmp_path_factory):
    """{split: [(pmid, [sentences], labels)]} and the directory of BLUE-form TSVs made from the real
    abstracts: train and dev label sentences as BLUE's release does ("0_0,1_1,..."), test by
    hallmark names (create_hoc.py).
    """
    out = tmp_path_factory.mktemp("blue-hoc-sentences")
    docs = {}
    for split, n in SPLITS.items():
        rows = [
            json.loads(line)
            for line in (SHARED_DATA / "hoc" / f"{split}.json").read_text().splitlines()
        ]
        docs[split] = [
            (r["id"], sentences(r["sentence"]), r["label"]) for r in rows if any(r["label"])
        ][:n]
        with open(out / f"{split}.tsv", "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f, delimiter="\t", lineterminator="\n")
            writer.writerow(["index", "sentence", "labels"])
            for pmid, texts, label in docs[split]:
                if split == "test":
                    value = ",".join(name for name, v in zip(HALLMARKS, label) if v)
                else:
                    value = ",".join(f"{i}_{v}" for i, v in enumerate(label))
                writer.writerows([f"{pmid}_s{i}", text, value] for i, text in enumerate(texts))
    return docs, out


def test_blue_label_forms_and_row_ids(blue_hoc):
    """Both text forms give each sentence its abstract's 0/1 row; the index column is the row id; a
    label in neither form, or text labels without names, is a one-line error naming file and
    line."""
    docs, out = blue_hoc
    for split in ("dev", "test"):
        path = str(out / f"{split}.tsv")
        rows = read_tsv(path, ["sentence"], "labels", "index")
        check_examples(rows, path, "multilabel", ["sentence"], width=10, label_names=HALLMARKS)
        expected = [
            (f"{pmid}_s{i}", tuple(label))
            for pmid, texts, label in docs[split]
            for i in range(len(texts))
        ]
        assert [(r.id, r.label) for r in rows] == expected
    assert (
        sum(len(texts) for _, texts, _ in docs["train"]) > 3 * SPLITS["train"]
    )  # abstracts became sentences
    assert parse_label_set("", HALLMARKS, "f:1") == [0] * 10
    for value, message in (
        ("3_2", "'3_2' is neither"),
        ("12_1", "'12_1' names position 12 of 10 labels"),
        ("cellular energy", "'cellular energy' is neither"),
    ):
        with pytest.raises(SentenceDataError, match=f"^f:1: label {message}"):
            parse_label_set(value, HALLMARKS, "f:1")
    with pytest.raises(
        SentenceDataError, match=r"^f:3: label '0_1' is text; give the label names in order"
    ):
        parse_label_set("0_1", None, "f:3")


@pytest.fixture(scope="module")
def hoc_blue_run(tiny_encoder, blue_hoc, tmp_path_factory):
    """(save_dir, json log) of sentence_task=hoc_blue, 20 updates from the tiny encoder (threshold
    0.2: the label prior it learns in that time puts the frequent hallmarks above it, so predictions
    are not all empty).
    """
    save_dir = tmp_path_factory.mktemp("hoc-blue")
    log = fine_tune_sentence(
        "hoc_blue",
        blue_hoc[1],
        save_dir,
        f"checkpoint.restore_file={tiny_encoder}",
        "task.threshold=0.2",
        updates=20,
    )
    return save_dir, log


@pytest.fixture(scope="module")
def loaded(hoc_blue_run):
    from fairseq_bio.inference.loading import load_fine_tuned

    return load_fine_tuned(str(hoc_blue_run[0] / "checkpoint_last.pt"), cpu=True)


def test_sentences_are_scored_per_document_as_computed_by_hand(loaded, blue_hoc):
    """Three real dev abstracts, their sentences predicted by hand-set logits and scored in two
    batches (documents whole): A predicts its gold on one sentence only; B one wrong hallmark on its
    first sentence and its gold on its last; C nothing. ORed per abstract: A exact, B gold + 1, C
    empty, so BLUE's P = (1 + g/(g+1) + 0) / 3, R = (1 + 1 + 0) / 3 and F1 = 2PR / (P + R); BLURB's
    micro F1 pools the cells."""
    from fairseq_bio.inference.sentence_level import sentence_metrics
    from fairseq_bio.criterions.bio_sentence_prediction import BioSentencePredictionCriterion

    task, _ = loaded
    criterion = BioSentencePredictionCriterion(None, task)
    (pa, sa, ga), (pb, sb, gb), (pc, sc, gc) = blue_hoc[0]["dev"][:3]
    wrong = gb.index(0)  # a hallmark B does not have
    logits, gold, ids = [], [], []
    for pmid, texts, label in ((pa, sa, ga), (pb, sb, gb), (pc, sc, gc)):
        for i in range(len(texts)):
            row = [-5.0] * 10
            if pmid == pa and i == 0:
                row = [5.0 if v else -5.0 for v in ga]
            if pmid == pb and i == 0:
                row[wrong] = 5.0
            if pmid == pb and i == len(texts) - 1:
                row = [5.0 if v else -5.0 for v in gb]
            logits.append(row)
            gold.append(label)
            ids.append(f"{pmid}_s{i}")
    outputs, target = torch.tensor(logits), torch.tensor(gold)
    documents = torch.tensor([0] * len(sa) + [1] * len(sb) + [2] * len(sc))
    split = len(sa) + len(sb)
    logs = [
        criterion.score(outputs[:split], target[:split], documents[:split]),
        criterion.score(outputs[split:], target[split:], documents[split:]),
    ]
    summed = {k: sum(log.get(k, 0) for log in logs) for k in set(logs[0]) | set(logs[1])}
    metrics = sentence_metrics(summed)

    g = sum(gb)
    p, r = (1 + g / (g + 1) + 0) / 3, (1 + 1 + 0) / 3
    assert metrics["documents"] == 3
    assert (metrics["example_precision"], metrics["example_recall"]) == pytest.approx(
        (100 * p, 100 * r), abs=0.01
    )
    assert metrics["example_f1"] == pytest.approx(100 * 2 * p * r / (p + r), abs=0.01)
    correct, predicted, golds = sum(ga) + g, sum(ga) + g + 1, sum(ga) + g + sum(gc)
    mp, mr = correct / predicted, correct / golds
    assert metrics["f1"] == pytest.approx(100 * 2 * mp * mr / (mp + mr), abs=0.01)
    # the metric functions on the sentence rows with their ids (the runner's score from predictions)
    # agree
    predicted_rows = [[int(v > 0) for v in row] for row in logits]
    assert 100 * blue_hoc_prf(gold, predicted_rows, ids)[2] == pytest.approx(
        metrics["example_f1"], abs=0.01
    )
    assert 100 * hoc_prf(gold, predicted_rows, ids)[2] == pytest.approx(metrics["f1"], abs=0.01)


def test_hoc_blue_validates_whole_documents_and_predict_agrees(
    hoc_blue_run, loaded, blue_hoc, tmp_path
):
    """The run's dev validation scores each of the 15 abstracts once (a document split over two
    batches would count twice) from all its sentences' windows; its logged example_f1 / f1 are
    BLUE's and BLURB's formulas on fairseq-bio-predict's sentence rows grouped by their ids; the
    test file in the names form predicts too.
    """
    from fairseq_bio.inference.sentence_level import predict_sentence_file

    _, log = hoc_blue_run
    docs, out = blue_hoc
    valid = logged(log, "valid")[20]
    assert int(valid["documents"]) == SPLITS["dev"] and int(valid["ex_total"]) == SPLITS["dev"]
    assert int(valid["windows"]) >= sum(
        len(texts) for _, texts, _ in docs["dev"]
    )  # a long sentence is windowed
    task, model = loaded
    scores = predict_sentence_file(
        task, model, str(out / "dev.tsv"), str(tmp_path / "dev.jsonl"), progress=False
    )
    rows = [json.loads(line) for line in (tmp_path / "dev.jsonl").read_text().splitlines()]
    gold, pred, ids = [r["gold"] for r in rows], [r["pred"] for r in rows], [r["id"] for r in rows]
    assert ids[0] == f"{docs['dev'][0][0]}_s0" and 0 < sum(map(sum, pred)) < sum(
        len(p) for p in pred
    )
    p, r, f = blue_hoc_prf(gold, pred, ids)
    assert float(valid["example_f1"]) == pytest.approx(100 * f, abs=0.01)
    assert scores["example_f1"] == pytest.approx(100 * f, abs=0.01)
    assert float(valid["example_precision"]) == pytest.approx(100 * p, abs=0.01)
    assert float(valid["f1"]) == pytest.approx(100 * hoc_prf(gold, pred, ids)[2], abs=0.01)
    predict_sentence_file(
        task, model, str(out / "test.tsv"), str(tmp_path / "test.jsonl"), progress=False
    )
    test = [json.loads(line) for line in (tmp_path / "test.jsonl").read_text().splitlines()]
    assert [r["gold"] for r in test] == [label for _, texts, label in docs["test"] for _ in texts]


def test_blue_preset_runs_hoc_blue_on_blues_sentence_files(blue_hoc, tmp_path):
    """fairseq-bio-blurb --preset blue: a HoC directory with BLUE's TSVs runs
    sentence_task=hoc_blue, its budget counted in sentences; one with abstract-level JSON lines runs
    sentence_task=hoc as before."""
    from fairseq_bio.runner.plan import plan_runs
    from fairseq_bio.cli.blurb import build_parser
    from fairseq_bio.runner.datasets import BLUE

    encoder = tmp_path / "encoder.pt"
    encoder.write_bytes(b"")
    jsonl = tmp_path / "jsonl"
    jsonl.mkdir()
    for split in ("train", "dev", "test"):
        (jsonl / f"{split}.json").write_text(
            (SHARED_DATA / "hoc" / f"{split}.json").read_text().splitlines()[0] + "\n"
        )
    plans = {}
    for name, directory in (("tsv", blue_hoc[1]), ("jsonl", jsonl)):
        args = build_parser().parse_args(
            [
                "--checkpoint",
                str(encoder),
                "--data",
                str(tmp_path),
                "--out",
                str(tmp_path / "out"),
                "--preset",
                "blue",
                "--tasks",
                "hoc",
                "--dataset-dir",
                f"hoc={directory}",
            ]
        )
        args.overrides, args.checkpoint = [], encoder
        (plans[name],), missing = plan_runs(args, BLUE, ["hoc"])
    assert plans["tsv"].recipe.preset == "hoc_blue" and plans["jsonl"].recipe.preset == "hoc"
    assert plans["tsv"].budget.train_examples == sum(
        len(texts) for _, texts, _ in blue_hoc[0]["train"]
    )
    assert plans["tsv"].cfg["checkpoint"]["best_checkpoint_metric"] == "example_f1"
    assert plans["tsv"].cfg["task"]["group_documents"] and plans["jsonl"].budget.train_examples == 1

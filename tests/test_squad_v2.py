"""SQuAD v2.0 in bio_extractive_qa (task.version_2_with_negative): unanswerable questions read
(refused without the option), trained towards <s> in every window, answered "" by the null score
diff threshold; the official evaluate-v2.0.py numbers (exact / F1 with the HasAns / NoAns breakdown,
the best-threshold search) on hand-made cases worked out by hand below; and one tiny real run on
tests/data/qa with unanswerable questions added (in the test's temp dir): fairseq-hydra-train ->
fairseq-bio-predict, the printed metrics equal to the criterion's dev metrics and to the official
definitions applied to the written predictions."""

import json

import pytest
from helpers.qa import QA_DATA, fine_tune_qa, hand_batch, hydra_log, set_logits

from fairseq_bio import runs
from fairseq_bio.data.qa_dataset import (
    NO_ANSWER,
    EncodedQA,
    ExtractiveQADataset,
    OffsetEncoder,
    best_answers,
    collate_qa,
    null_score_diffs,
    v2_predictions,
)
from fairseq_bio.data.squad import read_squad
from fairseq_bio.data.tagging_dataset import WordEncoder
from fairseq_bio.files import InputError
from fairseq_bio.metrics.qa import best_null_threshold, squad_v2_eval, squad_v2_sums

# ------------------------------------------------------------------------------------------- metrics by hand

# Five questions; golds [] are unanswerable (the official script: bool(qa["answers"]) is False, gold
# [""]).
PREDICTIONS = ["BRCA1", "", "", "the cat", "dog"]
GOLDS = [["BRCA1 gene"], [], ["p53"], [], ["a dog", "dog barked"]]


def test_official_v2_scores_by_hand():
    # q1 "BRCA1" vs "BRCA1 gene": EM 0, F1 = 2PR/(P+R) with P 1, R 1/2 = 2/3
    # q2 "" on an unanswerable question: EM 1, F1 1 (both token lists empty)
    # q3 "" on an answerable one: 0, 0
    # q4 "the cat" (normalised "cat") on an unanswerable one: 0, 0
    # q5 "dog" vs "a dog" (normalised "dog"): EM 1, F1 1
    # all: EM 2/5, F1 (2/3 + 1 + 0 + 0 + 1) / 5 = 8/15; HasAns (q1, q3, q5): EM 1/3, F1 (2/3 + 1) /
    # 3 = 5/9; NoAns (q2, q4): 1/2 for both
    assert squad_v2_eval(PREDICTIONS, GOLDS) == pytest.approx(
        {
            "exact": 40.0,
            "f1": 100 * 8 / 15,
            "total": 5,
            "HasAns_exact": 100 / 3,
            "HasAns_f1": 100 * 5 / 9,
            "HasAns_total": 3,
            "NoAns_exact": 50.0,
            "NoAns_f1": 50.0,
            "NoAns_total": 2,
        }
    )
    # a group without questions is left out, as the official script does
    assert set(squad_v2_eval(["BRCA1"], [["BRCA1"]])) == {
        "exact",
        "f1",
        "total",
        "HasAns_exact",
        "HasAns_f1",
        "HasAns_total",
    }
    assert squad_v2_eval([""], [[]]) == {
        "exact": 100.0,
        "f1": 100.0,
        "total": 1,
        "NoAns_exact": 100.0,
        "NoAns_f1": 100.0,
        "NoAns_total": 1,
    }
    # a gold answer that normalises to nothing: the question still has an answer (HasAns), scored
    # against ""
    assert squad_v2_eval([""], [["the"]])["HasAns_exact"] == 100.0
    every, has = squad_v2_sums(PREDICTIONS, GOLDS)
    assert (every.total, has.total, has.exact) == (5, 3, 1.0) and has.f1 == pytest.approx(5 / 3)


def test_best_null_threshold_by_hand():
    """The official find_best_thresh: start from every question answered "" (the 2 unanswerable ones
    right, score 2, threshold 0.0), then switch questions to their span in order of null score diff,
    keeping the first best.
    """
    spans = ["BRCA1", "x", "p53", "the cat", "dog"]
    diffs = [-1.0, 0.5, 2.0, 1.0, None]  # q5 found no span: never answered
    # EM: q1 (diff -1) +0 -> 2; q2 (0.5) unanswerable answered "x" -1 -> 1; q4 (1.0) -1 -> 0; q3 (2.0) +1 -> 1:
    #     best stays the start, 2 / 5, threshold 0.0
    # F1: q1 +2/3 -> 8/3 (best, threshold -1.0); q2 -> 5/3; q4 -> 2/3; q3 -> 5/3: best 8/3 / 5
    assert best_null_threshold(spans, diffs, GOLDS) == pytest.approx(
        {
            "best_exact": 40.0,
            "best_exact_thresh": 0.0,
            "best_f1": 100 * 8 / 15,
            "best_f1_thresh": -1.0,
        }
    )
    # the threshold it picks, applied with the decision rule ("" when diff > threshold), scores what
    # it promised
    answers = [[{"text": t, "score": 0.0}] for t in spans[:4]] + [[]]
    assert squad_v2_eval(v2_predictions(answers, diffs, -1.0), GOLDS)["f1"] == pytest.approx(
        100 * 8 / 15
    )
    # every unanswerable question answered with a span loses its point; a better F1 comes from
    # answering q3 too
    golds = [["BRCA1"], [], ["p53"]]
    assert best_null_threshold(["BRCA1", "x", "p53"], [0.0, 3.0, 1.0], golds) == pytest.approx(
        {"best_exact": 100.0, "best_exact_thresh": 1.0, "best_f1": 100.0, "best_f1_thresh": 1.0}
    )


# ------------------------------------------------------------------------------------------- reading, targets


def v2_file(source, dest, per_context=1):
    """``source`` (a SQuAD v1.1 file of tests/data/qa) with ``per_context`` unanswerable questions
    added to every paragraph: the first question(s) of the next paragraph, about another abstract,
    with "is_impossible": true and no answers. Returns the number of unanswerable questions."""
    data = json.loads(source.read_text(encoding="utf-8"))
    paragraphs = [p for article in data["data"] for p in article["paragraphs"]]
    added = 0
    for i, paragraph in enumerate(paragraphs):
        other = paragraphs[(i + 1) % len(paragraphs)]
        for qa in other["qas"][:per_context]:
            paragraph["qas"].append(
                {
                    "id": f"{qa['id']}_neg",
                    "question": qa["question"],
                    "answers": [],
                    "is_impossible": True,
                }
            )
            added += 1
    dest.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return added


def test_unanswerable_questions_read_only_when_asked_for(tmp_path):
    path = tmp_path / "train.json"
    added = v2_file(QA_DATA / "train.json", path)
    squad = read_squad(str(path), allow_unanswerable=True)
    assert (len(squad.examples), squad.unanswerable, added) == (29 + 12, 12, 12)
    assert all(ex.answers == [] for ex in squad.examples if ex.id.endswith("_neg"))
    with pytest.raises(InputError) as err:
        read_squad(str(path))
    text = str(err.value)
    assert (
        "\n" not in text
        and text.startswith(f"{path}:")
        and "task.version_2_with_negative=true" in text
    )
    assert "is_impossible: an unanswerable question" in text
    # a file to predict (answers ignored) is read whatever it says
    assert read_squad(str(path), require_answers=False).unanswerable == 0
    # is_impossible with an answer contradicts itself
    data = json.loads(path.read_text(encoding="utf-8"))
    data["data"][0]["paragraphs"][0]["qas"][0]["is_impossible"] = True
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    with pytest.raises(InputError, match='question 399330_001: is_impossible, but "answers" has 1'):
        read_squad(str(path), allow_unanswerable=True)


def v2_dataset(vocab, path, window=128, stride=32):
    dictionary, spec = vocab
    squad = read_squad(str(path), allow_unanswerable=True)
    encoded = EncodedQA.encode(OffsetEncoder(WordEncoder(dictionary, spec)), squad, 64)
    return ExtractiveQADataset(squad, encoded, dictionary, window, stride)


def test_unanswerable_questions_target_s_in_every_window(tmp_path, learned_vocab):
    from fairseq_bio.tasks.fine_tuning import load_vocab

    vocab = load_vocab(str(learned_vocab("bytebpe")))
    path = tmp_path / "train.json"
    v2_file(QA_DATA / "train.json", path, per_context=2)
    dataset = v2_dataset(vocab, path)
    negative = [i for i, ex in enumerate(dataset.squad.examples) if not ex.answers]
    assert len(negative) == 24 and all(dataset.targets[i] == NO_ANSWER for i in negative)
    assert any(
        dataset.windows(i) > 1 for i in negative
    )  # long contexts: several windows, all of them at <s>
    batch = collate_qa([dataset[i] for i in range(len(dataset))], vocab[0])
    for i, ex in enumerate(dataset.squad.examples):
        rows = batch["row_example"] == i
        hits = int((batch["start_positions"][rows] > 0).sum())
        assert hits == 0 if not ex.answers else hits >= 1
    assert (
        dataset.unaligned_answers() == v2_dataset(vocab, QA_DATA / "train.json").unaligned_answers()
    )


def test_null_score_is_the_smallest_s_score_over_the_windows():
    """BERT's run_squad / HF's run_qa: null score = min over the question's windows of start[0] +
    end[0]; the answer is "" when null score - best span score > threshold."""
    batch, _ = hand_batch()
    start, end = set_logits(
        batch, {(1, 5): (5.0, 0.0), (1, 6): (0.0, 4.0)}
    )  # best span "agglutination TEST": 9
    for r, (s, e) in enumerate([(3.0, 3.0), (1.0, 1.0), (4.0, 4.0)]):  # <s>: 6, 2, 8
        start[r, 0], end[r, 0] = s, e
    answers = best_answers(start, end, batch, 20, 30, 5)
    assert answers[0][0]["text"] == "agglutination TEST" and answers[0][0]["score"] == 9.0
    [diff] = null_score_diffs(answers, start, end, batch)
    assert diff == 2.0 - 9.0
    assert v2_predictions(answers, [diff], 0.0) == ["agglutination TEST"]
    assert v2_predictions(answers, [diff], -7.0) == [
        "agglutination TEST"
    ]  # not above the threshold
    assert v2_predictions(answers, [diff], -7.5) == [""]
    assert v2_predictions([[]], [None], 0.0) == [""]  # no span at all
    start[1, 0] = (
        11.0  # the window with the smallest null score gets a large one: the next smallest counts
    )
    assert null_score_diffs(answers, start, end, batch) == [6.0 - 9.0]


def test_criterion_logs_the_has_and_no_answer_breakdown():
    from fairseq import metrics

    from fairseq_bio.criterions.bio_extractive_qa import BioExtractiveQACriterion

    answers = [[{"text": t}] for t in ["BRCA1", "x", "p53", "the cat", "dog"]]
    one = BioExtractiveQACriterion.score(answers[:2], GOLDS[:2], PREDICTIONS[:2])
    two = BioExtractiveQACriterion.score(answers[2:], GOLDS[2:], PREDICTIONS[2:])
    assert (
        one["fa_total"] + two["fa_total"] == 3
    )  # the factoid measures cover the answerable questions
    with metrics.aggregate(new_root=True) as agg:
        BioExtractiveQACriterion.reduce_metrics(
            [{"loss": 0.0, "sample_size": 1, **one}, {"loss": 0.0, "sample_size": 1, **two}]
        )
        values = agg.get_smoothed_values()
    official = squad_v2_eval(PREDICTIONS, GOLDS)
    assert values["exact_match"] == round(official["exact"], 2) and values["f1"] == round(
        official["f1"], 2
    )
    for key in ("HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1"):
        assert values[key] == round(official[key], 2), key
    # of the three answerable ones only "p53" (factoid compares whole strings: "dog" is not "a dog")
    assert values["strict_acc"] == round(100 / 3, 2)
    v1 = BioExtractiveQACriterion.score(answers, [["BRCA1"]] * 5)
    assert "qa_has_total" not in v1 and v1["fa_total"] == 5


# ------------------------------------------------------------------------------------------------- end to end

V2_METRICS = ("exact_match", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1")


@pytest.fixture(scope="module")
def v2_run(tiny_encoder, tmp_path_factory):
    data = tmp_path_factory.mktemp("squad-v2")
    v2_file(QA_DATA / "train.json", data / "train.json")
    v2_file(QA_DATA / "dev.json", data / "dev.json")
    save_dir = data / "run"
    log = fine_tune_qa(
        tiny_encoder,
        save_dir,
        "task.version_2_with_negative=true",
        "checkpoint.best_checkpoint_metric=f1",
        "optimizer.groups.default.lr_float=0.001",
        updates=12,
        data=data,
    )
    return data, save_dir, log


def predict_v2(save_dir, data, out, capsys, *options):
    from fairseq_bio.cli.predict import main as predict

    capsys.readouterr()
    predict(
        [
            "--checkpoint",
            str(save_dir / "checkpoint_last.pt"),
            "--input",
            str(data / "dev.json"),
            "--out",
            str(out),
            "--no-progress",
            "--cpu",
            *options,
        ]
    )
    line = capsys.readouterr().out.strip().splitlines()[-1].split()
    rows = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    return rows, dict(zip(line[0::2], map(float, line[1::2])))


def test_v2_trains_and_predicts_end_to_end(v2_run, tmp_path, capsys):
    from conftest import logged

    data, save_dir, log = v2_run
    text = hydra_log(save_dir)
    assert "41 questions (12 unanswerable)" in text and "15 questions (4 unanswerable)" in text
    dev = runs.logged(log, "valid")
    last = dev[max(dev)]
    for entry in dev.values():
        assert all(0 <= entry[m] <= 100 for m in V2_METRICS)
    train = logged(log, "train")
    assert train[max(train)]["loss"] < train[min(train)]["loss"]

    rows, printed = predict_v2(save_dir, data, tmp_path / "dev.jsonl", capsys)
    # fairseq-bio-predict prints the criterion's own dev metrics for the same checkpoint ...
    assert {m: printed[m] for m in V2_METRICS} == {
        m: pytest.approx(last[m], abs=0.006) for m in V2_METRICS
    }
    # ... which are the official v2.0 definitions applied to the predictions it wrote
    golds = [r["gold"] for r in rows]
    assert sum(not g for g in golds) == 4 and len(rows) == 15
    official = squad_v2_eval([r["prediction"] for r in rows], golds)
    for ours, theirs in (
        ("exact_match", "exact"),
        ("f1", "f1"),
        ("HasAns_exact", "HasAns_exact"),
        ("HasAns_f1", "HasAns_f1"),
        ("NoAns_exact", "NoAns_exact"),
        ("NoAns_f1", "NoAns_f1"),
    ):
        assert printed[ours] == pytest.approx(official[theirs], abs=0.006), ours
    for row in rows:
        diff = row["null_score_diff"]
        assert row["prediction"] == (
            "" if diff is None or diff > 0.0 else row["answers"][0]["text"]
        )
    best = best_null_threshold(
        [r["answers"][0]["text"] if r["answers"] else "" for r in rows],
        [r["null_score_diff"] for r in rows],
        golds,
    )
    assert {k: printed[k] for k in best} == {  # printed: percentages to 2 decimals, thresholds to 4
        k: pytest.approx(v, abs=0.00006 if k.endswith("_thresh") else 0.006)
        for k, v in best.items()
    }

    # the threshold moves the no-answer decision: far below every diff, all ""; far above, every
    # span answered
    _, none = predict_v2(
        save_dir, data, tmp_path / "none.jsonl", capsys, "--null-score-diff-threshold=-1e9"
    )
    assert (none["NoAns_exact"], none["HasAns_exact"]) == (100.0, 0.0)
    assert none["exact_match"] == pytest.approx(100 * 4 / 15, abs=0.006)
    _, every = predict_v2(
        save_dir, data, tmp_path / "every.jsonl", capsys, "--null-score-diff-threshold=1e9"
    )
    assert every["NoAns_exact"] == 0.0
    # a threshold between the diffs (the tiny model answers "" everywhere at 0): the 8 smallest
    # diffs answered
    middle = sorted(r["null_score_diff"] for r in rows if r["null_score_diff"] is not None)[7]
    mixed_rows, mixed = predict_v2(
        save_dir, data, tmp_path / "mixed.jsonl", capsys, f"--null-score-diff-threshold={middle!r}"
    )
    assert sum(r["prediction"] != "" for r in mixed_rows) == 8
    official = squad_v2_eval([r["prediction"] for r in mixed_rows], golds)
    assert mixed["f1"] == pytest.approx(official["f1"], abs=0.006)
    assert mixed["NoAns_exact"] == pytest.approx(official["NoAns_exact"], abs=0.006)


def test_a_v1_checkpoint_refuses_a_v2_file_in_one_line(v2_run, tiny_encoder, tmp_path):
    """Without task.version_2_with_negative, a run on files with unanswerable questions stops in one
    line (at the first file read: fairseq loads the valid split first)."""
    from conftest import run_cli

    data, _, _ = v2_run
    save_dir = tmp_path / "v1"
    save_dir.mkdir()
    result = run_cli(
        runs.hydra_train(
            "bio_extractive_qa",
            f"task.data={data}",
            f"checkpoint.restore_file={tiny_encoder}",
            "optimization.max_update=1",
            save_dir=save_dir,
        ),
        cwd=save_dir,
        check=False,
    )
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert (
        last.startswith(str(data / "dev.json") + ":")
        and "_neg: is_impossible: an unanswerable question" in last
    )
    assert last.endswith(
        "(SQuAD v2.0 unanswerable questions are read with task.version_2_with_negative=true)"
    )

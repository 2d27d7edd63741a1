"""Sentence-level fine-tuning end to end through fairseq-hydra-train from the tiny pretrained
encoder, on the real shared data with each shipped dataset preset (sentence_task=re_gad, re_ddi,
hoc, biosses, pubmedqa, mednli): GAD learns above the majority class, long HoC abstracts and
PubMedQA contexts are windowed with every window seen and pooled as the mean, each dev metric is
logged for checkpoint selection, and bad input fails in one line."""

import json
import math
import re

import pytest
import torch
from conftest import SHARED_DATA, fine_tune_sentence, logged, run_cli

from fairseq_bio import runs
from fairseq_bio.checkpoints import FAIRSEQ_SAFE_GLOBALS, load_checkpoint
from fairseq_bio.criterions.bio_sentence_prediction import (
    BioSentencePredictionCriterion,
    BioSentencePredictionCriterionConfig,
)

# accuracy points above the majority class; measured over fine-tuning seeds 1 / 2 / 3 (common.seed;
# the fixture's is 1): +7.5 / +11.4 / +8.4, macro F1 +26.0 / +30.5 / +26.9 above the majority's
# (2026-11-27)
GAD_MARGIN = 4.0


def job_log(save_dir):
    """What every logger wrote in the run (hydra's record beside the checkpoints,
    run_config/local)."""
    return "".join(
        p.read_text(encoding="utf-8")
        for p in sorted((save_dir / "hydra").glob("*/hydra_train.log"))
    )


def test_gad_learns_above_the_majority_class(gad_model):
    """Dev accuracy and macro F1 of the final model clearly above predicting the majority class for
    all 535 dev sentences (BLURB's 4,261 / 535 split sizes, the last 535 train rows held out).

    BLURB's GAD metric, F1 of the positive class, is logged too, but the majority class (positive)
    already scores 70.77 on it (P 54.8, R 100), and the 2 x 128 encoder pretrained for 400 updates
    does not beat that in 600 updates (67-69 over seeds 1-3), so it is not asserted."""
    _, log = gad_model
    last = runs.last_validation(log)
    gold = [int(last[f"cls_gold_{i}"]) for i in range(2)]
    assert sum(gold) == 535
    majority = max(gold) / sum(gold)
    assert float(last["accuracy"]) >= 100 * majority + GAD_MARGIN
    assert (
        float(last["macro_f1"]) >= 100 * majority / (1 + majority) + 4 * GAD_MARGIN
    )  # majority: F1 of one class
    f1 = float(last["f1"])
    p, r = int(last["pos_correct"]) / int(last["pos_pred"]), int(last["pos_correct"]) / int(
        last["pos_gold"]
    )
    assert f1 == pytest.approx(
        100 * 2 * p * r / (p + r), abs=0.01
    )  # micro F1 over the positive class "1"
    train = logged(log, "train_inner")
    assert float(train[max(train)]["loss"]) < float(train[min(train)]["loss"])


def test_fine_tuned_directory_is_self_contained(gad_model):
    save_dir, log = gad_model
    for name in (
        "checkpoint_best.pt",
        "checkpoint_last.pt",
        "dict.txt",
        "bpe.json",
        "encoder.json",
        "vocab.bpe",
    ):
        assert (save_dir / name).exists(), name
    assert list((save_dir / "encoded").glob("encoded-*.npz"))  # the cache of encoded texts
    allowed = {f"{g.__module__}.{g.__qualname__}" for g in FAIRSEQ_SAFE_GLOBALS} | {"typing.Any"}
    unsafe = set(
        torch.serialization.get_unsafe_globals_in_checkpoint(save_dir / "checkpoint_best.pt")
    )
    assert unsafe <= allowed, unsafe - allowed
    state = load_checkpoint(save_dir / "checkpoint_best.pt")
    assert state["task_state"] == {"labels": ["0", "1"], "kind": "classification"}
    assert (
        state["cfg"]["model"]["encoder_layers"] == 2
    )  # taken from the encoder checkpoint, not the config
    assert state["model"]["classification_heads.bio_sentence.out_proj.weight"].shape == (2, 128)
    # checkpoint_best is the best dev F1 (BLURB's GAD metric), as the preset selects
    best = max(float(v["f1"]) for v in logged(log, "valid").values())
    assert state["extra_state"]["best"] == pytest.approx(best, abs=0.01)


def test_fairseq_validate_and_predict_score_every_test_sentence_as_the_criterion(
    gad_model, tmp_path
):
    """fairseq-validate on the fine-tuned checkpoint: the 534 test sentences are all scored (none
    dropped by fairseq's batching), and on the dev split it reproduces the training run's dev
    metrics for that checkpoint; fairseq-bio-predict writes a prediction per test sentence and
    prints the same test metrics."""
    save_dir, log = gad_model
    result = run_cli(
        runs.validate(
            SHARED_DATA / "re" / "GAD",
            "--task",
            "bio_sentence_prediction",
            "--path",
            save_dir / "checkpoint_best.pt",
            "--valid-subset",
            "test,valid",
            "--batch-size",
            "16",
            "--cpu",
        ),
        cwd=tmp_path,
    )
    printed = {}
    for line in (result.stdout + result.stderr).splitlines():
        found = re.search(r"valid on '(\w+)' subset \| (.*)", line)
        if found:
            printed[found.group(1)] = dict(
                item.rsplit(" ", 1) for item in found.group(2).split(" | ")
            )
    assert float(printed["test"]["bsz"]) == 534
    assert int(printed["test"]["cls_gold_0"]) + int(printed["test"]["cls_gold_1"]) == 534
    best = load_checkpoint(save_dir / "checkpoint_best.pt")["extra_state"]["best"]
    trained = [v for v in logged(log, "valid").values() if float(v["f1"]) == best][-1]
    for key in ("accuracy", "macro_f1", "f1", "cls_correct_0", "cls_correct_1"):
        assert float(printed["valid"][key]) == pytest.approx(float(trained[key]), abs=0.01), key

    # fairseq-bio-predict on the same test file: a row per test sentence in input order, and the
    # metrics it prints are fairseq-validate's
    test_file = SHARED_DATA / "re" / "GAD" / "test.tsv"
    predicted = run_cli(
        [
            "fairseq-bio-predict",
            "--checkpoint",
            save_dir / "checkpoint_best.pt",
            "--input",
            test_file,
            "--out",
            tmp_path / "pred.jsonl",
            "--cpu",
            "--no-progress",
        ],
        cwd=tmp_path,
    ).stdout
    rows = [json.loads(line) for line in (tmp_path / "pred.jsonl").read_text().splitlines()]
    assert [r["line"] for r in rows] == list(range(2, 536))  # line 1 is the header
    gold = test_file.read_text(encoding="utf-8").splitlines()[1:]
    assert [r["gold"] for r in rows] == [line.rsplit("\t", 1)[1] for line in gold]
    assert all(r["pred"] == max(r["probabilities"], key=r["probabilities"].get) for r in rows)
    metrics = dict(re.findall(r"(\w+) (\d+\.\d+)", predicted.splitlines()[-1]))
    for key in ("accuracy", "macro_f1", "precision", "recall", "f1"):
        assert float(metrics[key]) == pytest.approx(float(printed["test"][key]), abs=0.01), key
    # the same sentences without their label column: the same predictions, no gold, no metrics
    unlabelled = tmp_path / "unlabelled.tsv"
    unlabelled.write_text(
        "".join(line.rsplit("\t", 1)[0] + "\n" for line in ["index\tsentence\tlabel", *gold])
    )
    run_cli(
        [
            "fairseq-bio-predict",
            "--checkpoint",
            save_dir / "checkpoint_best.pt",
            "--input",
            unlabelled,
            "--out",
            tmp_path / "pred2.jsonl",
            "--cpu",
            "--no-progress",
        ],
        cwd=tmp_path,
    )
    again = [json.loads(line) for line in (tmp_path / "pred2.jsonl").read_text().splitlines()]
    assert [r["pred"] for r in again] == [r["pred"] for r in rows] and all(
        "gold" not in r for r in again
    )
    # a label the model does not know: one line naming the file and line, nothing written
    bad = tmp_path / "bad.tsv"
    bad.write_text(
        "index\tsentence\tlabel\n" + gold[0] + "\n" + gold[1].rsplit("\t", 1)[0] + "\tmaybe\n"
    )
    failed = run_cli(
        [
            "fairseq-bio-predict",
            "--checkpoint",
            save_dir / "checkpoint_best.pt",
            "--input",
            bad,
            "--out",
            tmp_path / "bad.jsonl",
            "--cpu",
            "--no-progress",
        ],
        cwd=tmp_path,
        check=False,
    )
    last = failed.stderr.strip().splitlines()[-1]
    assert failed.returncode != 0 and last.startswith(
        f"fairseq-bio-predict: {bad}:3: label 'maybe'"
    )
    assert not (tmp_path / "bad.jsonl").exists()


def _load(save_dir, name="checkpoint_best.pt", **overrides):
    from fairseq import checkpoint_utils

    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(save_dir / name)], arg_overrides=overrides
    )
    return models[0].eval(), task


def test_hoc_windows_every_window_and_pools_the_mean(hoc_model, hoc_slice):
    """Abstracts longer than 128 positions become consecutive windows that hold every piece exactly
    once; the criterion's prediction is the mean of the windows' logits, each window run on its own;
    the dev log counts exactly the windows the task planned."""
    save_dir, log = hoc_model
    model, task = _load(save_dir, data=str(hoc_slice))
    dataset = task.load_dataset("valid")
    windows = [dataset.windows(i) for i in range(len(dataset))]
    assert len(dataset) == 100 and sum(windows) > 3 * len(dataset) and task.window == 128
    for entry in logged(log, "valid").values():
        assert int(entry["windows"]) == sum(windows)

    longest = sorted(range(len(dataset)), key=lambda i: -windows[i])[:2]
    batch = dataset.collater([dataset[i] for i in longest])
    tokens = batch["net_input"]["src_tokens"]
    encoded = task.encode(task.read_split("valid"))[0]
    specials = (task.dictionary.eos(), task.dictionary.pad())
    for k, i in enumerate(longest):
        rows = tokens[batch["row_example"] == k]
        assert len(rows) == windows[i] and rows.size(1) <= 128
        whole = [int(p) for word in encoded.sentence(i) for p in word]
        assert [t for row in rows.tolist() for t in row[1:] if t not in specials] == whole

    criterion = BioSentencePredictionCriterion(BioSentencePredictionCriterionConfig(), task)
    with torch.no_grad():
        _, _, out = criterion(model, batch)
        pooled = criterion.pool(model, batch)
        for k in range(len(longest)):
            rows = tokens[batch["row_example"] == k]
            unpadded = [row[row.ne(task.dictionary.pad())][None] for row in rows]
            alone = [model(row, classification_head_name="bio_sentence")[0][0] for row in unpadded]
            assert torch.allclose(pooled[k], torch.stack(alone).mean(0), atol=1e-5)
    assert out["windows"] == sum(windows[i] for i in longest)


def test_hoc_logs_blurb_f1_and_learns_the_label_prior(hoc_model, hoc_slice):
    """BLURB's HoC F1 (micro over all abstract x hallmark cells) and its parts are derived from
    summed per-label counts. Within this test's budget (60 updates) the tiny encoder learns the
    hallmark prior only: the train loss falls to near the prior's entropy; beating a constant
    predictor on dev takes ~150+ updates (see the note).
    """
    save_dir, log = hoc_model
    last = runs.last_validation(log)
    counts = {
        kind: [int(last[f"ml_{kind}_{j}"]) for j in range(10)]
        for kind in ("gold", "pred", "correct")
    }
    gold, pred, correct = (sum(counts[k]) for k in ("gold", "pred", "correct"))
    assert gold == sum(sum(json.loads(line)["label"]) for line in open(hoc_slice / "dev.json"))
    p, r = (correct / pred if pred else 0.0), correct / gold
    assert float(last["f1"]) == pytest.approx(
        100 * (2 * p * r / (p + r) if p + r else 0.0), abs=0.01
    )
    train = logged(log, "train_inner")
    assert float(train[max(train)]["loss"]) < float(train[min(train)]["loss"]) - 0.5
    state = load_checkpoint(save_dir / "checkpoint_last.pt")
    assert state["task_state"] == {"labels": [str(j) for j in range(10)], "kind": "multilabel"}


def _slice(source, dest, n, extra=()):
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    dest.write_text("".join(lines[:n] + list(extra)), encoding="utf-8")


def test_ddi_five_classes_micro_f1_over_the_four_types(tiny_encoder, tmp_path):
    """DDI JSON lines: the train row labelled DDI-None (not one of the preset's 5 classes) is
    skipped and said so; F1 counts only the four interaction types."""
    data = tmp_path / "ddi"
    data.mkdir()
    train = (
        (SHARED_DATA / "re" / "DDI" / "train.json")
        .read_text(encoding="utf-8")
        .splitlines(keepends=True)
    )
    untyped = [line for line in train if json.loads(line)["label"] == "DDI-None"]
    assert len(untyped) == 1
    _slice(SHARED_DATA / "re" / "DDI" / "train.json", data / "train.json", 300, untyped)
    _slice(SHARED_DATA / "re" / "DDI" / "dev.json", data / "dev.json", 200)
    log = fine_tune_sentence(
        "re_ddi", data, tmp_path / "run", f"checkpoint.restore_file={tiny_encoder}", updates=10
    )
    assert (
        "1 rows with labels outside 0,DDI-advise,DDI-effect,DDI-int,DDI-mechanism skipped"
        in job_log(tmp_path / "run")
    )
    last = runs.last_validation(log)
    gold = [int(last[f"cls_gold_{i}"]) for i in range(5)]
    assert sum(gold) == 200 and int(last["pos_gold"]) == sum(
        gold[1:]
    )  # class 0 ("0") is the negative one
    assert {"accuracy", "macro_f1", "precision", "recall", "f1"} <= set(last)


def test_biosses_pearson_with_layer_wise_lr_decay(tiny_encoder, tmp_path):
    """BIOSSES pairs (TSV with a header) as a regression on [CLS] under LLRD 0.8 (one learning rate
    per layer group): the logged dev Pearson, derived from summed statistics, equals scipy's on the
    final model's predictions for all 16 dev pairs."""
    from scipy.stats import pearsonr

    log = fine_tune_sentence(
        "biosses",
        SHARED_DATA / "biosses",
        tmp_path,
        f"checkpoint.restore_file={tiny_encoder}",
        "task.layer_lr_decay=0.8",
        "common.log_interval=1",
        updates=12,
    )
    last = runs.last_validation(log)
    assert int(last["ps_n"]) == 16
    gold = [
        float(line.rstrip("\n").split("\t")[-1])
        for line in list(open(SHARED_DATA / "biosses" / "dev.tsv"))[1:]
    ]
    assert float(last["ps_sy"]) == pytest.approx(sum(gold), abs=1e-3)
    model, task = _load(tmp_path, "checkpoint_last.pt")
    dataset = task.load_dataset("valid")
    batch = dataset.collater([dataset[i] for i in range(len(dataset))])
    criterion = BioSentencePredictionCriterion(BioSentencePredictionCriterionConfig(), task)
    with torch.no_grad():
        predicted = criterion.pool(model, batch).squeeze(-1)
    assert batch["target"].tolist() == pytest.approx(gold)
    assert float(last["pearson"]) == pytest.approx(
        100 * pearsonr(predicted.numpy(), gold)[0], abs=0.01
    )
    # mid-schedule (every lr is 0 at the last update): one lr per depth, each twice (with and
    # without weight decay: the recipe's task.exempt_from_weight_decay), 0.8 of the one above
    entry = logged(log, "train_inner")[6]
    lrs = sorted((float(v) for k, v in entry.items() if k.startswith("lr_")), reverse=True)
    assert len(lrs) == 8 and lrs[-1] > 0 and lrs[0::2] == lrs[1::2]
    assert all(b == pytest.approx(0.8 * a, rel=1e-3) for a, b in zip(lrs[0::2], lrs[2::2]))


def test_pubmedqa_question_in_every_window_of_its_contexts(tiny_encoder, tmp_path):
    """PubMedQA from ori_pqal.json and BLURB's split file: question ‖ contexts, longer than 128
    positions, windowed with the question repeated; accuracy and macro F1 over the 50 dev
    questions."""
    data = tmp_path / "pubmedqa"
    data.mkdir()
    (data / "ori_pqal.json").symlink_to(SHARED_DATA / "pubmedqa" / "ori_pqal.json")
    split = json.loads((SHARED_DATA / "pubmedqa" / "blurb_split.json").read_text(encoding="utf-8"))
    (data / "blurb_split.json").write_text(
        json.dumps({"train": split["train"][:80], "dev": split["dev"]})
    )
    log = fine_tune_sentence(
        "pubmedqa", data, tmp_path / "run", f"checkpoint.restore_file={tiny_encoder}", updates=5
    )
    last = runs.last_validation(log)
    assert sum(int(last[f"cls_gold_{i}"]) for i in range(3)) == 50 and int(last["windows"]) > 2 * 50
    assert {"accuracy", "macro_f1"} <= set(last)
    assert re.search(
        r"\(valid\): 50 examples, (\d+) windows of <= 128 tokens", job_log(tmp_path / "run")
    )


def test_nli_pairs_from_json_lines(tiny_encoder, tmp_path):
    """The MedNLI preset on sentence pairs in MedNLI's JSON-lines form (sentence1, sentence2,
    gold_label), written here from real PubMedQA questions and contexts, since MedNLI itself is
    licence-gated: accuracy over 3 classes.
    """
    data = tmp_path / "nli"
    data.mkdir()
    pqal = json.loads((SHARED_DATA / "pubmedqa" / "ori_pqal.json").read_text(encoding="utf-8"))
    names = {"yes": "entailment", "no": "contradiction", "maybe": "neutral"}
    rows = [
        {
            "sentence1": e["QUESTION"],
            "sentence2": e["CONTEXTS"][0],
            "gold_label": names[e["final_decision"]],
        }
        for e in pqal.values()
    ]
    for name, part in (("mli_train_v1.jsonl", rows[:120]), ("mli_dev_v1.jsonl", rows[120:160])):
        (data / name).write_text("".join(json.dumps(r) + "\n" for r in part), encoding="utf-8")
    log = fine_tune_sentence(
        "mednli", data, tmp_path / "run", f"checkpoint.restore_file={tiny_encoder}", updates=8
    )
    last = runs.last_validation(log)
    gold = [int(last[f"cls_gold_{i}"]) for i in range(3)]
    assert sum(gold) == 40 and 0 <= float(last["accuracy"]) <= 100
    assert load_checkpoint(tmp_path / "run" / "checkpoint_last.pt")["task_state"]["labels"] == [
        "contradiction",
        "entailment",
        "neutral",
    ]


def _train(tmp_path, tiny_encoder, sentence_task, data):
    command = runs.hydra_train(
        "bio_sentence_prediction",
        f"sentence_task={sentence_task}",
        f"task.data={data}",
        f"checkpoint.restore_file={tiny_encoder}",
        save_dir=tmp_path / "run",
    )
    return run_cli(command, cwd=tmp_path, check=False)


def test_missing_mednli_names_where_to_get_it(tiny_encoder, tmp_path):
    result = _train(tmp_path, tiny_encoder, "mednli", tmp_path)
    assert result.returncode != 0
    error = result.stderr.strip().splitlines()[-1]
    assert "Traceback" not in result.stderr
    assert error.startswith(f"{tmp_path}/mli_train_v1.jsonl: not found (split train")
    assert "https://physionet.org/content/mednli/" in error
    assert (
        not list((tmp_path / "run").glob("*.pt")) and not (tmp_path / "run" / "dict.txt").exists()
    )


def test_re_row_without_entity_marker_is_a_one_line_error(tiny_encoder, tmp_path):
    data = tmp_path / "gad"
    data.mkdir()
    lines = (
        (SHARED_DATA / "re" / "GAD" / "train.tsv")
        .read_text(encoding="utf-8")
        .splitlines(keepends=True)[:900]
    )
    lines[700] = lines[700].replace("@GENE$", "APOE").replace("@DISEASE$", "Alzheimer disease")
    (data / "train.tsv").write_text("".join(lines), encoding="utf-8")
    result = _train(tmp_path, tiny_encoder, "re_gad", data)
    assert result.returncode != 0
    error = result.stderr.strip().splitlines()[-1]
    message = (
        f"{data}/train.tsv:701: entity placeholders none; a relation's row holds @GENE$ and @DISEASE$ once "
        "each (task.entity_placeholders=any accepts other counts)"
    )
    assert "Traceback" not in result.stderr and error == message

"""fairseq-bio-blurb end to end on slices of the real shared data, from the tiny pretrained encoder:
2 datasets x 2 seeds through fairseq-hydra-train and fairseq-bio-predict write results.md/json/png
with a partial BLURB score; a run killed mid-way is redone and a second invocation reuses every run;
BLUE's HoC is scored by its own example-based F1 from the predictions; the update budgets on the
full shared data are the shipped recipes'; the aggregate reproduces seed 001 Table 6; bad names fail
in one line."""

import contextlib
import fcntl
import json
import math
import os
import shlex
import signal
import statistics
import subprocess
import time

import psutil
import pytest
import torch
from conftest import BIN, SHARED_DATA, conll_slice, logged
from helpers.blurb_tables import TABLE_6

from fairseq_bio.runner.datasets import BLUE, BLUE_RECIPES, BLURB, BLURB_RECIPES
from fairseq_bio.runner.plan import LOCK_FILE, compose, plan_runs
from fairseq_bio.runner.report import aggregate, render_markdown
from fairseq_bio.cli.blurb import build_parser, main
from fairseq_bio.data.conll import read_conll_predictions
from fairseq_bio.errors import BioError
from fairseq_bio.metrics.classification import blue_hoc_f1, hoc_f1, micro_f1
from fairseq_bio.metrics.tagging import span_prf

# the tiny encoder learns something in 30 updates at lr 1e-3 (the recipes' lrs are for thousands of
# updates)
SMOKE = "--seeds 2 --max-update 30 --lr-grid 1e-3 -- dataset.batch_size=16 common.log_interval=5".split()
LR = "lr0.001"


@pytest.fixture(scope="module")
def blurb_data(tmp_path_factory):
    """A --data root of real slices: NCBI-disease (CoNLL) and GAD (BLUE TSV: 265 train rows + the
    535 dev rows the preset holds out, every 4th of the 534 test rows: 134)."""
    root = tmp_path_factory.mktemp("blurb-data")
    ncbi, gad = root / "ner" / "NCBI-disease", root / "re" / "GAD"
    ncbi.mkdir(parents=True)
    gad.mkdir(parents=True)
    src = SHARED_DATA / "ner" / "NCBI-disease"
    for name, n in (("train.tsv", 300), ("devel.tsv", 100), ("test.tsv", 100)):
        conll_slice(src / name, ncbi / name, n)
    train = (
        (SHARED_DATA / "re" / "GAD" / "train.tsv")
        .read_text(encoding="utf-8")
        .splitlines(keepends=True)
    )
    test = (
        (SHARED_DATA / "re" / "GAD" / "test.tsv")
        .read_text(encoding="utf-8")
        .splitlines(keepends=True)
    )
    (gad / "train.tsv").write_text("".join(train[:800]), encoding="utf-8")
    (gad / "test.tsv").write_text(
        "".join(test[:1] + test[1::4]), encoding="utf-8"
    )  # the file is sorted by label
    return root


def _args(encoder, data, out, *extra):
    return ["--checkpoint", str(encoder), "--data", str(data), "--out", str(out), *extra]


def test_runner_two_datasets_two_seeds(tiny_encoder, blurb_data, tmp_path, monkeypatch):
    """The killed first run is redone, the other three run; results hold every run, per-dataset
    statistics over the two seeds, the per-type averages and the partial BLURB score; test scores
    equal the predictions' own; a second invocation starts no fairseq-hydra-train (every run reused,
    nothing rewritten)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "out"
    argv = _args(tiny_encoder, blurb_data, out, "--tasks", "gad,ncbi", *SMOKE)
    first = out / "ncbi-disease" / LR / "seed1"  # table order: NER before RE

    # 1. stop the runner (SIGTERM, as a scheduler ending the job) as soon as the first run's
    #    training has started:
    # it takes its fairseq-hydra-train down with it
    proc = subprocess.Popen(
        [str(BIN / "fairseq-bio-blurb"), *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 300
        while not (first / "train.log").exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        children = psutil.Process(proc.pid).children(recursive=True)
        assert any("fairseq-hydra-train" in " ".join(c.cmdline()) for c in children)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 1 and stderr.strip().splitlines()[-1].startswith(
            "fairseq-bio-blurb: interrupted"
        )
        _, alive = psutil.wait_procs(children, timeout=30)
        assert not alive
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert (first / "cmd.txt").exists() and (first / "train.log").exists()
    assert not (first / "result.json").exists()

    # 2. run: the interrupted run is redone from the start, the other three run
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["counts"] == {"ran": 3, "redone": 1, "stale": 0, "reused": 0, "failed": 0}
    runs = {(r["dataset"], r["seed"]): r for r in results["runs"]}
    assert runs[("ncbi-disease", 1)]["status"] == "redone" and len(runs) == 4

    for (name, seed), r in runs.items():
        run_dir = out / name / LR / f"seed{seed}"
        assert r["run_dir"] == str(run_dir) and r["updates"] == 30
        command = shlex.split((run_dir / "cmd.txt").read_text())
        assert command[0].endswith("fairseq-hydra-train") and f"common.seed={seed}" in command
        assert f"checkpoint.save_dir={run_dir}" in command and "dataset.batch_size=16" in command
        assert (
            "optimizer.groups.default.lr_scheduler.warmup_updates=3" in command
        )  # 10 % of 30 updates
        stored = json.loads((run_dir / "result.json").read_text())
        assert (
            stored["test_metric"] == r["test_metric"] and stored["identity"]["command"] == command
        )
        if (
            name == "ncbi-disease"
        ):  # the test F1 is the conlleval F1 of fairseq-bio-predict's output
            gold, pred = read_conll_predictions(str(run_dir / "predictions.tsv"))
            assert len(gold) == 100 == r["test_examples"]
            assert r["test_metric"] == pytest.approx(100 * span_prf(gold, pred)[2], abs=0.01)
        else:  # ... = micro F1 over the positive class of the sentence predictions
            rows = [json.loads(line) for line in (run_dir / "predictions.jsonl").open()]
            assert len(rows) == 134 == r["test_examples"]
            f1 = micro_f1([row["gold"] for row in rows], [row["pred"] for row in rows], ("0",))
            assert r["test_metric"] == pytest.approx(100 * f1, abs=0.01)
        # examples trained on: a whole epoch of the slice (in at least ceil(n / 16) batches of at
        # most 16), then some of a second one (fairseq logs the mean batch size to one decimal); the
        # throughput is that over the training process's wall time
        n_train = 300 if name == "ncbi-disease" else 265
        assert n_train < r["train_examples"] <= n_train + 16 * (30 - math.ceil(n_train / 16)) + 2
        assert r["train_examples_per_s"] == pytest.approx(
            r["train_examples"] / r["train_s"], rel=0.01
        )
        assert 0 < r["test_examples_per_s"] and r["train_s"] < r["wall_s"]
        # the dev score is the best dev F1 logged, the one checkpoint_best was saved at
        assert r["dev_metric"] == max(
            float(v["f1"]) for v in logged(run_dir / "train.log", "valid").values()
        )
        # the trivial baseline from the gold test labels: GAD's all-positive F1; NCBI's every word
        # B-Disease (it finds the one-word entities)
        if name == "gad":
            positive = sum(row["gold"] == "1" for row in rows) / len(rows)
            assert r["trivial_baseline"] == pytest.approx(100 * 2 * positive / (1 + positive))
            assert r["trivial_prediction"] == "every prediction '1'"
        else:
            every_b = 100 * span_prf(gold, [["B-Disease"] * len(s) for s in gold])[2]
            assert r["trivial_baseline"] == pytest.approx(every_b) and 0 < every_b < 10
            assert r["trivial_prediction"] == "every word tagged 'B-Disease'"

    # per dataset: statistics over the two seeds; per type: the mean; BLURB: the mean of the two
    # covered types
    for name, task_type in (("ncbi-disease", "ner"), ("gad", "relation_extraction")):
        values = [runs[(name, s)]["test_metric"] for s in (1, 2)]
        d = results["datasets"][name]
        assert d["n"] == 2 and d["values"] == values and d["task_type"] == task_type
        assert d["mean"] == pytest.approx(statistics.fmean(values))
        assert d["std"] == pytest.approx(statistics.stdev(values))
        assert d["median"] == pytest.approx(statistics.median(values))
        assert results["per_type"][task_type] == pytest.approx(d["mean"])
        trained, seconds = (
            sum(runs[(name, s)][k] for s in (1, 2)) for k in ("train_examples", "train_s")
        )
        assert d["train_examples_per_s"] == pytest.approx(trained / seconds, rel=0.01)
    score = results["score"]
    expected = statistics.fmean(
        [results["datasets"]["ncbi-disease"]["mean"], results["datasets"]["gad"]["mean"]]
    )
    assert score["score"] == pytest.approx(expected) and score["partial"]
    assert score["covered_types"] == ["ner", "relation_extraction"]
    assert set(score["missing_types"]) == {
        "pico",
        "sentence_similarity",
        "document_classification",
        "question_answering",
    }
    assert results["missing"]["chemprot"] == "not run (not in --tasks)" and results["missing"][
        "hoc"
    ].startswith("not run")
    md = (out / "results.md").read_text()
    assert f"**BLURB score: {expected:.2f}** — **partial**: covers 2 of 6 task types" in md
    assert (
        "| NCBI-disease | ner | entity_f1 | 2 |" in md
        and "- ChemProt: not run (not in --tasks)" in md
    )
    assert (
        "| trivial baseline |" in md
        and results["datasets"]["gad"]["trivial_baseline"] == runs[("gad", 1)]["trivial_baseline"]
    )
    png = (out / "results.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000

    # 3. again: every run reused, no fairseq-hydra-train started (no run file rewritten), the same
    #    results
    mtimes = {p: p.stat().st_mtime_ns for p in out.glob("*/lr*/seed*/*") if p.is_file()}
    assert main(argv) == 0
    again = json.loads((out / "results.json").read_text())
    assert again["counts"] == {"ran": 0, "redone": 0, "stale": 0, "reused": 4, "failed": 0}
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes
    assert again["score"] == results["score"] and again["datasets"] == results["datasets"]


def test_random_init_draws_each_seed_once(tiny_encoder, blurb_data, tmp_path, monkeypatch):
    """--random-init: a dry run writes nothing; each seed's run starts from its own draw of the
    encoder's architecture (not the encoder's weights, not the other seed's), named in its command
    and identity; a second invocation reuses the runs and keeps the draws."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "out"
    argv = _args(tiny_encoder, blurb_data, out, "--tasks", "gad", "--random-init", *SMOKE)
    argv[argv.index("--max-update") + 1] = "4"
    assert main([*argv[: argv.index("--")], "--dry-run", *argv[argv.index("--") :]]) == 0
    assert not (out / "random-init").exists()

    assert main(argv) == 0
    starts = [out / "random-init" / f"seed{s}" / "model.pt" for s in (1, 2)]
    weights = [torch.load(p, weights_only=True)["model"] for p in (tiny_encoder, *starts)]
    key = next(k for k in weights[0] if k.endswith("layers.0.self_attn.k_proj.weight"))
    assert not torch.equal(weights[1][key], weights[2][key])
    assert not any(torch.equal(weights[0][key], w[key]) for w in weights[1:])
    assert all((p.parent / "dict.txt").exists() for p in starts)
    for seed, start in zip((1, 2), starts):
        run_dir = out / "gad" / LR / f"seed{seed}"
        command = shlex.split((run_dir / "cmd.txt").read_text())
        assert f"checkpoint.restore_file={start}" in command
        assert json.loads((run_dir / "result.json").read_text())["identity"]["random_init"] == seed
    stamps = [p.stat().st_mtime_ns for p in starts]
    assert main(argv) == 0
    assert json.loads((out / "results.json").read_text())["counts"]["reused"] == 2
    assert [p.stat().st_mtime_ns for p in starts] == stamps


def test_a_run_that_predicts_one_class_is_flagged(tiny_encoder, blurb_data, tmp_path, monkeypatch):
    """GAD trained on positive rows only answers '1' for every test row: its F1 is the all-positive
    baseline, and results.md / results.json say so beside the score."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    data = tmp_path / "data"
    (data / "re" / "GAD").mkdir(parents=True)
    rows = (
        (SHARED_DATA / "re" / "GAD" / "train.tsv")
        .read_text(encoding="utf-8")
        .splitlines(keepends=True)
    )
    positive = [row for row in rows if row.rstrip("\n").endswith("\t1")][
        :700
    ]  # 535 of them are the dev rows
    (data / "re" / "GAD" / "train.tsv").write_text("".join(positive), encoding="utf-8")
    (data / "re" / "GAD" / "test.tsv").write_bytes(
        (blurb_data / "re" / "GAD" / "test.tsv").read_bytes()
    )
    out = tmp_path / "out"
    assert (
        main(
            _args(
                tiny_encoder,
                data,
                out,
                "--tasks",
                "gad",
                "--seeds",
                "1",
                "--max-update",
                "20",
                "--lr-grid",
                "1e-3",
                "--",
                "dataset.batch_size=16",
            )
        )
        == 0
    )
    preds = [
        json.loads(line)["pred"]
        for line in (out / "gad" / LR / "seed1" / "predictions.jsonl").open()
    ]
    assert set(preds) == {"1"}
    d = json.loads((out / "results.json").read_text())["datasets"]["gad"]
    assert d["mean"] == pytest.approx(d["trivial_baseline"], abs=0.01) and d["vs_trivial"] == "at"
    md = (out / "results.md").read_text()
    assert f"{d['mean']:.2f} ± 0.00 ⚠ at trivial | {d['trivial_baseline']:.2f} |" in md
    assert (
        f"- **GAD {d['mean']:.2f} is at the trivial baseline** ({d['trivial_baseline']:.2f}: every prediction '1')"
        in md
    )


@pytest.fixture(scope="module")
def blue_hoc(tmp_path_factory):
    """Real HoC abstracts with at least one hallmark (BLUE's HoC has none without: its metric is
    undefined there)."""
    out = tmp_path_factory.mktemp("blue-hoc")
    for split, n in (("train", 60), ("dev", 20), ("test", 20)):
        lines = (
            (SHARED_DATA / "hoc" / f"{split}.json")
            .read_text(encoding="utf-8")
            .splitlines(keepends=True)
        )
        kept = [line for line in lines if any(json.loads(line)["label"])][:n]
        (out / f"{split}.json").write_text("".join(kept), encoding="utf-8")
    return out


def test_blue_hoc_is_scored_from_predictions_with_blues_metric(
    tiny_encoder, blue_hoc, tmp_path, monkeypatch
):
    """--preset blue: HoC's test score is BLUE's example-based F1 of the kept predictions, and
    BLURB's micro F1 of the same predictions is beside it; the BLUE score is the plain mean over the
    datasets present, marked partial.
    """
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "out"
    argv = _args(
        tiny_encoder,
        tmp_path,
        out,
        "--preset",
        "blue",
        "--tasks",
        "hoc",
        "--dataset-dir",
        f"hoc={blue_hoc}",
        "--seeds",
        "1",
        "--max-update",
        "10",
        "--",
        "dataset.batch_size=8",
    )
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    (run,) = results["runs"]
    rows = [json.loads(line) for line in open(os.path.join(run["run_dir"], "predictions.jsonl"))]
    assert len(rows) == 20 and all(len(row["pred"]) == 10 for row in rows)
    gold, pred, ids = [r["gold"] for r in rows], [r["pred"] for r in rows], [r["id"] for r in rows]
    assert run["metric"] == "hoc_example_f1"
    assert run["test_metric"] == pytest.approx(100 * blue_hoc_f1(gold, pred, ids))
    assert float(run["test"]["f1"]) == pytest.approx(100 * hoc_f1(gold, pred, ids), abs=0.01)
    assert (
        results["score"]["score"] == pytest.approx(run["test_metric"])
        and results["score"]["partial"]
    )
    assert set(results["missing"]) == set(BLUE.names()) - {"hoc"}
    assert "**BLUE score:" in (out / "results.md").read_text()


def test_budgets_on_the_shared_data_are_the_recipes(tmp_path):
    """On the full shared data the runner counts each train file to the update budget the shipped
    configs carry (epochs x batches, 10 % warm-up), and lists exactly the datasets that are not
    there as missing.
    """
    encoder = tmp_path / "encoder.pt"
    encoder.write_bytes(b"")
    args = build_parser().parse_args(_args(encoder, SHARED_DATA, tmp_path / "out"))
    args.overrides, args.checkpoint = [], encoder
    plans, missing = plan_runs(args, BLURB, BLURB.names())
    budgets = {p.recipe.name: (p.budget.max_update, p.budget.warmup, len(p.seeds)) for p in plans}
    assert budgets == {
        "bc5-disease": (
            8 * 285,
            228,
            5,
        ),  # 4,560 sentences at batch 16, 8 epochs (LinkBERT's BLURB script)
        "ncbi-disease": (
            3400,
            340,
            5,
        ),  # bio_tagging_ner's own: 20 epochs of 5,424 sentences at batch 32
        "ddi": (3955, 396, 5),  # the sentence_task presets' budgets
        "gad": (1340, 134, 5),
        "biosses": (150, 15, 10),
        "hoc": (1640, 164, 5),
        "pubmedqa": (870, 87, 10),
    }
    assert {n for n, why in missing.items() if why.startswith("no data")} == {
        "bc5-chem",
        "bc2gm",
        "jnlpba",
        "ebm-pico",
        "chemprot",
        "bioasq",
    }

    args.preset = "blue"
    plans, missing = plan_runs(args, BLUE, BLUE.names())
    assert [p.recipe.name for p in plans] == ["biosses", "bc5cdr-disease"]
    assert set(missing) == {
        "medsts",
        "bc5cdr-chemical",
        "share-clefe",
        "ddi",
        "chemprot",
        "i2b2-2010",
        "hoc",
        "mednli",
    }
    assert set(BLURB_RECIPES) == set(BLURB.names()) and set(BLUE_RECIPES) == set(BLUE.names())


def test_gated_presets_and_blue_versions_compose():
    """The presets for the sets users bring (ChemProt, BioASQ) carry their epochs x batches of
    BLURB's train sizes (seed 001 Table 3: 18,035 and 670); BLUE's relation sets read BLUE's TSVs
    with BLUE's labels."""
    base = ["task.data=/d", "checkpoint.restore_file=/c.pt"]
    for name, epochs, batch, train in (("chemprot", 10, 32, 18035), ("bioasq", 20, 16, 670)):
        cfg = compose(BLURB_RECIPES[name], base)
        updates = cfg["optimization"]["max_update"]
        assert (cfg["optimization"]["max_epoch"], cfg["dataset"]["batch_size"]) == (epochs, batch)
        assert updates == epochs * math.ceil(train / batch)
        assert cfg["optimizer"]["groups"]["default"]["lr_scheduler"]["warmup_updates"] == round(
            updates / 10
        )
    task = compose(BLUE_RECIPES["i2b2-2010"], base)["task"]
    assert (
        task["labels"] == "false,PIP,TeCP,TeRP,TrAP,TrCP,TrIP,TrNAP,TrWP"
        and task["negative_labels"] == "false"
    )
    assert (task["train_file"], task["test_file"], task["entity_markers"]) == (
        "train.tsv",
        "test.tsv",
        "",
    )
    assert compose(BLUE_RECIPES["ddi"], base)["task"]["negative_labels"] == "DDI-false"


@pytest.mark.parametrize("model", sorted(TABLE_6))
def test_report_reproduces_table_6(model):
    """Fed seed 001 Table 6's per-dataset numbers as runs, the report gives that table's BLURB score
    to 0.01, not partial; without BioASQ it is marked partial with question answering covered in
    part."""
    table = TABLE_6[model]
    records = [
        {
            "dataset": BLURB.task(name).name,
            "lr": 3e-5,
            "seed": 1,
            "dev_metric": value,
            "test_metric": value,
        }
        for name, value in table.items()
        if name != "BLURB score"
    ]
    results = aggregate(BLURB, records, {})
    assert (
        round(results["score"]["score"], 2) == table["BLURB score"]
        and not results["score"]["partial"]
    )
    md = render_markdown(results)
    assert f"**BLURB score: {table['BLURB score']:.2f}**" in md and "partial" not in md
    partial = aggregate(
        BLURB, [r for r in records if r["dataset"] != "bioasq"], {"bioasq": "no data"}
    )
    assert partial["score"]["partial"] and partial["score"]["incomplete_types"] == [
        "question_answering"
    ]
    assert "**partial**" in render_markdown(partial) and "- BioASQ: no data" in render_markdown(
        partial
    )


def test_learning_rate_is_chosen_on_dev():
    """With an lr grid, each dataset reports the test scores of the lr whose mean dev score over
    seeds is best."""
    records = [
        {"dataset": "gad", "lr": lr, "seed": s, "dev_metric": dev, "test_metric": test}
        for lr, s, dev, test in [
            (1e-5, 1, 70, 90),
            (1e-5, 2, 72, 92),
            (3e-5, 1, 75, 60),
            (3e-5, 2, 74, 62),
        ]
    ]
    d = aggregate(BLURB, records, {})["datasets"]["gad"]
    assert (
        d["lr"] == 3e-5
        and d["values"] == [60, 62]
        and d["dev_by_lr"] == {"1e-05": 71, "3e-05": 74.5}
    )


def test_bad_input_fails_in_one_line(tmp_path, blurb_data, capsys):
    encoder = tmp_path / "encoder.pt"
    encoder.write_bytes(b"")
    done = subprocess.run(
        [
            str(BIN / "fairseq-bio-blurb"),
            *_args(encoder, blurb_data, tmp_path / "o", "--tasks", "gad,nosuch"),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "fairseq-bio-blurb: unknown BLURB dataset 'nosuch'; known: " + ", ".join(BLURB.names())
    )
    with pytest.raises(BioError, match=r"^no data for any of chemprot under .*"):
        main(_args(encoder, blurb_data, tmp_path / "o", "--tasks", "chemprot"))
    with pytest.raises(
        BioError, match=r"^gad: the overrides do not compose with bio_sentence_prediction: "
    ):
        main(
            _args(
                encoder, blurb_data, tmp_path / "o", "--tasks", "gad", "--", "task.no_such_option=1"
            )
        )
    with pytest.raises(
        BioError, match=r"^gad: give learning rates with --lr-grid or as overrides, not both$"
    ):
        main(
            _args(
                encoder,
                blurb_data,
                tmp_path / "o",
                "--tasks",
                "gad",
                "--lr-grid",
                "1e-5,3e-5",
                "--",
                "optimizer.groups.default.lr_float=1e-4",
            )
        )
    with pytest.raises(BioError, match=r"nosuch\.pt: encoder checkpoint not found$"):
        main(_args(tmp_path / "nosuch.pt", blurb_data, tmp_path / "o"))
    assert not (tmp_path / "o").exists()
    # a second runner on an --out that another one holds is refused before it touches a run
    busy = tmp_path / "busy"
    busy.mkdir()
    with open(busy / LOCK_FILE, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("pid 12345 on node7\n")
        held.flush()
        capsys.readouterr()
        with pytest.raises(
            BioError,
            match=r"busy: another fairseq-bio-blurb is running there \(pid 12345 on node7\); ",
        ):
            main(_args(encoder, blurb_data, busy, "--tasks", "gad"))
    assert sorted(p.name for p in busy.iterdir()) == [LOCK_FILE]
    assert "gad:" not in capsys.readouterr().out  # no plan line from the refused runner


def test_finished_runs_of_earlier_runners_are_reused():
    """A result.json written while the test split was scored by fairseq-validate also names that
    command: the same training command from the same encoder file still makes it this run's; another
    command does not.
    """
    from fairseq_bio.runner.execute import made_by

    identity = {
        "command": ["fairseq-hydra-train", "common.seed=1"],
        "encoder": {"path": "/e.pt", "size": 1},
    }
    assert made_by({**identity, "validate": ["fairseq-validate", "--batch-size", "32"]}, identity)
    assert not made_by({**identity, "command": ["fairseq-hydra-train", "common.seed=2"]}, identity)
    assert not made_by(None, identity)


def test_predictions_are_read_by_the_conll_reader(tmp_path):
    """fairseq-bio-predict's conlleval columns read back per sentence; a ragged line is named in one
    line."""
    from fairseq_bio.data.conll import TaggingDataError

    path = tmp_path / "predictions.tsv"
    path.write_text("Mild\tO\tO\nanemia\tB-Disease\tO\n\nOK\tO\tB-Disease\n", encoding="utf-8")
    assert read_conll_predictions(path) == (
        [["O", "B-Disease"], ["O"]],
        [["O", "O"], ["B-Disease"]],
    )
    path.write_text("Mild\tO\tO\nanemia\tB-Disease\n", encoding="utf-8")
    with pytest.raises(
        TaggingDataError,
        match=rf"^{path}:2: 2 column\(s\); expected token<TAB>gold<TAB>prediction$",
    ):
        read_conll_predictions(path)


def test_batch_size_grid_plans_each_size_with_its_budget(tmp_path, capsys):
    """--batch-sizes 16,32 with --lr-grid (PubMedBERT sec. 6.2's search) plans every (lr, batch,
    seed) run, each batch size with its own budget (epochs x batches at that size, 10 % warm-up), in
    lr<lr>-bs<batch>; --dry-run prints them and trains nothing; the report chooses the (lr, batch)
    with the best mean dev score.
    """
    encoder = tmp_path / "encoder.pt"
    encoder.write_bytes(b"")
    out = tmp_path / "out"
    argv = _args(
        encoder,
        SHARED_DATA,
        out,
        "--tasks",
        "ncbi-disease,gad",
        "--seeds",
        "2",
        "--lr-grid",
        "1e-5,3e-5",
        "--batch-sizes",
        "32,16",
    )
    args = build_parser().parse_args(argv)
    assert args.batch_sizes == [16, 32]
    args.overrides, args.checkpoint = [], encoder
    plans, _ = plan_runs(args, BLURB, ["ncbi-disease", "gad"])
    ncbi = next(p for p in plans if p.recipe.name == "ncbi-disease")
    assert [(ncbi.budget_for(b).max_update, ncbi.budget_for(b).warmup) for b in (16, 32)] == [
        (20 * 339, 678),
        (20 * 170, 340),
    ]
    assert main([*argv, "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert (
        "ncbi-disease: 8 runs" in printed and "batch 16 (6780 updates),32 (3400 updates)" in printed
    )
    commands = [shlex.split(line) for line in printed.splitlines() if "fairseq-hydra-train" in line]
    assert len(commands) == 2 * 2 * 2 * 2  # datasets x lrs x batch sizes x seeds
    first = dict(a.split("=", 1) for a in commands[0] if "=" in a)
    assert first["dataset.batch_size"] == "16" and first["optimization.max_update"] == "6780"
    assert first["optimizer.groups.default.lr_scheduler.warmup_updates"] == "678"
    assert first["checkpoint.save_dir"].endswith("ncbi-disease/lr1e-05-bs16/seed1")
    assert not out.exists() or not any(out.rglob("*.pt"))  # nothing trained
    with pytest.raises(BioError, match="--batch-sizes or as overrides"):
        args.overrides = ["dataset.batch_size=8"]
        plan_runs(args, BLURB, ["gad"])
    records = [
        {
            "dataset": "gad",
            "lr": lr,
            "batch_size": b,
            "seed": s,
            "dev_metric": dev,
            "test_metric": 70.0 + s,
        }
        for lr, b, dev in [(1e-5, 16, 60.0), (1e-5, 32, 65.0), (3e-5, 16, 62.0), (3e-5, 32, 61.0)]
        for s in (1, 2)
    ]
    gad = aggregate(BLURB, records, {})["datasets"]["gad"]
    assert (gad["lr"], gad["batch_size"], gad["values"]) == (1e-5, 32, [71.0, 72.0])
    assert gad["dev_by_lr"]["1e-05,bs32"] == 65.0


def test_best_on_dev_takes_the_best_mean_and_on_a_tie_the_smaller_lr_then_batch():
    from fairseq_bio.runner.report import best_on_dev

    assert best_on_dev({(1e-4, 32): 0.8, (3e-5, 32): 0.8, (3e-5, 16): 0.8, (5e-5, 16): 0.7}) == (
        3e-5,
        16,
    )
    assert best_on_dev({(1e-4,): 0.9, (3e-5,): 0.8}) == (1e-4,)

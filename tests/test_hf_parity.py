"""benchmarks/hf_parity.py: a smoke run of the parity benchmark on slices of two task types (NER,
BIOSSES regression), the HF side included, and its pieces: the metric cross-check against
scikit-learn / scipy / seqeval, the data slices, the schedule both sides share."""

import json
import sys
from pathlib import Path

import pytest
from conftest import REPO

from fairseq_bio import runs

sys.path.insert(0, str(REPO / "benchmarks"))
import hf_parity  # noqa: E402
import parity_tasks  # noqa: E402

SHARED = REPO.parent / "shared" / "data"
pytestmark = pytest.mark.skipif(
    not (SHARED / "biosses").is_dir(), reason=f"no shared data at {SHARED}"
)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """One --quick run of both sides on NCBI-disease and BIOSSES: its folder (``work`` inside it,
    shared by the grid test, whose recipe-lr point is this run's BIOSSES training) and the report it
    wrote."""
    tmp_path = tmp_path_factory.mktemp("parity")
    out = tmp_path / "parity.md"
    done = runs.capture(
        [
            sys.executable,
            str(REPO / "benchmarks" / "hf_parity.py"),
            "--quick",
            "--datasets",
            "ncbi-disease,biosses",
            "--workdir",
            str(tmp_path / "work"),
            "--out",
            str(out),
        ],
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp_path, out


def test_smoke_run_of_both_sides_on_ner_and_regression(smoke):
    tmp_path, out = smoke
    record = json.loads(out.with_suffix(".json").read_text())
    ner, biosses = record["results"]
    assert (ner["dataset"], biosses["dataset"]) == ("ncbi-disease", "biosses") and record["quick"]
    assert ner["train_examples"] == hf_parity.QUICK["train"] and biosses["train_examples"] == 70
    for result, test_examples in ((ner, hf_parity.QUICK["test"]), (biosses, 14)):
        run = result["runs"][0]
        assert run["test_examples"] == test_examples
        # one schedule on both sides: ceil(0.3 epochs x batches), warm-up included
        expected = parity_tasks.schedule(
            {
                "epochs": 0.3,
                "train": result["train_examples"],
                "warmup": 0.1,
                "batch_size": result["recipe"]["batch_size"],
            }
        )
        assert run["updates"] == expected["updates"] >= 1
        for side in ("ours", "hf"):
            assert run[side]["score"] == pytest.approx(run[side]["reference"], abs=1e-4)
            assert run[side]["loop_s"] > 0 and run[side]["predict_s"] > 0
        assert result["predict_speedup"] > 0 and result["loop_ratio"] > 0
    assert (
        ner["runs"][0]["ours"]["metric"] == "entity_f1"
        and biosses["runs"][0]["hf"]["metric"] == "pearson"
    )
    assert biosses["runs"][0]["ours"]["trivial"] == 0.0  # a constant score: Pearson 0
    text = out.read_text()
    assert (
        "| NCBI-disease | entity_f1 |" in text
        and "| BIOSSES | pearson |" in text
        and "--quick" in text
    )
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the predictions both sides scored are on disk, ours from fairseq-bio-predict with its timing
    # line
    assert (tmp_path / "work" / "ours-biosses-1" / "test.pred.jsonl").exists()
    assert "wrote " in (tmp_path / "work" / "logs" / "ours-predict-biosses-1.out").read_text()
    # a second invocation with the same recipe reuses both finished trainings (a longer run cut
    # short resumes so)
    logs = tmp_path / "work" / "logs"
    trained = {
        name: (logs / f"{name}-train-biosses-1.out").stat().st_mtime_ns for name in ("ours", "hf")
    }
    again = runs.capture(
        [
            sys.executable,
            str(REPO / "benchmarks" / "hf_parity.py"),
            "--quick",
            "--datasets",
            "biosses",
            "--predict-rounds",
            "1",
            "--workdir",
            str(tmp_path / "work"),
            "--out",
            str(tmp_path / "again.md"),
        ],
        cwd=REPO,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert {
        name: (logs / f"{name}-train-biosses-1.out").stat().st_mtime_ns for name in trained
    } == trained
    reused = json.loads((tmp_path / "again.json").read_text())["results"][0]["runs"][0]
    for side in ("ours", "hf"):
        assert reused[side]["score"] == biosses["runs"][0][side]["score"]
        assert reused[side]["loop_s"] == biosses["runs"][0][side]["loop_s"]
    # --only: one side (the other runs beside it in another process), its score printed, no report
    # written
    only = runs.capture(
        [
            sys.executable,
            str(REPO / "benchmarks" / "hf_parity.py"),
            "--quick",
            "--datasets",
            "biosses",
            "--only",
            "hf",
            "--workdir",
            str(tmp_path / "work"),
            "--out",
            str(tmp_path / "only.md"),
        ],
        cwd=REPO,
    )
    assert only.returncode == 0, only.stderr[-3000:]
    assert f"[parity] biosses seed 1: hf {biosses['runs'][0]['hf']['score']:.2f}" in only.stdout
    assert not (tmp_path / "only.md").exists() and not (tmp_path / "only.json").exists()
    assert {
        name: (logs / f"{name}-train-biosses-1.out").stat().st_mtime_ns for name in trained
    } == trained
    # --combine: one report of separate invocations' records; a seed in two records counts once (the
    # first's)
    hf_parity.main(
        [
            "--combine",
            str(out.with_suffix(".json")),
            str(tmp_path / "again.json"),
            "--out",
            str(tmp_path / "combined.md"),
        ]
    )
    assert json.loads((tmp_path / "combined.json").read_text())["results"] == record["results"]


def test_reference_scores_agree_with_ours_and_catch_a_difference():
    from fairseq_bio.runner.datasets import BENCHMARKS

    blurb = BENCHMARKS["blurb"]
    cases = {
        "ncbi-disease": (
            [["B-Disease", "I-Disease", "O", "B-Disease"]],
            [["B-Disease", "O", "O", "B-Disease"]],
        ),
        "ddi": (
            ["0", "DDI-effect", "DDI-advise", "0", "DDI-effect"],
            ["DDI-effect", "DDI-effect", "0", "0", "0"],
        ),
        "gad": (["1", "0", "1", "1"], ["1", "1", "0", "1"]),
        "hoc": ([[1, 0, 1], [0, 0, 1], [1, 1, 0]], [[1, 0, 0], [0, 1, 1], [1, 1, 0]]),
        "biosses": ([0.5, 2.0, 3.5, 1.0], [1.0, 1.5, 3.0, 2.5]),
        "pubmedqa": (["yes", "no", "maybe", "yes"], ["yes", "yes", "maybe", "no"]),
    }
    for name, (gold, pred) in cases.items():
        bench = blurb.task(name)
        ids = [str(i) for i in range(len(gold))]
        options = {"ids": ids} if bench.metric.startswith("hoc") else {}
        ours = bench.score(gold, pred, **options)
        assert 0 < ours < 1, name  # neither all right nor all wrong: a real check
        assert hf_parity.reference_score(bench, gold, pred, ids) == pytest.approx(
            ours, abs=1e-9
        ), name
    # the score function refuses a run whose metric disagrees with the reference
    side = {"gold": ["1", "0"], "pred": ["1", "1"], "ids": ["a", "b"]}
    assert hf_parity.score("gad", side)["score"] == pytest.approx(100 * 2 / 3)
    original = hf_parity.reference_score
    try:
        hf_parity.reference_score = lambda *a: 0.5
        with pytest.raises(SystemExit, match="differs from the reference"):
            hf_parity.score("gad", side)
    finally:
        hf_parity.reference_score = original


def test_max_length_changes_only_the_input_length():
    assert hf_parity.recipe_at("ddi") == hf_parity.PARITY["ddi"]
    shorter = hf_parity.recipe_at("ddi", 256)
    assert shorter.max_length == 256 != hf_parity.PARITY["ddi"].max_length
    assert (shorter.lr, shorter.batch_size, shorter.train_examples) == (1e-4, 16, 12800)


def test_device_puts_both_sides_on_it_and_cuda_needs_a_gpu():
    spec = {
        "data": "/d",
        "imported": "/m.pt",
        "seed": 1,
        "epochs": 1,
        "train": 32,
        "batch_size": 16,
        "warmup": 0.1,
        "lr": 1e-4,
        "max_length": 128,
    }
    assert "common.cpu=true" in parity_tasks.ours_overrides(
        spec
    )  # a record from before --device: the CPU
    assert "common.cpu=true" in parity_tasks.ours_overrides({**spec, "device": "cpu"})
    assert not [
        o
        for o in parity_tasks.ours_overrides({**spec, "device": "cuda"})
        if o.startswith("common.cpu")
    ]
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(SystemExit, match="^hf_parity.py: --device cuda: no CUDA device here$"):
            hf_parity.main(
                ["--device", "cuda", "--datasets", "biosses", "--workdir", "/nonexistent/never"]
            )


def test_slices_are_new_files_beside_links_and_the_shared_data_is_untouched(tmp_path):
    ddi = hf_parity.PARITY["ddi"]
    data = hf_parity.dataset_dir("ddi", ddi, quick=False, tmp=tmp_path)
    assert data.parent == tmp_path and not (data / "train.json").is_symlink()
    assert len((data / "train.json").read_text().splitlines()) == ddi.train_examples
    # resolved on both sides: the shared folder may itself be reached through a link
    assert (data / "test.json").is_symlink()
    assert (data / "test.json").resolve() == (SHARED / "re/DDI/test.json").resolve()
    # TSV and PubMedQA files are read whole; no slice asked for: the shared directory itself
    assert (
        hf_parity.dataset_dir("gad", hf_parity.PARITY["gad"], quick=False, tmp=tmp_path)
        == SHARED / "re/GAD"
    )
    quick = hf_parity.dataset_dir(
        "ncbi-disease", hf_parity.PARITY["ncbi-disease"], quick=True, tmp=tmp_path
    )
    blocks = [b for b in (quick / "test.tsv").read_text().split("\n\n") if b.strip()]
    assert len(blocks) == hf_parity.QUICK["test"]


def test_a_finished_training_is_reused_only_for_the_same_request(tmp_path):
    record = tmp_path / parity_tasks.RECORD
    assert parity_tasks.finished(record, {"lr": 1e-4}) is None
    parity_tasks.keep(record, {"lr": 1e-4, "seed": 1}, {"loop_s": 12.5})
    assert parity_tasks.finished(record, {"lr": 1e-4, "seed": 1}) == {"loop_s": 12.5}
    assert parity_tasks.finished(record, {"lr": 5e-5, "seed": 1}) is None
    assert parity_tasks.finished(record, {"lr": 1e-4, "seed": 2}) is None


def test_lr_grid_picks_each_sides_lr_on_dev_and_a_rerun_trains_nothing(smoke, tmp_path):
    """--lr-grid on BIOSSES --quick: both sides trained at each lr (the recipe's 1e-4 is the
    shared-recipe run, the smoke run's training reused), each side's lr the dev argmax, its test
    score the chosen run's predictions; a second invocation reuses every training."""
    from fairseq_bio.inference.predictions import read_predictions

    work, out = smoke[0] / "work", tmp_path / "grid.md"
    smoke_trained = {p: p.stat().st_mtime_ns for p in (work / "logs").glob("*-train-biosses-1.out")}
    assert len(smoke_trained) == 2
    grid_run = [
        sys.executable,
        str(REPO / "benchmarks" / "hf_parity.py"),
        "--quick",
        "--datasets",
        "biosses",
        "--lr-grid",
        "3e-4,1e-4",
        "--workdir",
        str(work),
    ]
    done = runs.capture([*grid_run, "--out", str(out)], cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.with_suffix(".json").read_text())["results"][0]
    grid, parity = result["grid"], hf_parity.PARITY["biosses"]
    assert grid["lrs"] == [1e-4, 3e-4] and parity.lr == 1e-4
    names = {lr: hf_parity.run_name("biosses", 1, lr, parity) for lr in grid["lrs"]}
    assert names == {1e-4: "biosses-1", 3e-4: "biosses-lr0.0003-1"}
    assert (
        grid["points"][0]["runs"] == result["runs"]
    )  # the recipe's lr: the shared-recipe run, not trained twice
    logs = work / "logs"
    for (
        lr,
        name,
    ) in (
        names.items()
    ):  # each side trained at each lr of the grid, in the grid point's own directory
        hf_request = json.loads((work / f"hf-{name}" / parity_tasks.RECORD).read_text())["request"]
        ours_request = json.loads((work / f"ours-{name}" / parity_tasks.RECORD).read_text())[
            "request"
        ]
        assert hf_request["lr"] == lr and f"optimization.lr=[{lr}]" in ours_request["command"]
        assert (logs / f"ours-train-{name}.out").exists() and (
            logs / f"hf-train-{name}.out"
        ).exists()
    for side in hf_parity.SIDES:
        dev = [p["runs"][0][side]["dev"] for p in grid["points"]]
        assert grid[side]["dev"] == dev
        chosen = max(zip(grid["lrs"], dev), key=lambda p: (p[1], -p[0]))[
            0
        ]  # dev argmax, a tie: the smaller lr
        assert grid[side]["chosen"] == chosen
        # the test score reported is the chosen run's, scored again from what that run left on disk
        run_dir = work / f"{side}-{names[chosen]}"
        if side == "ours":
            gold, pred, ids = read_predictions(run_dir / "test.pred.jsonl", tagging=False)
            on_disk = {"gold": gold, "pred": pred, "ids": ids}
            dev_gold, dev_pred, dev_ids = read_predictions(
                run_dir / "valid.pred.jsonl", tagging=False
            )
            assert len(dev_gold) == 16  # BIOSSES's dev split, scored as test is
            assert hf_parity.score("biosses", {"gold": dev_gold, "pred": dev_pred, "ids": dev_ids})[
                "score"
            ] == (
                pytest.approx(grid["points"][grid["lrs"].index(chosen)]["runs"][0]["ours"]["dev"])
            )
        else:
            on_disk = json.loads((run_dir / parity_tasks.RECORD).read_text())["result"]
        assert grid[side]["test"]["mean"] == pytest.approx(
            hf_parity.score("biosses", on_disk)["score"]
        )
    assert grid["difference"] == pytest.approx(
        grid["ours"]["test"]["mean"] - grid["hf"]["test"]["mean"]
    )
    text = out.read_text()
    assert (
        "| BIOSSES, lr tuned on dev | pearson |" in text
        and "a tie: the smaller learning rate" in text
    )
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a second invocation trains nothing: every grid point's training is reused, only prediction
    # runs again
    trained = {p: p.stat().st_mtime_ns for p in logs.glob("*-train-biosses*.out")}
    assert (
        len(trained) == 4 and {p: trained[p] for p in smoke_trained} == smoke_trained
    )  # the smoke run's reused
    again = runs.capture(
        [*grid_run, "--predict-rounds", "1", "--out", str(tmp_path / "again.md")], cwd=REPO
    )
    assert again.returncode == 0, again.stderr[-3000:]
    record = json.loads((tmp_path / "again.json").read_text())
    assert not [
        c for c in record["commands"] if "checkpoint.save_dir=" in c or '"predict_only": false' in c
    ]
    assert {p: p.stat().st_mtime_ns for p in logs.glob("*-train-biosses*.out")} == trained
    for side in hf_parity.SIDES:
        assert record["results"][0]["grid"][side] == grid[side]
    # --only with a grid: that side at every lr (here all reused, so nothing runs), no report
    only = runs.capture([*grid_run, "--only", "hf", "--out", str(tmp_path / "only.md")], cwd=REPO)
    assert only.returncode == 0, only.stderr[-3000:]
    assert (
        "[parity] biosses seed 1: hf " in only.stdout
        and "[parity] biosses seed 1 at lr 0.0003: hf " in only.stdout
    )
    assert (
        not (tmp_path / "only.md").exists()
        and {p: p.stat().st_mtime_ns for p in trained} == trained
    )
    # --combine keeps a dataset's grid (the first record's, as a seed measured twice)
    hf_parity.main(
        [
            "--combine",
            str(out.with_suffix(".json")),
            str(tmp_path / "again.json"),
            "--out",
            str(tmp_path / "combined.md"),
        ]
    )
    assert json.loads((tmp_path / "combined.json").read_text())["results"][0]["grid"] == grid
    assert "| BIOSSES, lr tuned on dev |" in (tmp_path / "combined.md").read_text()


def test_lr_grid_refuses_what_is_not_a_grid_of_learning_rates():
    assert hf_parity.parse_grid(None) == [] and hf_parity.parse_grid(" 3e-4,1e-4,3e-4") == [
        1e-4,
        3e-4,
    ]
    for text, why in (
        ("3e-5,x", "'x' is not a learning rate"),
        ("1e-4,-1", "'-1' is not"),
        ("1e-4,nan", "'nan'"),
        ("1e-4", "a grid needs two learning rates or more"),
    ):
        with pytest.raises(SystemExit, match=f"^hf_parity.py: --lr-grid '{text}': {why}"):
            hf_parity.main(["--lr-grid", text, "--datasets", "biosses"])


def test_each_side_takes_its_best_dev_lr_and_a_tie_the_smaller():
    def entry(ours_dev, hf_dev, ours_test, hf_test):
        return {
            "ours": {"dev": ours_dev, "score": ours_test},
            "hf": {"dev": hf_dev, "score": hf_test},
        }

    points = [
        {"lr": 3e-5, "runs": [entry(50.0, 10.0, 1.0, 2.0), entry(60.0, 10.0, 3.0, 4.0)]},
        {"lr": 1e-4, "runs": [entry(55.0, 30.0, 5.0, 6.0), entry(55.0, 30.0, 7.0, 8.0)]},
        {"lr": 3e-4, "runs": [entry(40.0, 20.0, 9.0, 10.0), entry(40.0, 40.0, 11.0, 12.0)]},
    ]
    ours, hf = hf_parity.choose(points, "ours"), hf_parity.choose(points, "hf")
    assert (
        ours["dev"] == [55.0, 55.0, 40.0] and ours["chosen"] == 3e-5
    )  # a tie on the mean over seeds: the smaller
    assert ours["test"]["mean"] == 2.0
    assert hf["dev"] == [10.0, 30.0, 30.0] and hf["chosen"] == 1e-4 and hf["test"]["mean"] == 7.0


def test_dev_input_is_the_split_each_task_holds_out(tmp_path):
    """What ours predicts for the dev score: the dev file, PubMedQA's dev split, or GAD's rows held
    out of its train file (task.valid_from_train) written out, the same rows and labels our task
    reads as its valid split.
    """
    from fairseq_bio.data.sentence_files import read_tsv

    def dev_input(dataset):
        recipe = parity_tasks.blurb_recipe(dataset)
        return parity_tasks.dev_input(
            recipe.config, parity_tasks.task_config(dataset, SHARED / recipe.data), tmp_path
        )

    assert dev_input("ddi") == (str(SHARED / "re/DDI/dev.json"), [])
    assert dev_input("ncbi-disease") == (str(SHARED / "ner/NCBI-disease/devel.tsv"), [])
    assert dev_input("pubmedqa") == (str(SHARED / "pubmedqa/ori_pqal.json"), ["--split", "valid"])
    path, extra = dev_input("gad")
    task = parity_tasks.task_config("gad", SHARED / "re/GAD")
    held_out = read_tsv(str(SHARED / "re/GAD/train.tsv"), ["sentence"], "label")[
        -task["valid_from_train"] :
    ]
    written = read_tsv(path, ["sentence"], "label")
    assert (
        extra == []
        and Path(path).parent == tmp_path
        and len(written) == task["valid_from_train"] == 535
    )
    assert [(e.texts, e.label) for e in written] == [(e.texts, e.label) for e in held_out]


def test_a_recorded_training_is_reused_and_a_stop_leaves_the_rest(tmp_path):
    """A training's record (benchmarks/records/hf_parity: the grid in pieces) is what compare
    returns, without training, while its settings are the same; other settings train again, and
    past --stop-after no training starts."""
    import time

    parity = hf_parity.PARITY["ddi"]
    spec = {key: 1 for key in hf_parity.IDENTITY}
    spec.update(dataset="ddi", hf_variant="stock", device="cpu", lr=2e-4, seed=3)
    spec["name"] = hf_parity.run_name("ddi", 3, 2e-4, parity)
    entry = {"seed": 3, "ours": {"score": 54.8, "dev": 51.0}, "hf": {"score": 49.9, "dev": 50.2}}
    records = hf_parity.Records(tmp_path)
    records.put(spec, entry)
    assert records.path(spec) == tmp_path / "ddi" / "ddi-lr0.0002-3-cpu.json"
    # run and work are never used: a training would fail on them
    assert hf_parity.compare(None, None, spec, parity, 1, records) == entry
    assert records.get({**spec, "epochs": 2}) is None  # another recipe: measured again
    stopped = hf_parity.Records(tmp_path, stop_at=time.monotonic() - 1)
    assert hf_parity.compare(None, None, spec, parity, 1, stopped) == entry
    with pytest.raises(hf_parity.Stopped):
        hf_parity.compare(None, None, {**spec, "seed": 4}, parity, 1, stopped)

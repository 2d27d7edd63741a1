"""benchmarks/hf_parity.py: a smoke run of the parity benchmark on slices of two task types (NER, BIOSSES
regression), the HF side included, and its pieces: the metric cross-check against scikit-learn / scipy / seqeval,
the data slices, the schedule both sides share."""

import json
import subprocess
import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import hf_parity  # noqa: E402
import parity_tasks  # noqa: E402

SHARED = REPO.parent / "shared" / "data"
pytestmark = pytest.mark.skipif(not (SHARED / "biosses").is_dir(), reason=f"no shared data at {SHARED}")


def test_smoke_run_of_both_sides_on_ner_and_regression(tmp_path):
    out = tmp_path / "parity.md"
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "hf_parity.py"), "--quick", "--datasets", "ncbi-disease,biosses",
         "--workdir", str(tmp_path / "work"), "--out", str(out)],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(out.with_suffix(".json").read_text())
    ner, biosses = record["results"]
    assert (ner["dataset"], biosses["dataset"]) == ("ncbi-disease", "biosses") and record["quick"]
    assert ner["train_examples"] == hf_parity.QUICK["train"] and biosses["train_examples"] == 70
    for result, test_examples in ((ner, hf_parity.QUICK["test"]), (biosses, 14)):
        run = result["runs"][0]
        assert run["test_examples"] == test_examples
        # one schedule on both sides: ceil(0.3 epochs x batches), warm-up included
        expected = parity_tasks.schedule({"epochs": 0.3, "train": result["train_examples"], "warmup": 0.1,
                                          "batch_size": result["recipe"]["batch_size"]})  # fmt: skip
        assert run["updates"] == expected["updates"] >= 1
        for side in ("ours", "hf"):
            assert run[side]["score"] == pytest.approx(run[side]["reference"], abs=1e-4)
            assert run[side]["loop_s"] > 0 and run[side]["predict_s"] > 0
        assert result["predict_speedup"] > 0 and result["loop_ratio"] > 0
    assert ner["runs"][0]["ours"]["metric"] == "entity_f1" and biosses["runs"][0]["hf"]["metric"] == "pearson"
    assert biosses["runs"][0]["ours"]["trivial"] == 0.0  # a constant score: Pearson 0
    text = out.read_text()
    assert "| NCBI-disease | entity_f1 |" in text and "| BIOSSES | pearson |" in text and "--quick" in text
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the predictions both sides scored are on disk, ours from fairseq-bio-predict with its timing line
    assert (tmp_path / "work" / "ours-biosses-1" / "test.pred.jsonl").exists()
    assert "wrote " in (tmp_path / "work" / "logs" / "ours-predict-biosses-1.out").read_text()
    # a second invocation with the same recipe reuses both finished trainings (a longer run cut short resumes so)
    logs = tmp_path / "work" / "logs"
    trained = {name: (logs / f"{name}-train-biosses-1.out").stat().st_mtime_ns for name in ("ours", "hf")}
    again = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "hf_parity.py"), "--quick", "--datasets", "biosses",
         "--predict-rounds", "1", "--workdir", str(tmp_path / "work"), "--out", str(tmp_path / "again.md")],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert {name: (logs / f"{name}-train-biosses-1.out").stat().st_mtime_ns for name in trained} == trained
    reused = json.loads((tmp_path / "again.json").read_text())["results"][0]["runs"][0]
    for side in ("ours", "hf"):
        assert reused[side]["score"] == biosses["runs"][0][side]["score"]
        assert reused[side]["loop_s"] == biosses["runs"][0][side]["loop_s"]
    # --only: one side (the other runs beside it in another process), its score printed, no report written
    only = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "hf_parity.py"), "--quick", "--datasets", "biosses", "--only",
         "hf", "--workdir", str(tmp_path / "work"), "--out", str(tmp_path / "only.md")],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert only.returncode == 0, only.stderr[-3000:]
    assert f"[parity] biosses seed 1: hf {biosses['runs'][0]['hf']['score']:.2f}" in only.stdout
    assert not (tmp_path / "only.md").exists() and not (tmp_path / "only.json").exists()
    assert {name: (logs / f"{name}-train-biosses-1.out").stat().st_mtime_ns for name in trained} == trained
    # --combine: one report of separate invocations' records; a seed in two records counts once (the first's)
    hf_parity.main(["--combine", str(out.with_suffix(".json")), str(tmp_path / "again.json"), "--out",
                    str(tmp_path / "combined.md")])  # fmt: skip
    assert json.loads((tmp_path / "combined.json").read_text())["results"] == record["results"]


def test_reference_scores_agree_with_ours_and_catch_a_difference():
    from fairseq_bio.runner.datasets import BENCHMARKS

    blurb = BENCHMARKS["blurb"]
    cases = {
        "ncbi-disease": ([["B-Disease", "I-Disease", "O", "B-Disease"]], [["B-Disease", "O", "O", "B-Disease"]]),
        "ddi": (["0", "DDI-effect", "DDI-advise", "0", "DDI-effect"], ["DDI-effect", "DDI-effect", "0", "0", "0"]),
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
        assert hf_parity.reference_score(bench, gold, pred, ids) == pytest.approx(ours, abs=1e-9), name
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


def test_slices_are_new_files_beside_links_and_the_shared_data_is_untouched(tmp_path):
    ddi = hf_parity.PARITY["ddi"]
    data = hf_parity.dataset_dir("ddi", ddi, quick=False, tmp=tmp_path)
    assert data.parent == tmp_path and not (data / "train.json").is_symlink()
    assert len((data / "train.json").read_text().splitlines()) == ddi.train_examples
    # resolved on both sides: the shared folder may itself be reached through a link
    assert (data / "test.json").is_symlink()
    assert (data / "test.json").resolve() == (SHARED / "re/DDI/test.json").resolve()
    # TSV and PubMedQA files are read whole; no slice asked for: the shared directory itself
    assert hf_parity.dataset_dir("gad", hf_parity.PARITY["gad"], quick=False, tmp=tmp_path) == SHARED / "re/GAD"
    quick = hf_parity.dataset_dir("ncbi-disease", hf_parity.PARITY["ncbi-disease"], quick=True, tmp=tmp_path)
    blocks = [b for b in (quick / "test.tsv").read_text().split("\n\n") if b.strip()]
    assert len(blocks) == hf_parity.QUICK["test"]


def test_a_finished_training_is_reused_only_for_the_same_request(tmp_path):
    record = tmp_path / parity_tasks.RECORD
    assert parity_tasks.finished(record, {"lr": 1e-4}) is None
    parity_tasks.keep(record, {"lr": 1e-4, "seed": 1}, {"loop_s": 12.5})
    assert parity_tasks.finished(record, {"lr": 1e-4, "seed": 1}) == {"loop_s": 12.5}
    assert parity_tasks.finished(record, {"lr": 5e-5, "seed": 1}) is None
    assert parity_tasks.finished(record, {"lr": 1e-4, "seed": 2}) is None

"""`make demo`'s job (fairseq-bio-demo) on a slice of the real sample: every step (pretraining, the
same architecture from random initialisation, the BLURB runner on one shared dataset for both and
for the imported MiniLM, the comparison table and its picture), then a re-run that reuses them."""

import json
import re

import torch
from conftest import run_cli

from fairseq_bio import runs
from fairseq_bio_preprocess.demo_report import comparison_markdown


def test_demo_runs_end_to_end_and_reuses_finished_steps(pubmed_sample, tmp_path):
    args = [
        "fairseq-bio-demo",
        "--out",
        tmp_path / "demo",
        "--max-docs-per-file",
        "300",
        "--vocab-size",
        "4000",
        "--max-update",
        "20",
        "--blurb-tasks",
        "biosses",
        "--blurb-updates",
        "5",
        "--blurb-batch",
        "8",
        "--minilm-tasks",
        "biosses",
        "--minilm-updates",
        "2",
        "--minilm-batch",
        "4",
        "dataset.validate_interval_updates=10",
        "model.encoder_layers=2",
    ]
    first = run_cli(args, cwd=tmp_path).stdout
    for step in ("extract", "vocab", "encode", "binarize"):
        assert f"[demo] {step} -> " in first
    match = re.search(
        r"final valid : loss ([\d.]+) \(base 2\), perplexity ([\d.]+) at update 20", first
    )
    assert match and float(match.group(1)) > 0
    demo = tmp_path / "demo"
    for path in (
        "checkpoints/checkpoint_best.pt",
        "checkpoints/checkpoint_last.pt",
        "vocab/encoder.json",
        "vocab/vocab.bpe",
        "vocab/dict.txt",
        "data-bin/train.bin",
        "data-bin/bpe.json",
    ):
        assert (demo / path).exists(), path
    assert list((demo / "checkpoints" / "tensorboard").rglob("events.out.tfevents.*"))
    valid = runs.tensorboard_curve(
        demo / "checkpoints" / "tensorboard", "valid"
    )  # what demo.png draws
    assert [u for u, _ in valid] == [10, 20] and round(valid[-1][1], 3) == float(match.group(1))
    assert [
        u for u, _ in runs.tensorboard_curve(demo / "checkpoints" / "tensorboard", "train_inner")
    ][-1] == 20
    assert str(demo / "checkpoints") in first
    # pretrain -> fine-tune -> score: the demo's model fine-tuned on BIOSSES, the BLURB table
    # printed, partial
    assert "[demo] blurb -> " in first and "BLURB score" in first and "PARTIAL" in first
    assert "BIOSSES" in (demo / "blurb" / "results.md").read_text().upper()
    score = json.loads((demo / "blurb" / "results.json").read_text())["score"]
    # the same architecture from random initialisation, fine-tuned with the same budget
    assert "[demo] random-init -> " in first and "[demo] blurb-random-init -> " in first
    twin = torch.load(demo / "random-init" / "model.pt", weights_only=True)
    trained = torch.load(demo / "checkpoints" / "checkpoint_best.pt", weights_only=True)
    assert twin["extra_state"]["random_init"]["seed"] == 1
    key = "encoder.sentence_encoder.layers.0.fc1.weight"
    assert twin["model"][key].shape == trained["model"][key].shape
    assert not torch.equal(twin["model"][key], trained["model"][key])
    assert (demo / "random-init" / "dict.txt").read_bytes() == (
        demo / "data-bin" / "dict.txt"
    ).read_bytes()
    # the imported MiniLM fine-tuned the same way, and both in one table beside the trivial baseline
    assert "[demo] import-minilm -> " in first and (demo / "minilm-fairseq" / "model.pt").exists()
    assert "[demo] blurb-minilm -> " in first
    minilm = json.loads((demo / "blurb-minilm" / "results.json").read_text())
    assert minilm["checkpoint"] == str(demo / "minilm-fairseq" / "model.pt")
    table = (demo / "comparison.md").read_text()
    assert table in first
    header, _, row = table.splitlines()[:3]
    assert header.endswith(
        "| trivial baseline | demo model, pretrained (5 updates of 8) | same model, random init "
        "(5 updates of 8) | MiniLM-L6-H384 (2 updates of 4) | pretraining's effect |"
    )
    pretrained, twin = (
        json.loads((demo / d / "results.json").read_text())["datasets"]["biosses"]
        for d in ("blurb", "blurb-random-init")
    )
    assert row.startswith("| BIOSSES | pearson | 0.00 | ") and f"{pretrained['mean']:.2f}" in row
    assert f"{minilm['datasets']['biosses']['mean']:.2f}" in row
    learned = pretrained["vs_trivial"] == twin["vs_trivial"] == "above"
    assert row.endswith(f" | {pretrained['mean'] - twin['mean']:+.2f} |" if learned else " | – |")
    picture = (demo / "demo.png").read_bytes()
    assert picture.startswith(b"\x89PNG") and f"picture    : {demo / 'demo.png'}" in first

    again = run_cli(args, cwd=tmp_path).stdout
    for step in ("extract", "vocab", "encode", "binarize", "train", "random-init", "import-minilm"):
        assert f"[demo] {step}: reusing" in again
    assert match.group(0) in again  # the same final numbers, read back from the training log
    assert len(re.findall(r"1/1 biosses.*: reused", again)) == 3
    assert json.loads((demo / "blurb" / "results.json").read_text())["score"] == score
    assert (demo / "comparison.md").read_text() == table and table in again


def test_comparison_table_marks_scores_at_the_trivial_baseline():
    def results(**means):
        datasets = {
            name: {
                "title": name.upper(),
                "metric": "f1",
                "mean": mean,
                "trivial_baseline": 50.0,
                "vs_trivial": "at" if abs(mean - 50) <= 1 else ("below" if mean < 50 else "above"),
            }
            for name, mean in means.items()
        }
        return {"benchmark": "BLURB", "datasets": datasets}

    table = comparison_markdown({"tiny": results(gad=50.5, hoc=10.0), "MiniLM": results(gad=75.0)})
    rows = table.splitlines()
    assert rows[0] == "| dataset | metric | trivial baseline | tiny | MiniLM |"
    assert (
        rows[2] == "| GAD | f1 | 50.00 | 50.50 (at trivial) | 75.00 |"
    )  # in the benchmark's order, not the input's
    assert rows[3] == "| HOC | f1 | 50.00 | 10.00 (below trivial) | – |"
    assert "trivial baseline is the best score of one answer" in table


def test_comparison_table_gives_the_pretraining_effect_where_both_sides_ran():
    def results(**means):
        datasets = {
            name.replace("_", "-"): {
                "title": name.replace("_", "-").upper(),
                "metric": "f1",
                "mean": mean,
                "trivial_baseline": 3.0,
                "vs_trivial": "above",
            }
            for name, mean in means.items()
        }
        return {"benchmark": "BLURB", "datasets": datasets}

    columns = {
        "pretrained": results(ncbi_disease=40.25, gad=70.0, hoc=2.0),
        "random": results(ncbi_disease=30.0, hoc=8.0),
        "MiniLM": results(gad=75.0),
    }
    columns["pretrained"]["datasets"]["hoc"]["vs_trivial"] = "below"
    rows = comparison_markdown(columns, effect=("pretrained", "random")).splitlines()
    assert rows[0].endswith("| pretrained | random | MiniLM | pretraining's effect |")
    assert rows[2] == "| NCBI-DISEASE | f1 | 3.00 | 40.25 | 30.00 | – | +10.25 |"
    assert rows[3] == "| GAD | f1 | 3.00 | 70.00 | – | 75.00 | – |"
    # a side that learned nothing is no comparison, whatever the difference
    assert rows[4] == "| HOC | f1 | 3.00 | 2.00 (below trivial) | 8.00 | – | – |"

"""`make demo`'s job (fairseq-bio-demo) on a slice of the real sample: every step (pretraining, then the BLURB runner on
one shared dataset), then a re-run that reuses them."""

import json
import re

from conftest import run_cli


def test_demo_runs_end_to_end_and_reuses_finished_steps(pubmed_sample, tmp_path):
    args = ["fairseq-bio-demo", "--workdir", tmp_path / "demo", "--max-docs-per-file", "300", "--vocab-size", "4000",
            "--max-update", "20", "--blurb-tasks", "biosses", "--blurb-updates", "5", "dataset.validate_interval_updates=10",
            "model.encoder_layers=2"]  # fmt: skip
    first = run_cli(args, cwd=tmp_path).stdout
    for step in ("extract", "vocab", "encode", "binarize"):
        assert f"[demo] {step} -> " in first
    match = re.search(r"final valid : loss ([\d.]+) \(base 2\), perplexity ([\d.]+) at update 20", first)
    assert match and float(match.group(1)) > 0
    demo = tmp_path / "demo"
    for path in ("checkpoints/checkpoint_best.pt", "checkpoints/checkpoint_last.pt", "vocab/encoder.json",
                 "vocab/vocab.bpe", "vocab/dict.txt", "data-bin/train.bin", "data-bin/bpe.json"):  # fmt: skip
        assert (demo / path).exists(), path
    assert list((demo / "checkpoints" / "tensorboard").rglob("events.out.tfevents.*"))
    assert str(demo / "checkpoints") in first
    # pretrain -> fine-tune -> score: the demo's model fine-tuned on BIOSSES, the BLURB table printed, partial
    assert "[demo] blurb -> " in first and "BLURB score" in first and "partial" in first
    results = (demo / "blurb" / "results.md").read_text()
    assert results in first and "BIOSSES" in results.upper()
    score = json.loads((demo / "blurb" / "results.json").read_text())["score"]

    again = run_cli(args, cwd=tmp_path).stdout
    for step in ("extract", "vocab", "encode", "binarize", "train"):
        assert f"[demo] {step}: reusing" in again
    assert match.group(0) in again  # the same final numbers, read back from the training log
    assert re.search(r"1/1 biosses.*: reused", again)
    assert json.loads((demo / "blurb" / "results.json").read_text())["score"] == score

"""`make demo`'s job (fairseq-bio-demo) on a slice of the real sample: every step, then a re-run that reuses them."""

import re

from conftest import run_cli


def test_demo_runs_end_to_end_and_reuses_finished_steps(pubmed_sample, tmp_path):
    args = ["fairseq-bio-demo", "--workdir", tmp_path / "demo", "--max-docs-per-file", "300", "--vocab-size", "4000",
            "--max-update", "20", "dataset.validate_interval_updates=10", "model.encoder_layers=2"]  # fmt: skip
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

    again = run_cli(args, cwd=tmp_path).stdout
    for step in ("extract", "vocab", "encode", "binarize", "train"):
        assert f"[demo] {step}: reusing" in again
    assert match.group(0) in again  # the same final numbers, read back from the training log

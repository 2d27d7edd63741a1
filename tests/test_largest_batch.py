"""benchmarks/largest_batch.py: the memory model it predicts the largest batch with, and its code
path on the CPU (the measurements themselves need a GPU:
`python benchmarks/largest_batch.py --device cuda`)."""

import json
import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import largest_batch  # noqa: E402

GIB = 2**30


def test_the_predicted_batch_follows_the_line_through_the_probes():
    """20 GiB fixed (weights, gradients, master copy, Adam's moments) + 1.5 GiB per 512-token block:
    within 97 % of 80 GiB that is 38 blocks (20 + 38 x 1.5 = 77 <= 77.6; 39 would be 78.5); of 32
    GiB, 7; with a fixed part beyond the limit, 0; a peak that does not grow with the batch predicts
    nothing."""
    peaks = {1: 21.5 * GIB, 2: 23 * GIB}
    assert largest_batch.predicted_batch(peaks, 80 * GIB) == 38
    assert largest_batch.predicted_batch(peaks, 32 * GIB) == 7
    assert largest_batch.predicted_batch(peaks, 20 * GIB) == 0
    assert largest_batch.predicted_batch({1: 5 * GIB, 2: 5 * GIB}, 80 * GIB) is None


def test_stacked_blocks_are_one_batch():
    import torch

    block = {
        "id": torch.tensor([3]),
        "net_input": {
            "src_tokens": torch.ones(1, 4, dtype=torch.long),
            "src_lengths": torch.tensor([4]),
        },
        "target": torch.full((1, 4), 1),
        "nsentences": 1,
        "ntokens": 4,
    }
    batch = largest_batch.stack([block, block, block])
    assert batch["net_input"]["src_tokens"].shape == (3, 4) and batch["target"].shape == (3, 4)
    assert (batch["nsentences"], batch["ntokens"], batch["id"].tolist()) == (3, 12, [3, 3, 3])


def test_the_cpu_code_path_writes_a_row_per_configuration(data_bin, tmp_path):
    """bio_roberta_tiny with and without activation checkpointing on real PubMed blocks: a row each,
    marked as a code check (nothing is capped on a CPU), trained with the fused LM head and loss by
    default."""
    stem = tmp_path / "largest"
    largest_batch.main(
        [
            "--device",
            "cpu",
            "--data",
            str(data_bin()),
            "--archs",
            "bio_roberta_tiny",
            "--limits-gib",
            "1",
            "--steps",
            "1",
            "--out",
            str(stem),
        ]
    )
    rows = json.loads(stem.with_suffix(".json").read_text())["rows"]
    assert [(r["arch"], r["checkpointing"]) for r in rows] == [
        ("bio_roberta_tiny", False),
        ("bio_roberta_tiny", True),
    ]
    assert all(
        len(r["probe_peaks_mib"]) == 2 and r["verified"] is False for r in rows if r["batch"]
    )
    assert {r["criterion"] for r in rows} == {
        "BioMaskedLmLoss"
    }  # the fused head: no N x V logits held
    assert "| bio_roberta_tiny | on | 1 |" in stem.with_suffix(".md").read_text()

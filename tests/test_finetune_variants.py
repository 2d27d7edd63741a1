"""benchmarks/finetune_variants.py's report (`make bench-variants`): differences paired by seed
against each dataset's reference row, the paper's difference beside ours, the run order (references
first), unknown names refused. The fine-tunings themselves are fairseq-bio-blurb's, tested with the
runner."""

import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import finetune_variants  # noqa: E402


def row(dataset, variant, reference, values, seeds, paper=None):
    return {
        "dataset": dataset,
        "title": dataset.upper(),
        "metric": "f1",
        "variant": variant,
        "reference": reference,
        "overrides": [] if variant == reference else [f"task.{variant}=1"],
        "paper": paper,
        "paper_source": "Table 10" if paper is not None else "not in the paper",
        "values": values,
        "seeds": seeds,
        "mean": sum(values) / len(values),
        "std": 0.5,
        "dev_mean": 60.0,
        "wall_s": 100.0,
    }


def test_differences_are_paired_by_seed_and_set_beside_the_papers():
    rows = [
        row("bc5", "linear", "linear", [66.0, 65.0, 64.0], [1, 2, 3], paper=85.62),
        row(
            "bc5", "bilstm", "linear", [60.0, 66.0], [3, 1], paper=85.64
        ),  # seeds in another order, one missing
        row("bc5", "crf", "linear", [63.0, 62.0, 61.0], [1, 2, 3]),
    ]
    finetune_variants.paired(rows)
    assert "diffs" not in rows[0] and "paper_diff" not in rows[0]
    assert rows[1]["diffs"] == pytest.approx([-4.0, 0.0]) and rows[1]["diff"] == pytest.approx(-2.0)
    assert rows[1]["paper_diff"] == pytest.approx(0.02)
    assert rows[2]["diff"] == pytest.approx(-3.0) and "paper_diff" not in rows[2]
    table = finetune_variants.markdown(rows, 3)
    assert (
        "| BC5 f1 | linear | (recipe) | 65.00 ± 0.50 | 66.00, 65.00, 64.00 | reference |" in table
    )
    assert (
        "| BC5 f1 | bilstm | task.bilstm=1 | 63.00 ± 0.50 | 60.00, 66.00 | -2.00 (-4.00, +0.00) | 60.00 |"
        in table
    )
    assert "85.64 (Table 10) | +0.02 | 100 |" in table and "| not in the paper |  | 100 |" in table


def test_variants_are_known_and_each_dataset_starts_with_its_reference(tmp_path):
    names = [f"{d}:{n}" for d, n, *_ in finetune_variants.VARIANTS]
    assert len(set(names)) == len(names)
    for dataset in {d for d, *_ in finetune_variants.VARIANTS}:
        first = next(v for v in finetune_variants.VARIANTS if v[0] == dataset)
        assert first[2] == ()  # the reference is the recipe as it is
    asked = ["gad:mention_pool", "bc5-disease:bilstm", "gad:dummy_cls", "bc5-disease:bilstm_crf"]
    assert finetune_variants.run_order(asked) == [
        "gad:dummy_cls",
        "gad:mention_pool",
        "bc5-disease:linear",
        "bc5-disease:bilstm",
        "bc5-disease:bilstm_crf",
    ]
    with pytest.raises(SystemExit, match="unknown variant.*gad:nope"):
        finetune_variants.main(["--variants", "gad:nope", "--out", str(tmp_path)])

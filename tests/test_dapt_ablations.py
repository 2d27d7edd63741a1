"""benchmarks/dapt_ablations.py's report: a variant's fine-tunings found under its --out
(single-dataset runner outputs merged, a dataset twice refused), gains paired by seed against the
import, and the table's cells. The pretraining, perplexity and fine-tuning it reads are
domain_adaptation.py's and the runner's, tested with them."""

import json
import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import dapt_ablations  # noqa: E402


def runner_result(path, name, title, values, seeds, dev):
    path.mkdir(parents=True)
    result = {"title": title, "values": values, "seeds": seeds, "dev_mean": dev}
    (path / "results.json").write_text(json.dumps({"datasets": {name: result}}))


def test_variant_runs_are_merged_and_paired_by_seed(tmp_path):
    out = tmp_path / "dapt_x"
    runner_result(
        out / "blurb" / "updates_500_ncbi",
        "ncbi-disease",
        "NCBI-disease",
        [75.0, 74.0],
        [2, 1],
        74.5,
    )
    runner_result(
        out / "blurb_bc5" / "updates_500", "bc5-disease", "BC5-disease", [66.0], [1], 67.0
    )
    runner_result(
        out / "blurb" / "updates_1000", "ncbi-disease", "NCBI-disease", [1.0], [1], 1.0
    )  # another point
    found = dapt_ablations.variant_scores(out, 500)
    assert sorted(found) == ["bc5-disease", "ncbi-disease"] and found["ncbi-disease"]["values"] == [
        75.0,
        74.0,
    ]
    imported = {"values": [73.0, 73.5, 74.0], "seeds": [1, 2, 3]}
    assert dapt_ablations.paired_gains(imported, found["ncbi-disease"]) == pytest.approx(
        [1.5, 1.0]
    )  # by seed
    runner_result(out / "again" / "updates_500", "bc5-disease", "BC5-disease", [65.0], [1], 66.0)
    with pytest.raises(
        SystemExit, match=r"bc5-disease at 500 updates is also in another results.json"
    ):
        dapt_ablations.variant_scores(out, 500)


def test_table_has_each_runs_scores_gains_and_movement():
    cell = {"values": [74.0, 75.0, 76.0], "dev": 74.1, "gains": [0.0, 0.0, 0.0]}
    results = {
        "at": 500,
        "datasets": ["NCBI-disease", "GAD"],
        "runs": {
            "import (0 updates)": {
                "datasets": {"NCBI-disease": cell},
                "change": {},
                "perplexity": 54012.0,
            },
            "frozen embeddings": {
                "datasets": {
                    "NCBI-disease": {"values": [75.0, 76.0], "dev": 73.9, "gains": [1.0, -0.5]}
                },
                "change": {"embeddings": 0.0, "layer 0": 0.034, "layer 1": 0.049},
                "perplexity": 179.14,
                "general_perplexity": 531.5,
            },
        },
    }
    table = dapt_ablations.markdown(results)
    assert "GAD" not in table  # not fine-tuned in every run
    assert (
        "| import (0 updates) | 75.00 ± 1.00 | reference | 74.10 | 0.00 % | 0 | 54,012.0 |  |"
        in table
    )
    assert (
        "| frozen embeddings | 75.50 ± 0.71 | +0.25 (+1.00, -0.50) | 73.90 | 0.00 % | 3.4-4.9 % | 179.1 | 531.5 |"
        in table
    )

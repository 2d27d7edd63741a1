"""docs/reproduction.md and the records it is made of (benchmarks/records/reproduce/): the page is
what the committed records give (``reproduce.py --check``), the records are small tracked JSON, an
encoder below its random-init run is no comparison, a transcribed record without a finding's number
is not run yet, and no difference has a fixed margin. No training: seconds."""

import copy
import json
import subprocess
import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import reproduce  # noqa: E402
import reproduce_findings as findings  # noqa: E402
import reproduce_rule as rule  # noqa: E402
import reproduce_steps as steps  # noqa: E402
from reproduce_rule import (  # noqa: E402
    NO_COMPARISON,
    NONE,
    NOT_REPRODUCED,
    REPRODUCED,
    verdict,
)

SEEDS = REPO.parent / "shared" / "seeds"
pytestmark = pytest.mark.skipif(
    not SEEDS.is_dir(), reason=f"{SEEDS}: the seed papers' text is not here"
)
BY_KEY = {f.key: f for f in findings.FINDINGS}


def committed(step: str) -> dict:
    return json.loads((steps.RECORDS / f"{step}.json").read_text(encoding="utf-8"))


def test_the_committed_page_is_what_the_committed_records_give(tmp_path, capsys):
    reproduce.main(["--check"])  # returns: the page matches byte for byte
    changed = tmp_path / "reproduction.md"
    changed.write_bytes(reproduce.PAGE.read_bytes().replace(b"**no comparison**", b"**x**", 1))
    with pytest.raises(SystemExit) as failed:
        reproduce.main(["--check", "--out", str(changed)])
    message = str(failed.value.code)
    assert message.startswith("benchmarks/reproduce.py: ") and "\n" not in message
    assert "--from-records" in message and not (tmp_path / "reproduction.png").exists()


def test_every_step_has_a_small_tracked_record():
    names = sorted(p.stem for p in steps.RECORDS.glob("*.json"))
    known = {s.name for s in reproduce.STEPS}
    assert set(names) <= known
    # a step not run yet (no record): each of its findings says so on the page
    page = reproduce.PAGE.read_text(encoding="utf-8")
    for f in findings.FINDINGS:
        if f.step in known - set(names):
            assert f"not run yet: python benchmarks/reproduce.py --only {f.key}" in page
    for path in steps.RECORDS.glob("*.json"):
        assert path.stat().st_size < 16_000, path  # numbers and commands, never weights or data
        record = json.loads(path.read_text(encoding="utf-8"))
        assert record["step"] == path.stem and ("results" in record or "published" in record)
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", str(steps.RECORDS / "dapt.json")], cwd=REPO
    )
    assert ignored.returncode == 1  # not ignored: the records are committed with the page


def test_a_transcribed_record_without_the_finding_is_not_run_yet():
    # variants-markers moved to DDI: the transcribed record's GAD numbers are not its number
    row = rule.evaluate(BY_KEY["variants-markers"], committed("variants"))
    assert row.ours is None and row.verdict == NOT_REPRODUCED
    assert row.note.startswith("not run yet at its step's budget")
    assert "ddi" in BY_KEY["variants-markers"].reads.lower()


def test_an_encoder_below_its_random_init_is_no_comparison():
    # the committed ELECTRA record (per seed): its discriminator is below random init
    electra = committed("electra-downstream")
    assert rule.evaluate(BY_KEY["electra-downstream"], electra).verdict == NO_COMPARISON
    # one number changed (random init's seed 2: 34.26 -> 30.0): both sides beat random init
    # beyond their spreads, and the row is judged (ELECTRA below the masked LM: not reproduced)
    judged = copy.deepcopy(electra)
    judged["results"]["f1"]["random"][1] = 30.0
    row = rule.evaluate(BY_KEY["electra-downstream"], judged)
    assert row.verdict == NOT_REPRODUCED and row.note == ""
    # and the other way: one ELECTRA seed lowered below random init, no comparison again
    judged["results"]["f1"]["electra"][0] = 25.0
    assert rule.evaluate(BY_KEY["electra-downstream"], judged).verdict == NO_COMPARISON


def test_no_difference_has_a_fixed_margin_stated_per_row():
    assert verdict(NONE, 0.02, 0.9, spread=0.1, tolerance=1.0) == REPRODUCED
    assert verdict(NONE, 0.02, 1.5, spread=2.0, tolerance=1.0) == NOT_REPRODUCED  # noise is no room
    # the committed variants record with sides that pass the guard: the margin alone decides
    record = committed("variants")
    entry = record["published"]["variants-bilstm"]
    for s in entry["sides"]:
        s.update(spread=0.5, random=40.0)
    entry["ours"].update(effect=1.5, spread=2.0)
    assert rule.evaluate(BY_KEY["variants-bilstm"], record).verdict == NOT_REPRODUCED
    entry["ours"].update(effect=-0.6)
    assert rule.evaluate(BY_KEY["variants-bilstm"], record).verdict == REPRODUCED
    # the step's results with a random-init run per variant: the sides read it
    results = {
        name: {"values": values, "diffs": diffs, "random": [20.0, 21.0], "trivial": 0.0}
        for name, values, diffs in (
            ("ddi:dummy_cls", [60.0, 61.0], None),
            ("ddi:marker_start", [60.5, 60.7], [0.5, -0.3]),
        )
    }
    row = rule.evaluate(BY_KEY["variants-markers"], {"step": "variants", "results": results})
    assert row.verdict == REPRODUCED and row.ours.effect == pytest.approx(0.1)
    results["ddi:marker_start"]["random"] = [60.0, 61.0]  # no better than random init
    row = rule.evaluate(BY_KEY["variants-markers"], {"step": "variants", "results": results})
    assert row.verdict == NO_COMPARISON and "over random init (60.50)" in row.note
    page = reproduce.PAGE.read_text(encoding="utf-8")
    rows = [f for f in findings.FINDINGS if f.claim == NONE]
    assert rows and page.count("  Margin ±1 F1 points: a difference within it") == len(rows)


@pytest.mark.skipif(
    not (REPO.parent / "shared" / "data" / "re" / "GAD").is_dir(), reason="no GAD here"
)
def test_trivial_baselines_from_the_data():
    assert steps.trivial_baseline("ncbi-disease") == 0.0  # all-O tagging finds no entity
    assert steps.trivial_baseline("ddi") == 0.0  # the majority label is the negative one
    # GAD's majority training label is 1: every test pair called a relation, 281 of 534 right
    assert steps.trivial_baseline("gad") == pytest.approx(100 * 2 * 281 / (281 + 534))

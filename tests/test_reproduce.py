"""benchmarks/reproduce.py (`make reproduce`) and its findings (reproduce_findings.py): the verdict
rule (sign and spread, no difference, arithmetic), the page and its PNG from findings built here, a
finished step reused and one with another budget or an interrupted one run again, findings read from
a benchmark's results (with the guard on their sides), electra_downstream.py's smoke run through its
step, and the BLURB / bio-lm / BioELECTRA arithmetic rows end to end from the seed papers' own text.
The committed page and records: tests/test_reproduce_page.py."""

import sys

import pytest
from conftest import REPO, SHARED_DATA

sys.path.insert(0, str(REPO / "benchmarks"))
import reproduce  # noqa: E402
import reproduce_findings as findings  # noqa: E402
import reproduce_rule as rule  # noqa: E402
import reproduce_steps as steps  # noqa: E402
from reproduce_steps import Context, Step  # noqa: E402
from reproduce_rule import (  # noqa: E402
    DIRECTION,
    NO_COMPARISON,
    NONE,
    NOT_REPRODUCED,
    REPRODUCED,
    SIGN,
    VALUE,
    Measure,
    verdict,
)
from reproduce_findings import Finding  # noqa: E402

SEEDS = REPO.parent / "shared" / "seeds"
needs_seeds = pytest.mark.skipif(
    not SEEDS.is_dir(), reason=f"{SEEDS}: the seed papers' text is not here"
)
HEADER = "| seed | finding | paper | ours | verdict |"


def test_a_difference_reproduces_with_the_papers_sign_beyond_its_spread():
    assert verdict(SIGN, -1.184, -0.97, spread=0.0) == REPRODUCED  # a deterministic count: spread 0
    assert verdict(SIGN, 0.3, 0.5, spread=0.2) == REPRODUCED
    assert (
        verdict(SIGN, 0.3, 0.5, spread=0.8) == DIRECTION
    )  # the sign, but within the seeds' spread
    assert verdict(SIGN, 0.3, 0.5, spread=None) == DIRECTION  # one run: no spread to exceed
    assert verdict(SIGN, 0.3, -0.5, spread=0.1) == NOT_REPRODUCED
    assert (
        verdict(SIGN, 0.3, -0.05, spread=1.0) == NOT_REPRODUCED
    )  # the other sign, even within the spread
    assert verdict(SIGN, -1.0, 0.0, spread=0.0) == NOT_REPRODUCED
    assert verdict(SIGN, 0.3, None) == NOT_REPRODUCED  # nothing measured


def test_no_difference_and_arithmetic_claims():
    assert verdict(NONE, 0.02, -12.04, spread=0.5, tolerance=1.0) == NOT_REPRODUCED
    assert verdict(NONE, 0.02, 0.81, spread=0.78, tolerance=1.0) == REPRODUCED
    # a fixed margin: a noisy 1.5 is not no difference, however wide the seeds' spread
    assert verdict(NONE, 0.02, 1.5, spread=2.0, tolerance=1.0) == NOT_REPRODUCED
    assert verdict(NONE, 0.02, -1.5, spread=None, tolerance=1.0) == NOT_REPRODUCED
    assert verdict(VALUE, 0.0, 0.004, tolerance=0.01) == REPRODUCED
    assert verdict(VALUE, 81.10, 81.13, tolerance=0.01) == NOT_REPRODUCED
    with pytest.raises(ValueError, match="unknown claim"):
        verdict("bigger", 1.0, 2.0)


def test_differences_over_seeds():
    m = rule.differences([1.0, 2.0, 3.0], lambda mean, n: f"{mean:+.2f} {n}")
    assert (m.effect, m.spread, list(m.values)) == (2.0, 1.0, [1.0, 2.0, 3.0])
    assert m.text == "+2.00 ± 1.00 over 3 seeds"
    one = rule.differences([0.5], lambda mean, n: n)
    assert one.spread is None and one.text == "one seed"


def fake_finding(key, seed, claim, paper, step, ours, tolerance=0.0):
    return Finding(
        key,
        seed,
        f"finding {key}",
        claim,
        lambda: Measure(paper, f"paper {paper}"),
        step,
        ours,
        f"number of {step}",
        f"why {key}",
        tolerance,
    )


def test_page_and_png_from_findings_built_here(tmp_path):
    record = {
        "step": "s",
        "scale": "cpu",
        "device": "CPU, 2 cores",
        "date": "2026-11-27",
        "seconds": 90,
        "params": {"seeds": 2},
        "commands": ["python benchmarks/x.py --seeds 2"],
        "results": {"diffs": [0.4, 0.6], "gap": 0.003},
    }

    def mean_difference(results):
        return rule.differences(results["diffs"], lambda m, n: f"{m:+.2f}")

    built = [
        fake_finding("up", "001", SIGN, 1.0, "s", mean_difference),
        fake_finding("down", "002", SIGN, -1.0, "s", lambda r: Measure(0.5, "+0.50", 0.0)),
        fake_finding(
            "same", "000", VALUE, 0.0, "s", lambda r: Measure(r["gap"], "gap", 0.0), tolerance=0.01
        ),
        fake_finding("unmeasured", "003", SIGN, 1.0, None, None),
        fake_finding("not-run", "004", NONE, 0.1, "t", lambda r: Measure(0.0, "0")),
    ]
    rows = [rule.evaluate(f, record if f.step == "s" else None) for f in built]
    assert [r.verdict for r in rows] == [
        REPRODUCED,
        NOT_REPRODUCED,
        REPRODUCED,
        NOT_REPRODUCED,
        NOT_REPRODUCED,
    ]
    assert rows[4].note == "not run yet: python benchmarks/reproduce.py --only not-run"

    text = reproduce.page(rows, "reproduction.png")
    lines = text.splitlines()
    assert (
        lines[lines.index(HEADER) + 2]
        == "| 001 PubMedBERT | finding up | paper 1.0 | +0.50 | **reproduced** |"
    )
    assert (
        "| 003 BioELECTRA | finding unmeasured | paper 1.0 | not measured | **not reproduced** |"
        in lines
    )
    assert "2 reproduced; 0 direction reproduced; 3 not reproduced; 0 no comparison of 5." in lines
    assert "**The rule.**" in text and "![paper vs ours per finding](reproduction.png)" in text
    assert (
        "  Why: why down." in lines and "  Why: why unmeasured." in lines
    )  # a why for every row not reproduced
    assert "  Why: not run yet: python benchmarks/reproduce.py --only not-run." in lines
    assert not any(line.startswith("  Why: why up") for line in lines)
    assert "cpu scale (CPU, 2 cores, 2026-11-27, step `s` took 1.5 min)" in text
    assert "  python benchmarks/x.py --seeds 2" not in text  # steps of STEPS only; "s" is not one

    reproduce.plot(rows, tmp_path / "reproduction.png")
    assert (tmp_path / "reproduction.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == [
        "reproduction.png"
    ]  # written through a temp file, renamed


def test_a_finished_step_is_reused_and_another_budget_or_a_failure_runs_again(tmp_path):
    calls = []

    def run(ctx, params):
        calls.append(params)
        if params.get("fail"):
            raise KeyError("interrupted")
        ctx.commands.append(f"bench --n {params['n']}")
        return {"n": params["n"]}

    step = Step(
        "fake", "a fake step", {"cpu": {"n": 1}, "gpu": {"n": 5}}, run, {"cpu": 0, "gpu": 0}
    )
    ctx = Context(results=tmp_path / "results", work=tmp_path / "work")
    first = reproduce.ensure(ctx, step)
    assert (
        first["results"] == {"n": 1}
        and first["commands"] == ["bench --n 1"]
        and first["scale"] == "cpu"
    )
    assert reproduce.ensure(ctx, step) == first and len(calls) == 1  # reused, not run again
    ctx.scale = "gpu"
    assert (
        reproduce.ensure(ctx, step)["results"] == {"n": 5} and len(calls) == 2
    )  # another budget: run again
    failing = Step("fake", "a fake step", {"cpu": {"n": 2, "fail": True}}, run, {"cpu": 0})
    ctx.scale = "cpu"
    with pytest.raises(KeyError):
        reproduce.ensure(ctx, failing)
    assert reproduce.load_record(ctx, step)["results"] == {
        "n": 5
    }  # the interrupted run left the last record


def test_distillation_rows_read_the_benchmarks_table():
    text = (
        "# NER\n\n| model | encoder | parameters | best dev F1 | test P | test R | test F1 | fine-tune wall s |\n"
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n"
        "| teacher | 4 x 256 | 7.29 M | 37.86 | 32.83 | 38.65 | 35.50 | 123 |\n"
        "| distilled student | 2 x 128 | 2.46 M | 35.53 | 33.47 | 34.90 | 34.17 | 98 |\n\nCommands\n"
    )
    rows = steps.markdown_rows(text, "model")
    assert [r["model"] for r in rows] == ["teacher", "distilled student"] and rows[1][
        "test F1"
    ] == "34.17"


def minilm_distillation(tiny, tiny_random):
    """distill_minilm.py's results as reproduce.py records them, with the TinyBioBERT student's
    per-seed F1 and its random-init twin's given."""
    wide, narrow = "student 3 x 384, random init", "student 3 x 192, random init"
    return {
        "f1": {
            "teacher": [60.0, 61.0, 60.5],
            findings.TEACHER_RANDOM: [30.0, 31.0, 30.5],
            "biolm": [50.0, 51.0, 50.5],
            "tinybiobert": tiny,
            wide: [28.0, 29.0, 28.5],
            narrow: tiny_random,
        },
        "seeds": [1, 2, 3],
        "shapes": {"teacher": "6 x 384", findings.TEACHER_RANDOM: "6 x 384", "biolm": "3 x 384"}
        | {"tinybiobert": "3 x 192", wide: "3 x 384", narrow: "3 x 192"},
        "labels": {"teacher": "MiniLM", "biolm": "bio-lm sec. 7", "tinybiobert": "TinyBioBERT"},
        "random_of": {"teacher": findings.TEACHER_RANDOM, "biolm": wide, "tinybiobert": narrow},
        "speed": {"teacher 6 x 384": 1000.0, "student 3 x 384": 2000.0, "student 3 x 192": 5000.0},
        "trivial": {"NCBI-disease": 0.0},
    }


@needs_seeds
def test_distillation_rows_read_minilms_students():
    by_key = {f.key: f for f in findings.FINDINGS}
    assert by_key["compact-retention"].step == by_key["biolm-distill"].step == "distill-minilm"
    record = {
        "step": "distill-minilm",
        "results": minilm_distillation([40.0, 41.0, 40.5], [41.0, 40.0, 41.5]),
    }
    retention = rule.evaluate(by_key["compact-retention"], record)
    assert retention.ours.effect == pytest.approx(-20.0) and "66.9 %" in retention.ours.text
    # the difference alone has the paper's sign beyond its spread, but the student is below its
    # random-init twin: no comparison
    assert verdict(SIGN, retention.paper.effect, retention.ours.effect, 0.0) == REPRODUCED
    assert retention.verdict == NO_COMPARISON
    assert retention.note == (
        "the distilled 3 x 192 student (40.50): -0.33 over random init (40.83), not more than its "
        "seed spread 0.50"
    )
    assert (
        "TinyBioBERT 3 x 192 40.50 (-0.33 over random init, 66.9 % of the teacher, 5.0x as fast)"
        in retention.detail
    )
    gain = rule.evaluate(by_key["biolm-distill"], record)
    assert gain.ours.effect == pytest.approx(22.0) and gain.verdict == REPRODUCED
    # the student above its twin beyond its spread: judged, and the teacher's loss reproduced
    record["results"] = minilm_distillation([45.0, 46.0, 45.5], [35.0, 36.0, 35.5])
    assert rule.evaluate(by_key["compact-retention"], record).verdict == REPRODUCED


@needs_seeds
def test_electra_downstream_reads_the_paired_seeds():
    by_key = {f.key: f for f in findings.FINDINGS}
    results = {
        "f1": {
            "electra": [40.0, 42.5, 41.0],
            "mlm": [38.0, 42.0, 40.0],
            "random": [35.0, 36.0, 35.5],
        },
        "seeds": [1, 2, 3],
        "minutes": 10.0,
        "updates": {"electra": 900, "mlm": 1400},
        "planned": {"electra": 900, "mlm": 1400},
        "discriminator": {"replaced_recall": 0.31, "replaced_prob": 0.4, "original_prob": 0.1},
        "trivial": {"NCBI-disease": 0.0},
    }
    row = rule.evaluate(
        by_key["electra-downstream"], {"step": "electra-downstream", "results": results}
    )
    assert row.ours.effect == pytest.approx(7 / 6) and list(row.ours.values) == [2.0, 0.5, 1.0]
    assert (
        row.ours.spread == pytest.approx((7 / 12) ** 0.5) and row.verdict == REPRODUCED
    )  # +1.17 > its std 0.76
    assert row.ours.text == (
        "NCBI-disease F1: ELECTRA discriminator 41.17 vs masked LM 40.00 (**+1.17** ± 0.76 over "
        "3 seeds; random init 35.50; 900 vs 1400 pretraining updates in 10 min each)"
    )
    assert "mean P(replaced) 0.400 on replaced tokens vs 0.100 on original ones" in row.detail
    assert row.paper.effect > 0  # BioELECTRA (P) over PubMedBERT in BLURB points
    results["f1"]["mlm"] = [41.0, 43.0, 42.0]
    assert (
        rule.evaluate(by_key["electra-downstream"], {"results": results}).verdict == NOT_REPRODUCED
    )
    # an encoder that fine-tunes no better than random init (beyond its seeds' spread) learned
    # nothing: no comparison, ours still shown, the page says why
    results["f1"]["random"] = [41.0, 42.0, 41.5]
    results.update(updates={"electra": 700, "mlm": 1400})
    row = rule.evaluate(by_key["electra-downstream"], {"results": results})
    assert row.verdict == NO_COMPARISON and row.ours.effect == pytest.approx(-5 / 6)
    assert row.note == (
        "ELECTRA's discriminator after 700 of 900 planned pretraining updates (41.17): -0.33 over "
        "random init (41.50), not more than its seed spread 1.26; the masked LM after 1400 of 1400 "
        "planned pretraining updates (42.00): +0.50 over random init (41.50), not more than its "
        "seed spread 1.00"
    )
    results["f1"].update(electra=[45.0, 45.0, 45.0], mlm=[40.0, 41.0, 42.0])  # ELECTRA learned
    assert rule.evaluate(by_key["electra-downstream"], {"results": results}).note.startswith(
        "the masked LM after 1400 of 1400 planned pretraining updates (41.00): -0.50 over random"
    )
    # a record without the random-init arm or the trivial baseline cannot be judged
    del results["f1"]["random"], results["trivial"]
    row = rule.evaluate(by_key["electra-downstream"], {"results": results})
    assert row.verdict == NO_COMPARISON and row.note.startswith(
        "ELECTRA's discriminator after 700 of 900 planned pretraining updates (45.00): no "
        "random-init run recorded, no trivial baseline recorded; the masked LM"
    )


def test_electra_downstream_flop_estimate():
    """The benchmark's per-token estimate: ELECTRA's step does a little more arithmetic than the
    MLM's (the generator is a quarter as wide; both have one V-wide head on the masked
    positions)."""
    import electra_downstream as bench

    for size in ("tiny", "mini"):
        ratio = bench.flops_per_token(size, 16005, 128, electra=True) / bench.flops_per_token(
            size, 16005, 128, False
        )
        assert 1.0 < ratio < 1.2, (size, ratio)
    # 4 x 256 masked LM: 4 layers x (2 x 786,432 + 131,072) + 0.15 x 2 x (256^2 + 256 x 16005), x 3
    assert bench.flops_per_token("tiny", 16005, 128, electra=False) == pytest.approx(
        3 * (4 * 1703936 + 0.3 * (65536 + 256 * 16005))
    )


@needs_seeds
@pytest.mark.skipif(
    not (SHARED_DATA / "ner" / "NCBI-disease").is_dir(), reason="no NCBI-disease in ../shared/data"
)
def test_electra_downstream_quick_through_its_step(data_bin, tmp_path):
    """electra_downstream.py --quick on the suite's PubMed slice through reproduce's step: both
    encoders pretrained (40 updates each), the discriminator extracted, one fine-tuning seed each
    and of random init; its table and PNG, the finding read from the step's results, and a rerun
    that reuses every piece. About 1 min on a quiet core; 6 min beside other jobs (load 5 on 2
    cores)."""
    ctx = Context(results=tmp_path / "results", work=tmp_path / "work")
    # quick's 40 updates each, the budget (only a hard stop then) raised so that a busy machine
    # never cuts them; one thread per tool (two threads on two cores shared with other jobs ran the
    # fine-tunings 40x slower)
    params = {
        "args": [
            "--quick",
            "--data",
            data_bin("bytebpe"),
            "--pretrain-minutes",
            "10",
            "--threads",
            "1",
        ],
        "seeds": [1],
    }
    results = steps.run_electra_downstream(ctx, params)
    assert results["seeds"] == [1] and results["updates"] == {"electra": 40, "mlm": 40}
    assert {m: len(v) for m, v in results["f1"].items()} == {"electra": 1, "mlm": 1, "random": 1}
    work = tmp_path / "work" / "electra-downstream"
    text = (work / "results.md").read_text(encoding="utf-8")
    assert "| ELECTRA discriminator | 40 |" in text and "| masked LM | 40 |" in text
    assert "fairseq-bio-extract-encoder --checkpoint" in text  # the commands run
    assert (work / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    row = rule.evaluate(
        next(f for f in findings.FINDINGS if f.key == "electra-downstream"), {"results": results}
    )
    # 40 updates on 200 sentences: every encoder scores F1 0 on NER, none above random init: no
    # comparison, said so
    assert (
        results["planned"] == {"electra": 40, "mlm": 40}
        and results["discriminator"]["replaced_prob"] is not None
    )
    assert row.verdict == NO_COMPARISON and "over random init" in row.note

    assert steps.run_electra_downstream(ctx, params) == results  # the rerun reuses every piece
    output = (tmp_path / "work" / "logs" / "electra-downstream.out").read_text(encoding="utf-8")
    assert (
        output.count("reusing") == 5 and "fairseq-hydra-train" not in output
    )  # 2 encoders, 3 fine-tunings


@needs_seeds
def test_arithmetic_rows_end_to_end(tmp_path):
    """BLURB (seed 001 Table 6), bio-lm (seed 000 Table 2) and BioELECTRA (seed 003 Table 2)
    arithmetic from the papers' text through the runner and the page; every other row says it has
    not run."""
    ctx = Context(results=tmp_path / "results", work=tmp_path / "work")
    keys = ["blurb-arithmetic", "biolm-arithmetic", "electra-arithmetic"]
    rows = reproduce.reproduce(ctx, keys, tmp_path / "docs" / "reproduction.md")
    by_key = {r.finding.key: r for r in rows}
    assert all(by_key[k].verdict == REPRODUCED for k in keys)
    table_6 = by_key["blurb-arithmetic"].record["results"]["columns"]
    assert len(table_6) == 9 and table_6["PubMedBERT"]["computed"] == pytest.approx(81.10, abs=0.01)
    assert table_6["BERT-uncased"]["computed"] == pytest.approx(75.99, abs=0.01)
    assert len(by_key["biolm-arithmetic"].record["results"]["cells"]) == 40
    electra = by_key["electra-arithmetic"].ours
    assert electra.effect < 0.01 and "published 82.47" in electra.text
    electra_downstream = by_key["electra-downstream"]
    assert electra_downstream.verdict == NOT_REPRODUCED and electra_downstream.ours is None
    assert electra_downstream.note.startswith("not run yet")
    assert by_key["dapt"].note.startswith("not run yet")

    text = (tmp_path / "docs" / "reproduction.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    table = lines[lines.index(HEADER) + 2 : lines.index(HEADER) + 2 + len(findings.FINDINGS)]
    assert len(table) >= 6 and {line.split(" ")[1] for line in table} == {
        "000",
        "001",
        "002",
        "003",
        "004",
    }
    assert all(line.endswith(tuple(f"| **{v}** |" for v in rule.VERDICTS)) for line in table)
    assert (tmp_path / "docs" / "reproduction.png").is_file()
    assert (
        "reusing" not in text and "fairseq_bio.runner.datasets.blurb_score" in text
    )  # the step and its source


@needs_seeds
def test_every_seed_has_a_finding_with_the_papers_number():
    keys = [f.key for f in findings.FINDINGS]
    assert len(set(keys)) == len(keys)
    assert {f.seed for f in findings.FINDINGS} == {"000", "001", "002", "003", "004"}
    for f in findings.FINDINGS:
        assert f.claim in (VALUE, SIGN, NONE) and (
            f.step is None or f.step in reproduce.STEP
        ), f.key
        assert (f.ours is None) == (f.step is None), f.key
        assert (
            f.paper().text
        ), f.key  # the paper's number, read from its text, the shipped tables or the finding
    assert findings.table_6()["PubMedBERT"]["BLURB score"] == 81.10


def test_a_failed_step_is_said_on_the_page_and_the_run_fails(tmp_path, monkeypatch):
    """A step whose command exits non-zero: its output kept in the logs, the page written with why,
    exit status 1."""

    def fail(ctx, params):
        ctx.call([sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"], "fails")

    step = Step("broken", "a step that fails", {"cpu": {}}, fail, {"cpu": 0})
    monkeypatch.setattr(reproduce, "STEPS", [step])
    monkeypatch.setattr(reproduce, "STEP", {"broken": step})
    monkeypatch.setattr(
        reproduce, "FINDINGS", [fake_finding("row", "001", SIGN, 1.0, "broken", lambda r: None)]
    )
    ctx = Context(results=tmp_path / "results", work=tmp_path / "work")
    with pytest.raises(SystemExit, match=r"1 step\(s\) failed: broken"):
        reproduce.reproduce(ctx, None, tmp_path / "page.md")
    assert (tmp_path / "work" / "logs" / "fails.out").read_text(encoding="utf-8").strip() == "boom"
    text = (tmp_path / "page.md").read_text(encoding="utf-8")
    assert "  Why: its step failed (python exited 3; the end of its output" in text
    assert (
        "| 001 PubMedBERT | finding row | paper 1.0 | not measured | **not reproduced** |" in text
    )
    assert not (tmp_path / "results" / "broken.json").exists()


@needs_seeds
def test_the_dapt_row_is_every_set_the_step_ran():
    """Ours is the per-seed mean gain over every set (none singled out); a set where a side does not
    beat its random-init run makes the row no comparison, naming the set."""
    dapt = next(f for f in findings.FINDINGS if f.key == "dapt")

    def entry(scores, continued, random):
        gains = [c - s for s, c in zip(scores, continued)]
        return {"gains": gains, "scores": scores, "continued": continued, "random": random}

    results = {
        "NCBI-disease": entry([70.0, 71.0, 72.0], [72.0, 73.0, 73.0], [20.0, 22.0, 21.0]),
        "GAD": entry([60.0, 61.0, 62.0], [59.0, 61.0, 62.0], [55.0, 56.0, 57.0]),
    }
    for r in results.values():
        r["trivial"] = 0.0
    row = rule.evaluate(dapt, {"step": "dapt", "results": results})
    assert row.ours.values == pytest.approx(
        [0.5, 1.0, 0.5]
    )  # (2 - 1) / 2, (2 + 0) / 2, (1 + 0) / 2
    assert "mean over 2 sets" in row.ours.text and "GAD 61.00 → 60.67" in row.ours.text
    assert "mean over 4 sets" in row.paper.text and row.verdict == REPRODUCED
    results["GAD"]["random"] = [61.0, 61.5, 62.0]
    row = rule.evaluate(dapt, {"step": "dapt", "results": results})
    assert row.verdict == NO_COMPARISON and row.note.startswith("GAD: MiniLM as imported (61.00)")

"""The benchmarks' random-init arms and per-seed records, without training: finetune_variants.py's
DDI variants (Table 12's dataset) and its random-init column, domain_adaptation.py's random-init
row, and distill_minilm.py's students, presets and report (``distillation.py --ner --teacher
minilm``). Seconds."""

import json
import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import distill_minilm  # noqa: E402
import domain_adaptation  # noqa: E402
import finetune_variants  # noqa: E402


def test_table_12_runs_on_ddi_with_its_reference_first():
    assert finetune_variants.REFERENCE["ddi"] == "dummy_cls"
    assert finetune_variants.run_order(["ddi:marker_start"]) == [
        "ddi:dummy_cls",
        "ddi:marker_start",
    ]
    marker = finetune_variants.BY_NAME["ddi:marker_start"]
    assert marker[2] == ("task.entity_representation=marker_start",) and marker[3] == 82.18
    assert finetune_variants.BY_NAME["gad:marker_start"][3] is None  # no GAD column in Table 12


def test_the_variants_table_shows_the_random_init_run():
    row = {
        "dataset": "ddi",
        "title": "DDI",
        "metric": "micro F1",
        "variant": "marker_start",
        "reference": "dummy_cls",
        "overrides": ["task.entity_representation=marker_start"],
        "paper": 82.18,
        "paper_source": "Table 12, DDI",
        "values": [60.0, 62.0],
        "seeds": [1, 2],
        "mean": 61.0,
        "std": 1.41,
        "dev_mean": 58.0,
        "wall_s": 10.0,
        "random": {"values": [20.0, 22.0], "seeds": [1, 2], "mean": 21.0, "std": 1.41},
    }
    assert "| 21.00 (20.00, 22.00) |" in finetune_variants.markdown([row], 2)
    del row["random"]
    assert "| not run |" in finetune_variants.markdown([row], 2)


def test_the_variants_show_each_runs_dev_curve(tmp_path):
    """The dev curve is the mean over the chosen learning rate's seeds at every validation, read
    from each run's fairseq log; the table shows its value at half the budget and at the end."""
    target, runs = tmp_path / "ddi" / "dummy_cls", []
    for seed, scores in ((1, (40.0, 60.0, 61.0)), (2, (42.0, 62.0, 63.0))):
        run_dir = target / "ddi" / "lr0.0001" / f"seed{seed}"
        run_dir.mkdir(parents=True)
        lines = [
            json.dumps({"epoch": i, "valid_f1": str(f), "valid_num_updates": str(100 * i)})
            for i, f in enumerate(scores, start=1)
        ]
        (run_dir / "train.log").write_text("\n".join(lines) + "\n")
        runs.append(
            {"dataset": "ddi", "lr": 1e-4, "seed": seed, "run_dir": str(run_dir)}
            | {"dev_selected_on": "f1"}
        )
    other = dict(runs[0], lr=3e-5, run_dir=str(tmp_path / "none"))  # another grid point: not read
    results = {"datasets": {"ddi": {"lr": 1e-4}}, "runs": [*runs, other]}
    (target / "results.json").write_text(json.dumps(results))
    curve = finetune_variants.dev_curve(json.loads((target / "results.json").read_text()), "ddi")
    assert curve == {100: 41.0, 200: 61.0, 300: 62.0}
    assert finetune_variants.converged(curve) == "61.00 @200 → 62.00 @300"


def test_domain_adaptation_reports_the_random_init_run_per_dataset():
    def entry(values):
        return {
            "title": "NCBI-disease",
            "metric": "entity F1",
            "mean": sum(values) / len(values),
            "std": 0.5,
            "values": values,
            "seeds": [1, 2],
            "dev_mean": 50.0,
        }

    points = {
        u: {
            "datasets": {"ncbi-disease": entry(v)},
            "perplexity": 10.0,
            "encoder_change": {"encoder": 0.0},
        }
        for u, v in ((0, [70.0, 71.0]), (40, [71.0, 72.5]))
    }
    random = {"ncbi-disease": entry([10.0, 12.0])}
    results = domain_adaptation.report(points, 40, ["ncbi-disease"], random)
    row = results["rows"][0]
    assert row["random"]["values"] == [10.0, 12.0] and row["seed_gains"][40] == [1.0, 1.5]
    assert "| 11.00 ± 0.50 (10.00, 12.00) |" in domain_adaptation.markdown(results, 2)
    assert "random" not in domain_adaptation.report(points, 40, ["ncbi-disease"])["rows"][0]


def test_minilms_students_use_the_shipped_presets():
    configs = {p.stem for p in (REPO / "hydra_configs").glob("distill_*.yaml")}
    assert {s.config for s in distill_minilm.STUDENTS} == configs
    every_other = [s for s in distill_minilm.STUDENTS if s.init == "every-other"]
    assert {s.key for s in every_other} == {"distilbiobert", "compactbiobert", "biolm"}
    tiny = next(s for s in distill_minilm.STUDENTS if s.key == "tinybiobert")
    assert tiny.init == "random" and tiny.sizes["encoder_embed_dim"] < 384
    minilm = {"encoder_layers": 6, "encoder_embed_dim": 384}
    assert distill_minilm.random_key({**minilm, **tiny.sizes}) == "student 3 x 192, random init"


def test_the_distillation_report_has_every_model_per_seed():
    wide, narrow = "student 3 x 384, random init", "student 3 x 192, random init"
    results = {
        "f1": {
            "teacher": [60.0, 62.0],
            distill_minilm.TEACHER_RANDOM: [30.0, 31.0],
            "biolm": [50.0, 52.0],
            wide: [25.0, 27.0],
            "tinybiobert": [40.0, 41.0],
            narrow: [20.0, 21.0],
        },
        "seeds": [1, 2],
        "shapes": {
            "teacher": "6 x 384",
            distill_minilm.TEACHER_RANDOM: "6 x 384",
            "biolm": "3 x 384",
            wide: "3 x 384",
            "tinybiobert": "3 x 192",
            narrow: "3 x 192",
        },
        "labels": {"teacher": "MiniLM", "biolm": "bio-lm", "tinybiobert": "TinyBioBERT"},
        "random_of": {
            "teacher": distill_minilm.TEACHER_RANDOM,
            "biolm": wide,
            "tinybiobert": narrow,
        },
        "distill": {
            "biolm": {"updates": 4, "minutes": 1.0},
            "tinybiobert": {"updates": 4, "minutes": 1.0},
        },
        "distill_lr": 5e-4,
        "head": {"updates": 4, "encoder_change": 0.0},
        "budget": "--max-update 10",
        "speed": {
            "teacher 6 x 384": {"tokens_per_s": 1000.0},
            "student 3 x 384": {"tokens_per_s": 2000.0},
            "student 3 x 192": {"tokens_per_s": 5000.0},
        },
    }
    text = distill_minilm.markdown(results)
    assert (
        "| bio-lm | 3 x 384 | 4 updates, 1.0 min | 51.00 ± 1.41 | 50.00, 52.00 | +25.00 |" in text
    )
    assert "| 66.4 % | 5000 | 5.00x |" in text  # TinyBioBERT: 40.5 of 61.0, five times as fast
    assert text.count("\n| ") == 2 + len(results["f1"]) - 1

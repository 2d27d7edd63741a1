"""A recipe named after a paper gives that paper's per-dataset values (hydra_configs/paper_tables/):
BioELECTRA's Table 7 (seed 003), PubMedBERT's input lengths (seed 001 sec. 5.2) and BioMegatron's
sub-token labels (seed 002 sec. 5.1), over the task preset's and the BLURB runner's values, the
command line over them, each change said in one line; composed as fairseq-hydra-train composes (the
run config's hydra callback applied), planned by the runner, and in a real fairseq-hydra-train job
and sweep (BioMegatron's labels, trained and predicted on real NCBI-disease: test_head_hidden_layers).
"""

import math

import pytest
import yaml
from conftest import REPO, SHARED_DATA, run_cli
from helpers.hydra_configs import CONFIG_DIR, composer, job_config

from fairseq_bio import runs
from fairseq_bio.cli.blurb import build_parser
from fairseq_bio.errors import BioConfigError
from fairseq_bio.paper_tables import load_table
from fairseq_bio.runner.datasets import BLURB
from fairseq_bio.runner.paper_callback import apply_paper_table
from fairseq_bio.runner.plan import plan_runs

GAD = SHARED_DATA / "re" / "GAD"
ENCODER = "checkpoint.restore_file=/encoder/checkpoint_best.pt"
BIOELECTRA = "recipe=finetune_bioelectra"


@pytest.fixture
def compose():
    """hydra's composer, per test: the runner's plans compose with hydra of their own."""
    with composer() as composed:
        yield composed


def job(compose, config, *overrides):
    """(job config, notes): composed with the run config's paper-table callback applied."""
    cfg = compose(config, [ENCODER, *overrides])
    notes = apply_paper_table(cfg)
    return job_config(cfg), notes


def schedule(job):
    """(lr, optimization.lr, batch, epochs, max_positions, max_update, warm-up)."""
    default = job.optimizer.groups.default
    return (
        default.lr_float,
        list(job.optimization.lr),
        job.dataset.batch_size,
        job.optimization.max_epoch,
        job.task.max_positions,
        job.optimization.max_update,
        default.lr_scheduler.warmup_updates,
    )


def test_bioelectra_on_gad_trains_at_table_7s_values(compose):
    """003 Table 7, GAD: lr 2e-4, batch 32, 128 tokens, 5 epochs, over sentence_task/re_gad's 3e-5
    and 10 epochs; 5 epochs of GAD's 4,261 train rows at 32 are 670 updates, warm-up 10 %."""
    got, notes = job(
        compose, "bio_sentence_prediction", "sentence_task=re_gad", BIOELECTRA, f"task.data={GAD}"
    )
    assert schedule(got) == (2e-4, [2e-4], 32, 5, 128, 5 * 134, 67)
    assert got.task.layer_lr_decay == 0.8  # the recipe's own (Table 6) stays
    assert any(
        n.startswith("optimization.max_epoch=5: BioELECTRA Table 7, GAD")
        and n.endswith("over 10 of sentence_task/re_gad")
        for n in notes
    ), notes
    assert all("\n" not in n for n in notes)


def test_the_command_line_wins_over_the_table_and_says_so(compose):
    got, notes = job(
        compose,
        "bio_sentence_prediction",
        "sentence_task=re_gad",
        BIOELECTRA,
        f"task.data={GAD}",
        "dataset.batch_size=16",
        "optimization.max_epoch=7",
        "task.max_positions=96",
    )
    # the row changed neither the epochs nor the batch: the budget stays the preset's
    assert schedule(got)[:6] == (2e-4, [2e-4], 16, 7, 96, 1340)
    assert any(n.startswith("dataset.batch_size=16: the command line's, not 32") for n in notes)
    got, _ = job(
        compose,
        "bio_sentence_prediction",
        "sentence_task=re_gad",
        BIOELECTRA,
        f"task.data={GAD}",
        "dataset.batch_size=16",
    )
    assert (got.optimization.max_epoch, got.optimization.max_update) == (
        5,
        5 * math.ceil(4261 / 16),
    )
    got, _ = job(
        compose,
        "bio_sentence_prediction",
        "sentence_task=re_gad",
        BIOELECTRA,
        f"task.data={GAD}",
        "optimization.max_update=100",
    )
    assert (got.optimization.max_epoch, got.optimization.max_update) == (5, 100)


@pytest.mark.parametrize(
    "config, overrides, expected",
    [
        # 003 Table 7: BIOSSES 1.5e-4, 16, 128, 60 epochs (70 train pairs: 5 batches of 16)
        (
            "bio_sentence_prediction",
            ["sentence_task=biosses", f"task.data={SHARED_DATA / 'biosses'}"],
            (1.5e-4, [1.5e-4], 16, 60, 128, 300, 30),
        ),
        # 003 Table 7: NCBI-disease 2e-4, 32, 128, 5 epochs (5,424 sentences: 170 batches)
        (
            "bio_tagging_ner",
            [f"task.data={SHARED_DATA / 'ner' / 'NCBI-disease'}"],
            (2e-4, [2e-4], 32, 5, 128, 850, 85),
        ),
        # 003 Table 7: BC5-disease 2e-4, 16, 256, 5 epochs (4,560 sentences: 285 batches)
        (
            "bio_tagging_ner",
            [f"task.data={SHARED_DATA / 'ner' / 'BC5CDR-disease'}"],
            (2e-4, [2e-4], 16, 5, 256, 1425, 142),
        ),
    ],
    ids=["biosses", "ncbi-disease", "bc5-disease"],
)
def test_bioelectra_rows_that_differ(compose, config, overrides, expected):
    got, _ = job(compose, config, BIOELECTRA, *overrides)
    assert schedule(got) == expected


@pytest.mark.parametrize(
    "preset, data, length",
    [
        ("re_gad", "re/GAD", 128),
        ("re_ddi", "re/DDI", 256),
        ("pubmedqa", "pubmedqa", 512),
        ("hoc", "hoc", None),
    ],
)
def test_pubmedbert_input_lengths(compose, preset, data, length):
    """001 sec. 5.2: 128 tokens for GAD, 256 for ChemProt and DDI, 512 for QA; HoC: none given. The
    default recipe's: nothing else changes."""
    base = ["sentence_task=" + preset, f"task.data={SHARED_DATA / data}"]
    plain = job_config(compose("bio_sentence_prediction", [ENCODER, *base]))
    got, notes = job(compose, "bio_sentence_prediction", *base)
    assert got.task.max_positions == length
    assert schedule(got)[:4] == schedule(plain)[:4] and schedule(got)[5:] == schedule(plain)[5:]
    assert len(notes) == (length is not None)
    got, notes = job(compose, "bio_sentence_prediction", *base, "task.max_positions=64")
    assert got.task.max_positions == 64


def test_a_data_directory_of_no_known_dataset_is_said(compose, tmp_path):
    got, notes = job(compose, "bio_tagging_ner", BIOELECTRA, f"task.data={tmp_path / 'mine'}")
    assert got.optimization.max_epoch == 5 and got.task.max_positions is None
    assert notes == [
        f"recipe=finetune_bioelectra: task.data={tmp_path / 'mine'} names none of the runner's "
        "datasets (hydra_configs/runner/datasets.yaml): BioELECTRA Table 7 not applied"
    ]


def test_table_7_rows(tmp_path):
    """Every row of 003 Table 7 (lr, batch, length, epochs), and each row names a runner dataset."""
    rows = load_table("finetune_bioelectra", CONFIG_DIR).rows
    table = {
        name: (r["lr"], r["batch_size"], r["max_positions"], r["epochs"])
        for name, r in rows.items()
    }
    assert table == {
        "BC5-chem": (2e-4, 16, 256, 5),
        "BC5-disease": (2e-4, 16, 256, 5),
        "NCBI-disease": (2e-4, 32, 128, 5),
        "BC2GM": (2e-4, 32, 256, 5),
        "JNLPBA": (2e-4, 16, 256, 3),
        "ShARe/CLEFE": (2e-4, 32, 512, 5),
        "EBM PICO": (2e-4, 32, 256, 3),
        "ChemProt": (1e-4, 32, 256, 5),
        "DDI": (2e-4, 32, 256, 3),
        "GAD": (2e-4, 32, 128, 5),
        "i2b2-2010": (2e-4, 32, 128, 5),
        "BIOSSES": (1.5e-4, 16, 128, 60),
        "ClinicalSTS": (5e-5, 32, 128, 10),
        "HoC": (2e-4, 32, 128, 5),
        "MedNLI": (1e-4, 32, 128, 5),
        "PubMedQA": (2e-4, 32, 512, 20),
        "BioASQ": (2e-4, 32, 512, 20),
    }
    from fairseq_bio.runner.datasets import BENCHMARKS

    for name in rows:
        assert any(_knows(b, name) for b in BENCHMARKS.values()), name
    bad = tmp_path / "paper_tables"
    bad.mkdir()
    (bad / "r.yaml").write_text(yaml.safe_dump({"paper": "P", "rows": {"GAD": {"epochs": 0}}}))
    with pytest.raises(BioConfigError, match=r"^\S+r\.yaml: GAD: epochs must be positive, not 0$"):
        load_table("r", tmp_path)


def _knows(benchmark, name):
    try:
        benchmark.task(name)
    except ValueError:
        return False
    return True


def _plans(tmp_path, *extra):
    encoder = tmp_path / "encoder.pt"
    encoder.write_bytes(b"")
    args = build_parser().parse_args(
        [
            "--checkpoint",
            str(encoder),
            "--data",
            str(SHARED_DATA),
            "--out",
            str(tmp_path / "o"),
            *extra,
        ]
    )
    args.checkpoint = encoder
    return {p.recipe.name: p for p in plan_runs(args, BLURB, ["gad", "biosses"])[0]}


def test_the_runner_plans_gad_at_table_7s_values(tmp_path):
    """fairseq-bio-blurb -- recipe=finetune_bioelectra: GAD's runs at 2e-4, 32, 128, 5 epochs (670
    updates); a <dataset>:key=value override wins and the plan says so."""
    plans = _plans(tmp_path, "--", BIOELECTRA, "biosses:optimization.max_epoch=40")
    gad, biosses = plans["gad"], plans["biosses"]
    assert gad.lrs == [2e-4] and (gad.budget.max_update, gad.budget.warmup) == (670, 67)
    assert "task.max_positions=128" in gad.overrides and "optimization.max_epoch=5" in gad.overrides
    assert gad.cfg["dataset"]["batch_size"] == 32
    assert any(n.startswith("gad: optimization.max_epoch=5: BioELECTRA Table 7") for n in gad.notes)
    assert biosses.lrs == [1.5e-4] and biosses.budget.max_update == 40 * 5
    assert any(
        n.startswith("biosses: optimization.max_epoch=40: the command line's, not 60")
        for n in biosses.notes
    )


def test_a_real_job_takes_the_row_and_logs_it(tmp_path):
    """fairseq-hydra-train itself: the job's config (hydra's record) has Table 7's values and the
    log says which it took; the job then stops on the missing encoder, before training."""
    save = tmp_path / "run"
    result = run_cli(
        runs.hydra_train(
            "bio_sentence_prediction",
            "sentence_task=re_gad",
            BIOELECTRA,
            f"task.data={GAD}",
            f"checkpoint.restore_file={tmp_path / 'missing.pt'}",
            "dataset.batch_size=16",
            save_dir=save,
        ),
        cwd=REPO,
        check=False,
    )
    assert result.returncode != 0
    logged = result.stdout + result.stderr
    assert "optimization.max_epoch=5: BioELECTRA Table 7, GAD" in logged, logged[-3000:]
    assert "dataset.batch_size=16: the command line's, not 32 of BioELECTRA Table 7" in logged
    (record,) = save.glob("hydra/*/.hydra/config.yaml")
    cfg = yaml.safe_load(record.read_text())
    assert (cfg["optimization"]["max_epoch"], cfg["dataset"]["batch_size"]) == (5, 16)
    assert (cfg["task"]["max_positions"], cfg["optimizer"]["groups"]["default"]["lr_float"]) == (
        128,
        2e-4,
    )


def test_each_job_of_a_sweep_takes_the_row(tmp_path):
    """fairseq-hydra-train -m (hydra's basic launcher; submitit composes its jobs the same way):
    each job's recorded config has its dataset's Table 7 row, where the run config's callback never
    sees a sweep's jobs; the submitting process says what each took."""
    sweep = tmp_path / "sweep"
    command = runs.hydra_train(
        "bio_sentence_prediction",
        "sentence_task=re_gad",
        BIOELECTRA,
        f"task.data={GAD}",
        f"checkpoint.restore_file={tmp_path / 'missing.pt'}",
        "dataset.batch_size=16,32",
        f"hydra.sweep.dir={sweep}",
        save_dir=tmp_path / "run",
    )
    result = run_cli([command[0], "-m", *command[1:]], cwd=REPO, check=False)
    logged = result.stdout + result.stderr
    assert "optimization.max_epoch=5: BioELECTRA Table 7, GAD" in logged, logged[-3000:]
    jobs = sorted(sweep.glob("*/.hydra/config.yaml"))
    assert len(jobs) == 2, logged[-3000:]
    cfgs = [yaml.safe_load(p.read_text()) for p in jobs]
    assert sorted(c["dataset"]["batch_size"] for c in cfgs) == [
        16,
        32,
    ]  # the sweep's, not the row's
    for cfg in cfgs:
        assert (cfg["optimization"]["max_epoch"], cfg["task"]["max_positions"]) == (5, 128)
        assert cfg["optimizer"]["groups"]["default"]["lr_float"] == 2e-4


@pytest.mark.parametrize(
    "config, overrides, labels, noted",
    [
        (
            "bio_tagging_ner",
            ["task.data=" + str(SHARED_DATA / "ner" / "BC5CDR-disease")],
            True,
            True,
        ),
        (
            "bio_tagging_ner",
            ["task.data=" + str(SHARED_DATA / "ner" / "NCBI-disease")],
            False,
            False,
        ),
        (
            "bio_tagging_ner",
            [
                "task.data=" + str(SHARED_DATA / "ner" / "BC5CDR-disease"),
                "task.label_all_subtokens=false",
            ],
            False,
            True,
        ),
        ("bio_sentence_prediction", ["sentence_task=re_gad", f"task.data={GAD}"], None, False),
    ],
    ids=["bc5-disease", "ncbi-disease", "command-line", "gad"],
)
def test_biomegatron_labels_sub_tokens_but_on_ncbi_disease(
    compose, config, overrides, labels, noted
):
    """002 sec. 5.1: sub-tokens labelled separately, except NCBI-disease (whole-entity labels); a
    sentence task has no such option and is left as it is."""
    got, notes = job(compose, config, "recipe=finetune_biomegatron", *overrides)
    assert got.task.get("label_all_subtokens") is labels
    assert bool(notes) is noted
    if noted:
        (note,) = notes
        assert note.startswith("task.label_all_subtokens=") and "BioMegatron sec. 5.1" in note


def test_settle_leaves_keys_the_config_lacks():
    """Synthetic: a default row under a named one; flags compared as flags; absent keys skipped."""
    from fairseq_bio.paper_tables import ABSENT, PaperTable, settle

    table = PaperTable("r", "P", {"X": {"epochs": 3}}, {"label_all_subtokens": True, "epochs": 9})
    dataset, row = table.row(["x"])
    assert (dataset, row) == ("X", {"label_all_subtokens": True, "epochs": 3})
    values = {"optimization.max_epoch": 3, "task.label_all_subtokens": False}
    changes, notes = settle(table, dataset, row, values.get, {}, lambda key: "s")
    assert changes == {"task.label_all_subtokens": True} and len(notes) == 1
    changes, notes = settle(table, dataset, row, lambda key: ABSENT, {}, lambda key: "s")
    assert (changes, notes) == ({}, [])
    assert table.row(["y"]) == ("other datasets", {"label_all_subtokens": True, "epochs": 9})

"""ELECTRA pretraining end to end on real PubMed text through fairseq-hydra-train: the tiny config
learns (the generator's loss falls well below uniform; the discriminator detects replaced tokens,
which the all-"original" guess never does), a kill -9 resumes to the uninterrupted run's losses, a
128-position phase 1 restores into the 512-token phase-2 config, and checkpoints load with
weights_only=True through exactly fairseq's allowlist.

The learning check (measured on this PubMed slice, OMP_NUM_THREADS=1; the numbers are the valid
split at update 450 for seeds 1/2/3): discriminator 2 x 64, generator 32 wide, 16 x 64-token blocks,
lr 2e-3, 300 warm-up updates, temperature 1 (the default objective). Replaced recall
0.019/0.010/0.014 and precision 0.67/0.52/0.52 (the all-"original" guess: 0 and undefined; a random
guess: precision = the replaced fraction, 0.14), mean P(replaced) 0.154/0.141/0.144 on replaced
tokens vs 0.136/0.128/0.129 on original ones; generator 9.62-9.80 bits (uniform 11.55, unigram
9.79). Why this config: ~40-70 s on one core; smaller and shorter than bio_electra_tiny (4 x 256,
128 tokens, ~4x the time per update). Why the long warm-up (now also electra_cpu_demo's): with 30
warm-up updates to lr >= 1e-3 (bio_electra_tiny: 5e-4) the discriminator collapses within ~40
updates (its last hidden states become one vector for every token, so its output is the prior
everywhere) and stays there (recall 0 and equal P(replaced) on both kinds through 1,500 updates of
this config; benchmarks/electra.py); with 300 it separates the classes from update ~150. Recall
stays small in this budget because the generator reaches the unigram distribution by update ~200:
from then on a replacement is only detectable from context the discriminator must learn better than
the generator (recall ~0.01 through 1,500 updates). At temperature 2 (flatter, rarer samples) the
same run reaches recall 0.047."""

import math

import pytest
import torch
from conftest import logged, run_cli
from helpers.checkpoints import global_name, unsafe_globals
from training_processes import first_update_after_restart, killed_at

from fairseq_bio import checkpoints, runs

SIZES = [
    "model.encoder_layers=2",
    "model.encoder_embed_dim=64",
    "model.encoder_ffn_embed_dim=256",
    "model.encoder_attention_heads=1",
    "model.generator_embed_dim=32",
    "model.generator_ffn_embed_dim=128",
    "model.generator_attention_heads=1",
]
SHORT = ["model.max_positions=64", "task.tokens_per_sample=64"]
UPDATES = 450


def electra_train(data, save_dir, *overrides, config="bio_electra_tiny"):
    """The training command line of ``config`` with absolute paths."""
    return runs.hydra_train(config, f"task.data={data}", *overrides, save_dir=save_dir)


@pytest.fixture(scope="module")
def electra_run(data_bin, tmp_path_factory):
    """(save_dir, json log) of the learning-check config trained for UPDATES updates on the PubMed
    slice."""
    work = tmp_path_factory.mktemp("electra")
    save, log = work / "ckpt", work / "train.log"
    run_cli(
        electra_train(
            data_bin("bytebpe"),
            save,
            *SIZES,
            *SHORT,
            f"optimization.max_update={UPDATES}",
            "optimization.lr=[0.002]",
            "lr_scheduler.warmup_updates=300",
            "dataset.validate_interval_updates=150",
            f"checkpoint.save_interval_updates={UPDATES}",
            "common.log_format=json",
            "common.log_interval=50",
            f"common.log_file={log}",
            "common.tensorboard_logdir=null",
        ),
        cwd=work,
        timeout=1200,
    )
    return save, log


def test_tiny_electra_learns_to_detect_replaced_tokens_on_pubmed(electra_run, data_bin):
    _, log = electra_run
    inner, valid = logged(log, "train_inner"), logged(log, "valid")
    assert {150, 300, UPDATES} <= set(valid)
    first, last, v = inner[min(inner)], inner[UPDATES], valid[UPDATES]
    for entry in (first, last, v):
        assert (
            0.10 < float(entry["replaced_frac"]) < 0.16
        )  # 15 % masked; few samples equal the original
    assert float(last["gen_loss"]) < float(first["gen_loss"]) - 1.0
    uniform = math.log2(sum(1 for _ in open(data_bin("bytebpe") / "dict.txt")) + 5)
    assert float(v["gen_loss"]) < uniform - 1.5
    # The discriminator finds replaced tokens (the all-"original" guess finds none), mostly rightly
    # (a random guess is right at the replaced fraction), and ranks replaced tokens above original
    # ones on average.
    for entry in (last, v):
        assert float(entry["replaced_recall"]) >= 0.004, entry
        assert float(entry["replaced_precision"]) >= 2 * float(entry["replaced_frac"]), entry
        assert float(entry["replaced_prob"]) - float(entry["original_prob"]) >= 0.006, entry
    assert float(v["disc_acc"]) >= 1 - float(v["replaced_frac"]) - 0.002


def test_electra_checkpoint_loads_with_weights_only(electra_run):
    save, _ = electra_run
    path = save / "checkpoint_last.pt"
    assert unsafe_globals(path) <= {global_name(g) for g in checkpoints.FAIRSEQ_SAFE_GLOBALS}
    state = checkpoints.load_checkpoint(path)
    assert (
        state["cfg"]["model"]["_name"] == "bio_electra_tiny"
        and state["cfg"]["criterion"]["_name"] == "bio_electra"
    )
    weights = state["model"]
    assert "generator.embed_tokens.weight" not in weights and "generator_head.weight" not in weights
    assert weights["discriminator.embed_tokens.weight"].shape[1] == 64
    assert torch.load(path, weights_only=True)["optimizer_history"][-1]["num_updates"] == UPDATES


def test_configs_compose_to_bioelectra_table_5():
    from helpers.hydra_configs import cli_composed as composed
    from helpers.hydra_configs import no_shared_keys

    base = composed("bio_electra_base", "task.data=/data")
    assert base["model"]["_name"] == "bio_electra_base" and base["model"]["max_positions"] == 512
    assert base["task"]["_name"] == "bio_electra" and base["task"]["tokens_per_sample"] == 128
    assert base["task"]["mask_prob"] == 0.15 and base["model"]["dropout"] == 0.1
    assert base["criterion"] == {
        "_name": "bio_electra",
        "discriminator_weight": 50.0,
        "temperature": 1.0,
    }
    # AdamW with biases and LayerNorm weights exempt from weight decay, as ELECTRA's optimizer
    assert base["optimizer"] == {
        "_name": "bio_adamw",
        "adam_betas": "(0.9,0.999)",
        "adam_eps": 1e-06,
        "weight_decay": 0.01,
    }
    assert base["task"]["exempt_from_weight_decay"] is True
    assert base["optimization"]["lr"] == [0.0002]
    assert base["dataset"]["batch_size"] * base["optimization"]["update_freq"][0] == 512
    sched = base["lr_scheduler"]
    assert (sched["warmup_updates"], sched["total_num_update"], sched["end_learning_rate"]) == (
        10000,
        1000000,
        0.0,
    )
    assert base["optimization"]["max_update"] == 900000  # 90 % of the steps at 128 tokens

    phase2 = composed(
        "bio_electra_base_512", "task.data=/data", "checkpoint.restore_file=/p1/checkpoint_last.pt"
    )
    assert (
        phase2["task"]["tokens_per_sample"] == 512
        and phase2["optimization"]["max_update"] == 1000000
    )
    assert (
        phase2["checkpoint"]["restore_file"] == "/p1/checkpoint_last.pt"
        and phase2["checkpoint"]["reset_dataloader"]
    )
    assert {k: v for k, v in phase2.items() if k not in ("task", "optimization", "checkpoint")} == {
        k: v for k, v in base.items() if k not in ("task", "optimization", "checkpoint")
    }

    tiny = composed("bio_electra_tiny", "task.data=/data")
    assert tiny["common"]["cpu"] is True and tiny["model"]["_name"] == "bio_electra_tiny"
    assert tiny["task"]["_name"] == "bio_electra" and tiny["criterion"]["_name"] == "bio_electra"
    for name in ("bio_electra_base", "bio_electra_base_512", "bio_electra_tiny"):
        no_shared_keys(name)


def test_kill_9_and_restart_resumes_to_the_uninterrupted_losses(data_bin, tmp_path):
    """As the MLM test: the masks and the generator's draws are keyed by (seed, update, sample ids),
    dropout by fairseq's per-update seed, so a run killed with SIGKILL and restarted logs exactly
    the reference's numbers.
    """
    data = data_bin("bytebpe")
    settings = [
        *SIZES,
        *SHORT,
        "optimization.max_update=60",
        "checkpoint.save_interval_updates=20",
        "dataset.disable_validation=true",
        "lr_scheduler.warmup_updates=6",
        "common.log_format=json",
        "common.log_interval=5",
        "common.tensorboard_logdir=null",
    ]

    def command(save, log):
        return electra_train(data, save, *settings, f"common.log_file={log}")

    reference_log = tmp_path / "reference.log"
    run_cli(command(tmp_path / "reference", reference_log), cwd=tmp_path)
    reference = logged(reference_log, "train_inner")
    assert sorted(reference) == list(range(5, 61, 5))

    save, log = tmp_path / "interrupted", tmp_path / "interrupted.log"
    assert killed_at(command(save, log), log, 30, cwd=tmp_path) < 60

    run_cli(command(save, log), cwd=tmp_path)  # the same command again
    # resumed from checkpoint_last.pt (saved at 20 or 40), not from scratch
    assert first_update_after_restart(log) in (25, 45)
    resumed = logged(log, "train_inner")
    assert sorted(resumed) == sorted(reference)
    for update in reference:
        for key in ("loss", "gen_loss", "disc_loss", "replaced_frac", "replaced_prob", "lr"):
            assert resumed[update][key] == reference[update][key], (update, key)


def test_phase_1_with_128_positions_restores_into_the_512_token_phase_2_config(data_bin, tmp_path):
    """bio_electra_tiny (128 positions) for 10 updates, then bio_electra_base_512 (tiny sizes, CPU)
    restored from it: the position table is grown to 512 (+2) rows, phase 1's rows kept; the update
    count, lr schedule and Adam moments carry on (the grown rows' moments start at zero)."""
    data = data_bin("bytebpe")
    quiet = [
        "dataset.disable_validation=true",
        "common.log_format=json",
        "common.log_interval=1",
        "common.tensorboard_logdir=null",
        "dataset.batch_size=4",
    ]
    phase1 = tmp_path / "phase1"
    # phase 1 with phase 2's optimizer (the recipe's bio_adamw with the weight-decay exemption), as
    # the recipe's bio_electra_base is: the Adam moments then load into phase 2's parameter groups
    run_cli(
        electra_train(
            data,
            phase1,
            *SIZES,
            *quiet,
            "optimization.max_update=10",
            "model.max_positions=128",
            "task.tokens_per_sample=128",
            "optimizer._name=bio_adamw",
            "task.exempt_from_weight_decay=true",
            f"common.log_file={tmp_path / 'phase1.log'}",
        ),
        cwd=tmp_path,
    )
    first = torch.load(phase1 / "checkpoint_last.pt", weights_only=True)
    assert first["model"]["discriminator.embed_positions.weight"].shape == (128 + 2, 64)

    phase2, log = tmp_path / "phase2", tmp_path / "phase2.log"
    run_cli(
        electra_train(
            data,
            phase2,
            f"checkpoint.restore_file={phase1 / 'checkpoint_last.pt'}",
            "common.cpu=true",
            "common.fp16=false",
            "dataset.num_workers=0",
            "optimization.update_freq=[1]",
            "optimization.max_update=14",
            *SIZES,
            *quiet,
            f"common.log_file={log}",
            config="bio_electra_base_512",
        ),
        cwd=tmp_path,
    )
    inner = logged(log, "train_inner")
    assert sorted(inner) == [11, 12, 13, 14]  # the update count carries on
    for update in inner:  # phase 2's schedule at phase 1's count: warm-up of 10k steps to 2e-4
        assert float(inner[update]["lr"]) == pytest.approx(2e-4 * update / 10000, rel=1e-3)
    second = torch.load(phase2 / "checkpoint_last.pt", weights_only=True)
    assert second["cfg"]["task"]["tokens_per_sample"] == 512
    old = first["model"]["discriminator.embed_positions.weight"]
    grown = second["model"]["discriminator.embed_positions.weight"]
    assert grown.shape == (512 + 2, 64)
    assert (grown[:130] - old).abs().max() < 1e-5  # 4 Adam steps of lr <= 5.6e-6 on phase 1's rows
    assert grown[130:].std() > 0.01  # the new rows: initialised, not zero
    optim_state = second["last_optimizer_state"]["state"]
    steps = {int(s["step"]) for s in optim_state.values()}
    assert steps == {14}  # Adam's moments carried on from phase 1 (a reset optimizer would count 4)
    rows = {tuple(s["exp_avg"].shape) for s in optim_state.values() if s["exp_avg"].dim() == 2}
    assert (514, 64) in rows and (130, 64) not in rows

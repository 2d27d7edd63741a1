"""The shipped hydra configs compose to the seed-000 recipe and start real training from the
repository root exactly as documented (on CPU: fp16 off, one update)."""

import pytest
from conftest import REPO, logged, run_cli
from helpers.hydra_configs import cli_composed as composed
from helpers.hydra_configs import no_shared_keys


@pytest.mark.parametrize(
    "name, lr, batch, update_freq, arch",
    [
        ("bio_roberta_base", 6e-4, 32, 256, "bio_roberta_base"),
        ("bio_roberta_large", 4e-4, 16, 512, "bio_roberta_large"),
    ],
)
def test_recipe_of_seed_000(name, lr, batch, update_freq, arch):
    cfg = composed(name, "task.data=/data")
    assert cfg["optimization"]["lr"] == [lr]
    assert (
        cfg["dataset"]["batch_size"] * cfg["optimization"]["update_freq"][0] == 8192
    )  # sequences per update (1 GPU)
    assert (cfg["dataset"]["batch_size"], cfg["optimization"]["update_freq"][0]) == (
        batch,
        update_freq,
    )
    assert cfg["model"]["_name"] == arch and cfg["model"]["dropout"] == 0.1
    assert cfg["task"]["tokens_per_sample"] == 512 and cfg["model"]["max_positions"] == 512
    assert cfg["task"]["_name"] == "bio_masked_lm" and cfg["task"]["mask_prob"] == 0.15
    assert cfg["optimizer"] == {
        "_name": "adam",
        "adam_betas": "(0.9,0.98)",
        "adam_eps": 1e-06,
        "weight_decay": 0.01,
    }
    sched = cfg["lr_scheduler"]
    assert (
        sched["_name"] == "polynomial_decay"
        and sched["end_learning_rate"] == 0.0
        and sched["power"] == 1.0
    )
    assert sched["warmup_updates"] == 0.05 * cfg["optimization"]["max_update"] == 25000
    assert (
        cfg["common"]["fp16"] is True
        and cfg["common"]["tensorboard_logdir"] == "${checkpoint.save_dir}/tensorboard"
    )
    assert cfg["criterion"] == "masked_lm"


def test_tiny_demo_config_runs_on_cpu():
    cfg = composed("bio_roberta_tiny", "task.data=/data")
    assert cfg["common"]["cpu"] is True and cfg["common"]["fp16"] is False
    assert cfg["model"]["_name"] == "bio_roberta_tiny" and cfg["task"]["tokens_per_sample"] == 128
    assert cfg["lr_scheduler"]["warmup_updates"] == 0.05 * cfg["optimization"]["max_update"]


def test_demo_config_is_the_tiny_model_with_the_demo_recipe():
    tiny, demo = composed("bio_roberta_tiny", "task.data=/data"), composed(
        "bio_roberta_demo", "task.data=/data"
    )
    assert (
        demo["model"]["_name"] == tiny["model"]["_name"] and demo["model"]["max_positions"] == 128
    )
    assert {**demo["task"], "tokens_per_sample": 128} == tiny["task"] and demo["task"][
        "tokens_per_sample"
    ] == 64
    assert demo["model"]["dropout"] == demo["model"]["attention_dropout"] == 0.0
    assert demo["optimization"]["max_update"] > tiny["optimization"]["max_update"]
    assert demo["lr_scheduler"]["warmup_updates"] == 0.05 * demo["optimization"]["max_update"]
    # the same tokens per update as the tiny config, in blocks half as long
    tokens = [c["dataset"]["batch_size"] * c["task"]["tokens_per_sample"] for c in (demo, tiny)]
    assert tokens[0] == tokens[1] and demo["common"]["cpu"] is True


@pytest.mark.parametrize("recipe, lr", [("finetune_pubmedbert", 5e-5), ("finetune_biolm", 1e-5)])
def test_tagging_config_composes_to_the_fine_tuning_recipes(recipe, lr):
    """PubMedBERT sec. 5 / bio-lm sec. 5.2: Adam, 10 % linear warm-up then linear decay to 0,
    dropout 0.1, batch 32, best dev checkpoint by entity F1; per-parameter lr groups (composite) so
    layer_lr_decay works.
    """
    cfg = composed(
        "bio_tagging_ner", "task.data=/data", "checkpoint.restore_file=/ckpt.pt", f"recipe={recipe}"
    )
    group = cfg["optimizer"]["groups"]["default"]
    assert cfg["optimizer"]["_name"] == "composite" and cfg["lr_scheduler"] == "pass_through"
    assert (
        group["lr_float"] == lr
        and cfg["optimization"]["lr"] == [lr]
        and group["optimizer"]["_name"] == "adam"
    )
    sched = group["lr_scheduler"]
    assert (
        sched["_name"] == "polynomial_decay"
        and sched["end_learning_rate"] == 0.0
        and sched["power"] == 1.0
    )
    assert sched["warmup_updates"] == 0.1 * cfg["optimization"]["max_update"]
    assert cfg["dataset"]["batch_size"] == 32 and cfg["model"]["dropout"] == 0.1
    assert (
        cfg["checkpoint"]["best_checkpoint_metric"] == "f1"
        and cfg["checkpoint"]["maximize_best_checkpoint_metric"]
    )
    assert (
        cfg["checkpoint"]["reset_optimizer"]
        and cfg["task"]["_name"] == cfg["criterion"] == "bio_tagging"
    )
    assert cfg["optimization"]["max_epoch"] == 20


@pytest.mark.parametrize(
    "name",
    [
        "bio_roberta_base",
        "bio_roberta_large",
        "bio_roberta_tiny",
        "bio_roberta_demo",
        "bio_tagging_ner",
    ],
)
def test_primary_and_recipe_never_set_the_same_key(name):
    no_shared_keys(name)


@pytest.mark.parametrize("name", ["bio_roberta_base", "bio_roberta_large"])
def test_documented_command_starts_real_training(name, data_bin, tmp_path):
    """`fairseq-hydra-train --config-dir hydra_configs --config-name <name> task.data=<bin>` from
    the repo root (relative user_dir), on CPU: one real update of the full-size model."""
    log = tmp_path / "train.log"
    run_cli(
        [
            "fairseq-hydra-train",
            "--config-dir",
            "hydra_configs",
            "--config-name",
            name,
            f"task.data={data_bin('bytebpe')}",
            "common.cpu=true",
            "common.fp16=false",
            "optimization.max_update=1",
            "dataset.batch_size=1",
            "optimization.update_freq=[1]",
            "dataset.max_valid_steps=1",
            "checkpoint.no_save=true",
            f"checkpoint.save_dir={tmp_path}",
            "common.log_format=json",
            "common.log_interval=1",
            f"common.log_file={log}",
        ],
        cwd=REPO,
    )
    train = logged(log, "train")
    assert list(train) == [1] and float(train[1]["loss"]) > 0

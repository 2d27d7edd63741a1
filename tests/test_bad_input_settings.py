"""Settings that cannot train, refused before anything trains: one line naming the key and the
value, a non-zero exit within seconds, no checkpoint. ``fairseq_bio.settings.check_settings`` on the
shipped configs as hydra composes them, a few values through real ``fairseq-hydra-train`` and
``fairseq-train`` runs, the runner's grids; and the shipped configs run from any working
directory."""

import argparse
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from conftest import FINE_TUNE, REPO, SHARED_DATA

from fairseq_bio import runs
from fairseq_bio.errors import BioConfigError
from fairseq_bio.settings import check_settings

CONFIG_DIR = REPO / "hydra_configs"
TINY = [
    "model.encoder_layers=1",
    "model.encoder_embed_dim=32",
    "model.encoder_ffn_embed_dim=64",
    "model.encoder_attention_heads=2",
]  # a pretraining run that only has to start
SHIPPED = [
    "bio_roberta_tiny",
    "bio_roberta_base",
    "bio_roberta_large",
    "bio_pubmedbert",
    "bio_pubmedbert_512",
    "bio_megatron_345m",
    "bio_electra_tiny",
    "bio_electra_base",
    "distill_biolm",
    "distill_tinybiobert",
    "bio_tagging_ner",
    "bio_extractive_qa",
    "bio_sentence_prediction",
]


def composed(name: str, *overrides: str):
    """``name``'s job config as fairseq-hydra-train composes it (fairseq's schema included), with
    ``overrides``."""
    from fairseq.dataclass.initialize import hydra_init
    from hydra import compose, initialize_config_dir

    hydra_init(name)
    given = ["task.data=/data", "checkpoint.restore_file=/encoder.pt"]
    if name == "bio_sentence_prediction":
        given.append("sentence_task=re_gad")
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore"
        )  # hydra 1.1's note on schemas registered under the config's name
        with initialize_config_dir(
            config_dir=str(CONFIG_DIR), job_name="settings", version_base="1.1"
        ):
            return compose(name, overrides=[*given, *overrides])


def completed(cfg):
    """``cfg`` as fairseq-train's ``main`` has it when the plugin checks it: completed and
    resolved."""
    from fairseq.dataclass.initialize import add_defaults
    from omegaconf import OmegaConf

    OmegaConf.set_struct(cfg, False)
    add_defaults(cfg)
    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
    add_defaults(cfg)
    return cfg


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_config_passes(name):
    cfg = composed(name)
    check_settings(cfg)
    check_settings(completed(cfg))


@pytest.mark.parametrize(
    "name, override",
    [
        ("bio_roberta_tiny", "optimization.max_update=0"),  # no limit
        ("bio_roberta_tiny", "model.dropout=0"),
        ("bio_roberta_tiny", "task.mask_prob=0.99"),
        ("bio_roberta_tiny", "optimization.clip_norm=0"),
        ("bio_roberta_tiny", "lr_scheduler.warmup_updates=0"),
        ("bio_roberta_tiny", "++task.random_token_prob=0.5"),
        ("bio_tagging_ner", "optimizer.groups.default.lr_float=1e-7"),
    ],
)
def test_possible_edge_values_pass(name, override):
    check_settings(completed(composed(name, override)))


def test_batches_by_tokens_alone_pass():
    check_settings(
        completed(
            composed("bio_roberta_tiny", "dataset.batch_size=null", "dataset.max_tokens=4096")
        )
    )


IMPOSSIBLE = [
    (
        "bio_roberta_tiny",
        "dataset.batch_size=-1",
        "dataset.batch_size=-1: a batch holds at least one of its sentences",
    ),
    (
        "bio_tagging_ner",
        "dataset.batch_size=0",
        "dataset.batch_size=0: a batch holds at least one of its sentences",
    ),
    ("bio_roberta_tiny", "dataset.batch_size_valid=0", "dataset.batch_size_valid=0: "),
    (
        "bio_roberta_tiny",
        "dataset.max_tokens=0",
        "dataset.max_tokens=0: a batch holds at least one of its tokens",
    ),
    (
        "bio_roberta_tiny",
        "optimization.lr=[-1]",
        "optimization.lr=[-1.0]: a learning rate must be a positive, finite",
    ),
    ("bio_roberta_tiny", "optimization.lr=[0]", "optimization.lr=[0.0]: a learning rate"),
    ("bio_roberta_tiny", "optimization.lr=[nan]", "optimization.lr=[nan]: a learning rate"),
    ("bio_roberta_tiny", "optimization.lr=[inf]", "optimization.lr=[inf]: a learning rate"),
    (
        "bio_tagging_ner",
        "optimizer.groups.default.lr_float=-1e-5",
        "optimizer.groups.default.lr_float=-1e-05: ",
    ),
    (
        "bio_tagging_ner",
        "optimizer.groups.default.lr_float=nan",
        "optimizer.groups.default.lr_float=nan: ",
    ),
    (
        "bio_roberta_tiny",
        "optimization.max_update=-5",
        "optimization.max_update=-5: must be 0 (no limit) or a ",
    ),
    (
        "bio_tagging_ner",
        "optimization.max_epoch=-1",
        "optimization.max_epoch=-1: must be 0 (no limit)",
    ),
    (
        "bio_roberta_tiny",
        "optimization.update_freq=[0]",
        "optimization.update_freq=[0]: each entry is a number",
    ),
    (
        "bio_roberta_tiny",
        "model.max_positions=0",
        "model.max_positions=0: a model needs at least one position",
    ),
    ("bio_tagging_ner", "model.max_positions=0", "model.max_positions=0: "),
    (
        "bio_roberta_tiny",
        "task.tokens_per_sample=0",
        "task.tokens_per_sample=0: a block holds <s> and at least one",
    ),
    (
        "bio_roberta_tiny",
        "task.tokens_per_sample=256",
        "task.tokens_per_sample=256: more than the model's positions " "(model.max_positions=128)",
    ),
    (
        "bio_roberta_tiny",
        "task.mask_prob=1.5",
        "task.mask_prob=1.5: the masking rate must lie in (0, 1)",
    ),
    ("bio_roberta_tiny", "task.mask_prob=0", "task.mask_prob=0"),  # 0, then 0.0 once typed
    (
        "bio_roberta_tiny",
        'task.mask_prob_schedule="0.1,1"',
        'task.mask_prob_schedule="0.1,1": each masking rate',
    ),
    (
        "bio_roberta_tiny",
        "++task.random_token_prob=-0.1",
        "task.random_token_prob=-0.1: a share of the masked " "positions must lie in [0, 1]",
    ),
    ("bio_electra_tiny", "++task.leave_unmasked_prob=1.5", "task.leave_unmasked_prob=1.5: "),
    (
        "bio_roberta_tiny",
        "++task.leave_unmasked_prob=0.95",
        "task.random_token_prob=0.1 and " "task.leave_unmasked_prob=0.95: their sum",
    ),
    (
        "bio_roberta_tiny",
        "lr_scheduler.warmup_updates=-1",
        "lr_scheduler.warmup_updates=-1: must be 0 (no warm-up)",
    ),
    (
        "bio_tagging_ner",
        "optimizer.groups.default.lr_scheduler.warmup_updates=-3",
        "optimizer.groups.default.lr_scheduler.warmup_updates=-3: must be 0",
    ),
    (
        "bio_roberta_tiny",
        "optimization.clip_norm=-1",
        "optimization.clip_norm=-1.0: must be 0 (no clipping)",
    ),
    ("bio_roberta_tiny", "model.dropout=1", "model.dropout=1.0: a dropout must lie in [0, 1)"),
    ("bio_tagging_ner", "model.attention_dropout=-0.1", "model.attention_dropout=-0.1: a dropout"),
    ("bio_tagging_ner", "task.head_dropout=1.5", "task.head_dropout=1.5: a dropout"),
    ("bio_roberta_tiny", "optimizer.adam_eps=abc", "optimizer.adam_eps=abc: not a number"),
    ("bio_roberta_tiny", "optimizer.weight_decay=x", "optimizer.weight_decay=x: not a number"),
    (
        "bio_tagging_ner",
        "optimizer.groups.default.optimizer.adam_eps=abc",
        "optimizer.groups.default.optimizer.adam_eps=abc: not a number",
    ),
    (
        "bio_tagging_ner",
        "optimizer.groups.default.lr_float=abc",
        "optimizer.groups.default.lr_float=abc: not a ",
    ),
    (
        "bio_tagging_ner",
        "task.head_hidden_layers=two",
        "task.head_hidden_layers=two: not a whole number",
    ),
]


@pytest.mark.parametrize("name, override, message", IMPOSSIBLE)
def test_impossible_settings_are_named_in_one_line(name, override, message):
    cfg = composed(name, override)
    for stage in (cfg, None):  # as hydra composed it, and as fairseq's main completes it
        with pytest.raises(BioConfigError) as refused:
            check_settings(cfg if stage is not None else completed(cfg))
        assert str(refused.value).startswith(message) and "\n" not in str(refused.value), str(
            refused.value
        )
        if (
            "not a " in message
        ):  # omegaconf refuses the value already while fairseq completes the config
            break


def test_fairseq_trains_argparse_options_are_checked_as_they_are():
    """fairseq-train keeps a legacy architecture's options as an argparse Namespace (stock
    ``roberta_base``): its values are read untyped, and fairseq's own masked LM passes."""
    from fairseq import options
    from fairseq.dataclass.initialize import add_defaults
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    def cfg(*extra):
        argv = [
            "/data",
            "--task",
            "masked_lm",
            "--arch",
            "roberta_base",
            "--criterion",
            "masked_lm",
            "--optimizer",
            "adam",
            "--lr",
            "0.0005",
            "--max-tokens",
            "500",
            "--tokens-per-sample",
            "500",
            *extra,
        ]
        parsed = convert_namespace_to_omegaconf(
            options.parse_args_and_arch(options.get_training_parser(), argv)
        )
        add_defaults(parsed)
        return parsed

    check_settings(cfg())
    with pytest.raises(
        BioConfigError, match=r"^model\.dropout=1\.0: a dropout must lie in \[0, 1\)$"
    ):
        check_settings(cfg("--dropout", "1.0"))
    with pytest.raises(BioConfigError, match=r"^optimization\.lr=\[-1\.0\]: "):
        check_settings(cfg("--lr", "-1"))


# ------------------------------------------------------------------------------------ through the entry points


def _refused(result, message: str, save_dir: Path, started: float) -> None:
    assert result.returncode == 1, result.stderr[-3000:]
    for noise in ("Traceback", "Error executing job", "HYDRA_FULL_ERROR"):
        assert noise not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == message
    assert not list(save_dir.rglob("checkpoint*.pt"))
    assert time.monotonic() - started < 120  # a start-up, not training


def _hydra(cwd: Path, config: str, *overrides, save_dir: Path, **kwargs):
    started = time.monotonic()
    result = subprocess.run(
        runs.hydra_train(config, *overrides, save_dir=save_dir, **kwargs),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    return result, started


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "dataset.batch_size=-1",
            "dataset.batch_size=-1: a batch holds at least one of its sentences (leave it unset "
            "for none)",
        ),
        (
            "optimization.lr=[-1]",
            "optimization.lr=[-1.0]: a learning rate must be a positive, finite number",
        ),
        (
            "optimizer.adam_eps=abc",
            "optimizer.adam_eps=abc: not a number",
        ),  # omegaconf's, named by the callback
    ],
)
def test_impossible_settings_stop_fairseq_hydra_train_before_it_builds_anything(
    data_bin, tmp_path, override, message
):
    result, started = _hydra(
        tmp_path,
        "bio_roberta_tiny",
        f"task.data={data_bin('bytebpe')}",
        *TINY,
        "optimization.max_update=2",
        override,
        save_dir=tmp_path / "run",
    )
    _refused(result, message, tmp_path / "run", started)


def test_fine_tuning_refuses_them_too(tiny_encoder, ncbi_slice, tmp_path):
    result, started = _hydra(
        tmp_path,
        "bio_tagging_ner",
        f"task.data={ncbi_slice}",
        f"checkpoint.restore_file={tiny_encoder}",
        *FINE_TUNE,
        "dataset.batch_size=0",
        save_dir=tmp_path / "run",
    )
    _refused(
        result,
        "dataset.batch_size=0: a batch holds at least one of its sentences (leave it unset for none)",
        tmp_path / "run",
        started,
    )


def test_fairseq_train_refuses_them_too(data_bin, tmp_path):
    """The argparse entry point: the same check, the plugin's excepthook prints it."""
    started = time.monotonic()
    command = runs.train(
        data_bin("bytebpe"),
        "--task",
        "bio_masked_lm",
        "--arch",
        "bio_roberta_tiny",
        "--criterion",
        "masked_lm",
        "--optimizer",
        "adam",
        "--lr",
        "-1",
        "--batch-size",
        "4",
        "--max-update",
        "2",
        "--cpu",
        "--save-dir",
        tmp_path / "run",
        "--tokens-per-sample",
        "128",
        "--encoder-layers",
        "1",
        "--encoder-embed-dim",
        "32",
        "--encoder-ffn-embed-dim",
        "64",
        "--encoder-attention-heads",
        "2",
    )
    result = subprocess.run(
        command,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    _refused(
        result,
        "optimization.lr=[-1.0]: a learning rate must be a positive, finite number",
        tmp_path / "run",
        started,
    )


# ------------------------------------------------------------------------------------------- the runner's grids


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--lr-grid", "nan"],
            "fairseq-bio-blurb: --lr-grid: 'nan': learning rates must be positive, finite numbers",
        ),
        (
            ["--lr-grid", "1e-5,inf"],
            "fairseq-bio-blurb: --lr-grid: '1e-5,inf': learning rates must be positive, finite",
        ),
        (
            ["--lr-grid=-1e-5"],
            "fairseq-bio-blurb: --lr-grid: '-1e-5': learning rates must be positive",
        ),
        (["--lr-grid", "0"], "fairseq-bio-blurb: --lr-grid: '0': learning rates must be positive"),
        (
            ["--batch-sizes", "16,0"],
            "fairseq-bio-blurb: --batch-sizes: '16,0' is not a comma-separated list of positive",
        ),
        (
            ["--batch-sizes", "-8"],
            "fairseq-bio-blurb: --batch-sizes: '-8' is not a comma-separated list of positive",
        ),
        (["--seeds", "0"], "fairseq-bio-blurb: --seeds: '0' is not a positive integer"),
        (["--seeds", "nan"], "fairseq-bio-blurb: --seeds: 'nan' is not a positive integer"),
    ],
)
def test_blurb_grids_are_refused_at_parse_time_in_one_line(capsys, tmp_path, argv, message):
    from fairseq_bio.cli.blurb import cli_main

    with pytest.raises(SystemExit) as exit_info:
        cli_main(["--checkpoint", str(tmp_path / "encoder.pt"), "--data", str(tmp_path), *argv])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith(message) and err.count("\n") == 1, err


def test_blurb_refuses_an_impossible_override_before_any_run(capsys, tmp_path):
    from fairseq_bio.cli.blurb import cli_main

    encoder = tmp_path / "encoder.pt"
    encoder.write_bytes(b"")  # never read: the plan is refused first
    with pytest.raises(SystemExit) as exit_info:
        cli_main(
            [
                "--checkpoint",
                str(encoder),
                "--data",
                str(SHARED_DATA),
                "--out",
                str(tmp_path / "out"),
                "--tasks",
                "ncbi-disease",
                "--dry-run",
                "--",
                "optimizer.groups.default.lr_float=nan",
            ]
        )
    assert str(exit_info.value.code) == (
        "fairseq-bio-blurb: ncbi-disease: optimizer.groups.default.lr_float=nan: a "
        "learning rate must be a positive, finite number"
    )
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------------- configs from any directory


def test_the_plugins_name_as_user_dir_found_nowhere_is_the_imported_plugin(tmp_path, monkeypatch):
    import fairseq_bio  # noqa: F401  (the configs' hydra callback imports it before fairseq's import_user_module)
    from fairseq import utils

    monkeypatch.chdir(tmp_path)
    assert utils.import_user_module(argparse.Namespace(user_dir="fairseq_bio")) is None
    with pytest.raises(
        FileNotFoundError
    ):  # any other name that is no directory stays fairseq's error
        utils.import_user_module(argparse.Namespace(user_dir="fairseq_bio_missing"))


def test_shipped_configs_train_from_another_directory(data_bin, tmp_path):
    """The README's command with an absolute --config-dir, run where the data is, the configs' own
    user_dir."""
    work = tmp_path / "elsewhere"
    work.mkdir()
    result, _ = _hydra(
        work,
        "bio_roberta_tiny",
        f"task.data={data_bin('bytebpe')}",
        *TINY,
        "optimization.max_update=3",
        "dataset.disable_validation=true",
        save_dir=Path("run"),
        user_dir=None,
        config_dir=CONFIG_DIR,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (work / "run" / "checkpoint_last.pt").is_file()


def test_processes_started_per_gpu_find_the_plugin_from_another_directory(tmp_path):
    """fairseq starts one fresh process per GPU of a machine, which imports ``common.user_dir``
    before anything imports the plugin. Composed in another directory, the configs' bare
    ``fairseq_bio`` is the plugin's directory (the plugin's hydra plugin), which such a process
    imports: its tasks are registered."""
    composed = runs.capture(
        [
            runs.executable(runs.HYDRA_TRAIN),
            "--config-dir",
            CONFIG_DIR,
            "--config-name",
            "bio_roberta_tiny",
            "task.data=data-bin",
            "--cfg",
            "job",
        ],
        cwd=tmp_path,
        timeout=120,
    )
    assert composed.returncode == 0, composed.stderr[-3000:]
    (user_dir,) = [
        line.split(":", 1)[1].strip()
        for line in composed.stdout.splitlines()
        if line.strip().startswith("user_dir:")
    ]
    assert Path(user_dir) == REPO / "fairseq_bio"
    child = (
        "import argparse, sys\n"
        "from fairseq import utils\n"
        "from fairseq.tasks import TASK_REGISTRY\n"
        "utils.import_user_module(argparse.Namespace(user_dir=sys.argv[1]))\n"
        "print('bio_masked_lm' in TASK_REGISTRY)\n"
    )
    found = subprocess.run(
        [sys.executable, "-c", child, user_dir], cwd=tmp_path, capture_output=True, text=True
    )
    assert found.stdout.strip() == "True", found.stderr[-3000:]
    bare = subprocess.run(
        [sys.executable, "-c", child, "fairseq_bio"], cwd=tmp_path, capture_output=True, text=True
    )
    assert "FileNotFoundError" in bare.stderr  # what such a process met before

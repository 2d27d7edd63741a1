"""Stock fairseq workflows run unchanged with the plugin loaded (issue 11; the CI part of
``make peer-test``): fairseq's own eos-mode token-block and legacy masked-LM tests, and a stock
``masked_lm`` + ``roberta_base`` epoch with ``--sample-break-mode eos``, fail without fairseq_bio
and pass with it; the numpy-1 names ``patches.fairseq_repairs`` gives fairseq are exactly the ones
the installed fairseq uses, and numpy itself is untouched."""

import importlib
import itertools
import math
import os
import re
import shutil
import subprocess
import sys

import numpy
import pytest
import torch
from conftest import REPO, logged, run_cli

from fairseq_bio import checkpoints, runs
from fairseq_bio.patches import fairseq_repairs

PEER = REPO.parent / "shared" / "peer" / "fairseq_tests"
EOS_TEST = "tests/test_token_block_dataset.py::TestTokenBlockDataset::test_eos_break_mode"
LEGACY_TEST = "tests/test_binaries.py::TestMaskedLanguageModel::test_legacy_masked_lm"
TINY_ROBERTA = [
    "--encoder-layers",
    "2",
    "--encoder-embed-dim",
    "32",
    "--encoder-ffn-embed-dim",
    "64",
    "--encoder-attention-heads",
    "4",
    "--tokens-per-sample",
    "64",
    "--max-positions",
    "64",
    "--optimizer",
    "adam",
    "--lr",
    "1e-3",
    "--cpu",
    "--no-epoch-checkpoints",
]


def fairseq_numpy1_uses():
    """{module: names} of the ``np.<name>`` in the installed fairseq (examples/ aside) that this
    numpy lacks."""
    import fairseq

    package = os.path.dirname(fairseq.__file__)
    uses = {}
    for directory, subdirs, files in os.walk(package):
        subdirs[:] = [d for d in subdirs if not (directory == package and d == "examples")]
        for file in sorted(f for f in files if f.endswith(".py")):
            source = open(os.path.join(directory, file), encoding="utf-8").read()
            names = {n for n in re.findall(r"\bnp\.(\w+)", source) if not hasattr(numpy, n)}
            if names:
                assert re.search(r"^import numpy as np$", source, re.M), file  # np is numpy there
                module = os.path.relpath(
                    os.path.join(directory, file[:-3]), os.path.dirname(package)
                )
                uses[module.replace(os.sep, ".")] = tuple(sorted(names))
    return uses


def test_numpy1_names_are_exactly_those_fairseq_uses():
    assert fairseq_numpy1_uses() == fairseq_repairs.NUMPY1_NAMES


def test_fairseq_modules_see_numpy1_names_and_numpy_is_unchanged():
    import fairseq_bio  # noqa: F401

    for module_name, names in fairseq_repairs.NUMPY1_NAMES.items():
        view = importlib.import_module(module_name).np
        assert {n for n in vars(view) if not n.startswith("__")} == {
            *names,
            "fairseq_bio_numpy1_names",
        }
        assert (
            view.zeros is numpy.zeros
            and view.random is numpy.random
            and view.__version__ == numpy.__version__
        )
    data_utils = importlib.import_module("fairseq.data.data_utils")
    token_block = importlib.import_module("fairseq.data.token_block_dataset")
    assert data_utils.np.int is int and token_block.np.compat.long is int
    assert [n for n in vars(token_block.np.compat) if not n.startswith("__")] == ["long"]
    assert not hasattr(token_block.np, "int")  # each module gets only what it uses
    for name in ("compat", "int", "float"):
        assert name not in vars(numpy) and not hasattr(numpy, name)


def test_legacy_masked_lm_dictionaries_load_as_in_fairseq_0_12_2(data_bin):
    from fairseq.data.legacy.masked_lm_dictionary import BertDictionary, MaskedLMDictionary

    dict_txt = data_bin("bytebpe") / "dict.txt"
    entries = [line.split()[0] for line in open(dict_txt, encoding="utf-8")]
    mlm = MaskedLMDictionary.load(str(dict_txt))
    assert mlm.symbols == ["<s>", "<pad>", "</s>", "<unk>", "<mask>", *entries] and mlm.mask() == 4
    bert = BertDictionary.load(str(dict_txt))
    assert (
        bert.symbols[:7] == ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "<cls>", "<sep>"]
        and bert.nspecial == 7
    )
    with pytest.raises(
        ValueError, match=r"dict.txt: BertDictionary always adds its special symbols"
    ):
        BertDictionary.load(str(dict_txt), add_special_symbols=False)


def peer_pytest(*tests, plugin):
    """Run fairseq's own tests in ../shared/peer/fairseq_tests, with fairseq_bio loaded first or
    not."""
    if not PEER.is_dir():
        raise AssertionError(
            f"{PEER}: fairseq's peer tests are missing (see its README.md in ../shared/peer)"
        )
    env = {
        **os.environ,
        "PYTHONPATH": f"{PEER}{os.pathsep}{REPO / 'tests' / 'peer'}",
        "OMP_NUM_THREADS": "2",
        "COLUMNS": "400",
    }  # fmt: skip  (wide enough that -rf does not cut the failure messages)
    plugin_args = ["-p", "fairseq_bio_loaded"] if plugin else []
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            *plugin_args,
            "-rf",
            *tests,
        ],
        cwd=PEER,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_fairseq_own_tests_fail_without_the_plugin_and_pass_with_it():
    without = peer_pytest(EOS_TEST, LEGACY_TEST, plugin=False)
    failed = dict(re.findall(r"^FAILED (\S+) - (.*)$", without.stdout, re.M))
    assert failed.keys() == {EOS_TEST, LEGACY_TEST}, without.stdout[-3000:]
    assert failed[EOS_TEST].startswith("AttributeError: module 'numpy' has no attribute 'compat'")
    assert "unexpected keyword argument 'add_special_symbols'" in failed[LEGACY_TEST]
    loaded = peer_pytest(EOS_TEST, LEGACY_TEST, plugin=True)
    assert loaded.returncode == 0 and re.match(
        r"2 passed\b", loaded.stdout.splitlines()[-1]
    ), loaded.stdout[-3000:]


def test_stock_masked_lm_roberta_epoch_in_eos_mode(data_bin, tmp_path):
    """A stock fairseq-train run (masked_lm + roberta_base, one sentence per sample) with --user-dir
    fairseq_bio trains a whole epoch; without the plugin it cannot even load its data under
    numpy 2."""
    # The slice's 204 real valid sentences as both splits: an epoch takes seconds (its 3,840-line
    # train split takes minutes on 2 cores; --train-subset valid would share one iterator with
    # validation, exhausted before training).
    data, small = data_bin("bytebpe"), tmp_path / "data-bin"
    small.mkdir()
    shutil.copy(data / "dict.txt", small)
    for split, ext in itertools.product(("train", "valid"), ("bin", "idx")):
        shutil.copy(data / f"valid.{ext}", small / f"{split}.{ext}")
    recipe = [
        "--task",
        "masked_lm",
        "--criterion",
        "masked_lm",
        "--arch",
        "roberta_base",
        "--sample-break-mode",
        "eos",
        "--batch-size",
        "32",
        "--skip-invalid-size-inputs-valid-test",
        *TINY_ROBERTA,
    ]
    stock = runs.train(
        small, *recipe, "--save-dir", tmp_path / "without", "--max-update", "1", plugin=False
    )
    crashed = run_cli(stock, cwd=tmp_path, check=False)
    assert crashed.returncode != 0
    last_line = crashed.stderr.strip().splitlines()[-1]
    assert last_line.startswith(
        "AttributeError: module 'numpy' has no attribute 'compat'"
    ), last_line

    log = tmp_path / "train.log"
    run_cli(
        runs.train(
            small,
            *recipe,
            "--save-dir",
            tmp_path / "ckpt",
            "--max-epoch",
            "1",
            "--log-format",
            "json",
            "--log-interval",
            "1",
            "--log-file",
            log,
        ),
        cwd=tmp_path,
    )
    [(updates, _)] = logged(log, "train").items()  # one end-of-epoch summary
    [(valid_updates, valid)] = logged(log, "valid").items()
    assert updates == valid_updates == max(logged(log, "train_inner")) >= 5
    assert math.isfinite(float(valid["loss"]))
    state = checkpoints.load_checkpoint(tmp_path / "ckpt" / "checkpoint_last.pt")
    assert (
        state["extra_state"]["train_iterator"]["epoch"] == 2
    )  # epoch 1 complete, epoch 2 not begun
    assert state["extra_state"]["train_iterator"]["iterations_in_epoch"] == 0
    assert state["optimizer_history"][-1]["num_updates"] == updates
    assert all(torch.isfinite(t).all() for t in state["model"].values() if t.is_floating_point())

"""Importing the plugin registers its components; what else it changes is listed in
test_import_side_effects.py."""

import json
import subprocess
import sys
import textwrap

SNAPSHOT = textwrap.dedent(
    """
    import json, logging, os, sys
    import torch
    import fairseq.criterions, fairseq.models, fairseq.optim, fairseq.tasks
    from fairseq.criterions import CRITERION_REGISTRY
    from fairseq.optim import OPTIMIZER_REGISTRY
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY
    from fairseq.tasks import TASK_REGISTRY

    def state():
        return {
            "tasks": sorted(TASK_REGISTRY), "models": sorted(MODEL_REGISTRY), "archs": sorted(ARCH_MODEL_REGISTRY),
            "criterions": sorted(CRITERION_REGISTRY), "optimizers": sorted(OPTIMIZER_REGISTRY),
            "files": sorted(os.listdir(".")), "argv": sys.argv,
            "handlers": [type(h).__name__ for h in logging.getLogger().handlers],
            "rng": torch.random.get_rng_state().sum().item(), "dtype": str(torch.get_default_dtype()),
            "threads": torch.get_num_threads(),
        }

    before = state()
    import fairseq_bio
    after = state()
    print(json.dumps({"before": before, "after": after}))
    """
)


def test_import_only_registers_bio_names(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", SNAPSHOT], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout
    snap = json.loads(out.strip().splitlines()[-1])
    before, after = snap["before"], snap["after"]
    for registry in ("tasks", "models", "archs", "criterions", "optimizers"):
        added = set(after[registry]) - set(before[registry])
        assert set(before[registry]) <= set(after[registry])
        assert all(name.startswith("bio_") for name in added), added
    assert set(after["tasks"]) - set(before["tasks"]) == {
        "bio_masked_lm",
        "bio_tagging",
        "bio_electra",
        "bio_sentence_prediction",
        "bio_extractive_qa",
    }
    assert set(after["criterions"]) - set(before["criterions"]) == {
        "bio_distillation",
        "bio_tagging",
        "bio_electra",
        "bio_sentence_prediction",
        "bio_extractive_qa",
        "bio_masked_lm",
    }
    assert set(after["optimizers"]) - set(before["optimizers"]) == {"bio_adamw"}
    assert set(after["archs"]) - set(before["archs"]) == {
        "bio_roberta",
        "bio_roberta_tiny",
        "bio_roberta_base",
        "bio_roberta_large",
        "bio_megatron_345m",
        "bio_megatron_800m",
        "bio_megatron_1_2b",
        "bio_electra",
        "bio_electra_tiny",
        "bio_electra_small",
        "bio_electra_base",
        "bio_electra_large",
    }
    for key in ("files", "argv", "handlers", "rng", "dtype", "threads"):
        assert before[key] == after[key], key


def test_user_dir_import_registers_the_same_components(tmp_path):
    """fairseq's --user-dir path (import_user_module) finds the tasks and models under the
    plugin."""
    import fairseq_bio

    code = textwrap.dedent(
        f"""
        import argparse
        from fairseq import utils
        from fairseq.tasks import TASK_REGISTRY
        from fairseq.models import ARCH_MODEL_REGISTRY
        utils.import_user_module(argparse.Namespace(user_dir={fairseq_bio.__path__[0]!r}))
        print("bio_masked_lm" in TASK_REGISTRY, "bio_roberta_large" in ARCH_MODEL_REGISTRY)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert out.stdout.split()[-2:] == ["True", "True"]


def test_hf_trainer_imports_in_this_environment():
    """torchaudio (a CUDA build on PyPI) must stay out: transformers' Trainer imports it when
    present."""
    import importlib.util

    assert importlib.util.find_spec("torchaudio") is None
    subprocess.run(
        [sys.executable, "-c", "import transformers.trainer"], check=True, capture_output=True
    )

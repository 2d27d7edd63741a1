"""The sentence-level presets (hydra_configs/sentence_task/) compose onto bio_sentence_prediction
after the PubMedBERT recipe: each selects on its dataset's BLURB metric, and its update budget is
its epochs of the real train set at its batch size with 10 % warm-up. (Every preset also trains end
to end in test_sentence_e2e.py.)"""

import dataclasses
import json
import math

import pytest
from conftest import REPO, SHARED_DATA
from omegaconf import OmegaConf

from fairseq_bio.tasks.bio_sentence_prediction import BioSentencePredictionConfig

# fairseq-hydra-train registers fairseq's schema under the primary config's name, which hydra 1.1
# warns about
pytestmark = pytest.mark.filterwarnings(
    "ignore:(?s).*validated against ConfigStore schema:UserWarning"
)


def compose(*overrides):
    """The job config fairseq-hydra-train composes (fairseq's schema registered under the config's
    name)."""
    from fairseq.dataclass.initialize import hydra_init
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    hydra_init("bio_sentence_prediction")
    with initialize_config_dir(
        config_dir=str(REPO / "hydra_configs"), job_name="test", version_base="1.1"
    ):
        cfg = hydra_compose(
            "bio_sentence_prediction",
            overrides=["task.data=/data", "checkpoint.restore_file=/c.pt", *overrides],
        )
    return OmegaConf.to_container(cfg)


def _lines(path):
    return sum(1 for line in open(path, encoding="utf-8") if line.strip())


def _train_size(preset):
    """Train examples of each preset's real data (MedNLI, licence-gated: its paper's 11,232
    pairs)."""
    if preset == "re_gad":
        return _lines(SHARED_DATA / "re" / "GAD" / "train.tsv") - 535
    if preset == "re_ddi":  # minus the DDI-None row the preset skips
        return _lines(SHARED_DATA / "re" / "DDI" / "train.json") - 1
    if preset == "hoc":
        return _lines(SHARED_DATA / "hoc" / "train.json")
    if preset == "biosses":
        return _lines(SHARED_DATA / "biosses" / "train.tsv") - 1  # the header
    if preset == "pubmedqa":
        return len(json.loads((SHARED_DATA / "pubmedqa" / "blurb_split.json").read_text())["train"])
    return 11232


PRESETS = {  # preset: (kind, checkpoint metric, epochs, batch size, lr)
    "re_gad": ("classification", "f1", 10, 32, 3e-5),
    "re_ddi": ("classification", "f1", 5, 32, 2e-5),
    "hoc": ("multilabel", "f1", 40, 32, 4e-5),
    "biosses": ("regression", "pearson", 30, 16, 1e-5),
    "pubmedqa": ("classification", "accuracy", 30, 16, 2e-5),
    "mednli": ("classification", "accuracy", 10, 16, 3e-5),
}


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_preset_composes_to_its_recipe(preset):
    kind, metric, epochs, batch, lr = PRESETS[preset]
    cfg = compose(f"sentence_task={preset}")
    task, opt = cfg["task"], cfg["optimization"]
    assert (
        task["_name"] == cfg["criterion"]["_name"] == "bio_sentence_prediction"
        and task["kind"] == kind
    )
    assert (
        cfg["checkpoint"]["best_checkpoint_metric"] == metric
        and cfg["checkpoint"]["maximize_best_checkpoint_metric"]
    )
    assert (
        cfg["checkpoint"]["reset_optimizer"]
        and cfg["checkpoint"]["save_dir"] == f"checkpoints/bio_{preset}"
    )
    group = cfg["optimizer"]["groups"]["default"]
    assert cfg["optimizer"]["_name"] == "composite" and group["optimizer"]["_name"] == "adam"
    assert group["lr_float"] == opt["lr"][0] == lr and cfg["model"]["dropout"] == 0.1
    assert cfg["dataset"]["batch_size"] == batch and opt["max_epoch"] == epochs
    assert opt["max_update"] == epochs * math.ceil(_train_size(preset) / batch)
    assert group["lr_scheduler"]["warmup_updates"] == round(opt["max_update"] / 10)
    assert (
        group["lr_scheduler"]["_name"] == "polynomial_decay"
        and group["lr_scheduler"]["end_learning_rate"] == 0.0
    )


def test_base_lists_every_task_option_and_wants_a_preset():
    """hydra composes before the plugin is imported: every task option is listed to be overridable,
    and a run without sentence_task= is refused."""
    from hydra.errors import ConfigCompositionException, MissingConfigException
    from omegaconf.errors import MissingMandatoryValue

    cfg = compose("sentence_task=re_gad")
    owned = {
        "restore_file",
        "finetune_from_model",
        "save_dir",
        "max_tokens",
        "seed",
    }  # II(...) of other groups
    fields = {f.name for f in dataclasses.fields(BioSentencePredictionConfig)} - owned
    assert set(cfg["task"]) == fields
    with pytest.raises(
        (ConfigCompositionException, MissingConfigException, MissingMandatoryValue),
        match="sentence_task",
    ):
        compose()

"""Composing the shipped hydra configs in-process, as fairseq-hydra-train composes them (tests that read configs)."""

import warnings
from contextlib import contextmanager

from conftest import REPO
from omegaconf import OmegaConf, open_dict

CONFIG_DIR = REPO / "hydra_configs"


@contextmanager
def composer():
    """``compose(name, overrides) -> cfg`` with hydra's own node, as fairseq-hydra-train composes (schema by name)."""
    from fairseq.dataclass.initialize import hydra_init
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    cache, schemas = {}, set()

    def composed(name, overrides):
        key = (name, tuple(overrides))
        if key not in cache:  # a compose costs ~0.3 s here (hydra deep-copies fairseq's schema)
            if name not in schemas:
                hydra_init(name)
                schemas.add(name)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "(?s).*is validated against ConfigStore schema")
                cache[key] = hydra_compose(name, overrides=list(overrides), return_hydra_config=True)
        return cache[key].copy()

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.1"):
        yield composed


def job_config(cfg):
    """The training config as the job resolves it (fairseq-hydra-train's _hydra_main), hydra's node left out."""
    from fairseq.dataclass.initialize import add_defaults

    import fairseq_bio  # noqa: F401  (the plugin's dataclasses, for add_defaults)

    cfg = cfg.copy()  # typed by fairseq's schema, as the job gets it: values from the environment are converted
    with open_dict(cfg):
        del cfg["hydra"]
    add_defaults(cfg)
    return OmegaConf.create(OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True, enum_to_str=True))

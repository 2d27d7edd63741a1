"""The shipped hydra configs as fairseq-hydra-train composes them: in-process (``composer``,
``composed``), as its ``--cfg job`` prints them (``cli_composed``), and a check that a primary
config and its recipe set different keys."""

import warnings
from contextlib import contextmanager

import yaml
from conftest import REPO, run_cli
from omegaconf import OmegaConf, open_dict

CONFIG_DIR = REPO / "hydra_configs"


@contextmanager
def composer():
    """``compose(name, overrides) -> cfg`` with hydra's own node, as fairseq-hydra-train composes
    (schema by name)."""
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
                cache[key] = hydra_compose(
                    name, overrides=list(overrides), return_hydra_config=True
                )
        return cache[key].copy()

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.1"):
        yield composed


def job_config(cfg):
    """The training config as the job resolves it (fairseq-hydra-train's _hydra_main), hydra's node
    left out."""
    from fairseq.dataclass.initialize import add_defaults

    import fairseq_bio  # noqa: F401  (the plugin's dataclasses, for add_defaults)

    cfg = (
        cfg.copy()
    )  # typed by fairseq's schema, as the job gets it: values from the environment are converted
    with open_dict(cfg):
        del cfg["hydra"]
    add_defaults(cfg)
    return OmegaConf.create(
        OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True, enum_to_str=True)
    )


def composed(name, *overrides):
    """fairseq-hydra-train's config (schema matched by name, then add_defaults and resolution)."""
    from fairseq.dataclass.initialize import add_defaults, hydra_init
    from hydra import compose, initialize_config_dir

    import fairseq_bio  # noqa: F401  (the plugin's dataclasses, for add_defaults)

    hydra_init(name)
    with initialize_config_dir(
        config_dir=str(CONFIG_DIR), version_base="1.1"
    ), warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", "(?s).*is validated against ConfigStore schema"
        )  # fairseq's by-name schema
        cfg = compose(name, overrides=list(overrides))
    add_defaults(cfg)
    return OmegaConf.create(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))


def cli_composed(name, *overrides):
    """The job config ``fairseq-hydra-train --cfg job`` prints from the repository root, unresolved,
    as a dict."""
    out = run_cli(
        [
            "fairseq-hydra-train",
            "--config-dir",
            "hydra_configs",
            "--config-name",
            name,
            "--cfg",
            "job",
            *overrides,
        ],
        cwd=REPO,
    ).stdout
    return yaml.safe_load(out)


def _keys(node, prefix=""):
    for key, value in node.items():
        if key == "defaults":
            continue
        if isinstance(value, dict):
            yield from _keys(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def no_shared_keys(name):
    """fairseq-hydra-train merges its schema with the primary config, so the recipe comes after it:
    a key both set would silently take the recipe's value."""
    primary = yaml.safe_load((CONFIG_DIR / f"{name}.yaml").read_text())
    recipe_name = next(
        d["recipe"] for d in primary["defaults"] if isinstance(d, dict) and "recipe" in d
    )
    recipe_keys, todo = set(), [recipe_name]
    while todo:
        recipe = yaml.safe_load((CONFIG_DIR / "recipe" / f"{todo.pop()}.yaml").read_text())
        recipe_keys |= set(_keys(recipe))
        todo += [d for d in recipe.get("defaults", []) if isinstance(d, str) and d != "_self_"]
    assert set(_keys(primary)) & recipe_keys == set()

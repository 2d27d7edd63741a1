"""What fairseq-hydra-train's config composition gets from the plugin, before fairseq imports it.

An override hydra cannot compose is said in one line naming it: a value of the wrong type, a key the
config does not have (with the nearest keys it does have), an override hydra cannot parse, a config
group option that does not exist (with the options there are), where hydra prints a block of five
to thirty lines ending in "Set the environment variable HYDRA_FULL_ERROR=1"
(``FAIRSEQ_BIO_TRACEBACK=1`` or ``HYDRA_FULL_ERROR=1`` keep hydra's report). And the shipped
configs' bare ``common.user_dir: fairseq_bio``, where it names no directory from the working
directory, becomes the plugin's own directory, so that the processes fairseq starts for the GPUs
of one machine, which read it before anything imports the plugin, find the plugin too.

``install()`` is called by the ``hydra_plugins.fairseq_bio`` module, which hydra imports with its
plugins when it starts, in fairseq-hydra-train only; it also gives each job a sweep composes to the
hooks that module names (a recipe's paper table, ``runner.paper_callback``).
"""

import difflib
import functools
import os
import sys
from typing import Callable, Sequence

_MARK = "fairseq_bio_overrides"
TRACEBACK_VARIABLES = ("FAIRSEQ_BIO_TRACEBACK", "HYDRA_FULL_ERROR")
PLUGIN = "fairseq_bio"  # the shipped configs' common.user_dir
PLUGIN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this package


def _first_line(text) -> str:
    return next((line.strip() for line in str(text).splitlines() if line.strip()), "")


def _nearest_keys(cause) -> str:
    """ ", did you mean a.b?" for a key the config does not have, from the keys beside it."""
    parent, key, full_key = (getattr(cause, k, None) for k in ("parent_node", "key", "full_key"))
    if parent is None or not key or not hasattr(parent, "keys"):
        return ""
    close = difflib.get_close_matches(str(key), [str(k) for k in parent.keys()], n=3)
    prefix = str(full_key)[: -len(str(key))] if full_key else ""
    return f"; did you mean {' or '.join(prefix + k for k in close)}?" if close else ""


def one_line(error) -> str:
    """The composition error ``error`` (hydra's, with omegaconf's cause) as one line that starts
    with the override it is about."""
    from hydra.errors import MissingConfigException, OverrideParseException

    cause = error.__cause__
    if isinstance(error, OverrideParseException):
        return f"{error.override}: hydra cannot parse it ({_first_line(error)})"
    if isinstance(error, MissingConfigException) and error.missing_cfg_file:
        group, _, name = str(error.missing_cfg_file).rpartition("/")
        options = ", ".join(error.options or ()) or "none"
        return f"{group or 'config'}={name}: no such config (the options: {options})"
    text = str(error)
    if text.startswith("Error merging override "):
        override = _first_line(text)[len("Error merging override ") :]
        return f"{override}: {_first_line(cause)}" if cause is not None else override
    if text.startswith("Could not override "):
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        add = next((line.split(" use ", 1)[1] for line in lines if " use +" in line), None)
        override = add[1:] if add else lines[0][len("Could not override ") :].strip("'.")
        where = "default list" if "defaults list" in text else "config"
        hint = f" ({add} adds it)" if add else ""
        return f"{override}: no such key in the {where}{_nearest_keys(cause)}{hint}"
    return "; ".join(filter(None, [_first_line(text), _first_line(cause) if cause else ""]))


def plugin_user_dir(cfg) -> None:
    """``common.user_dir`` of ``cfg`` as the plugin's directory where it is the configs' bare
    ``fairseq_bio`` and no such directory is here (see the module docstring)."""
    from omegaconf import open_dict, read_write

    common = cfg.get("common") if hasattr(cfg, "get") else None
    user_dir = common.get("user_dir") if hasattr(common, "get") else None
    if user_dir and os.path.normpath(str(user_dir)) == PLUGIN and not os.path.exists(user_dir):
        with read_write(common), open_dict(common):
            common.user_dir = PLUGIN_DIR


def _composing(load_configuration):
    @functools.wraps(load_configuration)
    def load(*args, **kwargs):
        from hydra.errors import ConfigCompositionException, MissingConfigException
        from hydra.errors import OverrideParseException

        try:
            cfg = load_configuration(*args, **kwargs)
        except (ConfigCompositionException, MissingConfigException, OverrideParseException) as e:
            if any(os.environ.get(name) == "1" for name in TRACEBACK_VARIABLES):
                raise
            print(one_line(e), file=sys.stderr)
            raise SystemExit(1) from None
        plugin_user_dir(cfg)
        return cfg

    setattr(load, _MARK, True)
    return load


def _composing_sweep_jobs(load_sweep_config, per_job):
    @functools.wraps(load_sweep_config)
    def load(*args, **kwargs):
        cfg = load_sweep_config(*args, **kwargs)
        for hook in per_job:
            hook(cfg)
        return cfg

    setattr(load, _MARK, True)
    return load


def install(per_job: Sequence[Callable] = ()) -> None:
    """Compose as the module docstring says; ``per_job`` are called with the config of each job a
    sweep (``-m``) composes, which the run config's callbacks do not see. Idempotent."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    if not getattr(ConfigLoaderImpl.load_configuration, _MARK, False):
        ConfigLoaderImpl.load_configuration = _composing(ConfigLoaderImpl.load_configuration)
    if per_job and not getattr(ConfigLoaderImpl.load_sweep_config, _MARK, False):
        ConfigLoaderImpl.load_sweep_config = _composing_sweep_jobs(
            ConfigLoaderImpl.load_sweep_config, list(per_job)
        )

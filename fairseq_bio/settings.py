"""Settings that cannot train, refused before fairseq builds anything: ``check_settings(cfg)``.

fairseq takes a negative learning rate (gradient ascent), a batch size of 0 or -1 (ignored when
fine-tuning; in pretraining the whole split in one batch, until the machine runs out of memory),
``max_positions=0``, a masking rate of 1.5 or a dropout of 1, and fails much later with a traceback,
or not at all. ``check_settings`` reads the whole config and raises the first impossible value as a
one-line ``BioConfigError`` naming the key and the value. It also reads each registry section
(``optimizer``, ``task``, ...) against its dataclass as fairseq will, so that a value that is not a
number (``optimizer.adam_eps=abc``) is named in one line rather than in omegaconf's traceback; the
composite optimizer's groups, which fairseq reads only when it builds the optimizer, are read here
too.

``patches.settings_check`` runs it in fairseq-train's ``main`` (which fairseq-hydra-train runs too),
before fairseq makes the checkpoint directory, the task, datasets or model.
"""

import argparse
import math
from typing import Any, Iterator, Tuple

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .errors import BioConfigError, BioError, OneLineErrors


def _get(cfg, key: str):
    """``cfg``'s value at the dotted ``key`` (None when absent or unresolvable), containers as
    Python ones."""
    try:
        value = OmegaConf.select(cfg, key, throw_on_resolution_failure=False)
        if isinstance(value, (DictConfig, ListConfig)):
            return OmegaConf.to_container(value, resolve=True)
    except OmegaConfBaseException:
        return None
    if isinstance(
        value, argparse.Namespace
    ):  # a legacy model's options, as fairseq-train keeps them: never typed
        return {k: v for k, v in vars(value).items() if _is_plain(v)}
    return value


def _is_plain(value) -> bool:
    return (
        value is None
        or isinstance(value, (bool, int, float, str))
        or (isinstance(value, list) and all(_is_plain(v) for v in value))
    )


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _show(value) -> str:
    return f"[{','.join(str(v) for v in value)}]" if isinstance(value, list) else str(value)


def _refuse(key: str, value, why: str) -> BioConfigError:
    return BioConfigError(f"{key}={_show(value)}: {why}")


# --- types: each registry section read against its dataclass, as fairseq's add_defaults does -------------------


def _dataclass_of(section: str, node):
    """The dataclass fairseq's ``add_defaults`` merges ``section`` (task, model, optimizer, ...)
    with, or None."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY, MODEL_DATACLASS_REGISTRY
    from fairseq.registry import REGISTRIES
    from fairseq.tasks import TASK_DATACLASS_REGISTRY

    name = node if isinstance(node, str) else node.get("_name") if isinstance(node, dict) else None
    if section == "task":
        return TASK_DATACLASS_REGISTRY.get(name)
    if section == "model":
        return MODEL_DATACLASS_REGISTRY.get(ARCH_MODEL_NAME_REGISTRY.get(name, name))
    if section in REGISTRIES:
        return REGISTRIES[section]["dataclass_registry"].get(name)
    return None


def _type_error(key: str, error: OmegaConfBaseException) -> BioConfigError:
    """omegaconf's multi-line validation error as one line naming the whole key and the value."""
    msg = (getattr(error, "msg", None) or str(error)).strip().splitlines()[0]
    full = f"{key}.{error.full_key}" if getattr(error, "full_key", "") else key
    wanted = msg.rsplit(" could not be converted to ", 1)
    if len(wanted) == 2 and getattr(error, "value", None) is not None:
        kind = {"Float": "a number", "Integer": "a whole number", "Boolean": "true or false"}
        return _refuse(full, error.value, f"not {kind.get(wanted[1], wanted[1])}")
    return BioConfigError(f"{full}: {msg}")


def _typed(key: str, dataclass, node):
    if isinstance(node, str):
        node = OmegaConf.create({"_name": node})
    try:
        return OmegaConf.merge(dataclass, node)
    except OmegaConfBaseException as error:
        raise _type_error(key, error) from None


def _sections(cfg) -> Iterator[Tuple[str, Any]]:
    """(key, typed node) of each registry section with a dataclass, the composite optimizer's groups
    included."""
    from fairseq.dataclass.configs import FairseqConfig
    from fairseq.optim.composite import OptimizerAndSchedulerConfig

    for section, field in FairseqConfig.__dataclass_fields__.items():
        node = _get(cfg, section) if field.type is Any else None
        if isinstance(OmegaConf.select(cfg, section, default=None), argparse.Namespace):
            yield section, OmegaConf.create(
                node
            )  # fairseq uses a Namespace as it is: its values, untyped
            continue
        dataclass = _dataclass_of(section, node) if node is not None else None
        if dataclass is None:
            continue
        typed = _typed(section, dataclass, node)
        yield section, typed
        if section != "optimizer" or typed.get("_name") != "composite":
            continue
        for group, group_node in (_get(typed, "groups") or {}).items():
            prefix = f"optimizer.groups.{group}"
            # fairseq never merges a group with this dataclass (other keys pass): only the keys it
            # has are read
            known = {
                k: v
                for k, v in group_node.items()
                if k in OptimizerAndSchedulerConfig.__dataclass_fields__
            }
            group_typed = _typed(prefix, OptimizerAndSchedulerConfig, known)
            yield prefix, group_typed
            for part in ("optimizer", "lr_scheduler"):
                part_node = _get(group_typed, part)
                part_dataclass = _dataclass_of(part, part_node) if part_node is not None else None
                if part_dataclass is not None:
                    yield f"{prefix}.{part}", _typed(f"{prefix}.{part}", part_dataclass, part_node)


# --- values ---------------------------------------------------------------------------------------------------


def _at_least(key: str, value, low: int, why: str) -> None:
    """An integer setting (a list's every element) of at least ``low``; None (unset) passes."""
    for item in value if isinstance(value, list) else [value]:
        if item is not None and not (_is_number(item) and item >= low and float(item).is_integer()):
            raise _refuse(key, value, why)


def _learning_rates(key: str, value) -> None:
    for lr in value if isinstance(value, list) else [value]:
        if lr is None:
            continue
        if not (_is_number(lr) and math.isfinite(lr) and lr > 0):
            raise _refuse(key, value, "a learning rate must be a positive, finite number")


def _rate(key: str, value, low_open: bool, high_open: bool, what: str) -> None:
    if value is None:
        return
    fits = (
        _is_number(value)
        and (value > 0 if low_open else value >= 0)
        and (value < 1 if high_open else value <= 1)
    )
    if not fits:
        interval = f"{'(' if low_open else '['}0, 1{')' if high_open else ']'}"
        raise _refuse(key, value, f"{what} must lie in {interval}")


def _check_batches(cfg) -> None:
    for key in (
        "dataset.batch_size",
        "dataset.batch_size_valid",
        "dataset.max_tokens",
        "dataset.max_tokens_valid",
    ):
        what = "sentences" if "batch_size" in key else "tokens"
        _at_least(
            key,
            _get(cfg, key),
            1,
            f"a batch holds at least one of its {what} (leave it unset for none)",
        )


def _check_optimization(cfg) -> None:
    _learning_rates("optimization.lr", _get(cfg, "optimization.lr"))
    for key in ("optimization.max_update", "optimization.max_epoch"):
        _at_least(key, _get(cfg, key), 0, "must be 0 (no limit) or a positive count")
    _at_least(
        "optimization.update_freq",
        _get(cfg, "optimization.update_freq"),
        1,
        "each entry is a number of batches per update, at least 1",
    )
    clip = _get(cfg, "optimization.clip_norm")
    if clip is not None and not (_is_number(clip) and 0 <= clip < math.inf):
        raise _refuse(
            "optimization.clip_norm", clip, "must be 0 (no clipping) or a positive, finite norm"
        )


def _check_section(key: str, node) -> None:
    """What a registry section (or a composite optimizer group) holds: warm-up, learning rates,
    dropouts."""
    if "warmup_updates" in node:
        warmup = _get(node, "warmup_updates")
        _at_least(f"{key}.warmup_updates", warmup, 0, "must be 0 (no warm-up) or a positive count")
    if key.startswith("optimizer.groups.") and key.count(".") == 2:
        _learning_rates(f"{key}.lr_float", _get(node, "lr_float"))
        _learning_rates(f"{key}.lr", _get(node, "lr"))
    if key in ("model", "task", "criterion"):
        for name in node:
            if name.endswith(("dropout", "layerdrop")):
                _rate(f"{key}.{name}", _get(node, name), False, True, "a dropout")


def _check_positions(cfg) -> None:
    _at_least(
        "model.max_positions",
        _get(cfg, "model.max_positions"),
        1,
        "a model needs at least one position",
    )
    _at_least(
        "task.max_positions",
        _get(cfg, "task.max_positions"),
        1,
        "a window needs at least one position",
    )
    block, positions = _get(cfg, "task.tokens_per_sample"), _get(cfg, "model.max_positions")
    _at_least("task.tokens_per_sample", block, 2, "a block holds <s> and at least one token")
    if _is_number(block) and _is_number(positions) and block > positions:
        why = f"more than the model's positions (model.max_positions={positions})"
        raise _refuse("task.tokens_per_sample", block, why)


def _check_masking(cfg) -> None:
    if _get(cfg, "task.mask_prob") is None:
        return
    _rate("task.mask_prob", _get(cfg, "task.mask_prob"), True, True, "the masking rate")
    schedule = _get(cfg, "task.mask_prob_schedule") or ""
    for item in str(schedule).split(","):
        try:
            rate = float(item) if item.strip() else None
        except ValueError:
            raise _refuse(
                "task.mask_prob_schedule", f'"{schedule}"', "not a comma-separated list of rates"
            ) from None
        if rate is not None and not 0 < rate < 1:
            raise _refuse(
                "task.mask_prob_schedule", f'"{schedule}"', "each masking rate must lie in (0, 1)"
            )
    shares = []
    for key in ("task.random_token_prob", "task.leave_unmasked_prob"):
        share = _get(cfg, key)
        _rate(key, share, False, False, "a share of the masked positions")
        shares.append(share or 0)
    if sum(shares) > 1:
        given = f"task.random_token_prob={shares[0]} and task.leave_unmasked_prob={shares[1]}"
        raise BioConfigError(
            f"{given}: their sum, the share of masked positions not replaced by <mask>, must be at "
            "most 1"
        )


def check_settings(cfg) -> None:
    """Raise the first setting of fairseq config ``cfg`` that cannot train (see the module
    docstring) as a one-line ``BioConfigError`` naming its key and value; a config whose settings
    can train passes unchanged.
    """
    # Every registry section read as its type first ("abc" is never compared with 0), and completed
    # with its dataclass's defaults as fairseq completes it: the values below are those training
    # would use.
    sections = dict(_sections(cfg))
    completed = OmegaConf.create({k: sections.get(k, _get(cfg, k)) for k in cfg if k != "hydra"})
    _check_batches(completed)
    _check_optimization(completed)
    _check_positions(completed)
    _check_masking(completed)
    for (
        key,
        node,
    ) in (
        sections.items()
    ):  # a top-level section from the completed config: its interpolations resolve
        _check_section(key, completed[key] if key in completed else node)


class OneLineSettingErrors(OneLineErrors):
    """The shipped ``run_config``s' hydra callback: ``errors.OneLineErrors``, and a job that
    omegaconf stopped on a setting (fairseq's own reading of the config, before ``check_settings``
    runs, names neither its section nor always the value: ``optimizer.adam_eps=abc``) reported as
    ``check_settings`` names it, in one line.
    """

    def named(self, config, error: BaseException) -> BaseException:
        if not isinstance(error, OmegaConfBaseException):
            return error
        try:
            check_settings(config)
        except BioError as named:
            return named
        return error

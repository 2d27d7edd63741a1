"""A paper's per-dataset fine-tuning values, applied by the recipe named after the paper.

``hydra_configs/paper_tables/<recipe>.yaml`` holds the rows (BioELECTRA's Table 7, PubMedBERT's
input lengths, BioMegatron's sub-token labels): per dataset, as the paper names it, some of
``FIELDS``, and optionally a ``default`` row for the datasets without one. A run of
``recipe=<recipe>`` on a dataset of the table takes the row's values over those of the task preset
(``sentence_task/``) and of the BLURB runner's dataset table; a value given on the command line
wins over the row; a field whose key the run's config lacks (a tagging option in a sentence task)
is left out. ``settle`` says which value a run took and why, one line per value; the runner's plan
and the hydra callback of the shipped run config (``runner.paper_callback``) apply it.
"""

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from .errors import BioConfigError
from .metrics.benchmark_scores import dataset_key

TABLES = "paper_tables"  # the folder of the tables in the hydra config directory
# a row's field -> the config keys it sets (the first one is compared and named in notes)
FIELDS: Dict[str, Tuple[str, ...]] = {
    "lr": ("optimizer.groups.default.lr_float", "optimization.lr"),
    "batch_size": ("dataset.batch_size",),
    "max_positions": ("task.max_positions",),
    "epochs": ("optimization.max_epoch",),
    "label_all_subtokens": ("task.label_all_subtokens",),
}
FLAGS = {"label_all_subtokens"}  # true / false fields; the others are positive numbers
ABSENT = object()  # what ``settle``'s ``current`` returns for a key the config lacks


@dataclass(frozen=True)
class PaperTable:
    """One recipe's table: the paper's name for it and its rows (dataset -> {field: value})."""

    recipe: str
    paper: str  # as notes cite it: "BioELECTRA Table 7"
    rows: Dict[str, Dict[str, Any]]
    default: Optional[Dict[str, Any]] = None  # the values of the datasets without a row

    def row(self, names: Iterable[str]) -> Optional[Tuple[str, Dict[str, Any]]]:
        """(dataset, values) of the first row named by one of ``names`` (compared loosely) over the
        default row; ("other datasets", the default row) when none is named; None without one."""
        keys = {dataset_key(n) for n in names}
        for dataset, row in self.rows.items():
            if dataset_key(dataset) in keys:
                return dataset, {**(self.default or {}), **row}
        return ("other datasets", self.default) if self.default else None


def _positive(value: Any, integer: bool) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return value > 0 and math.isfinite(value) and (not integer or value == int(value))


def load_table(recipe: Optional[str], config_dir: Path) -> Optional[PaperTable]:
    """The table of ``recipe`` in ``config_dir`` (None: it has none); a table that does not read is
    a one-line ``BioConfigError`` naming the file and row."""
    import yaml

    path = Path(config_dir) / TABLES / f"{recipe}.yaml"
    if not recipe or not path.is_file():
        return None
    try:
        table = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise BioConfigError(f"{path}: {' '.join(str(e).split())}") from None
    if (
        not isinstance(table, dict)
        or not {"paper", "rows"} <= set(table) <= {"paper", "rows", "default"}
        or not isinstance(table["rows"], dict)
    ):
        raise BioConfigError(
            f"{path}: expected `paper` (its name), `rows` (dataset: values), optionally `default`"
        )
    rows = dict(table["rows"], **({"default": table["default"]} if "default" in table else {}))
    for dataset, row in rows.items():
        if not isinstance(row, dict) or not row or set(row) - set(FIELDS):
            raise BioConfigError(
                f"{path}: {dataset}: expected some of {', '.join(FIELDS)}, not {row!r}"
            )
        for field, value in row.items():
            if field in FLAGS and not isinstance(value, bool):
                raise BioConfigError(f"{path}: {dataset}: {field} must be true or false")
            if field not in FLAGS and not _positive(value, integer=field != "lr"):
                raise BioConfigError(f"{path}: {dataset}: {field} must be positive, not {value!r}")
    return PaperTable(recipe, str(table["paper"]), table["rows"], table.get("default"))


def _same(a: Any, b: Any) -> bool:
    if isinstance(b, bool):
        return a is b
    if isinstance(a, list) and len(a) == 1:
        a = a[0]
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    except (TypeError, ValueError):
        return False


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(_shown(v) for v in value) + "]"
    return f"{value:g}" if isinstance(value, float) else str(value)


def settle(
    table: PaperTable,
    dataset: str,
    row: Mapping[str, Any],
    current: Callable[[str], Any],
    given: Mapping[str, Optional[str]],
    source: Callable[[str], str],
) -> Tuple[Dict[str, Any], List[str]]:
    """({config key: value} ``row`` (``table.row``'s for ``dataset``) changes, one note per value it
    changes or the command line kept over it). ``current(key)``: the composed value (``ABSENT``:
    the config has no such key); ``given``: the keys set on the command line (-> the value as the
    note shows it; None: the composed one); ``source(key)``: what set the composed value
    ("sentence_task/re_gad")."""
    changes: Dict[str, Any] = {}
    notes: List[str] = []
    cited = f"{table.paper}, {dataset} (paper_tables/{table.recipe}.yaml)"
    for field, value in row.items():
        keys = FIELDS[field]
        value = value if field in FLAGS else float(value) if field == "lr" else int(value)
        now = current(keys[0])
        if now is ABSENT:
            continue
        taken = [given[k] or _shown(now) for k in keys if k in given]
        if taken:
            if not _same(now, value) or given.get(keys[0]):
                notes.append(
                    f"{keys[0]}={taken[0]}: the command line's, not {_shown(value)} of {cited}"
                )
            continue
        if _same(now, value):
            continue
        for key in keys:
            changes[key] = [value] if key == "optimization.lr" else value
        was = (
            "over the default (unset)"
            if now is None
            else f"over {_shown(now)} of {source(keys[0])}"
        )
        notes.append(f"{keys[0]}={_shown(value)}: {cited}, {was}")
    return changes, notes


def as_overrides(changes: Mapping[str, Any]) -> List[str]:
    """Hydra overrides of ``settle``'s changes."""
    return [f"{key}={_shown(value)}" for key, value in changes.items()]


def override_keys(overrides: Iterable[str]) -> List[str]:
    """The config keys of hydra overrides (``+key=v``, ``key=v``; deletions and groups too)."""
    return [o.split("=", 1)[0].lstrip("+~") for o in overrides]


def _flat_keys(node: Any, prefix: str = "") -> Iterable[str]:
    for key, value in node.items() if isinstance(node, dict) else ():
        if key != "defaults":
            if isinstance(value, dict):
                yield from _flat_keys(value, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}"


def composed_by(config_dir: Path, choices: Mapping[str, Any]) -> Callable[[str], str]:
    """``source`` for ``settle``: the task preset (``sentence_task/<name>``) when its file sets the
    key, else the recipe."""
    import yaml

    preset = choices.get("sentence_task")
    path = Path(config_dir) / "sentence_task" / f"{preset}.yaml"
    keys = set()
    if preset and path.is_file():
        keys = set(_flat_keys(yaml.safe_load(path.read_text(encoding="utf-8"))))
    recipe = choices.get("recipe")
    return lambda key: f"sentence_task/{preset}" if key in keys else f"recipe/{recipe}"

"""The dataset table of BLURB, BLUE and bio-lm (``hydra_configs/runner/datasets.yaml``), read and
checked once: per benchmark its ``Benchmark`` of ``fairseq_bio.metrics.benchmark_scores`` (datasets
in table order, task types, metrics, the aggregate), and per dataset the ``Recipe``
fairseq-bio-blurb fine-tunes it with (config, fine-tuning recipe or preset, overrides, seeds,
cross-validation folds, where its data is, its format and where users get it). The file's header
describes every field.
"""

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ..errors import BioConfigError
from ..metrics.benchmark_scores import TAGS, Benchmark, BenchmarkScore, BenchmarkTask, dataset_key
from ..runs import shipped_config_dir
from .folds import MIN_FOLDS

TAGGING = "bio_tagging_ner"  # the configs a recipe runs (fairseq-hydra-train --config-name)
SENTENCE = "bio_sentence_prediction"

TASK_FIELDS = (
    "name",
    "title",
    "task_type",
    "metric",
    "aliases",
    "negatives",
    "clinical",
    "extra_metrics",
)
RECIPE_FIELDS = (
    "config",
    "recipe",
    "preset",
    "epochs",
    "batch_size",
    "lr",
    "overrides",
    "seeds",
    "folds",
    "data",
    "format",
    "source",
    "version",
    "alternative",
)
REQUIRED = ("name", "title", "task_type", "metric", "config", "data", "source")
ALTERNATIVE_FIELDS = ("preset", "overrides", "format", "source", "version")
BENCHMARK_FIELDS = ("name", "aggregate", "task_types", "datasets")
BENCHMARK_OPTIONS = ("statistic", "domain_means")  # Benchmark's fields with defaults
SCHEDULE = ("epochs", "batch_size", "lr")
TYPE_RECIPE_FIELDS = (
    "recipe",
    *SCHEDULE,
)  # what task_type_recipes gives every dataset of a type (bio-lm's)


@dataclass(frozen=True)
class Recipe:
    """How one benchmark dataset is fine-tuned here (its task type and metric: its
    ``BenchmarkTask``)."""

    name: str  # the dataset's name in its benchmark
    config: str  # fairseq-hydra-train --config-name
    data: str  # its directory under --data
    preset: Optional[str] = None  # sentence_task= (bio_sentence_prediction)
    overrides: Tuple[str, ...] = ()  # hydra overrides on top of the config / preset
    seeds: int = 5  # PubMedBERT sec. 6.2: five runs, ten for the small BIOSSES, PubMedQA and BioASQ
    source: str = ""  # where users get the data when it is not there
    version: str = ""  # how the files read here differ from the benchmark's own version
    alternative: Optional["Recipe"] = (
        None  # the dataset in another form, run when this one's files are absent
    )
    recipe: Optional[str] = (
        None  # recipe= (hydra_configs/recipe/); None: the config's own (PubMedBERT's)
    )
    folds: Optional[int] = (
        None  # K-fold cross-validation of the train file (bio-lm's GAD, EU-ADR: 10)
    )
    format: str = ""  # the files read and their format

    def command_base(self) -> List[str]:
        """The config (fine-tuning recipe, preset) of this dataset's hydra command line."""
        return (
            ["--config-name", self.config]
            + ([f"recipe={self.recipe}"] if self.recipe else [])
            + ([f"sentence_task={self.preset}"] if self.preset else [])
        )


def schedule_overrides(epochs: int, batch_size: int, lr: float) -> List[str]:
    """Overrides for a dataset's epochs, batch size and learning rate (LinkBERT's BLURB script)."""
    return [
        f"optimization.max_epoch={epochs}",
        f"dataset.batch_size={batch_size}",
        f"optimizer.groups.default.lr_float={lr}",
        f"optimization.lr=[{lr}]",
    ]


def _strings(value: Any, where: str, what: str) -> Tuple[str, ...]:
    """A list of strings (nested lists flattened: shared groups come in as YAML aliases)."""
    if isinstance(value, str) or not isinstance(value, list):
        raise BioConfigError(f"{where}: {what} must be a list, not {value!r}")
    out: List[str] = []
    for item in value:
        if isinstance(item, list):
            out.extend(_strings(item, where, what))
        elif isinstance(item, str):
            out.append(item)
        else:
            raise BioConfigError(f"{where}: {what} holds {item!r}, not a string")
    return tuple(out)


def _recipe(entry: Mapping[str, Any], where: str, configs: Path) -> Recipe:
    """The entry's Recipe; ``configs``: the hydra config directory its config, recipe and preset are
    in."""
    config, preset, recipe_name = entry["config"], entry.get("preset"), entry.get("recipe")
    presets, recipes = configs / "sentence_task", configs / "recipe"
    if config not in (TAGGING, SENTENCE):
        raise BioConfigError(f"{where}: config {config!r} is neither {TAGGING} nor {SENTENCE}")
    if preset is not None and (config != SENTENCE or not (presets / f"{preset}.yaml").is_file()):
        raise BioConfigError(
            f"{where}: preset {preset!r} is not one of {presets} (a {SENTENCE} preset)"
        )
    if recipe_name is not None and not (recipes / f"{recipe_name}.yaml").is_file():
        raise BioConfigError(f"{where}: recipe {recipe_name!r} is not one of {recipes}")
    folds = entry.get("folds")
    if folds is not None and (
        isinstance(folds, bool) or not isinstance(folds, int) or folds < MIN_FOLDS
    ):
        raise BioConfigError(
            f"{where}: folds must be an integer of at least {MIN_FOLDS}, not {folds!r}"
        )
    overrides: Tuple[str, ...] = ()
    given = [k for k in SCHEDULE if k in entry]
    if given:
        if len(given) < len(SCHEDULE):
            raise BioConfigError(
                f"{where}: {', '.join(SCHEDULE)} go together; only {', '.join(given)} given"
            )
        overrides = tuple(
            schedule_overrides(int(entry["epochs"]), int(entry["batch_size"]), float(entry["lr"]))
        )
    overrides += _strings(entry.get("overrides", []), where, "overrides")
    seeds = entry.get("seeds", 5)
    if not isinstance(seeds, int) or seeds < 1:
        raise BioConfigError(f"{where}: seeds must be a positive integer, not {seeds!r}")
    recipe = Recipe(
        entry["name"],
        config,
        str(entry["data"]),
        preset,
        overrides,
        seeds,
        str(entry["source"]),
        str(entry.get("version", "")),
        recipe=recipe_name,
        folds=folds,
        format=str(entry.get("format", "")),
    )
    alternative = entry.get("alternative")
    if alternative is None:
        return recipe
    unknown = (
        set(alternative) - set(ALTERNATIVE_FIELDS)
        if isinstance(alternative, dict)
        else {"(not a mapping)"}
    )
    if unknown:
        raise BioConfigError(
            f"{where}: alternative: unknown field(s) {', '.join(sorted(unknown))}; known: "
            f"{', '.join(ALTERNATIVE_FIELDS)}"
        )
    other = _recipe(
        {**entry, **alternative, "alternative": None}, f"{where} (alternative)", configs
    )
    return replace(recipe, alternative=other)


def _task(entry: Mapping[str, Any], where: str) -> BenchmarkTask:
    """The entry's BenchmarkTask; ``where`` names the benchmark (the task's own errors name the
    dataset)."""
    at = f"{where}: {entry['name']}"
    lists = {
        k: _strings(entry[k], at, k)
        for k in ("aliases", "negatives", "extra_metrics")
        if k in entry
    }
    try:
        task = BenchmarkTask(
            entry["name"],
            entry["title"],
            entry["task_type"],
            entry["metric"],
            clinical=bool(entry.get("clinical", False)),
            **lists,
        )
    except ValueError as e:
        raise BioConfigError(f"{where}: {e}") from None
    if (task.kind == TAGS) != (entry["config"] == TAGGING):
        raise BioConfigError(
            f"{at}: metric {task.metric} does not score the predictions of {entry['config']}"
        )
    return task


def _type_recipes(value: Any, task_types: Any, where: str) -> Dict[str, Dict[str, Any]]:
    """A benchmark's ``task_type_recipes``: {task type: fields that replace those of each of its
    datasets}."""
    if not isinstance(value, dict):
        raise BioConfigError(
            f"{where}: task_type_recipes must map task types to fields, not {value!r}"
        )
    for task_type, fields in value.items():
        if task_type not in (task_types or ()):
            raise BioConfigError(
                f"{where}: task_type_recipes: {task_type!r} is not one of the task_types"
            )
        unknown = (
            set(fields) - set(TYPE_RECIPE_FIELDS)
            if isinstance(fields, dict)
            else {"(not a mapping)"}
        )
        if unknown:
            known = ", ".join(TYPE_RECIPE_FIELDS)
            raise BioConfigError(
                f"{where}: task_type_recipes: {task_type}: unknown field(s) "
                f"{', '.join(sorted(unknown))}; known: {known}"
            )
    return value


def load_table(
    path: Union[str, Path, None] = None
) -> Tuple[Dict[str, Benchmark], Dict[str, Dict[str, Recipe]]]:
    """({benchmark key: Benchmark}, {benchmark key: {dataset name: Recipe}}) of a dataset table
    (default: the shipped one); a table that does not read is a one-line ``BioConfigError`` naming
    the file and entry."""
    import yaml

    path = Path(path) if path is not None else shipped_config_dir() / "runner" / "datasets.yaml"
    try:
        table = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise BioConfigError(f"{path}: {' '.join(str(e).split())}") from None
    if not isinstance(table, dict):
        raise BioConfigError(f"{path}: not a mapping of benchmarks")
    benchmarks, recipes = {}, {}
    configs = path.parent.parent
    for key, spec in table.items():
        if key == "shared":  # groups the entries refer to by YAML anchors
            continue
        where = f"{path}: {key}"
        optional = (*BENCHMARK_OPTIONS, "task_type_recipes")
        if (
            not isinstance(spec, dict)
            or not set(BENCHMARK_FIELDS) <= set(spec)
            or set(spec) - set(BENCHMARK_FIELDS) - set(optional)
        ):
            raise BioConfigError(
                f"{where}: expected name, aggregate, task_types and datasets (and optionally "
                f"{', '.join(optional)})"
            )
        type_recipes = _type_recipes(spec.get("task_type_recipes", {}), spec["task_types"], where)
        tasks, recipes[key] = [], {}
        for i, entry in enumerate(spec["datasets"]):
            name = (
                entry.get("name", f"entry {i + 1}") if isinstance(entry, dict) else f"entry {i + 1}"
            )
            at = f"{where}: {name}"
            if not isinstance(entry, dict):
                raise BioConfigError(f"{at}: not a mapping")
            entry = {**entry, **type_recipes.get(entry.get("task_type"), {})}
            unknown = set(entry) - set(TASK_FIELDS) - set(RECIPE_FIELDS)
            missing = [k for k in REQUIRED if k not in entry]
            if unknown or missing:
                problem = f"unknown field(s) {', '.join(sorted(unknown))}" if unknown else ""
                problem += ("; " if unknown and missing else "") + (
                    f"missing {', '.join(missing)}" if missing else ""
                )
                raise BioConfigError(f"{at}: {problem}")
            if name in recipes[key]:
                raise BioConfigError(f"{at}: a second entry of that name")
            tasks.append(_task(entry, where))
            recipes[key][name] = _recipe(entry, at, configs)
        options = {k: spec[k] for k in BENCHMARK_OPTIONS if k in spec}
        try:
            benchmarks[key] = Benchmark(
                str(spec["name"]),
                tuple(tasks),
                str(spec["aggregate"]),
                _strings(spec["task_types"], where, "task_types"),
                **options,
            )
        except ValueError as e:
            raise BioConfigError(f"{path}: {e}") from None
    return benchmarks, recipes


# The shipped table, read once on import (this module is the runner's, never imported by the
# plugin's __init__).
BENCHMARKS, RECIPES = load_table()
BLURB, BLUE, BIOLM = BENCHMARKS["blurb"], BENCHMARKS["blue"], BENCHMARKS["biolm"]
BLURB_RECIPES, BLUE_RECIPES, BIOLM_RECIPES = RECIPES["blurb"], RECIPES["blue"], RECIPES["biolm"]


def benchmark(name: Union[str, Benchmark]) -> Benchmark:
    """The benchmark called ``name``: its key (``blurb``, ``blue``, ``biolm``) or the name reports
    print (``bio-lm``), compared loosely; one-line error if none."""
    if isinstance(name, Benchmark):
        return name
    for key, bench in BENCHMARKS.items():
        if dataset_key(name) in (dataset_key(key), dataset_key(bench.name)):
            return bench
    raise ValueError(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}")


def benchmark_score(
    results: Mapping[str, Union[float, Sequence[float], None]],
    name: Union[str, Benchmark] = "blurb",
) -> BenchmarkScore:
    """The aggregate of per-dataset results (a number, per-seed numbers, or ``None``: missing),
    partial if any miss."""
    return benchmark(name).score(results)


def blurb_score(results: Mapping[str, Union[float, Sequence[float], None]]) -> BenchmarkScore:
    """BLURB: macro average over the six task types of the per-type mean of dataset results."""
    return BLURB.score(results)


def blue_score(results: Mapping[str, Union[float, Sequence[float], None]]) -> BenchmarkScore:
    """BLUE: plain average of the ten dataset results (partial without the clinical sets)."""
    return BLUE.score(results)

"""Planning fairseq-bio-blurb's runs: each dataset's composed config, its data files (or
cross-validation folds) and update budget, its learning rates and seeds, and every run's directory
and command lines; the lock that keeps two runners off one ``--out``.
"""

import logging
import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .. import paper_tables
from ..errors import BioConfigError, BioError
from ..metrics.benchmark_scores import Benchmark, BenchmarkTask
from ..runs import PLUGIN_DIR, command, hydra_train, shipped_config_dir
from .datasets import RECIPES, SENTENCE, TAGGING, Recipe
from .folds import Fold, write_folds


def resolve_tasks(benchmark: Benchmark, tasks: str) -> List[str]:
    """Registry names of ``--tasks`` (``all``, or names / aliases separated by commas), in table
    order."""
    if tasks.strip().lower() == "all":
        return list(benchmark.names())
    chosen = set()
    for name in (n.strip() for n in tasks.split(",")):
        if not name:
            continue
        try:
            chosen.add(benchmark.task(name).name)
        except ValueError as e:
            raise BioConfigError(str(e)) from None
    if not chosen:
        raise BioConfigError("--tasks names no dataset")
    return [n for n in benchmark.names() if n in chosen]


def _key(override: str) -> str:
    return override.split("=", 1)[0]


def merge_overrides(*groups: Sequence[str]) -> List[str]:
    """Hydra overrides with one entry per key, a later group's value replacing an earlier one's."""
    merged: Dict[str, str] = {}
    for group in groups:
        for item in group:
            merged.pop(_key(item), None)
            merged[_key(item)] = item
    return list(merged.values())


def comma_names(value: Any) -> List[str]:
    """The names of a comma-separated config value (``task.labels``, ``task.negative_labels``)."""
    return [n.strip() for n in str(value or "").split(",") if n.strip()]


def compose(recipe: Recipe, overrides: Sequence[str]) -> Dict[str, Any]:
    """The job config fairseq's hydra entry point composes for ``recipe``'s config, preset and
    overrides, then ``overrides`` (fairseq's schema included)."""
    return compose_with_choices(recipe, overrides)[0]


def compose_with_choices(
    recipe: Recipe, overrides: Sequence[str]
) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """``compose``'s config and hydra's choice of each config group (``recipe``,
    ``sentence_task``)."""
    from fairseq.dataclass.initialize import hydra_init
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf, open_dict

    hydra_init(recipe.config)
    configs = str(shipped_config_dir())
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore"
        )  # hydra 1.1's note on schemas registered under the config's name
        with initialize_config_dir(
            config_dir=configs, job_name="fairseq-bio-blurb", version_base="1.1"
        ):
            try:
                overrides = merge_overrides(recipe.command_base()[2:], recipe.overrides, overrides)
                cfg = hydra_compose(recipe.config, overrides=overrides, return_hydra_config=True)
            except Exception as e:  # hydra's messages span lines: keep the first
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise BioConfigError(
                    f"{recipe.name}: the overrides do not compose with {recipe.config}: {first}"
                ) from None
    choices = OmegaConf.to_container(cfg.hydra.runtime.choices)
    with open_dict(cfg):
        del cfg["hydra"]
    return OmegaConf.to_container(cfg, resolve=False), choices


def _value(cfg: Dict[str, Any], key: str) -> Any:
    node: Any = cfg
    for part in key.split("."):
        node = (
            node.get(part, paper_tables.ABSENT) if isinstance(node, dict) else paper_tables.ABSENT
        )
    return node


def paper_row(
    recipe: Recipe,
    task: BenchmarkTask,
    cfg: Dict[str, Any],
    choices: Dict[str, Any],
    user: Dict[str, Optional[str]],
) -> Tuple[List[str], List[str]]:
    """The overrides of the paper table of the run's recipe (``paper_tables``) for ``task``, over
    the preset's and the dataset table's values but not the user's, and one note per value they
    change or the user kept."""
    configs = shipped_config_dir()
    table = paper_tables.load_table(choices.get("recipe"), configs)
    found = table.row((task.name, task.title, *task.aliases)) if table else None
    if found is None:
        return [], []
    runner = set(paper_tables.override_keys(recipe.overrides))
    composed = paper_tables.composed_by(configs, choices)
    changes, notes = paper_tables.settle(
        table,
        *found,
        lambda key: _value(cfg, key),
        user,
        lambda key: "runner/datasets.yaml" if key in runner else composed(key),
    )
    return paper_tables.as_overrides(changes), notes


def check_overrides(name: str, cfg: Dict[str, Any]) -> None:
    """A dataset's composed config whose settings cannot train (``fairseq_bio.settings``: a learning
    rate of nan, a batch size of 0 among the overrides) stops the runner before it starts anything,
    not each of its runs.
    """
    from omegaconf import OmegaConf

    from ..settings import check_settings

    try:
        check_settings(OmegaConf.create(cfg))
    except BioError as e:
        raise BioConfigError(f"{name}: {e}") from None


def split_files(config: str, task: Dict[str, Any]) -> Dict[str, str]:
    """{split: path} of the files a run reads (a split cut from train, or PubMedQA's split file, as
    the task does)."""
    data = str(task["data"])
    if config == TAGGING:
        return {s: os.path.join(data, task[f"{s}_file"]) for s in ("train", "valid", "test")}
    ext = os.path.splitext(str(task["train_file"]))[1]
    if str(task["format"]) == "pubmedqa":
        return {
            "train": os.path.join(data, task["train_file"]),
            "split": os.path.join(data, task["split_file"]),
        }
    files = {"train": os.path.join(data, task["train_file"])}
    if not task.get("valid_from_train"):
        files["valid"] = os.path.join(data, task.get("valid_file") or f"valid{ext}")
    files["test"] = os.path.join(data, task.get("test_file") or f"test{ext}")
    return files


def needed_files(config: str, task: Dict[str, Any], cross_validated: bool) -> List[str]:
    """The files a dataset's runs need: every split's, or only the train file when its folds are cut
    from it."""
    files = split_files(config, task)
    return [files["train"]] if cross_validated else list(files.values())


def fold_count(given: Optional[int], recipe: Recipe) -> Optional[int]:
    """The number of folds a dataset is cross-validated over: ``--folds`` if given (1: none), else
    the table's."""
    k = recipe.folds if given is None else given
    return k if k and k > 1 else None


def train_examples(config: str, task: Dict[str, Any]) -> int:
    """Training examples the task will read (rows it skips and rows held out for dev not
    counted)."""
    from ..data import sentence_files as sd

    path = os.path.join(str(task["data"]), task["train_file"])
    if config == TAGGING:
        from ..data.conll import read_conll

        return len(read_conll(path))
    fmt = sd.file_format(path, str(task["format"]))
    fields, label = comma_names(task["text_fields"]), task["label_field"]
    if fmt == "pubmedqa":
        examples = sd.read_pubmedqa(
            path, os.path.join(str(task["data"]), task["split_file"]), "train", label
        )
    elif fmt == "tsv":
        examples = sd.read_tsv(path, fields, label)
    else:
        examples = sd.read_jsonl(path, fields, label, task.get("id_field"))
    n_valid = int(task.get("valid_from_train") or 0)
    if n_valid and fmt != "pubmedqa":
        examples = examples[:-n_valid]
    known = set(comma_names(task.get("labels")))
    if task.get("kind") == "classification" and known and task.get("unknown_labels") == "skip":
        examples = [ex for ex in examples if str(ex.label).strip() in known]
    return len(examples)


@dataclass
class Budget:
    """A run's update budget: PubMedBERT sec. 6.2's warm-up over the first 10 % of steps, then
    linear decay."""

    max_update: int
    max_epoch: int
    warmup: int
    train_examples: Optional[int] = None
    batch: Optional[int] = None

    def overrides(self) -> List[str]:
        return [
            f"optimization.max_update={self.max_update}",
            f"optimization.max_epoch={self.max_epoch}",
            f"optimizer.groups.default.lr_scheduler.warmup_updates={self.warmup}",
        ]


def update_budget(
    config: str, cfg: Dict[str, Any], max_epoch: Optional[int], max_update: Optional[int]
) -> Budget:
    """Updates = epochs x batches of the train file found (``max_update`` given: that many, for
    smoke runs)."""
    opt = cfg["optimization"]
    batch = int(cfg["dataset"]["batch_size"]) * int((opt.get("update_freq") or [1])[0])
    epochs = int(max_epoch if max_epoch is not None else opt["max_epoch"])
    if max_update is not None:
        return Budget(max_update, max_epoch or 0, round(max_update / 10), batch=batch)
    n = train_examples(config, cfg["task"])
    updates = epochs * math.ceil(n / batch)
    return Budget(updates, epochs, round(updates / 10), n, batch)


@dataclass
class Plan:
    """One dataset's runs: where its data is, its composed config, overrides and budget, its lrs and
    seeds."""

    recipe: Recipe
    task: BenchmarkTask
    data: Path
    cfg: Dict[str, Any]
    overrides: List[
        str
    ]  # the runner's and the recipe's (paths, budget, the dataset's hyperparameters)
    user_overrides: List[str]  # from the command line: they win over everything else
    budget: Budget
    lrs: List[float]
    seeds: List[int]
    folds: List[Fold] = field(default_factory=list)  # empty: the dataset's own splits
    batch_sizes: List[int] = field(
        default_factory=list
    )  # --batch-sizes (a grid); empty: the config's batch only
    notes: List[str] = field(default_factory=list)  # the values a paper table set or the user kept

    def budget_for(self, batch: int) -> Budget:
        """The update budget at ``batch`` (of a --batch-sizes grid): the dataset's epochs x its
        batches at that size, warm-up 10 %; a budget given in updates (--max-update,
        optimization.max_update) stays as it is.
        """
        b = self.budget
        if b.train_examples is None:
            return b
        updates = b.max_epoch * math.ceil(b.train_examples / (batch * self.update_freq))
        return Budget(
            updates, b.max_epoch, round(updates / 10), b.train_examples, batch * self.update_freq
        )

    @property
    def update_freq(self) -> int:
        return int((self.cfg["optimization"].get("update_freq") or [1])[0])


@dataclass
class Run:
    """One training process (fairseq's hydra entry point) and the fairseq-bio-predict of its test
    split: (dataset, lr, seed), its directory and command lines."""

    plan: Plan
    lr: float
    seed: int
    dir: Path
    command: List[str]
    predict: List[str]
    predictions: (
        Path  # what fairseq-bio-predict writes: CoNLL (tagging) or JSON lines (sentence level)
    )
    identity: Dict[str, Any] = field(
        default_factory=dict
    )  # what a result.json must have been made by to be reused
    fold: Optional[Fold] = None  # the cross-validation fold it trains and tests on
    batch_size: Optional[int] = (
        None  # a --batch-sizes grid's batch size; None: the config's (no grid)
    )

    @property
    def label(self) -> str:
        return run_label(
            self.plan.recipe.name,
            self.lr,
            self.seed,
            self.fold.index if self.fold else None,
            self.fold.k if self.fold else None,
            self.batch_size,
        )


def run_label(
    dataset: str,
    lr: float,
    seed: int,
    fold: Optional[int] = None,
    folds: Optional[int] = None,
    batch_size: Optional[int] = None,
) -> str:
    """How reports name a run: ``gad lr=3e-05 fold=2/10 seed=1`` (``lr=3e-05 batch=16`` in a
    batch-size grid)."""
    batch = f" batch={batch_size}" if batch_size else ""
    return (
        f"{dataset} lr={lr:g}{batch}" + (f" fold={fold}/{folds}" if fold else "") + f" seed={seed}"
    )


def _dataset_overrides(
    extra: Sequence[str], benchmark: Benchmark
) -> Tuple[List[str], Dict[str, List[str]]]:
    """Extra overrides for every run, and ``<dataset>:key=value`` ones for one dataset's runs."""
    common, per_dataset = [], {}
    for item in extra:
        key = _key(item)
        if ":" in key:
            name, item = item.split(":", 1)
            try:
                per_dataset.setdefault(benchmark.task(name).name, []).append(item)
            except ValueError as e:
                raise BioConfigError(f"override {name}:{item}: {e}") from None
        else:
            common.append(item)
    return common, per_dataset


def encoder_fingerprint(checkpoint: Path) -> Dict[str, Any]:
    """What identifies the encoder file a run started from (a re-trained file at the same path is
    another one)."""
    stat = checkpoint.stat()
    return {"path": str(checkpoint), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def plan_runs(
    args, benchmark: Benchmark, names: Sequence[str]
) -> Tuple[List[Plan], Dict[str, str]]:
    """The plans of the datasets with data, and {dataset: why it is missing} for the benchmark's
    others."""
    recipes = RECIPES[args.preset]
    extra, per_dataset = _dataset_overrides(args.overrides, benchmark)
    dirs = {}
    for item in args.dataset_dir:
        if "=" not in item:
            raise BioConfigError(f"--dataset-dir {item!r}: expected NAME=DIR")
        name, path = item.split("=", 1)
        try:
            dirs[benchmark.task(name).name] = Path(path).resolve()
        except ValueError as e:
            raise BioConfigError(f"--dataset-dir {item}: {e}") from None
    plans, missing = [], {}
    for task in benchmark.tasks:
        if task.name not in names:
            missing[task.name] = "not run (not in --tasks)"
            continue
        recipe = recipes[task.name]
        data = dirs.get(task.name, (Path(args.data) / recipe.data).resolve())
        user = extra + per_dataset.get(task.name, [])
        if args.lr_grid and any(
            _key(o) in ("optimizer.groups.default.lr_float", "optimization.lr") for o in user
        ):
            raise BioConfigError(
                f"{task.name}: give learning rates with --lr-grid or as overrides, not both"
            )
        if args.batch_sizes and any(_key(o) == "dataset.batch_size" for o in user):
            raise BioConfigError(
                f"{task.name}: give batch sizes with --batch-sizes or as overrides, not both"
            )
        paths = [f"task.data={data}", f"checkpoint.restore_file={args.checkpoint}"]
        given = [*paths, *user]
        cfg, choices = compose_with_choices(recipe, given)
        check_overrides(task.name, cfg)
        k = fold_count(args.folds, recipe)
        absent = [
            p for p in needed_files(recipe.config, cfg["task"], bool(k)) if not os.path.exists(p)
        ]
        if (
            absent and recipe.alternative is not None
        ):  # the dataset in its other form (BLUE's HoC: abstracts)
            other = compose(recipe.alternative, given)
            if all(
                os.path.exists(p)
                for p in needed_files(recipe.alternative.config, other["task"], bool(k))
            ):
                recipe, cfg, absent = recipe.alternative, other, []
                choices = {**choices, "sentence_task": recipe.preset}
        if absent:
            hint = recipe.source or cfg["task"].get("data_source") or ""
            notes = (["user-supplied clinical data"] if task.clinical else []) + (
                [f"needs {hint}"] if hint else []
            )
            missing[task.name] = f"no data: {absent[0]} not found" + (
                f" ({'; '.join(notes)})" if notes else ""
            )
            continue
        # the paper's values for this dataset where the run's recipe has a table (paper_tables);
        # the user's overrides and the runner's own options for lr, batch and epochs win
        chosen: Dict[str, Optional[str]] = dict.fromkeys(paper_tables.override_keys(user))
        if args.lr_grid:
            chosen["optimizer.groups.default.lr_float"] = ",".join(f"{lr:g}" for lr in args.lr_grid)
        if args.batch_sizes:
            chosen["dataset.batch_size"] = ",".join(str(b) for b in args.batch_sizes)
        if args.max_epoch is not None:
            chosen["optimization.max_epoch"] = str(args.max_epoch)
        paper, paper_notes = paper_row(recipe, task, cfg, choices, chosen)
        if paper:
            cfg = compose(recipe, [*paths, *paper, *user])
        folds: List[Fold] = []
        tagging = recipe.config == TAGGING
        if (
            k
        ):  # the folds of the train file, written where the runs are; the budget is the first fold's
            train = split_files(recipe.config, cfg["task"])["train"]
            try:
                folds = write_folds(
                    train, tagging, cfg["task"], k, Path(args.out).resolve() / task.name / "folds"
                )
            except (ValueError, OSError) as e:  # the readers' one-line file:line errors
                raise BioConfigError(f"{task.name}: {e}") from None
        budget_cfg = (
            {**cfg, "task": {**cfg["task"], **folds[0].task_values(tagging)}} if folds else cfg
        )
        user_keys = {_key(o) for o in user}
        if (
            "optimization.max_update" in user_keys
        ):  # the user's budget; warm-up 10 % of it unless given too
            updates = int(cfg["optimization"]["max_update"])
            warmup = cfg["optimizer"]["groups"]["default"]["lr_scheduler"]["warmup_updates"]
            given = "optimizer.groups.default.lr_scheduler.warmup_updates" in user_keys
            budget = Budget(
                updates,
                int(cfg["optimization"]["max_epoch"]),
                int(warmup) if given else round(updates / 10),
            )
        else:
            try:
                budget = update_budget(recipe.config, budget_cfg, args.max_epoch, args.max_update)
            except (ValueError, OSError) as e:  # the readers' one-line file:line errors
                raise BioConfigError(f"{task.name}: {e}") from None
        lrs = args.lr_grid or [float(cfg["optimizer"]["groups"]["default"]["lr_float"])]
        seeds = list(range(1, (args.seeds or recipe.seeds) + 1))
        fixed = [
            f"task.data={data}",
            f"common.user_dir={PLUGIN_DIR}",
            f"checkpoint.restore_file={args.checkpoint}",
            # encoded texts are keyed by vocabulary, BPE and text: every run of a dataset shares
            # them
            f"task.cache_dir={Path(args.out).resolve() / task.name / 'encoded'}",
            # runs are redone from the start, never resumed: only the best dev checkpoint is kept
            "checkpoint.no_last_checkpoints=true",
        ]
        if args.cpu:
            fixed.append("common.cpu=true")
        overrides = merge_overrides(fixed, recipe.overrides, paper, budget.overrides())
        plans.append(
            Plan(
                recipe,
                task,
                data,
                cfg,
                overrides,
                user,
                budget,
                lrs,
                seeds,
                folds,
                list(args.batch_sizes or []),
                [f"{task.name}: {note}" for note in paper_notes],
            )
        )
    return plans, missing


def make_runs(plan: Plan, args) -> List[Run]:
    """Every (lr, fold, seed) run of a plan with its two command lines."""
    out = Path(args.out).resolve()
    tagging = plan.recipe.config == TAGGING
    runs = []
    for lr, batch in [(lr, batch) for lr in plan.lrs for batch in plan.batch_sizes or [None]]:
        # a batch-size grid's runs sit beside each other in lr<lr>-bs<batch>; without one the
        # directory is lr<lr>
        grid = f"lr{lr:g}" + (f"-bs{batch}" if batch else "")
        sized = (
            [f"dataset.batch_size={batch}", *plan.budget_for(batch).overrides()] if batch else []
        )
        for fold in plan.folds or [None]:
            # a fold's files win over every other task.data / *_file, the user's included (they
            # named the source)
            task = {**plan.cfg["task"], **fold.task_values(tagging)} if fold else plan.cfg["task"]
            test, options = test_input(plan.recipe.config, task)
            for seed in plan.seeds:
                run_dir = (
                    out / plan.recipe.name / grid / (fold.name if fold else "") / f"seed{seed}"
                )
                start = random_start(out, seed) if args.random_init else None
                own = [
                    *([f"checkpoint.restore_file={start}"] if start else []),
                    f"checkpoint.save_dir={run_dir}",
                    f"common.log_file={run_dir / 'train.log'}",
                    f"common.seed={seed}",
                    f"optimizer.groups.default.lr_float={lr}",
                    f"optimization.lr=[{lr}]",
                ]
                overrides = merge_overrides(
                    plan.overrides,
                    sized,
                    own,
                    plan.user_overrides,
                    fold.overrides(tagging) if fold else [],
                )
                # common.user_dir where it always stood (in plan.overrides): the command is a stored
                # result's identity
                _, config, *groups = plan.recipe.command_base()
                training = hydra_train(config, *groups, *overrides, user_dir=None)
                predictions = run_dir / ("predictions.tsv" if tagging else "predictions.jsonl")
                predict = command(
                    "fairseq-bio-predict",
                    "--checkpoint",
                    run_dir / "checkpoint_best.pt",
                    "--input",
                    test,
                    "--out",
                    predictions,
                    "--overwrite",
                    "--no-progress",
                    "--batch-size",
                    args.validate_batch_size,
                    *options,
                    *(["--cpu"] if args.cpu else []),
                )
                identity = {"command": training, "encoder": encoder_fingerprint(args.checkpoint)}
                if start:  # the draw is the seed's: the command names it, the encoder its source
                    identity["random_init"] = seed
                if fold:
                    identity["fold_data"] = fold.digest
                runs.append(
                    Run(
                        plan,
                        lr,
                        seed,
                        run_dir,
                        training,
                        predict,
                        predictions,
                        identity,
                        fold,
                        batch,
                    )
                )
    return runs


def random_start(out: Path, seed: int) -> Path:
    """Where ``--random-init`` keeps seed ``seed``'s draw of the encoder's architecture."""
    return out / "random-init" / f"seed{seed}" / "model.pt"


def write_random_starts(runs: Sequence[Run], checkpoint: Path, out: Path) -> None:
    """``--random-init``: each seed's draw of ``checkpoint``'s architecture (fairseq's
    initialisation under the seed, its vocabulary beside it), written where ``random_start`` says
    unless one newer than ``checkpoint`` is there already."""
    from ..encoder_checkpoints import random_init_checkpoint

    for seed in sorted({run.seed for run in runs}):
        start = random_start(out, seed)
        if not start.exists() or start.stat().st_mtime_ns < checkpoint.stat().st_mtime_ns:
            random_init_checkpoint(checkpoint, start, seed=seed, error=BioConfigError)


def test_input(config: str, task: Dict[str, Any]) -> Tuple[str, List[str]]:
    """The file fairseq-bio-predict scores a run's test split from, and the options it needs
    (PubMedQA: the split)."""
    if config == SENTENCE and str(task["format"]) == "pubmedqa":
        return os.path.join(str(task["data"]), task["train_file"]), ["--split", "test"]
    return split_files(config, task)["test"], []


LOCK_FILE = ".fairseq-bio-blurb.lock"


def lock_out(out: Path):
    """An exclusive lock on ``<out>/.fairseq-bio-blurb.lock`` while this runner works there: two
    runners on one ``--out`` would redo and overwrite each other's runs. A file system without locks
    is run on unlocked.
    """
    import fcntl
    import socket

    out.mkdir(parents=True, exist_ok=True)
    f = open(out / LOCK_FILE, "a+", encoding="utf-8")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "its pid unknown"
        f.close()
        raise BioConfigError(
            f"{out}: another fairseq-bio-blurb is running there ({holder}); wait for it or give "
            "another --out"
        ) from None
    except OSError as e:  # e.g. a Lustre mount without -o flock
        logging.getLogger(__name__).warning("%s: not locked (%s)", out / LOCK_FILE, e)
        return f
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
    f.flush()
    return f

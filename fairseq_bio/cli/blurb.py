"""fairseq-bio-blurb: one encoder checkpoint fine-tuned and scored on every BLURB (or BLUE) dataset there is data for.

Each (dataset, learning rate, seed) is one ``fairseq-hydra-train`` process with the dataset's standard recipe (its
config or preset, PubMedBERT sec. 6.2's 10 % warm-up and linear decay, its epochs and batch size; the update budget
counted from the train file found), in its own run directory under ``--out``: ``cmd.txt`` (the command line),
``train.log`` (fairseq's json log), ``checkpoint_best.pt`` (the best dev checkpoint), ``test.log``
(``fairseq-validate`` of that checkpoint on the test split), the test predictions, and ``result.json``, written
atomically when everything else is there. A run with a ``result.json`` made by the same command from the same
encoder file is reused; a run without one (interrupted, failed) is done again from the start.

With ``--lr-grid`` each dataset's learning rate is the one with the best mean dev score over seeds, and its test
scores are reported (PubMedBERT sec. 6.2: hyperparameters are chosen on dev). ``results.md`` / ``.json`` / ``.png``
give per dataset the mean, standard deviation and median of the test scores over seeds, per task type the average,
and the benchmark score of ``fairseq_bio.metrics.blurb``: **partial**, with the types it covers, whenever a dataset
is missing (no data, not asked for, or every run failed).
"""

import argparse
import contextlib
import json
import logging
import math
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..metrics.blurb import BENCHMARKS, Benchmark, BenchmarkTask, benchmark_score, summarize_runs
from .predict import atomic_output, read_conll_predictions

REPO = Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO / "hydra_configs"
PLUGIN_DIR = REPO / "fairseq_bio"
BIN = Path(sys.executable).parent

TAGGING = "bio_tagging_ner"
SENTENCE = "bio_sentence_prediction"
TASK_NAMES = {TAGGING: "bio_tagging", SENTENCE: "bio_sentence_prediction"}

# What a run writes; all of it is removed before a run is done again, so nothing of an interrupted attempt is read.
RUN_OUTPUTS = ("result.json", "train.log", "train.out", "test.log", "checkpoint_best.pt", "checkpoint_last.pt",
               "predictions.tsv", "predictions.jsonl")  # fmt: skip


class BlurbError(Exception):
    """Bad arguments or data; printed as one line."""


class RunFailed(Exception):
    """One run did not finish; the message is one line and names the file to read."""


# ---------------------------------------------------------------------------------------------------------------
# The table: benchmark dataset -> how it is fine-tuned and scored here
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recipe:
    """How one benchmark dataset is fine-tuned and scored here (its task type and metric: ``metrics.blurb``)."""

    name: str  # the dataset's name in the benchmark registry (fairseq_bio.metrics.blurb)
    config: str  # fairseq-hydra-train --config-name
    data: str  # its directory under --data
    metric: str  # the key the task logs for the benchmark's metric: valid_<metric>, test_<metric>
    preset: Optional[str] = None  # sentence_task= (bio_sentence_prediction)
    overrides: Tuple[str, ...] = ()  # hydra overrides on top of the config / preset
    seeds: int = 5  # PubMedBERT sec. 6.2: five runs, ten for the small BIOSSES, PubMedQA and BioASQ
    score_from: str = "validate"  # "predictions": the test score is computed from the predictions (BLUE's HoC)
    source: str = ""  # where users get the data when it is not there
    version: str = ""  # how the files read here differ from the benchmark's own version
    alternative: Optional["Recipe"] = None  # the dataset in another form, run when this one's files are absent

    def command_base(self) -> List[str]:
        """The config (and preset) of this dataset's hydra command line."""
        return ["--config-name", self.config] + ([f"sentence_task={self.preset}"] if self.preset else [])


def _recipe(epochs: int, batch: int, lr: float) -> Tuple[str, ...]:
    """Overrides for a tagging dataset's epochs, batch size and learning rate (LinkBERT's BLURB script)."""
    return (f"optimization.max_epoch={epochs}", f"dataset.batch_size={batch}",
            f"optimizer.groups.default.lr_float={lr}", f"optimization.lr=[{lr}]")  # fmt: skip


_CRICHTON = "Crichton et al. 2017's split (cambridgeltl/MTL-Bioinformatics-2016), as BLURB uses it"
_BLUE_RELEASE = "github.com/ncbi-nlp/BLUE_Benchmark/releases/tag/0.1"
# BLUE's relation TSVs dummify entities by type (@drug$, @GENE-Y$, @problem$, overlaps as @drug-brand$): no marker
# list covers them all, so the row check that needs one is left off.
_BLUE_TSV = ("task.train_file=train.tsv", "task.valid_file=dev.tsv", "task.test_file=test.tsv", "task.unknown_labels=error",
             "task.entity_markers=''")  # fmt: skip

BLURB_RECIPES: Dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe("bc5-chem", TAGGING, "ner/BC5CDR-chem", "f1", overrides=_recipe(20, 32, 5e-5),
               source=f"BC5CDR-chem in CoNLL form, {_CRICHTON}; or fairseq-bio-convert-tagging pubtator on the CDR "
               "corpus with --types Chemical"),
        Recipe("bc5-disease", TAGGING, "ner/BC5CDR-disease", "f1", overrides=_recipe(8, 16, 5e-5),
               source=f"BC5CDR-disease in CoNLL form, {_CRICHTON}"),
        Recipe("ncbi-disease", TAGGING, "ner/NCBI-disease", "f1", overrides=_recipe(20, 32, 5e-5),
               source=f"NCBI-disease in CoNLL form, {_CRICHTON}"),
        Recipe("bc2gm", TAGGING, "ner/BC2GM", "f1", overrides=_recipe(50, 32, 6e-5),
               source=f"BC2GM in CoNLL form, {_CRICHTON}"),
        Recipe("jnlpba", TAGGING, "ner/JNLPBA", "f1", overrides=_recipe(5, 16, 1e-5),
               source=f"JNLPBA in CoNLL form, {_CRICHTON}"),
        Recipe("ebm-pico", TAGGING, "pico/EBM-PICO", "word_macro_f1",
               overrides=_recipe(1, 32, 5e-5) + ("checkpoint.best_checkpoint_metric=word_macro_f1",),
               source="fairseq-bio-convert-tagging ebm-nlp ebm_nlp_2_00.tar.gz --out <data>/pico/EBM-PICO "
               "(github.com/bepnye/EBM-NLP)"),
        Recipe("chemprot", SENTENCE, "re/ChemProt", "f1", "re_chemprot",
               source="BLURB's ChemProt JSON lines (licence-restricted: BioCreative VI ChemProt corpus)"),
        Recipe("ddi", SENTENCE, "re/DDI", "f1", "re_ddi", source="BLURB's DDI JSON lines"),
        Recipe("gad", SENTENCE, "re/GAD", "f1", "re_gad", source="BLUE/BioBERT's GAD TSV (fold 1)"),
        Recipe("biosses", SENTENCE, "biosses", "pearson", "biosses", seeds=10, source="BIOSSES TSV (BLUE's split)"),
        Recipe("hoc", SENTENCE, "hoc", "f1", "hoc", source="BLURB's HoC JSON lines (abstract level)"),
        Recipe("pubmedqa", SENTENCE, "pubmedqa", "accuracy", "pubmedqa", seeds=10,
               source="PubMedQA's ori_pqal.json with BLURB's blurb_split.json"),
        Recipe("bioasq", SENTENCE, "bioasq", "accuracy", "bioasq", seeds=10,
               source="BLURB's BioASQ yes/no JSON lines (registration-gated: participants-area.bioasq.org)"),
    )
}  # fmt: skip

BLUE_RECIPES: Dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe("medsts", SENTENCE, "blue/MedSTS", "pearson", "biosses", ("task.max_score=5.0",), seeds=10,
               source="MedSTS (clinical, licence-gated: Mayo Clinic) as a TSV with sentence1, sentence2, score 0-5"),
        Recipe("biosses", SENTENCE, "biosses", "pearson", "biosses", seeds=10, source="BIOSSES TSV (BLUE's split)"),
        Recipe("bc5cdr-disease", TAGGING, "ner/BC5CDR-disease", "f1", overrides=_recipe(8, 16, 5e-5),
               source=f"BC5CDR-disease in CoNLL form ({_BLUE_RELEASE})",
               version="Crichton et al.'s preprocessing of the same 500/500/500 CDR abstracts (BLURB's; 4,560 / 4,581 "
               "/ 4,797 sentences), not BLUE's own (4,182 / 4,244 / 4,424)"),
        Recipe("bc5cdr-chemical", TAGGING, "ner/BC5CDR-chem", "f1", overrides=_recipe(20, 32, 5e-5),
               source=f"BC5CDR-chemical in CoNLL form ({_BLUE_RELEASE})",
               version="Crichton et al.'s preprocessing when read from ner/BC5CDR-chem (BLURB's), not BLUE's own"),
        Recipe("share-clefe", TAGGING, "blue/ShARe-CLEFE", "f1", overrides=_recipe(20, 32, 5e-5),
               source="ShARe/CLEF eHealth 2013 task 1 (clinical, PhysioNet credentialed access), converted to CoNLL"),
        Recipe("ddi", SENTENCE, "blue/DDI", "f1", "re_ddi", _BLUE_TSV + (
               "task.labels='DDI-false,DDI-advise,DDI-effect,DDI-int,DDI-mechanism'", "task.negative_labels=DDI-false"),
               source=f"BLUE's DDI TSV (index, sentence, label; {_BLUE_RELEASE}); BLURB's re/DDI is another version"),
        Recipe("chemprot", SENTENCE, "blue/ChemProt", "f1", "re_chemprot", _BLUE_TSV,
               source=f"BLUE's ChemProt TSV (index, sentence, label; {_BLUE_RELEASE})"),
        Recipe("i2b2-2010", SENTENCE, "blue/i2b2-2010", "f1", "re_chemprot", _BLUE_TSV + (
               "task.labels='false,PIP,TeCP,TeRP,TrAP,TrCP,TrIP,TrNAP,TrWP'", "task.negative_labels='false'"),
               source="i2b2-2010 relations (clinical, n2c2 data use agreement) as BLUE's TSV (create_i2b2_bert.py)"),
        Recipe("hoc", SENTENCE, "blue/HoC", "example_f1", "hoc_blue", score_from="predictions",
               source=f"BLUE's HoC ({_BLUE_RELEASE}: 1,108 / 157 / 315 abstracts as train/dev/test.tsv of sentences: "
               "index <PMID>_s<n>, sentence, labels), or the same grouped per abstract into JSON lines",
               alternative=Recipe("hoc", SENTENCE, "blue/HoC", "f1", "hoc", score_from="predictions",
                                  source=f"BLUE's HoC ({_BLUE_RELEASE}) grouped per abstract into JSON lines "
                                  "{\"sentence\", \"label\": 10 x 0/1 in BLUE's label order, \"id\": PMID}")),
        Recipe("mednli", SENTENCE, "blue/MedNLI", "accuracy", "mednli",
               source="MedNLI (clinical, PhysioNet credentialed access: physionet.org/content/mednli)"),
    )
}  # fmt: skip

RECIPES = {"blurb": BLURB_RECIPES, "blue": BLUE_RECIPES}


def resolve_tasks(benchmark: Benchmark, tasks: str) -> List[str]:
    """Registry names of ``--tasks`` (``all``, or names / aliases separated by commas), in table order."""
    if tasks.strip().lower() == "all":
        return list(benchmark.names())
    chosen = set()
    for name in (n.strip() for n in tasks.split(",")):
        if not name:
            continue
        try:
            chosen.add(benchmark.task(name).name)
        except ValueError as e:
            raise BlurbError(str(e)) from None
    if not chosen:
        raise BlurbError("--tasks names no dataset")
    return [n for n in benchmark.names() if n in chosen]


# ---------------------------------------------------------------------------------------------------------------
# Planning: composed configs, data checks, update budgets, command lines
# ---------------------------------------------------------------------------------------------------------------


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


def _names(value: Any) -> List[str]:
    return [n.strip() for n in str(value or "").split(",") if n.strip()]


def compose(recipe: Recipe, overrides: Sequence[str]) -> Dict[str, Any]:
    """The job config fairseq-hydra-train composes for ``recipe``'s config, preset and overrides, then
    ``overrides`` (fairseq's schema included)."""
    from fairseq.dataclass.initialize import hydra_init
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    hydra_init(recipe.config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # hydra 1.1's note on schemas registered under the config's name
        with initialize_config_dir(config_dir=str(CONFIG_DIR), job_name="fairseq-bio-blurb", version_base="1.1"):
            try:
                overrides = merge_overrides(recipe.command_base()[2:], recipe.overrides, overrides)
                cfg = hydra_compose(recipe.config, overrides=overrides)
            except Exception as e:  # hydra's messages span lines: keep the first
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise BlurbError(f"{recipe.name}: the overrides do not compose with {recipe.config}: {first}") from None
    return OmegaConf.to_container(cfg, resolve=False)


def split_files(config: str, task: Dict[str, Any]) -> Dict[str, str]:
    """{split: path} of the files a run reads (a split cut from train, or PubMedQA's split file, as the task does)."""
    data = str(task["data"])
    if config == TAGGING:
        return {s: os.path.join(data, task[f"{s}_file"]) for s in ("train", "valid", "test")}
    ext = os.path.splitext(str(task["train_file"]))[1]
    if str(task["format"]) == "pubmedqa":
        return {"train": os.path.join(data, task["train_file"]), "split": os.path.join(data, task["split_file"])}
    files = {"train": os.path.join(data, task["train_file"])}
    if not task.get("valid_from_train"):
        files["valid"] = os.path.join(data, task.get("valid_file") or f"valid{ext}")
    files["test"] = os.path.join(data, task.get("test_file") or f"test{ext}")
    return files


def train_examples(config: str, task: Dict[str, Any]) -> int:
    """Training examples the task will read (rows it skips and rows held out for dev not counted)."""
    from ..data import sentence_data as sd

    path = os.path.join(str(task["data"]), task["train_file"])
    if config == TAGGING:
        from ..data.conll import read_conll

        return len(read_conll(path))
    fmt = sd.file_format(path, str(task["format"]))
    fields, label = _names(task["text_fields"]), task["label_field"]
    if fmt == "pubmedqa":
        examples = sd.read_pubmedqa(path, os.path.join(str(task["data"]), task["split_file"]), "train", label)
    elif fmt == "tsv":
        examples = sd.read_tsv(path, fields, label)
    else:
        examples = sd.read_jsonl(path, fields, label, task.get("id_field"))
    n_valid = int(task.get("valid_from_train") or 0)
    if n_valid and fmt != "pubmedqa":
        examples = examples[:-n_valid]
    known = set(_names(task.get("labels")))
    if task.get("kind") == "classification" and known and task.get("unknown_labels") == "skip":
        examples = [ex for ex in examples if str(ex.label).strip() in known]
    return len(examples)


@dataclass
class Budget:
    """A run's update budget: PubMedBERT sec. 6.2's warm-up over the first 10 % of steps, then linear decay."""

    max_update: int
    max_epoch: int
    warmup: int
    train_examples: Optional[int] = None
    batch: Optional[int] = None

    def overrides(self) -> List[str]:
        return [f"optimization.max_update={self.max_update}", f"optimization.max_epoch={self.max_epoch}",
                f"optimizer.groups.default.lr_scheduler.warmup_updates={self.warmup}"]  # fmt: skip


def update_budget(config: str, cfg: Dict[str, Any], max_epoch: Optional[int], max_update: Optional[int]) -> Budget:
    """Updates = epochs x batches of the train file found (``max_update`` given: that many, for smoke runs)."""
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
    """One dataset's runs: where its data is, its composed config, overrides and budget, its lrs and seeds."""

    recipe: Recipe
    task: BenchmarkTask
    data: Path
    cfg: Dict[str, Any]
    overrides: List[str]  # the runner's and the recipe's (paths, budget, the dataset's hyperparameters)
    user_overrides: List[str]  # from the command line: they win over everything else
    budget: Budget
    lrs: List[float]
    seeds: List[int]


@dataclass
class Run:
    """One fairseq-hydra-train process: (dataset, lr, seed), its directory and command lines."""

    plan: Plan
    lr: float
    seed: int
    dir: Path
    command: List[str]
    validate: List[str]
    identity: Dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.plan.recipe.name} lr={self.lr:g} seed={self.seed}"


def _dataset_overrides(extra: Sequence[str], benchmark: Benchmark) -> Tuple[List[str], Dict[str, List[str]]]:
    """Extra overrides for every run, and ``<dataset>:key=value`` ones for one dataset's runs."""
    common, per_dataset = [], {}
    for item in extra:
        key = _key(item)
        if ":" in key:
            name, item = item.split(":", 1)
            try:
                per_dataset.setdefault(benchmark.task(name).name, []).append(item)
            except ValueError as e:
                raise BlurbError(f"override {name}:{item}: {e}") from None
        else:
            common.append(item)
    return common, per_dataset


def encoder_fingerprint(checkpoint: Path) -> Dict[str, Any]:
    """What identifies the encoder file a run started from (a re-trained file at the same path is another one)."""
    stat = checkpoint.stat()
    return {"path": str(checkpoint), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def plan_runs(args, benchmark: Benchmark, names: Sequence[str]) -> Tuple[List[Plan], Dict[str, str]]:
    """The plans of the datasets with data, and {dataset: why it is missing} for the benchmark's others."""
    recipes = RECIPES[args.preset]
    extra, per_dataset = _dataset_overrides(args.overrides, benchmark)
    dirs = {}
    for item in args.dataset_dir:
        if "=" not in item:
            raise BlurbError(f"--dataset-dir {item!r}: expected NAME=DIR")
        name, path = item.split("=", 1)
        try:
            dirs[benchmark.task(name).name] = Path(path).resolve()
        except ValueError as e:
            raise BlurbError(f"--dataset-dir {item}: {e}") from None
    plans, missing = [], {}
    for task in benchmark.tasks:
        if task.name not in names:
            missing[task.name] = "not run (not in --tasks)"
            continue
        recipe = recipes[task.name]
        data = dirs.get(task.name, (Path(args.data) / recipe.data).resolve())
        user = extra + per_dataset.get(task.name, [])
        if args.lr_grid and any(_key(o) in ("optimizer.groups.default.lr_float", "optimization.lr") for o in user):
            raise BlurbError(f"{task.name}: give learning rates with --lr-grid or as overrides, not both")
        given = [f"task.data={data}", f"checkpoint.restore_file={args.checkpoint}", *user]
        cfg = compose(recipe, given)
        absent = [p for p in split_files(recipe.config, cfg["task"]).values() if not os.path.exists(p)]
        if absent and recipe.alternative is not None:  # the dataset in its other form (BLUE's HoC: abstracts)
            other = compose(recipe.alternative, given)
            if all(os.path.exists(p) for p in split_files(recipe.alternative.config, other["task"]).values()):
                recipe, cfg, absent = recipe.alternative, other, []
        if absent:
            hint = recipe.source or cfg["task"].get("data_source") or ""
            missing[task.name] = f"no data: {absent[0]} not found" + (f" (needs {hint})" if hint else "")
            continue
        user_keys = {_key(o) for o in user}
        if "optimization.max_update" in user_keys:  # the user's budget; warm-up 10 % of it unless given too
            updates = int(cfg["optimization"]["max_update"])
            warmup = cfg["optimizer"]["groups"]["default"]["lr_scheduler"]["warmup_updates"]
            given = "optimizer.groups.default.lr_scheduler.warmup_updates" in user_keys
            budget = Budget(
                updates, int(cfg["optimization"]["max_epoch"]), int(warmup) if given else round(updates / 10)
            )
        else:
            try:
                budget = update_budget(recipe.config, cfg, args.max_epoch, args.max_update)
            except (ValueError, OSError) as e:  # the readers' one-line file:line errors
                raise BlurbError(f"{task.name}: {e}") from None
        lrs = args.lr_grid or [float(cfg["optimizer"]["groups"]["default"]["lr_float"])]
        seeds = list(range(1, (args.seeds or recipe.seeds) + 1))
        fixed = [
            f"task.data={data}",
            f"common.user_dir={PLUGIN_DIR}",
            f"checkpoint.restore_file={args.checkpoint}",
            # encoded texts are keyed by vocabulary, BPE and text: every run of a dataset shares them
            f"task.cache_dir={Path(args.out).resolve() / task.name / 'encoded'}",
            # runs are redone from the start, never resumed: only the best dev checkpoint is kept
            "checkpoint.no_last_checkpoints=true",
        ]
        if args.cpu:
            fixed.append("common.cpu=true")
        overrides = merge_overrides(fixed, recipe.overrides, budget.overrides())
        plans.append(Plan(recipe, task, data, cfg, overrides, user, budget, lrs, seeds))
    return plans, missing


def make_runs(plan: Plan, args) -> List[Run]:
    """Every (lr, seed) run of a plan with its two command lines."""
    out = Path(args.out).resolve()
    runs = []
    for lr in plan.lrs:
        for seed in plan.seeds:
            run_dir = out / plan.recipe.name / f"lr{lr:g}" / f"seed{seed}"
            own = [f"checkpoint.save_dir={run_dir}", f"common.log_file={run_dir / 'train.log'}", f"common.seed={seed}",
                   f"optimizer.groups.default.lr_float={lr}", f"optimization.lr=[{lr}]"]  # fmt: skip
            overrides = merge_overrides(plan.overrides, own, plan.user_overrides)
            command = [str(BIN / "fairseq-hydra-train"), "--config-dir", str(CONFIG_DIR),
                       *plan.recipe.command_base(), *overrides]  # fmt: skip
            validate = [str(BIN / "fairseq-validate"), str(plan.data), "--task", TASK_NAMES[plan.recipe.config],
                        "--user-dir", str(PLUGIN_DIR), "--path", str(run_dir / "checkpoint_best.pt"),
                        "--valid-subset", "test", "--batch-size", str(args.validate_batch_size),
                        "--log-format", "json"] + (["--cpu"] if args.cpu else [])  # fmt: skip
            identity = {"command": command, "validate": validate, "encoder": encoder_fingerprint(args.checkpoint)}
            runs.append(Run(plan, lr, seed, run_dir, command, validate, identity))
    return runs


# ---------------------------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------------------------


def write_json(path: Path, obj: Any) -> None:
    with atomic_output(path) as f:
        json.dump(obj, f, indent=1)
        f.write("\n")


def _number(value: Any) -> Any:
    """fairseq's json logs write numbers as strings ("0.37"): numbers again."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return int(value) if value.lstrip("-").isdigit() else float(value)
    return value


def json_entries(text: str, prefix: str) -> List[Dict[str, Any]]:
    """fairseq's json progress entries whose keys start with ``prefix`` (e.g. ``valid_``), in order."""
    entries = []
    for line in text.splitlines():
        start = line.find("{")
        if start < 0 or f'"{prefix}' not in line:
            continue
        try:
            entry = json.loads(line[start:])
        except ValueError:
            continue
        if isinstance(entry, dict) and any(k.startswith(prefix) for k in entry):
            entries.append({k[len(prefix) :]: _number(v) for k, v in entry.items() if k.startswith(prefix)})
    return entries


def valid_entries(log: Path) -> Dict[int, Dict[str, Any]]:
    """{num_updates: entry} of a training run's dev validations (fairseq may write an entry more than once)."""
    if not log.exists():
        return {}
    return {int(e["num_updates"]): e for e in json_entries(log.read_text(encoding="utf-8"), "valid_")
            if "num_updates" in e}  # fmt: skip


def examples_trained(log: Path) -> int:
    """Training examples a run went through: per epoch, its updates times fairseq's average batch size (``bsz``),
    from the epoch-end ``train_`` entries of its log."""
    if not log.exists():
        return 0
    epochs = [e for e in json_entries(log.read_text(encoding="utf-8"), "train_") if "num_updates" in e and "bsz" in e]
    total, before = 0.0, 0
    for entry in epochs:
        updates = int(entry["num_updates"])
        total += (updates - before) * float(entry["bsz"])
        before = updates
    return round(total)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def test_input(config: str, task: Dict[str, Any]) -> Tuple[str, List[str]]:
    """The file fairseq-bio-predict scores a run's test split from, and the options it needs (PubMedQA: the split)."""
    if config == SENTENCE and str(task["format"]) == "pubmedqa":
        return os.path.join(str(task["data"]), task["train_file"]), ["--split", "test"]
    return split_files(config, task)["test"], []


def read_predictions(config: str, out: Path) -> Tuple[List[Any], List[Any], List[str]]:
    """(gold, predicted, ids) of a fairseq-bio-predict output: conlleval's token, gold, prediction for tagging; JSON
    lines with the label, probabilities / 0-1 row / score per example for the sentence tasks."""
    if config == SENTENCE:
        rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines() if line.strip()]
        ids = [str(r["id"] if r.get("id") is not None else r["line"]) for r in rows]
        return [r["gold"] for r in rows], [r["pred"] for r in rows], ids
    gold, pred = read_conll_predictions(str(out))
    return gold, pred, [str(i) for i in range(len(gold))]


def predict(run: Run, args) -> Tuple[List[Any], List[Any], List[str]]:
    """(gold, predicted, ids) of the test set by fairseq-bio-predict on checkpoint_best, its output kept in the run
    directory (``predictions.tsv`` for tagging, ``predictions.jsonl`` for the sentence tasks)."""
    recipe = run.plan.recipe
    test, extra = test_input(recipe.config, run.plan.cfg["task"])
    out = run.dir / ("predictions.tsv" if recipe.config == TAGGING else "predictions.jsonl")
    command = [str(BIN / "fairseq-bio-predict"), "--checkpoint", str(run.dir / "checkpoint_best.pt"), "--input", test,
               "--output", str(out), "--overwrite", "--quiet", *extra] + (["--cpu"] if args.cpu else [])  # fmt: skip
    done = subprocess.run(command, cwd=run.dir, capture_output=True, text=True)
    if done.returncode:
        raise RunFailed(f"fairseq-bio-predict exited {done.returncode}: {_last_line(done.stderr)}")
    return read_predictions(recipe.config, out)


def execute(run: Run, args) -> Dict[str, Any]:
    """Train, validate on test and predict one run, or reuse its result; returns its record (with ``status``)."""
    result_path = run.dir / "result.json"
    status = "ran"
    if result_path.exists():
        try:
            old = json.loads(result_path.read_text(encoding="utf-8"))
        except ValueError:
            old = None
        if isinstance(old, dict) and old.get("identity") == run.identity:
            return {**old, "status": "reused"}
        status = "stale"  # made by another command or from another encoder file
    elif (run.dir / "cmd.txt").exists():
        status = "redone"  # an earlier attempt was interrupted or failed
    run.dir.mkdir(parents=True, exist_ok=True)
    for name in RUN_OUTPUTS:
        (run.dir / name).unlink(missing_ok=True)
    with atomic_output(run.dir / "cmd.txt") as f:
        f.write(shlex.join(run.command) + "\n")
    start = time.time()
    with open(run.dir / "train.out", "w", encoding="utf-8") as out:
        code = subprocess.run(run.command, cwd=run.dir, stdout=out, stderr=subprocess.STDOUT).returncode
    train_s = time.time() - start
    if code:
        tail = _last_line((run.dir / "train.out").read_text(encoding="utf-8", errors="replace"))
        raise RunFailed(f"fairseq-hydra-train exited {code}: {tail} (see {run.dir / 'train.out'})")
    selection = str(run.plan.cfg["checkpoint"]["best_checkpoint_metric"])
    dev = valid_entries(run.dir / "train.log")
    if not dev or not (run.dir / "checkpoint_best.pt").exists():
        raise RunFailed(f"no dev validation or no checkpoint_best.pt (see {run.dir / 'train.out'})")
    maximize = bool(run.plan.cfg["checkpoint"].get("maximize_best_checkpoint_metric", True))
    best = (max if maximize else min)(dev.values(), key=lambda e: float(e[selection]))
    scoring = time.time()
    validated = subprocess.run(run.validate, cwd=run.dir, capture_output=True, text=True)
    with atomic_output(run.dir / "test.log") as f:
        f.write(validated.stdout + validated.stderr)
    if validated.returncode:
        raise RunFailed(f"fairseq-validate exited {validated.returncode}: {_last_line(validated.stderr)}")
    tests = json_entries(validated.stdout + validated.stderr, "test_")
    if not tests:
        raise RunFailed(f"fairseq-validate printed no test metrics (see {run.dir / 'test.log'})")
    test = tests[-1]
    recipe, bench = run.plan.recipe, run.plan.task
    gold, pred, ids = predict(run, args)
    score_s, trained = time.time() - scoring, examples_trained(run.dir / "train.log")
    options = {"ids": ids} if bench.metric.startswith("hoc") else {}
    predicted = 100 * bench.score(gold, pred, **options)
    trivial = bench.trivial_baseline(gold, **options)
    if recipe.score_from == "predictions":
        test_metric = predicted
    else:
        if recipe.metric not in test:
            raise RunFailed(f"fairseq-validate logged no {recipe.metric} (see {run.dir / 'test.log'})")
        test_metric = float(test[recipe.metric])
    record = {
        "dataset": recipe.name,
        "title": bench.title,
        "task_type": bench.task_type,
        "metric": bench.metric,
        "metric_key": recipe.metric,
        "lr": run.lr,
        "seed": run.seed,
        "run_dir": str(run.dir),
        "updates": max(dev),
        "dev_metric": float(best[selection]),
        "dev_selected_on": selection,
        "dev": best,
        "test_metric": test_metric,
        "test": test,
        "test_metric_from_predictions": predicted,
        "trivial_baseline": 100 * trivial.score,
        "trivial_prediction": trivial.prediction,
        "test_examples": len(gold),
        "predictions": "predictions.tsv" if recipe.config == TAGGING else "predictions.jsonl",
        "train_s": round(train_s, 1),
        "train_examples": trained,
        "train_examples_per_s": round(trained / train_s, 2) if train_s > 0 else None,
        "test_examples_per_s": round(len(gold) / score_s, 2) if score_s > 0 else None,
        "wall_s": round(time.time() - start, 1),
        "identity": run.identity,
    }
    write_json(result_path, record)
    return {**record, "status": status}


# ---------------------------------------------------------------------------------------------------------------
# Aggregation and report
# ---------------------------------------------------------------------------------------------------------------


def aggregate(benchmark: Benchmark, records: Sequence[Dict[str, Any]], missing: Dict[str, str]) -> Dict[str, Any]:
    """Per dataset (the lr with the best mean dev score; its test scores over seeds), per type, and the score."""
    missing = dict(missing)
    datasets: Dict[str, Dict[str, Any]] = {}
    for task in benchmark.tasks:
        done = [r for r in records if r["dataset"] == task.name and r.get("test_metric") is not None]
        if not done:
            if task.name not in missing:
                missing[task.name] = "every run failed"
            continue
        by_lr: Dict[float, List[Dict[str, Any]]] = {}
        for r in sorted(done, key=lambda r: (r["lr"], r["seed"])):
            by_lr.setdefault(r["lr"], []).append(r)
        dev_by_lr = {lr: statistics.fmean(r["dev_metric"] for r in rs) for lr, rs in by_lr.items()}
        lr = max(dev_by_lr, key=lambda k: (dev_by_lr[k], -k))
        chosen = by_lr[lr]
        summary = summarize_runs([r["test_metric"] for r in chosen], task.name)
        datasets[task.name] = {
            "title": task.title,
            "task_type": task.task_type,
            "metric": task.metric,
            "n": summary.n,
            "mean": summary.mean,
            "std": summary.std,
            "median": summary.median,
            "values": [r["test_metric"] for r in chosen],
            "seeds": [r["seed"] for r in chosen],
            "lr": lr,
            "dev_mean": dev_by_lr[lr],
            "dev_selected_on": chosen[0].get("dev_selected_on"),
            "dev_by_lr": {f"{k:g}": v for k, v in dev_by_lr.items()},
            "wall_s": round(sum(r.get("wall_s", 0.0) for r in done), 1),
            "train_examples_per_s": _rate(done, "train_examples", "train_s"),
            **trivial_flag(summary.mean, chosen[0]),
        }
    score = benchmark_score({t.name: datasets[t.name]["values"] if t.name in datasets else None
                             for t in benchmark.tasks}, benchmark)  # fmt: skip
    return {
        "benchmark": benchmark.name,
        "aggregate": "macro average over task types" if benchmark.aggregate == "by_type" else "mean over datasets",
        "datasets": datasets,
        "per_type": score.per_type,
        "score": score.to_dict(),
        "summary": score.summary(),
        "missing": {name: missing[name] for name in benchmark.names() if name in missing},
    }


TRIVIAL_MARGIN = 1.0  # points: a mean test score this close to the trivial baseline is flagged


def trivial_flag(mean: float, record: Dict[str, Any]) -> Dict[str, Any]:
    """The dataset's trivial baseline (from the gold test labels, ``BenchmarkTask.trivial_baseline``) and where the
    mean test score stands to it: ``at`` (within TRIVIAL_MARGIN points), ``below``, ``above``; None for records
    written before the baseline was kept."""
    baseline = record.get("trivial_baseline")
    if baseline is None:
        return {"trivial_baseline": None, "trivial_prediction": None, "vs_trivial": None}
    vs = "at" if abs(mean - baseline) <= TRIVIAL_MARGIN else ("below" if mean < baseline else "above")
    return {"trivial_baseline": baseline, "trivial_prediction": record.get("trivial_prediction"), "vs_trivial": vs}


def trivial_notes(datasets: Dict[str, Dict[str, Any]]) -> List[str]:
    """One line per dataset whose mean test score is at (or below) its trivial baseline."""
    notes = []
    for d in datasets.values():
        if d.get("vs_trivial") in ("at", "below"):
            where = "at" if d["vs_trivial"] == "at" else "below"
            notes.append(f"- **{d['title']} {d['mean']:.2f} is {where} the trivial baseline** "
                         f"({d['trivial_baseline']:.2f}: {d['trivial_prediction']}): the model has learned nothing "
                         "measurable there (too few updates, a learning rate too high or too low, or a bug)")  # fmt: skip
    return notes


def _rate(records: Sequence[Dict[str, Any]], count: str, seconds: str) -> Optional[float]:
    """Examples per second over runs (total examples / total seconds); None for records made before it was kept."""
    timed = [r for r in records if r.get(count) and r.get(seconds)]
    return round(sum(r[count] for r in timed) / sum(r[seconds] for r in timed), 2) if timed else None


def _fmt(value: Optional[float]) -> str:
    return "–" if value is None else f"{value:.2f}"


def _dev(d: Dict[str, Any]) -> str:
    """The mean dev score and the metric checkpoints were selected on (BLUE's HoC: BLURB's F1, not its own)."""
    return _fmt(d.get("dev_mean")) + (f" ({d['dev_selected_on']})" if d.get("dev_selected_on") else "")


def render_markdown(results: Dict[str, Any]) -> str:
    """results.md: the score (marked partial), per-dataset and per-type tables, what is missing, every run."""
    bench = BENCHMARKS[results["benchmark"].lower()]
    score = results["score"]
    lines = [f"# {results['benchmark']} results", ""]
    if results.get("checkpoint"):
        lines += [f"Encoder: `{results['checkpoint']}`", ""]
    head = f"**{results['benchmark']} score: {_fmt(score['score'])}**"
    if score["partial"]:
        n_types = len(score["covered_types"]) + len(score["missing_types"])
        head += (f" — **partial**: covers {len(score['covered_types'])} of {n_types} task types "
                 f"({', '.join(score['covered_types']) or 'none'})")  # fmt: skip
        if score["incomplete_types"]:
            head += f"; in part: {', '.join(score['incomplete_types'])}"
        head += f"; {len(score['missing'])} of {len(bench.tasks)} datasets missing (listed below)"
    lines += [head, "", f"The score is the {results['aggregate']} ({results['benchmark']}'s own rule); test scores "
              "x 100, of the best dev checkpoint of each run.", ""]  # fmt: skip
    lines += ["| dataset | task type | metric | n | mean ± std | trivial baseline | median | lr | dev mean (selected on) "
              "| wall (s) | train examples/s |",
              "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for name, d in results["datasets"].items():
        flag = {"at": " ⚠ at trivial", "below": " ⚠ below trivial"}.get(d.get("vs_trivial"), "")
        lines.append(f"| {d['title']} | {d['task_type']} | {d['metric']} | {d['n']} | {d['mean']:.2f} ± "
                     f"{d['std']:.2f}{flag} | {_fmt(d.get('trivial_baseline'))} | {d['median']:.2f} | {d['lr']:g} | "
                     f"{_dev(d)} | {d.get('wall_s', 0):.0f} | {_fmt(d.get('train_examples_per_s'))} |")  # fmt: skip
    notes = trivial_notes(results["datasets"])
    lines += ["", "Trivial baseline: the best score of one answer given to every test example (each class; every "
              "word one tag; every label row all 0, all 1 or the per-label majority; every score the mean), from the "
              "gold labels, by the dataset's own metric."]  # fmt: skip
    if notes:
        lines += [""] + notes
    lines += ["", "| task type | datasets | average |", "| --- | ---: | ---: |"]
    for task_type in bench.task_types:
        names = bench.names([task_type])
        have = [n for n in names if n in results["datasets"]]
        value = results["per_type"].get(task_type)
        lines.append(f"| {task_type} | {len(have)} of {len(names)} | {_fmt(value)} |")
    if results["missing"]:
        lines += ["", "Missing (not in the score):", ""]
        titles = {t.name: t.title for t in bench.tasks}
        lines += [f"- {titles[name]}: {why}" for name, why in results["missing"].items()]
    notes = results.get("versions") or {}
    if notes:
        lines += ["", "Dataset versions:", ""] + [f"- {name}: {note}" for name, note in notes.items()]
    runs = results.get("runs") or []
    if runs:
        lines += ["", "Per run: wall time of training and scoring together; examples/s of training (the "
                  "fairseq-hydra-train process: examples trained on / its wall time, start-up, dev validation and "
                  "checkpoint saves included) and of test scoring (fairseq-validate and fairseq-bio-predict).", "",
                  "| run | status | updates | dev | test | wall (s) | train examples/s | test examples/s | directory |",
                  "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]  # fmt: skip
        for r in runs:
            lines.append(f"| {r['dataset']} lr={r['lr']:g} seed={r['seed']} | {r['status']} | {r.get('updates', '')} | "
                         f"{_fmt(r.get('dev_metric'))} | {_fmt(r.get('test_metric'))} | {r.get('wall_s', 0):.0f} | "
                         f"{_fmt(r.get('train_examples_per_s'))} | {_fmt(r.get('test_examples_per_s'))} | "
                         f"`{r['run_dir']}` |")  # fmt: skip
        failed = [r for r in runs if r["status"] == "failed"]
        if failed:
            lines += ["", "Failed runs:", ""] + [f"- {r['dataset']} lr={r['lr']:g} seed={r['seed']}: {r['error']}"
                                                  for r in failed]  # fmt: skip
    return "\n".join(lines) + "\n"


def render_chart(results: Dict[str, Any], path: Path) -> None:
    """results.png: test mean ± std per dataset coloured by task type, the per-type averages and the score."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bench = BENCHMARKS[results["benchmark"].lower()]
    colours = {t: plt.get_cmap("tab10")(i) for i, t in enumerate(bench.task_types)}
    names = list(results["datasets"])
    fig, (ax, ax_types) = plt.subplots(1, 2, figsize=(4 + 0.7 * max(len(names), 1) + 0.6 * len(bench.task_types), 4.5),
                                       gridspec_kw={"width_ratios": [max(len(names), 1), len(bench.task_types)]})  # fmt: skip
    means = [results["datasets"][n]["mean"] for n in names]
    stds = [results["datasets"][n]["std"] for n in names]
    ax.bar(range(len(names)), means, yerr=stds, capsize=3,
           color=[colours[results["datasets"][n]["task_type"]] for n in names])  # fmt: skip
    label = "trivial baseline"
    for i, n in enumerate(names):  # the trivial baseline as a black tick on each bar; a flagged score in red
        d = results["datasets"][n]
        if d.get("trivial_baseline") is not None:
            ax.plot([i - 0.4, i + 0.4], [d["trivial_baseline"]] * 2, color="black", linewidth=2, label=label)
            label = None
        if d.get("vs_trivial") in ("at", "below"):
            ax.text(i, d["mean"] + 3, "trivial", color="red", ha="center", fontsize=8, rotation=90)
    if label is None:
        ax.legend(fontsize=7, loc="upper right")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([f"{results['datasets'][n]['title']}\n(n={results['datasets'][n]['n']})" for n in names],
                       rotation=45, ha="right", fontsize=8)  # fmt: skip
    ax.set_ylabel("test score (mean ± std over seeds)")
    ax.set_ylim(0, 100)
    types = list(bench.task_types)
    values = [results["per_type"].get(t) for t in types]
    ax_types.bar(range(len(types)), [v or 0 for v in values], color=[colours[t] for t in types])
    for i, v in enumerate(values):
        if v is None:
            ax_types.text(i, 2, "missing", rotation=90, ha="center", va="bottom", fontsize=8)
    ax_types.set_xticks(range(len(types)))
    ax_types.set_xticklabels(types, rotation=45, ha="right", fontsize=8)
    ax_types.set_ylim(0, 100)
    score = results["score"]
    if score["score"] is not None:
        ax_types.axhline(score["score"], color="black", linestyle="--", linewidth=1)
        label = f"{results['benchmark']} {score['score']:.2f}" + (" (partial)" if score["partial"] else "")
        ax_types.text(len(types) - 0.5, score["score"] + 1, label, ha="right", va="bottom", fontsize=8)
    ax_types.set_title("per task type", fontsize=9)
    ax.set_title("per dataset", fontsize=9)
    title = f"{results['benchmark']} score {_fmt(score['score'])}"
    if score["partial"]:
        title += f" (PARTIAL: {len(score['covered_types'])} of {len(types)} task types, {len(score['missing'])} " \
                 "datasets missing)"  # fmt: skip
    fig.suptitle(title)
    fig.tight_layout()
    with atomic_output(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)


def write_results(out: Path, results: Dict[str, Any]) -> None:
    """results.json, results.md and results.png under ``out``, each written atomically."""
    write_json(out / "results.json", results)
    with atomic_output(out / "results.md") as f:
        f.write(render_markdown(results))
    render_chart(results, out / "results.png")


# ---------------------------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------------------------


def _floats(value: str) -> List[float]:
    try:
        values = [float(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a comma-separated list of numbers") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{value!r}: learning rates must be positive")
    return sorted(set(values))


def _positive(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive integer")
    return int(value)


def _span(seeds: Sequence[int]) -> str:
    return f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fairseq-bio-blurb",
        description=__doc__.split("\n\n")[0],
        epilog="Hydra overrides after `--` go to every run (`<dataset>:key=value`: to that dataset's runs only).",
    )
    parser.add_argument("--checkpoint", required=True, help="the encoder checkpoint (dict.txt + bpe.json beside it)")
    parser.add_argument("--tasks", default="all", help="all, or dataset names separated by commas (ncbi,gad,hoc,...)")
    parser.add_argument(
        "--seeds", type=_positive, default=None, help="seeds per dataset (default: 5; 10 for BIOSSES, PubMedQA, BioASQ)"
    )
    parser.add_argument("--data", required=True, help="root of the task data (ner/NCBI-disease, re/GAD, hoc, ...)")
    parser.add_argument("--dataset-dir", action="append", default=[], metavar="NAME=DIR",
                        help="one dataset's directory, instead of its place under --data (repeatable)")  # fmt: skip
    parser.add_argument("--out", default="runs/blurb", help="where runs and results go (default: runs/blurb)")
    parser.add_argument("--preset", choices=sorted(RECIPES), default="blurb", help="benchmark: blurb or blue")
    parser.add_argument("--lr-grid", type=_floats, default=None, help="learning rates to try, e.g. 1e-5,3e-5,5e-5")
    parser.add_argument("--max-epoch", type=_positive, default=None, help="epochs instead of each dataset's own")
    parser.add_argument("--max-update", type=_positive, default=None, help="updates per run (smoke runs)")
    parser.add_argument("--validate-batch-size", type=_positive, default=32, help="batch size of the test scoring")
    parser.add_argument("--cpu", action="store_true", help="train and score on the CPU even when a GPU is present")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and the command lines, run nothing")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    overrides = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    args = build_parser().parse_args(argv)
    args.overrides = overrides
    benchmark = BENCHMARKS[args.preset]
    names = resolve_tasks(benchmark, args.tasks)
    args.checkpoint = Path(args.checkpoint).resolve()
    if not args.checkpoint.is_file():
        raise BlurbError(f"{args.checkpoint}: encoder checkpoint not found")
    if not Path(args.data).is_dir():
        raise BlurbError(f"{args.data}: --data is not a directory")
    # importing fairseq set the root logger to DEBUG; the runs' own logs are in their directories
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", force=True)
    out = Path(args.out).resolve()

    plans, missing = plan_runs(args, benchmark, names)
    runs = [run for plan in plans for run in make_runs(plan, args)]
    tag = f"[{args.preset}]"
    for name, why in missing.items():
        if not why.startswith("not run"):
            print(f"{tag} {name}: missing ({why})", flush=True)
    for plan in plans:
        b = plan.budget
        size = f"{b.train_examples} train examples, " if b.train_examples is not None else ""
        n_runs = len(plan.lrs) * len(plan.seeds)
        print(f"{tag} {plan.recipe.name}: {n_runs} run{'s' * (n_runs != 1)} ({size}{b.max_update} updates, "
              f"warm-up {b.warmup}, lr {','.join(f'{lr:g}' for lr in plan.lrs)}, seeds {_span(plan.seeds)})",
              flush=True)  # fmt: skip
    if args.dry_run:
        for run in runs:
            print(shlex.join(run.command))
        return 0
    if not plans:
        raise BlurbError(f"no data for any of {', '.join(names)} under {args.data} (see the lines above)")

    lock = lock_out(out)
    try:
        return run_all(runs, args, benchmark, plans, missing, out, tag)
    finally:
        lock.close()


LOCK_FILE = ".fairseq-bio-blurb.lock"


def lock_out(out: Path):
    """An exclusive lock on ``<out>/.fairseq-bio-blurb.lock`` while this runner works there: two runners on one
    ``--out`` would redo and overwrite each other's runs. A file system without locks is run on unlocked."""
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
        raise BlurbError(f"{out}: another fairseq-bio-blurb is running there ({holder}); wait for it or give "
                         "another --out") from None  # fmt: skip
    except OSError as e:  # e.g. a Lustre mount without -o flock
        logging.getLogger(__name__).warning("%s: not locked (%s)", out / LOCK_FILE, e)
        return f
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
    f.flush()
    return f


def run_all(runs: List[Run], args, benchmark: Benchmark, plans: List[Plan], missing: Dict[str, str], out: Path,
            tag: str) -> int:  # fmt: skip
    """Every run in turn (a failed one is reported and the others go on), then the results under ``out``."""
    records = []
    for i, run in enumerate(runs, 1):
        start = time.time()
        try:
            record = execute(run, args)
        except RunFailed as e:
            record = {"dataset": run.plan.recipe.name, "lr": run.lr, "seed": run.seed, "run_dir": str(run.dir),
                      "status": "failed", "error": str(e), "wall_s": round(time.time() - start, 1)}  # fmt: skip
        records.append(record)
        if record["status"] == "failed":
            what = f"FAILED: {record['error']}"
        else:
            what = f"test {record['metric_key']} {record['test_metric']:.2f} (dev {record['dev_metric']:.2f}"
            what += f"; trivial {record['trivial_baseline']:.2f})" if "trivial_baseline" in record else ")"
        print(f"{tag} {i}/{len(runs)} {run.label}: {record['status']}, {what}, {time.time() - start:.1f} s",
              flush=True)  # fmt: skip

    results = aggregate(benchmark, records, missing)
    counts = {s: sum(r["status"] == s for r in records) for s in ("ran", "redone", "stale", "reused", "failed")}
    results.update(
        checkpoint=str(args.checkpoint),
        preset=args.preset,
        data=str(Path(args.data).resolve()),
        lr_grid=args.lr_grid,
        overrides=args.overrides,
        counts=counts,
        versions={p.recipe.name: p.recipe.version for p in plans if p.recipe.version},
        budgets={p.recipe.name: vars(p.budget) for p in plans},
        runs=[{k: v for k, v in r.items() if k != "identity"} for r in records],
    )
    write_results(out, results)
    print(f"{tag} {results['summary']}")
    done = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    print(f"{tag} {len(records)} run{'s' * (len(records) != 1)}: {done}")
    print(f"{tag} wrote {out / 'results.md'}, results.json, results.png")
    return 1 if counts["failed"] else 0


def _terminated(signum, frame):
    # an exception, so that subprocess.run kills the fairseq-hydra-train it is waiting for (SIGTERM: a scheduler
    # ending the job) instead of leaving it running without us
    raise KeyboardInterrupt


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    signal.signal(signal.SIGTERM, _terminated)
    try:
        sys.exit(main(argv))
    except BlurbError as e:
        sys.exit(f"fairseq-bio-blurb: {e}")
    except KeyboardInterrupt:
        sys.exit("fairseq-bio-blurb: interrupted (finished runs are kept and reused next time)")


if __name__ == "__main__":
    cli_main()

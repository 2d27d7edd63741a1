"""The hydra callback of the shipped ``run_config/local`` that gives a fairseq-hydra-train run the
values of its recipe's paper table (``fairseq_bio.paper_tables``): ``recipe=finetune_bioelectra`` on
GAD trains at Table 7's lr, batch size, length and epochs, over those of ``sentence_task/re_gad``.

The dataset is the one of the runner's table (``datasets``) the data directory is named after, else
the first the ``sentence_task`` preset is run for; the command line wins over the row. When the row
changes the epochs or the batch size, the update budget and warm-up follow them (``plan``'s, from
the train file) unless ``optimization.max_update`` is on the command line. Each value set or kept
is logged in one line when the job starts. A sweep (``-m``) composes its jobs past the callback:
the plugin's hydra plugin gives each of them to ``apply_to_sweep_job``.
"""

import logging
from pathlib import Path
from typing import Any, List, Optional

from hydra.experimental.callback import Callback
from omegaconf import OmegaConf

from .. import paper_tables
from ..errors import BioError
from ..runs import shipped_config_dir
from .datasets import BENCHMARKS, RECIPES, SENTENCE, TAGGING
from .plan import update_budget

logger = logging.getLogger("fairseq_bio.paper_tables")
TASKS = {"bio_tagging": TAGGING, "bio_sentence_prediction": SENTENCE}  # task -> runner config
WARMUP = "optimizer.groups.default.lr_scheduler.warmup_updates"


class PaperTableValues(Callback):
    """Applies the table when the run starts (hydra's job config is copied from that config) and
    logs its notes once hydra has set up the job's logging."""

    def __init__(self) -> None:
        self.notes: List[str] = []

    def on_run_start(self, config, **kwargs) -> None:
        self.notes = apply_paper_table(config)

    def on_job_start(self, config, **kwargs) -> None:
        for note in self.notes:
            logger.info(note)
        self.notes = []


def apply_to_sweep_job(config) -> None:
    """``apply_paper_table`` to the config of one job of a sweep, its notes logged by the process
    that composes it (the one that submits, under SLURM)."""
    for note in apply_paper_table(config):
        logger.info(note)


def config_dir(config, recipe: str) -> Path:
    """The hydra config directory the run's recipe was read from (``--config-dir``)."""
    for source in config.hydra.runtime.config_sources:
        path = Path(str(source.path))
        if source.schema == "file" and (path / "recipe" / f"{recipe}.yaml").is_file():
            return path
    return shipped_config_dir()


def dataset_names(data: Any, preset: Optional[str]) -> List[str]:
    """The names, title and aliases of the dataset a run trains on: the one its data directory is
    named after, else those the ``sentence_task`` preset is run for (in table order)."""
    base = Path(str(data)).name
    for bench in BENCHMARKS.values():
        try:
            task = bench.task(base)
        except ValueError:
            continue
        return [task.name, task.title, *task.aliases]
    names: List[str] = []
    for key, recipes in RECIPES.items():
        for recipe in recipes.values():
            if preset and preset in (recipe.preset, getattr(recipe.alternative, "preset", None)):
                task = BENCHMARKS[key].task(recipe.name)
                names += [task.name, task.title, *task.aliases]
    return names


def apply_paper_table(config) -> List[str]:
    """Set the paper table's values in ``config`` (hydra's, its ``hydra`` node included) and
    return the notes to log; nothing without a table, a row, or a fine-tuning task of the runner."""
    choices = config.hydra.runtime.choices
    recipe = choices.get("recipe")
    task_name = OmegaConf.select(config, "task._name")
    if not recipe or task_name not in TASKS:
        return []
    configs = config_dir(config, recipe)
    table = paper_tables.load_table(recipe, configs)
    if table is None:
        return []
    preset = choices.get("sentence_task")
    names = dataset_names(OmegaConf.select(config, "task.data"), preset)
    given = dict.fromkeys(paper_tables.override_keys(config.hydra.overrides.task))
    notes = []
    if not names and "recipe" in given:  # said where the paper's recipe was asked for by name
        notes.append(
            f"recipe={recipe}: task.data={config.task.data} names none of the runner's datasets "
            f"(hydra_configs/runner/datasets.yaml): "
            + ("the default row of " if table.default else "")
            + f"{table.paper} {'applies' if table.default else 'not applied'}"
        )
    found = table.row(names)
    if found is None:  # the paper gives this dataset no values
        return notes
    changes, settled = paper_tables.settle(
        table,
        *found,
        lambda key: OmegaConf.select(config, key, default=paper_tables.ABSENT),
        given,
        paper_tables.composed_by(configs, choices),
    )
    notes += settled
    for key, value in changes.items():
        OmegaConf.update(config, key, value, merge=False)
    schedule = {"dataset.batch_size", "optimization.max_epoch"}
    if schedule & set(changes) and "optimization.max_update" not in given:
        notes.append(_rebudget(config, TASKS[task_name], WARMUP not in given))
    return notes


def _rebudget(config, runner_config: str, warmup: bool) -> str:
    """Set max_update (and the warm-up, 10 % of it) to the new epochs x batches; the note."""
    sections = {
        k: OmegaConf.to_container(config[k], resolve=True)
        for k in ("optimization", "dataset", "task")
    }
    try:
        budget = update_budget(runner_config, sections, None, None)
    except (BioError, OSError, ValueError) as e:
        return f"optimization.max_update={config.optimization.max_update} kept: {e}"
    OmegaConf.update(config, "optimization.max_update", budget.max_update, merge=False)
    if warmup and OmegaConf.select(config, WARMUP) is not None:
        OmegaConf.update(config, WARMUP, budget.warmup, merge=False)
    return (
        f"optimization.max_update={budget.max_update} (warm-up {budget.warmup}): "
        f"{budget.max_epoch} epochs of {budget.train_examples} train examples at {budget.batch}"
    )

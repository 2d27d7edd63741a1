"""Running fairseq-bio-blurb's runs: one training process (``runs.hydra_train``'s command line) and
one fairseq-bio-predict of the test split each, the dev scores read from fairseq's json log
(``runs.logged``), the test score computed from the predictions file, and result.json; a finished
run made by the same command from the same encoder file is reused.
"""

import json
import shlex
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

from ..files import atomic_write, write_json
from ..inference.predictions import read_predictions
from ..metrics.benchmark_scores import (
    CLASSIFICATION,
    MULTILABEL,
    Benchmark,
    TrivialBaseline,
    percentages,
)
from ..runs import Run as Process
from ..runs import capture, logged
from .datasets import TAGGING
from .plan import Plan, Run, comma_names
from .report import aggregate, write_results

# What a run writes; all of it is removed before a run is done again, so nothing of an interrupted
# attempt is read (test.log: fairseq-validate's, written by runners before the test score came from
# the predictions alone).
RUN_OUTPUTS = (
    "result.json",
    "train.log",
    "train.out",
    "test.log",
    "checkpoint_best.pt",
    "checkpoint_last.pt",
    "predictions.tsv",
    "predictions.jsonl",
)
# fairseq's mid-epoch checkpoints (checkpoint_<epoch>_<updates>.pt), written when a recipe validates
# every N updates (checkpoint.save_interval_updates: fairseq saves checkpoint_best only when it
# saves); runs are never resumed
INTERVAL_CHECKPOINTS = "checkpoint_[0-9]*_[0-9]*.pt"


def remove_interval_checkpoints(run_dir: Path) -> None:
    """Delete a run's mid-epoch checkpoints: only checkpoint_best.pt is kept."""
    for path in run_dir.glob(INTERVAL_CHECKPOINTS):
        path.unlink(missing_ok=True)


class RunFailed(Exception):
    """One run did not finish; the message is one line and names the file to read."""


def examples_trained(log: Path) -> int:
    """Training examples a run went through: per epoch, its updates times fairseq's average batch
    size (``bsz``), from the epoch-end ``train_`` entries of its log."""
    total, before = 0.0, 0
    for updates, entry in sorted(logged(log, "train").items()):
        if "bsz" in entry:
            total += (updates - before) * float(entry["bsz"])
            before = updates
    return round(total)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def made_by(stored: Any, identity: Dict[str, Any]) -> bool:
    """Whether a result.json's identity is this run's: the same training command from the same
    encoder file (one written while the test split was scored by fairseq-validate names that command
    too; the training is the same).
    """
    return isinstance(stored, dict) and all(stored.get(k) == v for k, v in identity.items())


def score_run(run: Run) -> Tuple[Dict[str, Any], TrivialBaseline, int]:
    """(test metrics in percent, trivial baseline, test examples) of a run's predictions file: the
    dataset's ``BenchmarkTask.scores`` (``prediction_scores``: what fairseq-bio-predict printed for
    the same file) with the task's negative classes, rows of one document grouped (HoC)."""
    bench, task = run.plan.task, run.plan.cfg["task"]
    gold, pred, ids = read_predictions(run.predictions, run.plan.recipe.config == TAGGING)
    options: Dict[str, Any] = {}
    if bench.kind == MULTILABEL:
        options["ids"] = ids
    if bench.kind == CLASSIFICATION:
        options["negatives"] = set(comma_names(task.get("negative_labels")))
    return (
        percentages(bench.scores(gold, pred, **options)),
        bench.trivial_baseline(gold, **options),
        len(gold),
    )


def execute(run: Run) -> Dict[str, Any]:
    """Train one run and predict its test split, or reuse its result; returns its record (with
    ``status``)."""
    result_path = run.dir / "result.json"
    status = "ran"
    if result_path.exists():
        try:
            old = json.loads(result_path.read_text(encoding="utf-8"))
        except ValueError:
            old = None
        if isinstance(old, dict) and made_by(old.get("identity"), run.identity):
            return {**old, "status": "reused"}
        status = "stale"  # made by another command or from another encoder file
    elif (run.dir / "cmd.txt").exists():
        status = "redone"  # an earlier attempt was interrupted or failed
    run.dir.mkdir(parents=True, exist_ok=True)
    for name in RUN_OUTPUTS:
        (run.dir / name).unlink(missing_ok=True)
    remove_interval_checkpoints(run.dir)
    with atomic_write(run.dir / "cmd.txt") as f:
        f.write(shlex.join(run.command) + "\n")
    start = time.time()
    # finish(): a SIGTERM to the runner (fairseq-bio-blurb raises KeyboardInterrupt) kills the
    # training with it
    training = Process(run.command, run.dir / "train.out", cwd=run.dir)
    code = training.finish()
    train_s = time.time() - start
    remove_interval_checkpoints(run.dir)
    if code:
        raise RunFailed(
            f"{training.name} exited {code}: {_last_line(training.output())} (see {training.out})"
        )
    selection = str(run.plan.cfg["checkpoint"]["best_checkpoint_metric"])
    dev = logged(run.dir / "train.log", "valid")
    if not dev or not (run.dir / "checkpoint_best.pt").exists():
        raise RunFailed(f"no dev validation or no checkpoint_best.pt (see {run.dir / 'train.out'})")
    maximize = bool(run.plan.cfg["checkpoint"].get("maximize_best_checkpoint_metric", True))
    best = (max if maximize else min)(dev.values(), key=lambda e: float(e[selection]))
    scoring = time.time()
    predicted = capture(run.predict, cwd=run.dir)
    if predicted.returncode:
        raise RunFailed(
            f"fairseq-bio-predict exited {predicted.returncode}: {_last_line(predicted.stderr)}"
        )
    test, trivial, n_test = score_run(run)
    score_s, trained = time.time() - scoring, examples_trained(run.dir / "train.log")
    bench = run.plan.task
    record = {
        "dataset": run.plan.recipe.name,
        "title": bench.title,
        "task_type": bench.task_type,
        "metric": bench.metric,
        "metric_key": bench.key,
        "lr": run.lr,
        **batch_field(run),
        "seed": run.seed,
        **fold_fields(run),
        "run_dir": str(run.dir),
        "updates": max(dev),
        "dev_metric": float(best[selection]),
        "dev_selected_on": selection,
        "dev": best,
        "test_metric": test[bench.key],
        "test": test,
        "trivial_baseline": 100 * trivial.score,
        "trivial_prediction": trivial.prediction,
        "test_examples": n_test,
        "predictions": run.predictions.name,
        "train_s": round(train_s, 1),
        "train_examples": trained,
        "train_examples_per_s": round(trained / train_s, 2) if train_s > 0 else None,
        "test_examples_per_s": round(n_test / score_s, 2) if score_s > 0 else None,
        "wall_s": round(time.time() - start, 1),
        "identity": run.identity,
    }
    write_json(result_path, record, indent=1)
    return {**record, "status": status}


def batch_field(run: Run) -> Dict[str, Any]:
    """A batch-size grid's run: its ``batch_size`` for its record (the grid point it is); nothing
    for other runs."""
    return {"batch_size": run.batch_size} if run.batch_size else {}


def fold_fields(run: Run) -> Dict[str, Any]:
    """A cross-validation run's ``fold`` (1..K) and ``folds`` (K) for its record; nothing for other
    runs."""
    return {"fold": run.fold.index, "folds": run.fold.k} if run.fold else {}


def run_all(
    runs: List[Run],
    args,
    benchmark: Benchmark,
    plans: List[Plan],
    missing: Dict[str, str],
    out: Path,
    tag: str,
) -> int:
    """Every run in turn (a failed one is reported and the others go on), then the results under
    ``out``."""
    records = []
    for i, run in enumerate(runs, 1):
        start = time.time()
        try:
            record = execute(run)
        except RunFailed as e:
            record = {
                "dataset": run.plan.recipe.name,
                "lr": run.lr,
                **batch_field(run),
                "seed": run.seed,
                **fold_fields(run),
                "run_dir": str(run.dir),
                "status": "failed",
                "error": str(e),
                "wall_s": round(time.time() - start, 1),
            }
        records.append(record)
        if record["status"] == "failed":
            what = f"FAILED: {record['error']}"
        else:
            what = f"test {record['metric_key']} {record['test_metric']:.2f} (dev {record['dev_metric']:.2f}"
            what += (
                f"; trivial {record['trivial_baseline']:.2f})"
                if "trivial_baseline" in record
                else ")"
            )
        print(
            f"{tag} {i}/{len(runs)} {run.label}: {record['status']}, {what}, {time.time() - start:.1f} s",
            flush=True,
        )

    results = aggregate(benchmark, records, missing)
    counts = {
        s: sum(r["status"] == s for r in records)
        for s in ("ran", "redone", "stale", "reused", "failed")
    }
    results.update(
        checkpoint=str(args.checkpoint),
        preset=args.preset,
        data=str(Path(args.data).resolve()),
        lr_grid=args.lr_grid,
        overrides=args.overrides,
        counts=counts,
        versions={p.recipe.name: p.recipe.version for p in plans if p.recipe.version},
        folds={p.recipe.name: len(p.folds) for p in plans if p.folds},
        budgets={p.recipe.name: vars(p.budget) for p in plans},
        runs=[{k: v for k, v in r.items() if k != "identity"} for r in records],
    )
    write_results(out, results)
    print(f"{tag} {results['summary']}")
    done = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    print(f"{tag} {len(records)} run{'s' * (len(records) != 1)}: {done}")
    print(f"{tag} wrote {out / 'results.md'}, results.json, results.png")
    return 1 if counts["failed"] else 0

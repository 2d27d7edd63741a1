"""Running fairseq-bio-blurb's runs: one training process (``runs.hydra_train``'s command line) and
one fairseq-bio-predict of the test split each, the dev scores read from fairseq's json log
(``runs.logged``), the test score computed from the predictions file, and result.json; a finished
run made by the same command from the same encoder file is reused. A resumable run (the SLURM
launcher's, ``runner.slurm``) keeps checkpoint_last.pt and resumes from it when started again.
The report of the records is ``report_runs``, whichever launcher ran them.
"""

import json
import shlex
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

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
    "trained.json",
)
# fairseq's mid-epoch checkpoints (checkpoint_<epoch>_<updates>.pt), written when a recipe validates
# every N updates (checkpoint.save_interval_updates: fairseq saves checkpoint_best only when it
# saves); a run resumes from checkpoint_last.pt only
INTERVAL_CHECKPOINTS = "checkpoint_[0-9]*_[0-9]*.pt"
TRAINED = "trained.json"  # a resumable run's training has ended well (``mark_trained``)
RESETS = ("reset_optimizer", "reset_lr_scheduler", "reset_meters", "reset_dataloader")


def remove_interval_checkpoints(run_dir: Path) -> None:
    """Delete a run's mid-epoch checkpoints: only checkpoint_best.pt is kept."""
    for path in run_dir.glob(INTERVAL_CHECKPOINTS):
        path.unlink(missing_ok=True)


class RunFailed(Exception):
    """One run did not finish; the message is one line and names the file to read."""


def resumable_command(run: Run) -> List[str]:
    """The run's training command made resumable: checkpoint_last.pt written (each epoch end, and on
    a pre-emption signal) and loaded when it is there, else the encoder through
    ``checkpoint.finetune_from_model`` (fairseq then sets every reset flag itself). It trains as
    ``run.command`` does, bit for bit; ``run.command`` stays the run's identity.
    """
    given = [a for a in run.command if a.startswith("checkpoint.restore_file=")]
    encoder = given[-1].split("=", 1)[1]
    return [
        *run.command,
        "checkpoint.no_last_checkpoints=false",
        "checkpoint.restore_file=checkpoint_last.pt",
        f"checkpoint.finetune_from_model={encoder}",
        *(f"checkpoint.{flag}=false" for flag in RESETS),
    ]


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


def reused_record(run: Run) -> Optional[Dict[str, Any]]:
    """The record of a run finished before by the same command from the same encoder file (its
    result.json, ``status`` "reused"), else None."""
    try:
        old = json.loads((run.dir / "result.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(old, dict) and made_by(old.get("identity"), run.identity):
        return {**old, "status": "reused"}
    return None


def _resumable(run: Run, command: List[str]) -> bool:
    """Whether an earlier attempt of ``command`` left something to resume from: checkpoint_last.pt,
    or its whole training (trained.json)."""
    try:
        before = (run.dir / "cmd.txt").read_text(encoding="utf-8")
    except OSError:
        return False
    done = (run.dir / "checkpoint_best.pt").exists() and (run.dir / TRAINED).exists()
    return before == shlex.join(command) + "\n" and (
        done or (run.dir / "checkpoint_last.pt").exists()
    )


def mark_trained(run: Run, train_s: float) -> None:
    """A resumable run's training ended well: a run stopped from here on predicts again and trains
    no more (fairseq resumed from a finished run's checkpoint_last.pt would train one update more).
    """
    write_json(run.dir / TRAINED, {"train_s": round(train_s, 1)})
    (run.dir / "checkpoint_last.pt").unlink(missing_ok=True)


def _train(run: Run, command: List[str], env, started) -> float:
    """Run the training process; its wall time (``RunFailed`` when it fails)."""
    start = time.time()
    # finish(): a SIGTERM to the runner (fairseq-bio-blurb raises KeyboardInterrupt) kills the
    # training with it
    training = Process(command, run.dir / "train.out", cwd=run.dir, env=env)
    if started is not None:
        started(training)
    code = training.finish()
    remove_interval_checkpoints(run.dir)
    if code:
        raise RunFailed(
            f"{training.name} exited {code}: {_last_line(training.output())} (see {training.out})"
        )
    return time.time() - start


def execute(
    run: Run,
    resumable: bool = False,
    env: Optional[Dict[str, str]] = None,
    started: Optional[Callable[[Process], None]] = None,
) -> Dict[str, Any]:
    """Train one run and predict its test split, or reuse its result; returns its record (with
    ``status``). ``resumable``: train with ``resumable_command`` and resume an earlier attempt of it
    (status "resumed"); ``env``: variables for the training process; ``started(process)``: called
    once the training process runs."""
    reused = reused_record(run)
    if reused is not None:
        return reused
    command = resumable_command(run) if resumable else run.command
    if (run.dir / "result.json").exists():
        status = "stale"  # made by another command or from another encoder file
    elif (run.dir / "cmd.txt").exists():
        status = "redone"  # an earlier attempt was interrupted or failed
    else:
        status = "ran"
    start = time.time()
    if status == "redone" and resumable and _resumable(run, command):
        status = "resumed"
    else:
        run.dir.mkdir(parents=True, exist_ok=True)
        for name in RUN_OUTPUTS:
            (run.dir / name).unlink(missing_ok=True)
        remove_interval_checkpoints(run.dir)
        with atomic_write(run.dir / "cmd.txt") as f:
            f.write(shlex.join(command) + "\n")
    try:
        train_s = float(json.loads((run.dir / TRAINED).read_text(encoding="utf-8"))["train_s"])
    except (OSError, ValueError, KeyError, TypeError):
        train_s = _train(run, command, env, started)
        if resumable:
            mark_trained(run, train_s)
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
    write_json(run.dir / "result.json", record, indent=1)
    return {**record, "status": status}


def batch_field(run: Run) -> Dict[str, Any]:
    """A batch-size grid's run: its ``batch_size`` for its record (the grid point it is); nothing
    for other runs."""
    return {"batch_size": run.batch_size} if run.batch_size else {}


def fold_fields(run: Run) -> Dict[str, Any]:
    """A cross-validation run's ``fold`` (1..K) and ``folds`` (K) for its record; nothing for other
    runs."""
    return {"fold": run.fold.index, "folds": run.fold.k} if run.fold else {}


def failed_record(run: Run, error: str, wall_s: float) -> Dict[str, Any]:
    """The record of a run that did not finish: ``error`` is the one line that says why."""
    return {
        "dataset": run.plan.recipe.name,
        "lr": run.lr,
        **batch_field(run),
        "seed": run.seed,
        **fold_fields(run),
        "run_dir": str(run.dir),
        "status": "failed",
        "error": error,
        "wall_s": round(wall_s, 1),
    }


def run_line(tag: str, i: int, n: int, run: Run, record: Dict[str, Any], seconds: float) -> str:
    """The line a runner prints when a run is done: its status, test and dev score, wall time."""
    if record["status"] == "failed":
        what = f"FAILED: {record['error']}"
    else:
        what = f"test {record['metric_key']} {record['test_metric']:.2f} (dev {record['dev_metric']:.2f}"
        what += (
            f"; trivial {record['trivial_baseline']:.2f})" if "trivial_baseline" in record else ")"
        )
    return f"{tag} {i}/{n} {run.label}: {record['status']}, {what}, {seconds:.1f} s"


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
            record = failed_record(run, str(e), time.time() - start)
        records.append(record)
        print(run_line(tag, i, len(runs), run, record, time.time() - start), flush=True)
    return report_runs(records, args, benchmark, plans, missing, out, tag)


STATUSES = ("ran", "redone", "stale", "reused", "failed")


def report_runs(
    records: List[Dict[str, Any]],
    args,
    benchmark: Benchmark,
    plans: List[Plan],
    missing: Dict[str, str],
    out: Path,
    tag: str,
) -> int:
    """results.json / .md / .png of the runs' records under ``out`` and the summary lines; the exit
    status (1 when a run failed)."""
    results = aggregate(benchmark, records, missing)
    counts = {s: sum(r["status"] == s for r in records) for s in STATUSES}
    resumed = sum(r["status"] == "resumed" for r in records)  # only the SLURM launcher resumes
    if resumed:
        counts["resumed"] = resumed
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

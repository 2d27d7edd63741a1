"""fairseq-bio-blurb's report: per dataset the test scores over seeds (or cross-validation folds) of
the learning rate chosen on dev, per task type (and domain) the average, the benchmark score
(partial when datasets are missing), each dataset's trivial baseline and the flag beside a score at
it; results.json, results.md and results.png, each written atomically.
"""

import statistics
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..files import atomic_write, write_json, write_text
from ..metrics.benchmark_scores import DOMAINS, Benchmark, summarize_runs
from .datasets import benchmark as benchmark_named
from .plan import run_label


def best_on_dev(dev: Dict[Tuple[float, ...], float]) -> Tuple[float, ...]:
    """The grid point (a tuple: lr first, then batch size if any) of the best mean dev score; a tie:
    the smaller learning rate, then the smaller batch (the gentler setting). The BLURB runner's and
    hf_parity.py's rule.
    """
    return max(dev, key=lambda k: (dev[k], *(-x for x in k)))


def aggregate(
    benchmark: Benchmark, records: Sequence[Dict[str, Any]], missing: Dict[str, str]
) -> Dict[str, Any]:
    """Per dataset (the lr with the best mean dev score; its test scores over seeds, or per fold the
    benchmark's statistic over that fold's seeds), per type (and domain), and the score."""
    missing = dict(missing)
    datasets: Dict[str, Dict[str, Any]] = {}
    for task in benchmark.tasks:
        done = [
            r for r in records if r["dataset"] == task.name and r.get("test_metric") is not None
        ]
        if not done:
            if task.name not in missing:
                missing[task.name] = "every run failed"
            continue
        # the grid point (lr, and batch size in a --batch-sizes grid; 0 without one) with the best
        # mean dev score
        by_lr: Dict[Tuple[float, int], List[Dict[str, Any]]] = {}
        for r in sorted(
            done, key=lambda r: (r["lr"], r.get("batch_size") or 0, r.get("fold") or 0, r["seed"])
        ):
            by_lr.setdefault((r["lr"], r.get("batch_size") or 0), []).append(r)
        dev_by_lr = {k: statistics.fmean(r["dev_metric"] for r in rs) for k, rs in by_lr.items()}
        lr, batch = best_on_dev(dev_by_lr)
        chosen = by_lr[lr, batch]
        per_fold = fold_values(chosen, benchmark.statistic)
        values = list(per_fold.values()) if per_fold else [r["test_metric"] for r in chosen]
        summary = summarize_runs(values, task.name)
        folds = (
            {"folds": chosen[0]["folds"], "per_fold": {str(f): v for f, v in per_fold.items()}}
            if per_fold
            else {}
        )
        baseline = chosen[0]
        if per_fold and all(
            r.get("trivial_baseline") is not None for r in chosen
        ):  # each fold tests other rows
            baseline = {
                "trivial_baseline": statistics.fmean(r["trivial_baseline"] for r in chosen),
                "trivial_prediction": f"{baseline.get('trivial_prediction')}, mean over the folds",
            }
        datasets[task.name] = {
            "title": task.title,
            "task_type": task.task_type,
            "metric": task.metric,
            "n": summary.n,
            "mean": summary.mean,
            "std": summary.std,
            "median": summary.median,
            "values": values,
            "seeds": (
                sorted({r["seed"] for r in chosen}) if per_fold else [r["seed"] for r in chosen]
            ),
            **folds,
            "lr": lr,
            **({"batch_size": batch} if batch else {}),
            "dev_mean": dev_by_lr[lr, batch],
            "dev_selected_on": chosen[0].get("dev_selected_on"),
            "dev_by_lr": {
                f"{k:g}" + (f",bs{b}" if b else ""): v for (k, b), v in dev_by_lr.items()
            },
            "wall_s": round(sum(r.get("wall_s", 0.0) for r in done), 1),
            "train_examples_per_s": _rate(done, "train_examples", "train_s"),
            **trivial_flag(summary.mean, baseline),
        }
    score = benchmark.score(
        {
            t.name: datasets[t.name]["values"] if t.name in datasets else None
            for t in benchmark.tasks
        }
    )
    return {
        "benchmark": benchmark.name,
        "aggregate": (
            "macro average over task types"
            if benchmark.aggregate == "by_type"
            else "mean over datasets"
        ),
        "statistic": benchmark.statistic,
        "datasets": datasets,
        "per_type": score.per_type,
        "per_domain": score.per_domain,
        "score": score.to_dict(),
        "summary": score.summary(),
        "missing": {name: missing[name] for name in benchmark.names() if name in missing},
    }


def fold_values(records: Sequence[Dict[str, Any]], statistic: str) -> Dict[int, float]:
    """{fold: the ``statistic`` of its runs' test scores} of cross-validation runs, in fold order;
    {} for others."""
    by_fold: Dict[int, List[float]] = {}
    for r in records:
        if r.get("fold"):
            by_fold.setdefault(int(r["fold"]), []).append(r["test_metric"])
    return {f: summarize_runs(v, f"fold {f}").value(statistic) for f, v in sorted(by_fold.items())}


TRIVIAL_MARGIN = 1.0  # points: a mean test score this close to the trivial baseline is flagged


def trivial_flag(mean: float, record: Dict[str, Any]) -> Dict[str, Any]:
    """The dataset's trivial baseline (from the gold test labels,
    ``BenchmarkTask.trivial_baseline``) and where the mean test score stands to it: ``at`` (within
    TRIVIAL_MARGIN points), ``below``, ``above``; None for records written before the baseline was
    kept."""
    baseline = record.get("trivial_baseline")
    if baseline is None:
        return {"trivial_baseline": None, "trivial_prediction": None, "vs_trivial": None}
    vs = (
        "at"
        if abs(mean - baseline) <= TRIVIAL_MARGIN
        else ("below" if mean < baseline else "above")
    )
    return {
        "trivial_baseline": baseline,
        "trivial_prediction": record.get("trivial_prediction"),
        "vs_trivial": vs,
    }


def trivial_notes(datasets: Dict[str, Dict[str, Any]]) -> List[str]:
    """One line per dataset whose mean test score is at (or below) its trivial baseline."""
    notes = []
    for d in datasets.values():
        if d.get("vs_trivial") in ("at", "below"):
            where = "at" if d["vs_trivial"] == "at" else "below"
            notes.append(
                f"- **{d['title']} {d['mean']:.2f} is {where} the trivial baseline** "
                f"({d['trivial_baseline']:.2f}: {d['trivial_prediction']}): the model has learned nothing "
                "measurable there (too few updates, a learning rate too high or too low, or a bug)"
            )
    return notes


def _rate(records: Sequence[Dict[str, Any]], count: str, seconds: str) -> Optional[float]:
    """Examples per second over runs (total examples / total seconds); None for records made before
    it was kept."""
    timed = [r for r in records if r.get(count) and r.get(seconds)]
    return (
        round(sum(r[count] for r in timed) / sum(r[seconds] for r in timed), 2) if timed else None
    )


def _fmt(value: Optional[float]) -> str:
    return "–" if value is None else f"{value:.2f}"


def _batch(d: Dict[str, Any]) -> str:
    """The batch size a --batch-sizes grid chose, beside the lr ("" without a grid)."""
    return f", batch {d['batch_size']}" if d.get("batch_size") else ""


def _dev(d: Dict[str, Any]) -> str:
    """The mean dev score and the metric checkpoints were selected on (BLUE's HoC: BLURB's F1, not
    its own)."""
    return _fmt(d.get("dev_mean")) + (
        f" ({d['dev_selected_on']})" if d.get("dev_selected_on") else ""
    )


def _label(record: Dict[str, Any]) -> str:
    return run_label(
        record["dataset"],
        record["lr"],
        record["seed"],
        record.get("fold"),
        record.get("folds"),
        record.get("batch_size"),
    )


def render_markdown(results: Dict[str, Any]) -> str:
    """results.md: the score (marked partial), per-dataset and per-type tables, what is missing,
    every run."""
    bench = benchmark_named(results["benchmark"])
    score = results["score"]
    lines = [f"# {results['benchmark']} results", ""]
    if results.get("checkpoint"):
        lines += [f"Encoder: `{results['checkpoint']}`", ""]
    head = f"**{results['benchmark']} score: {_fmt(score['score'])}**"
    if score["partial"]:
        n_types = len(score["covered_types"]) + len(score["missing_types"])
        head += (
            f" — **partial**: covers {len(score['covered_types'])} of {n_types} task types "
            f"({', '.join(score['covered_types']) or 'none'})"
        )
        if score["incomplete_types"]:
            head += f"; in part: {', '.join(score['incomplete_types'])}"
        head += f"; {len(score['missing'])} of {len(bench.tasks)} datasets missing (listed below)"
    each = results.get("statistic", "mean")
    lines += [
        head,
        "",
        f"The score is the {results['aggregate']} ({results['benchmark']}'s own rule), each dataset "
        f"counted by the {each} of its runs (of its folds, when cross-validated); test scores x 100, of the best "
        "dev checkpoint of each run.",
        "",
    ]
    lines += [
        "| dataset | task type | metric | n | mean ± std | trivial baseline | median | lr | dev mean (selected on) "
        "| wall (s) | train examples/s |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, d in results["datasets"].items():
        flag = {"at": " ⚠ at trivial", "below": " ⚠ below trivial"}.get(d.get("vs_trivial"), "")
        lines.append(
            f"| {d['title']} | {d['task_type']} | {d['metric']} | {d['n']} | {d['mean']:.2f} ± "
            f"{d['std']:.2f}{flag} | {_fmt(d.get('trivial_baseline'))} | {d['median']:.2f} | {d['lr']:g}"
            f"{_batch(d)} | {_dev(d)} | {d.get('wall_s', 0):.0f} | {_fmt(d.get('train_examples_per_s'))} |"
        )
    notes = trivial_notes(results["datasets"])
    lines += [
        "",
        "Trivial baseline: the best score of one answer given to every test example (each class; every "
        "word one tag; every label row all 0, all 1 or the per-label majority; every score the mean), from the "
        "gold labels, by the dataset's own metric.",
    ]
    if notes:
        lines += [""] + notes
    lines += ["", "| task type | datasets | average |", "| --- | ---: | ---: |"]
    for task_type in bench.task_types:
        names = bench.names([task_type])
        have = [n for n in names if n in results["datasets"]]
        value = results["per_type"].get(task_type)
        lines.append(f"| {task_type} | {len(have)} of {len(names)} | {_fmt(value)} |")
    if bench.domain_means:
        for clinical, domain in DOMAINS.items():
            names = [t.name for t in bench.tasks if t.clinical == clinical]
            have = [n for n in names if n in results["datasets"]]
            value = (results.get("per_domain") or {}).get(domain)
            lines.append(f"| {domain} (domain) | {len(have)} of {len(names)} | {_fmt(value)} |")
        lines.append(
            f"| all | {len(results['datasets'])} of {len(bench.tasks)} | {_fmt(score['score'])} |"
        )
    crossed = {name: d for name, d in results["datasets"].items() if d.get("folds")}
    if crossed:
        lines += [
            "",
            f"Cross-validated (K folds of the train file; per fold the {each} over its seeds):",
            "",
        ]
        for d in crossed.values():
            per_fold = ", ".join(f"{f}: {v:.2f}" for f, v in d["per_fold"].items())
            lines.append(
                f"- {d['title']}: {d['folds']}-fold, {len(d['per_fold'])} folds done; median {d['median']:.2f}"
                f", mean {d['mean']:.2f} ± {d['std']:.2f} over folds ({per_fold})"
            )
    if results["missing"]:
        lines += ["", "Missing (not in the score):", ""]
        titles = {t.name: t.title for t in bench.tasks}
        lines += [f"- {titles[name]}: {why}" for name, why in results["missing"].items()]
    notes = results.get("versions") or {}
    if notes:
        lines += ["", "Dataset versions:", ""] + [
            f"- {name}: {note}" for name, note in notes.items()
        ]
    runs = results.get("runs") or []
    if runs:
        lines += [
            "",
            "Per run: wall time of training and scoring together; examples/s of training (the "
            "fairseq-hydra-train process: examples trained on / its wall time, start-up, dev validation and "
            "checkpoint saves included) and of test scoring (fairseq-bio-predict).",
            "",
            "| run | status | updates | dev | test | wall (s) | train examples/s | test examples/s | directory |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for r in runs:
            lines.append(
                f"| {_label(r)} | {r['status']} | {r.get('updates', '')} | "
                f"{_fmt(r.get('dev_metric'))} | {_fmt(r.get('test_metric'))} | {r.get('wall_s', 0):.0f} | "
                f"{_fmt(r.get('train_examples_per_s'))} | {_fmt(r.get('test_examples_per_s'))} | "
                f"`{r['run_dir']}` |"
            )
        failed = [r for r in runs if r["status"] == "failed"]
        if failed:
            lines += ["", "Failed runs:", ""] + [f"- {_label(r)}: {r['error']}" for r in failed]
    return "\n".join(lines) + "\n"


def render_chart(results: Dict[str, Any], path: Path) -> None:
    """results.png: test mean ± std per dataset coloured by task type, the per-type averages and the
    score."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bench = benchmark_named(results["benchmark"])
    colours = {t: plt.get_cmap("tab10")(i) for i, t in enumerate(bench.task_types)}
    names = list(results["datasets"])
    fig, (ax, ax_types) = plt.subplots(
        1,
        2,
        figsize=(4 + 0.7 * max(len(names), 1) + 0.6 * len(bench.task_types), 4.5),
        gridspec_kw={"width_ratios": [max(len(names), 1), len(bench.task_types)]},
    )
    means = [results["datasets"][n]["mean"] for n in names]
    stds = [results["datasets"][n]["std"] for n in names]
    ax.bar(
        range(len(names)),
        means,
        yerr=stds,
        capsize=3,
        color=[colours[results["datasets"][n]["task_type"]] for n in names],
    )
    label = "trivial baseline"
    for i, n in enumerate(
        names
    ):  # the trivial baseline as a black tick on each bar; a flagged score in red
        d = results["datasets"][n]
        if d.get("trivial_baseline") is not None:
            ax.plot(
                [i - 0.4, i + 0.4],
                [d["trivial_baseline"]] * 2,
                color="black",
                linewidth=2,
                label=label,
            )
            label = None
        if d.get("vs_trivial") in ("at", "below"):
            ax.text(i, d["mean"] + 3, "trivial", color="red", ha="center", fontsize=8, rotation=90)
    if label is None:
        ax.legend(fontsize=7, loc="upper right")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(
        [f"{results['datasets'][n]['title']}\n(n={results['datasets'][n]['n']})" for n in names],
        rotation=45,
        ha="right",
        fontsize=8,
    )
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
        label = f"{results['benchmark']} {score['score']:.2f}" + (
            " (partial)" if score["partial"] else ""
        )
        ax_types.text(
            len(types) - 0.5, score["score"] + 1, label, ha="right", va="bottom", fontsize=8
        )
    ax_types.set_title("per task type", fontsize=9)
    ax.set_title("per dataset", fontsize=9)
    title = f"{results['benchmark']} score {_fmt(score['score'])}"
    if score["partial"]:
        title += (
            f" (PARTIAL: {len(score['covered_types'])} of {len(types)} task types, {len(score['missing'])} "
            "datasets missing)"
        )
    fig.suptitle(title)
    fig.tight_layout()
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)


def write_results(out: Path, results: Dict[str, Any]) -> None:
    """results.json, results.md and results.png under ``out``, each written atomically."""
    write_json(out / "results.json", results, indent=1)
    write_text(out / "results.md", render_markdown(results))
    render_chart(results, out / "results.png")

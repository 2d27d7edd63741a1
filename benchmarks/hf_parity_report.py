"""The report of ``hf_parity.py``: per dataset the two sides' scores and times over seeds (and a
learning-rate grid's points), as markdown, JSON and a PNG."""

import json
import statistics
import time
from pathlib import Path
from typing import Dict, List

from harness import pyplot, save_figure


def mean_std(values: List[float]) -> Dict[str, float]:
    """{"mean", "std"} of per-seed ``values`` (std 0 for one)."""
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
    }


def summary(runs: List[Dict], parity) -> Dict:
    """Both sides' mean ± std over ``runs``, the loop-time and prediction ratios, and whether each
    meets its target (``parity``: the dataset's ``hf_parity.Parity``)."""
    ours = mean_std([r["ours"]["score"] for r in runs])
    hf = mean_std([r["hf"]["score"] for r in runs])
    loop = sum(r["ours"]["loop_s"] for r in runs) / sum(r["hf"]["loop_s"] for r in runs)
    predict = sum(r["hf"]["predict_s"] for r in runs) / sum(r["ours"]["predict_s"] for r in runs)
    difference = ours["mean"] - hf["mean"]
    return {
        "ours": ours,
        "hf": hf,
        "difference": difference,
        "loop_ratio": loop,
        "predict_speedup": predict,
        "meets": {
            "score": difference >= parity.min_difference,
            "loop": loop <= 0.8,
            "predict": predict >= 1.5,
        },
    }


def _tick(ok: bool) -> str:
    return "yes" if ok else "**no**"


def report(results: List[Dict], env: str, quick: bool) -> str:
    lines = [
        "# Fine-tuning parity: fairseq_bio vs HF transformers on MiniLM-L6-H384, every BLURB task type",
        "",
        f"{time.strftime('%Y-%m-%d')}, {env}."
        + (" **--quick: slices, not a measurement.**" if quick else ""),
        "Same recipe on both sides per dataset (10 % warm-up, linear decay, no weight decay, clip 1.0, last model "
        "scored); HF truncates at max length, ours windows. Scores: percent (Pearson x 100), mean ± std over seeds, "
        "each checked against scikit-learn / scipy / seqeval. Loop: training-loop time ours / HF (target <= 0.8x). "
        "Predict: our examples/s over HF's (target >= 1.5x).",
        "",
        "| dataset | metric | recipe (lr, batch, epochs, max len) | train | updates | seeds | ours | HF | ours - HF "
        "(target) | trivial | HF cut test ex. | loop ours/HF | predict speed-up |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        first, recipe, meets = r["runs"][0], r["recipe"], r["meets"]
        variant = "" if r.get("hf_variant", "stock") == "stock" else f" (HF: {r['hf_variant']})"
        lines.append(
            f"| {first['ours']['title']}{variant} | {first['ours']['metric']} | {recipe['lr']:g}, "
            f"{recipe['batch_size']}, "
            f"{recipe['epochs']:g}, {recipe['max_length']} | {r['train_examples']} | {first['updates']} | "
            f"{len(r['runs'])} | {r['ours']['mean']:.2f} ± {r['ours']['std']:.2f} | {r['hf']['mean']:.2f} ± "
            f"{r['hf']['std']:.2f} | {r['difference']:+.2f} (>= {recipe['min_difference']:g}: "
            f"{_tick(meets['score'])}) | {first['ours']['trivial']:.2f} | {first['hf_truncated']} of "
            f"{first['test_examples']} | {r['loop_ratio']:.2f}x ({_tick(meets['loop'])}) | "
            f"{r['predict_speedup']:.2f}x ({_tick(meets['predict'])}) |"
        )
        if "grid" in r:
            lines.append(_tuned_row(r))
    lines += _grid_table([r for r in results if "grid" in r])
    lines += [
        "",
        "Per run (seconds: training loop / whole training process / prediction):",
        "",
        "| dataset | seed | ours | HF | ours loop / process / predict | HF loop / process / predict |",
        "| --- | ---: | ---: | ---: | --- | --- |",
    ]
    for r in results:
        for e in r["runs"]:
            o, h = e["ours"], e["hf"]
            lines.append(
                f"| {o['title']} | {e['seed']} | {o['score']:.2f} | {h['score']:.2f} | {o['loop_s']:.0f} / "
                f"{o['process_s']:.0f} / {o['predict_s']:.1f} | {h['loop_s']:.0f} / {h['process_s']:.0f} / "
                f"{h['predict_s']:.1f} |"
            )
    return "\n".join(lines) + "\n"


def _tuned_row(r: Dict) -> str:
    """The main table's row of a grid run: each side at its own lr chosen on dev (no timings: the
    row above's)."""
    first, recipe, grid = r["runs"][0], r["recipe"], r["grid"]
    ours, hf = grid["ours"]["test"], grid["hf"]["test"]
    return (
        f"| {first['ours']['title']}, lr tuned on dev | {first['ours']['metric']} | ours {grid['ours']['chosen']:g} / "
        f"HF {grid['hf']['chosen']:g} (grid {', '.join(f'{lr:g}' for lr in grid['lrs'])}), {recipe['batch_size']}, "
        f"{recipe['epochs']:g}, {recipe['max_length']} | {r['train_examples']} | {first['updates']} | "
        f"{len(grid['points'][0]['runs'])} | {ours['mean']:.2f} ± {ours['std']:.2f} | {hf['mean']:.2f} ± "
        f"{hf['std']:.2f} | {grid['difference']:+.2f} (>= {recipe['min_difference']:g}: "
        f"{_tick(grid['meets']['score'])}) | {first['ours']['trivial']:.2f} | - | - | - |"
    )


GRID_RULE = (
    "Learning rate chosen on dev (`--lr-grid`): each side is fine-tuned at every learning rate of the grid, the "
    "recipe otherwise unchanged (the recipe's own learning rate is the shared-recipe run), and each model is scored "
    "on the dataset's dev split by the same metric code as test (mean over seeds). Each side takes the learning rate "
    "with its best dev score (a tie: the smaller learning rate), and that model's test score is reported. The "
    '"lr tuned on dev" row compares the two sides each at its own dev-chosen learning rate (ours - HF); the row '
    "above it keeps the recipe's learning rate on both."
)


def _grid_table(results: List[Dict]) -> List[str]:
    """Markdown lines: the rule, and per grid run and side each lr's dev score, the chosen lr and
    its test score."""
    if not results:
        return []
    lines = [
        "",
        GRID_RULE,
        "",
        "| dataset | side | dev score at each lr (chosen in bold) | chosen lr | test at it |",
        "| --- | --- | --- | ---: | ---: |",
    ]
    for r in results:
        grid = r["grid"]
        for name, side in (("ours", "ours"), ("hf", "HF")):
            chosen = grid[name]["chosen"]
            dev = ", ".join(
                f"**{lr:g}: {d:.2f}**" if lr == chosen else f"{lr:g}: {d:.2f}"
                for lr, d in zip(grid["lrs"], grid[name]["dev"])
            )
            test = grid[name]["test"]
            lines.append(
                f"| {r['runs'][0]['ours']['title']} | {side} | {dev} | {chosen:g} | {test['mean']:.2f} ± "
                f"{test['std']:.2f} |"
            )
    return lines


def plot(results: List[Dict], path: Path) -> None:
    plt = pyplot()
    names = [r["runs"][0]["ours"]["title"] for r in results]
    x = range(len(names))
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(15, 4.5))
    tuned = [i for i, r in enumerate(results) if "grid" in r]
    # with grid runs each side has two bars, the shared recipe's and the lr tuned on dev
    width, at = (0.2, {"ours": -0.3, "hf": 0.1}) if tuned else (0.4, {"ours": -0.2, "hf": 0.2})
    for side, name, color in (
        ("ours", "fairseq_bio", "tab:blue"),
        ("hf", "HF Trainer", "tab:orange"),
    ):
        a.bar(
            [i + at[side] for i in x],
            [r[side]["mean"] for r in results],
            width,
            yerr=[r[side]["std"] for r in results],
            label=name,
            color=color,
        )
        if tuned:
            a.bar(
                [i + at[side] + width for i in tuned],
                [results[i]["grid"][side]["test"]["mean"] for i in tuned],
                width,
                yerr=[results[i]["grid"][side]["test"]["std"] for i in tuned],
                label=f"{name}, lr tuned on dev",
                color=color,
                alpha=0.5,
                hatch="//",
            )
    a.scatter(
        list(x),
        [r["runs"][0]["ours"]["trivial"] for r in results],
        marker="_",
        s=400,
        color="black",
        label="trivial baseline",
        zorder=3,
    )
    a.set_ylabel("test score (mean ± std over seeds)")
    a.legend(fontsize=8)
    b.bar(list(x), [r["loop_ratio"] for r in results], color="tab:green")
    b.axhline(0.8, color="red", linestyle="--", label="target <= 0.8")
    b.set_ylabel("training loop time, ours / HF")
    b.legend(fontsize=8)
    c.bar(list(x), [r["predict_speedup"] for r in results], color="tab:purple")
    c.axhline(1.5, color="red", linestyle="--", label="target >= 1.5")
    c.set_ylabel("prediction examples/s, ours / HF")
    c.legend(fontsize=8)
    for ax in (a, b, c):
        ax.set_xticks(list(x), names, rotation=30, fontsize=8)
    fig.suptitle(
        "MiniLM-L6-H384 fine-tuned by fairseq_bio and by HF transformers, same recipe"
        + (" (hatched: each side's lr chosen on dev)" if tuned else "")
    )
    fig.tight_layout()
    save_figure(fig, path, dpi=100)  # matplotlib's default


def write(out: Path, record: Dict) -> None:
    """The markdown report (printed too), the JSON record and the PNG of ``record``."""
    from fairseq_bio.files import atomic_write

    text = report(record["results"], record["env"], record["quick"])
    text += "\nCommands run:\n\n```\n" + "\n".join(record["commands"]) + "\n```\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(out) as f:
        f.write(text)
    with atomic_write(out.with_suffix(".json")) as f:
        json.dump(record, f, indent=1)
    plot(record["results"], out.with_suffix(".png"))
    print(text)

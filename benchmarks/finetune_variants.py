"""PubMedBERT's fine-tuning variants, measured on real data beside the paper's numbers: Table 10
(linear layer vs Bi-LSTM, and a BiLSTM-CRF, on BC5-disease) and Table 12 (relation encodings on DDI,
the paper's dataset, and GAD: dummified text with [CLS] vs MENTION pooling vs entity markers with
the entity-start encoding). `make bench-variants`.

Every variant is one ``fairseq-bio-blurb`` run of MiniLM-L6-H384 with the same seeds and CPU budget
and only the variant's overrides, so each row differs from its dataset's reference row in the head
alone; differences are paired by seed. ``--random-init`` runs each variant again on MiniLM's
architecture from random initialisation (same seeds and budget): what the encoder's pretraining
adds. Writes ``<out>/results.*``, copied to ``benchmarks/results/finetune_variants.*``; finished
runs are reused.

    python benchmarks/finetune_variants.py --variants bc5-disease:bilstm --seeds 1 --max-update 20   # smoke
"""

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Dict, List, Optional

from fairseq_bio import runs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from blurb_scores import CPU_BUDGETS  # noqa: E402
from parity_tasks import imported_minilm  # noqa: E402
from harness import REPO, RESULTS, pyplot, save_figure, save_report  # noqa: E402

# (dataset, variant, overrides, the paper's number for that row, where it comes from). The first
# variant of each dataset is its reference. PubMedBERT (seed 001) Table 10: BC5-disease entity F1,
# linear 85.62 vs Bi-LSTM 85.64 (no BiLSTM-CRF row; GAD 82.34 vs 81.80 is a relation task, whose
# Bi-LSTM we do not build). Table 12, DDI micro F1 over the four interaction types (the negative
# class left out, as sentence_task/re_ddi scores it): dummified [CLS] 82.36, dummified MENTION
# 82.08, markers + entity start 82.18; it has no GAD column.
VARIANTS = (
    ("bc5-disease", "linear", (), 85.62, "Table 10, BC5-disease"),
    ("bc5-disease", "bilstm", ("task.lstm_layers=1",), 85.64, "Table 10, BC5-disease"),
    ("bc5-disease", "bilstm_crf", ("task.lstm_layers=1", "task.crf=true"), None, "not in Table 10"),
    # the head at 20 x the encoder's rate (1e-3: the tests' BiLSTM rate), as BiLSTM-CRF taggers are
    # often run; the linear head at that rate too, the control that tells the BiLSTM from the faster
    # head
    (
        "bc5-disease",
        "linear_head_lr",
        ("task.head_lr_scale=20",),
        None,
        "control (not in the paper)",
    ),
    (
        "bc5-disease",
        "bilstm_head_lr",
        ("task.lstm_layers=1", "task.head_lr_scale=20"),
        85.64,
        "Table 10, BC5-disease",
    ),
    (
        "bc5-disease",
        "bilstm_crf_head_lr",
        ("task.lstm_layers=1", "task.crf=true", "task.head_lr_scale=20"),
        None,
        "not in Table 10",
    ),
    ("ddi", "dummy_cls", (), 82.36, "Table 12, DDI"),
    ("ddi", "mention_pool", ("task.entity_representation=mention_pool",), 82.08, "Table 12, DDI"),
    ("ddi", "marker_start", ("task.entity_representation=marker_start",), 82.18, "Table 12, DDI"),
    ("gad", "dummy_cls", (), None, "no GAD column in Table 12"),
    ("gad", "mention_pool", ("task.entity_representation=mention_pool",), None, "no GAD column"),
    ("gad", "marker_start", ("task.entity_representation=marker_start",), None, "no GAD column"),
)

BY_NAME = {f"{v[0]}:{v[1]}": v for v in VARIANTS}
REFERENCE = {
    dataset: name for dataset, name, *_ in reversed(VARIANTS)
}  # each dataset's first variant


def run_order(wanted: List[str]) -> List[str]:
    """``dataset:variant`` names in the order asked, each dataset's reference before its first
    variant."""
    order: List[str] = []
    for name in wanted:
        dataset = name.split(":")[0]
        order += [
            n for n in dict.fromkeys((f"{dataset}:{REFERENCE[dataset]}", name)) if n not in order
        ]
    return order


def blurb_run(
    target: Path,
    checkpoint: Path,
    data: str,
    dataset: str,
    seeds: int,
    overrides,
    max_update: Optional[int],
    random_init: bool = False,
) -> Dict:
    """``checkpoint`` fine-tuned by the runner on ``dataset`` with ``overrides`` (finished runs in
    ``target`` reused; from random initialisation when ``random_init``, each seed its own draw);
    its results.json entry for the dataset."""
    command = runs.command(
        "fairseq-bio-blurb",
        "--checkpoint",
        checkpoint,
        "--data",
        data,
        "--tasks",
        dataset,
        "--seeds",
        seeds,
        "--out",
        target,
        "--cpu",
        *(["--random-init"] if random_init else []),
        "--",
        *CPU_BUDGETS,
        *overrides,
        # after the CPU budgets, whose per-dataset caps (ddi:) it must override
        *([f"{dataset}:optimization.max_update={max_update}"] if max_update else []),
    )
    print("$ " + " ".join(command), flush=True)
    runs.Run(command).finish()  # a failed runner's results.json says which runs failed
    results = target / "results.json"
    if not results.exists():
        sys.exit(f"{dataset} {target.name}: the runner wrote no {results}")
    written = json.loads(results.read_text(encoding="utf-8"))
    entry = written["datasets"].get(dataset)
    if not entry or "values" not in entry:
        sys.exit(f"{dataset} {target.name}: no scores in {results} (see the runner's output above)")
    return {**entry, "dev_curve": dev_curve(written, dataset)}


def dev_curve(results: Dict, dataset: str) -> Dict[int, float]:
    """{update: dev score} of ``dataset``'s runs in the runner's ``results`` (its results.json) at
    its chosen learning rate, the mean over seeds at each validation all of them logged (read from
    each run's train.log, so runs reused from before are read alike)."""
    lr = results["datasets"][dataset].get("lr")
    curves = []
    for run in results.get("runs", []):
        if run.get("dataset") != dataset or run.get("lr") != lr or "run_dir" not in run:
            continue
        key = run["dev_selected_on"]
        dev = runs.logged(Path(run["run_dir"]) / "train.log", "valid")
        curves.append({u: float(e[key]) for u, e in dev.items() if key in e})
    common = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
    return {u: statistics.fmean(c[u] for c in curves) for u in common}


def converged(curve: Dict[int, float]) -> str:
    """The dev score at the validation nearest half the budget and at the last one (a curve still
    rising shows it)."""
    if not curve:
        return "–"
    updates = sorted(curve)
    half = min(updates, key=lambda u: (abs(u - updates[-1] / 2), -u))  # a tie: the later
    return f"{curve[half]:.2f} @{half} → {curve[updates[-1]]:.2f} @{updates[-1]}"


def variant_runs(
    out: Path,
    checkpoint: Path,
    data: str,
    seeds: int,
    wanted: List[str],
    max_update: Optional[int],
    random_init: bool = False,
) -> List[Dict]:
    """Each wanted variant (and its dataset's reference) fine-tuned by the runner, and from random
    initialisation of the encoder's architecture (each seed its own draw) when ``random_init``;
    their results.json rows, the random-init run's per-seed scores under ``random``."""
    rows = []
    for dataset, name, overrides, paper, source in (BY_NAME[n] for n in run_order(wanted)):
        entry = blurb_run(
            out / dataset / name, checkpoint, data, dataset, seeds, overrides, max_update
        )
        row = {
            "dataset": dataset,
            "title": entry["title"],
            "metric": entry["metric"],
            "variant": name,
            "reference": REFERENCE[dataset],
            "overrides": list(overrides),
            "paper": paper,
            "paper_source": source,
            "values": entry["values"],
            "seeds": entry["seeds"],
            "mean": entry["mean"],
            "std": entry.get("std", 0.0),
            "dev_mean": entry["dev_mean"],
            "wall_s": entry["wall_s"],
            "trivial_baseline": entry.get("trivial_baseline"),
            "dev_curve": entry["dev_curve"],
        }
        if random_init:
            fresh = blurb_run(
                out / "random-init" / dataset / name,
                checkpoint,
                data,
                dataset,
                seeds,
                overrides,
                max_update,
                random_init=True,
            )
            row["random"] = {
                k: fresh.get(k, 0.0)
                for k in ("values", "seeds", "mean", "std", "wall_s", "dev_curve")
            }
        rows.append(row)
    return sorted(rows, key=lambda r: list(BY_NAME).index(f"{r['dataset']}:{r['variant']}"))


def paired(rows: List[Dict]) -> None:
    """Each row's difference to its dataset's reference row, per seed and in the mean (and the
    paper's)."""
    by_name = {(r["dataset"], r["variant"]): r for r in rows}
    for r in rows:
        ref = by_name.get((r["dataset"], r["reference"]))
        if ref is None or ref is r:
            continue
        scores = dict(zip(ref["seeds"], ref["values"]))
        r["diffs"] = [v - scores[s] for s, v in zip(r["seeds"], r["values"]) if s in scores]
        r["diff"] = statistics.mean(r["diffs"]) if r["diffs"] else None
        if r["paper"] is not None and ref["paper"] is not None:
            r["paper_diff"] = r["paper"] - ref["paper"]


def markdown(rows: List[Dict], seeds: int) -> str:
    lines = [
        "| dataset | variant | overrides | test (mean ± std) | per seed | vs reference, paired by seed | dev mean |"
        " dev: half budget → end | random init (per seed) | PubMedBERT (paper) | paper's difference | wall (s) |",
        "| --- | --- | --- | ---: | --- | --- | ---: | --- | --- | ---: | ---: | ---: |",
    ]
    for r in rows:
        diff = (
            "reference"
            if r["variant"] == r["reference"]
            else (
                f"{r['diff']:+.2f} ({', '.join(f'{d:+.2f}' for d in r['diffs'])})"
                if r.get("diffs")
                else "–"
            )
        )
        paper = (
            f"{r['paper']:.2f} ({r['paper_source']})"
            if r["paper"] is not None
            else r["paper_source"]
        )
        paper_diff = f"{r['paper_diff']:+.2f}" if "paper_diff" in r else ""
        fresh = r.get("random")
        random_init = (
            f"{fresh['mean']:.2f} ({', '.join(f'{v:.2f}' for v in fresh['values'])})"
            if fresh
            else "not run"
        )
        cells = [
            f"{r['title']} {r['metric']}",
            r["variant"],
            " ".join(r["overrides"]) or "(recipe)",
            f"{r['mean']:.2f} ± {r['std']:.2f}",
            ", ".join(f"{v:.2f}" for v in r["values"]),
            diff,
            f"{r['dev_mean']:.2f}",
            converged(r.get("dev_curve") or {}),
            random_init,
            paper,
            paper_diff,
            f"{r['wall_s']:.0f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return (
        "\n".join(lines)
        + f"\n\nMean ± std over {seeds} seed(s); test scores x 100 of each run's best dev "
        "checkpoint; dev: the mean over seeds at the validation nearest half the updates and at the "
        "last (the PNG's lower panels draw every validation); random init: the same run on "
        "MiniLM's architecture from random weights (--random-init). "
        "The paper's numbers are PubMedBERT (BERT-base, full fine-tuning budgets); ours are "
        "MiniLM-L6-H384 on benchmarks/blurb_scores.py's CPU budgets, so compare differences, not levels.\n"
    )


def plot(rows: List[Dict], path: Path) -> None:
    plt = pyplot()

    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    fig, axes = plt.subplots(2, len(datasets), figsize=(5 * len(datasets), 8), squeeze=False)
    for ax, dataset in zip(axes[1], datasets):  # the dev curves: has each run converged?
        for r in (r for r in rows if r["dataset"] == dataset):
            for curve, style, name in (
                (r.get("dev_curve"), "-", r["variant"]),
                ((r.get("random") or {}).get("dev_curve"), ":", f"{r['variant']}, random init"),
            ):
                if curve:
                    updates = sorted(curve)
                    ax.plot(updates, [curve[u] for u in updates], style, marker=".", label=name)
        ax.set_title(f"{dataset} dev, every validation", fontsize=10)
        ax.set_xlabel("update")
        ax.set_ylabel("dev score (mean over seeds)")
        ax.legend(fontsize=7)
    for ax, dataset in zip(axes[0], datasets):
        mine = [r for r in rows if r["dataset"] == dataset]
        x = range(len(mine))
        ax.bar(
            x,
            [r["mean"] for r in mine],
            yerr=[r["std"] for r in mine],
            color="tab:blue",
            alpha=0.6,
            capsize=4,
            label="ours (MiniLM, CPU budget)",
        )
        for i, r in zip(x, mine):
            ax.scatter([i] * len(r["values"]), r["values"], color="black", s=10, zorder=3)
            if r.get("random"):
                ax.scatter([i], [r["random"]["mean"]], color="tab:red", marker="x", zorder=3)
            if r.get("diff") is not None:
                label = (
                    f"paper {r['paper_diff']:+.2f}\n" if "paper_diff" in r else ""
                ) + f"ours {r['diff']:+.2f}"
                ax.annotate(label, (i, r["mean"] + r["std"]), ha="center", va="bottom", fontsize=8)
        low = min(min(r["values"] + [r.get("random", {}).get("mean", 100.0)]) for r in mine)
        ax.set_ylim(low - 3, max(max(r["values"]) for r in mine) + 5)
        ax.set_xticks(list(x), [r["variant"] for r in mine])
        ax.set_title(f"{mine[0]['title']} ({mine[0]['metric']}, test)")
        ax.legend(fontsize=8, loc="lower left")
        ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--checkpoint", help="the encoder (default: MiniLM-L6-H384 imported into <out>/minilm)"
    )
    parser.add_argument(
        "--data", default=str(REPO.parent / "shared" / "data"), help="root of the task data"
    )
    parser.add_argument("--out", default=str(REPO / "runs" / "variants"), help="runs and results")
    parser.add_argument(
        "--seeds", type=int, default=3, help="fine-tuning seeds per variant (default 3)"
    )
    parser.add_argument(
        "--variants",
        default=",".join(f"{d}:{n}" for d, n, *_ in VARIANTS),
        help="dataset:variant names separated by commas, run in this order (default: all; a dataset's "
        "reference variant always runs)",
    )
    parser.add_argument(
        "--max-update", type=int, default=None, help="cap each fine-tuning (smoke runs)"
    )
    parser.add_argument(
        "--random-init",
        action="store_true",
        help="also fine-tune each variant on the encoder's architecture from random initialisation "
        "(each seed its own draw), with the same seeds and budget",
    )
    parser.add_argument(
        "--results", default=str(RESULTS), help=f"where the results are copied (default {RESULTS})"
    )
    args = parser.parse_args(argv)

    wanted = [w.strip() for w in args.variants.split(",") if w.strip()]
    unknown = [w for w in wanted if w not in BY_NAME]
    if unknown:
        sys.exit(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(sorted(BY_NAME))}")
    out = Path(args.out).resolve()
    checkpoint = Path(args.checkpoint).resolve() if args.checkpoint else out / "minilm" / "model.pt"
    if not checkpoint.exists():
        imported_minilm(checkpoint.parent)
    rows = variant_runs(
        out, checkpoint, args.data, args.seeds, wanted, args.max_update, args.random_init
    )
    paired(rows)
    text = "# Fine-tuning variants (PubMedBERT Tables 10 and 12) on real data\n\n" + markdown(
        rows, args.seeds
    )
    results = {
        "checkpoint": str(checkpoint),
        "seeds": args.seeds,
        "budgets": CPU_BUDGETS,
        "max_update": args.max_update,
        "random_init": args.random_init,
        "rows": rows,
    }
    save_report(
        out, results, text, lambda path: plot(rows, path), Path(args.results), "finetune_variants"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Continued-pretraining ablations side by side: runs of ``domain_adaptation.py`` that differ in one setting
(``--head-warmup``, ``--freeze-embeddings``), each checkpoint at one update count fine-tuned with the same budgets
and seeds through ``fairseq-bio-blurb``, against the reference run's same checkpoint and the import.

Per run: test mean +- std, the gain over the import paired by seed, mean dev, how far the weights
moved and the MLM perplexity. A variant is a ``domain_adaptation.py --out`` directory
(``variant_scores`` says what is read there).

    python benchmarks/dapt_ablations.py --reference benchmarks/results/domain_adaptation.json --at 500 \\
        --variant "head warm-up 100=runs/dapt_hw" --variant "frozen embeddings=runs/dapt_fe"
"""

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))
from domain_adaptation import encoder_change, paired_gains, perplexity  # noqa: E402
from harness import RESULTS, pyplot, save_figure, save_report  # noqa: E402

IMPORT = "import (0 updates)"


def variant_scores(out: Path, at: int) -> Dict[str, Dict]:
    """{dataset: the runner's result} of every fine-tuning of ``out``'s update-``at`` checkpoint.

    That checkpoint is ``pretrain/checkpoint_1_<at>.pt`` (or ``checkpoint_last.pt`` when ``at`` is
    the full budget); its results are every ``results.json`` of ``fairseq-bio-blurb`` under ``out``
    whose path names ``updates_<at>`` (runs of single datasets in separate ``--out`` directories
    are merged)."""
    found: Dict[str, Dict] = {}
    for path in sorted(out.glob("**/results.json")):
        if f"updates_{at}" not in str(path.relative_to(out)):
            continue
        for name, result in (
            json.loads(path.read_text(encoding="utf-8")).get("datasets", {}).items()
        ):
            if name in found:
                sys.exit(
                    f"{path}: {name} at {at} updates is also in another results.json under {out}"
                )
            found[name] = result
    return found


def checkpoint_at(out: Path, at: int) -> Path:
    for path in (
        out / "pretrain" / f"checkpoint_1_{at}.pt",
        out / "pretrain" / "checkpoint_last.pt",
    ):
        if path.exists():
            return path
    sys.exit(f"{out}/pretrain: no checkpoint of update {at}")


def collect(
    reference: Dict, variants: Dict[str, Path], at: int, data_bin: Path, general_bin: Path
) -> Dict:
    """Per run (import, reference, each variant): per dataset values / dev / paired gains,
    embeddings, ppl."""
    key = str(at)
    base = {row["dataset"]: row for row in reference["rows"]}

    def reference_cells(
        step: str,
    ) -> Dict[str, Dict]:  # the reference ran the runner's --seeds n: seeds 1..n
        return {
            d: {
                "values": r["scores"][step]["values"],
                "seeds": list(range(1, len(r["scores"][step]["values"]) + 1)),
                "dev": r["dev"][step],
            }
            for d, r in base.items()
        }

    runs = {
        IMPORT: {
            "datasets": reference_cells("0"),
            "change": {},
            "perplexity": reference["perplexity"]["0"],
        },
        f"reference ({at})": {
            "datasets": reference_cells(key),
            "change": reference["encoder_change"][key],
            "perplexity": reference["perplexity"][key],
        },
    }
    if "general_perplexity" in reference:
        runs[IMPORT]["general_perplexity"] = reference["general_perplexity"]["0"]
        runs[f"reference ({at})"]["general_perplexity"] = reference["general_perplexity"][key]
    for label, out in variants.items():
        checkpoint = checkpoint_at(out, at)
        scores = {
            result["title"]: {
                "values": result["values"],
                "seeds": result["seeds"],
                "dev": result["dev_mean"],
            }
            for result in variant_scores(out, at).values()
        }
        runs[label] = {
            "datasets": scores,
            "change": encoder_change(out / "minilm" / "model.pt", checkpoint),
            "perplexity": perplexity(
                checkpoint, data_bin, out / "perplexity" / f"updates_{at}.log"
            ),
        }
        if general_bin and "general_perplexity" in reference:
            runs[label]["general_perplexity"] = perplexity(
                checkpoint, general_bin, out / "perplexity" / f"general_updates_{at}.log"
            )
    for run in runs.values():
        for name, cell in run["datasets"].items():
            cell["gains"] = paired_gains(runs[IMPORT]["datasets"][name], cell)
    return {"at": at, "runs": runs, "datasets": [row["dataset"] for row in reference["rows"]]}


def markdown(results: Dict) -> str:
    names = [
        d for d in results["datasets"] if all(d in r["datasets"] for r in results["runs"].values())
    ]
    lines = [
        f"# Continued-pretraining ablations at {results['at']} updates (MiniLM-L6-H384 on PubMed)",
        "",
        "| run | "
        + " | ".join(f"{d} test | gain (per seed) | dev" for d in names)
        + " | embeddings moved | layers moved | held-out ppl | general ppl |",
        "| --- | "
        + " | ".join("---: | --- | ---:" for _ in names)
        + " | ---: | --- | ---: | ---: |",
    ]
    for label, run in results["runs"].items():
        cells = []
        for d in names:
            c = run["datasets"][d]
            std = statistics.stdev(c["values"]) if len(c["values"]) > 1 else 0.0
            gain = statistics.mean(c["gains"])
            per = ", ".join(f"{g:+.2f}" for g in c["gains"])
            cells.append(
                f"{statistics.mean(c['values']):.2f} ± {std:.2f} | "
                + ("reference" if label == IMPORT else f"{gain:+.2f} ({per})")
                + f" | {c['dev']:.2f}"
            )
        change = run["change"]
        layers = [v for k, v in change.items() if k.startswith("layer ")]
        general = run.get("general_perplexity")
        lines.append(
            f"| {label} | "
            + " | ".join(cells)
            + f" | {100 * change.get('embeddings', 0):.2f} % | "
            + (f"{100 * min(layers):.1f}-{100 * max(layers):.1f} %" if layers else "0")
            + " | "
            + f"{run['perplexity']:,.1f} | "
            + (f"{general:,.1f}" if general else "")
            + " |"
        )
    return "\n".join(lines) + "\n"


def chart(results: Dict, path: Path) -> None:
    plt = pyplot()

    runs = [label for label in results["runs"] if label != IMPORT]
    names = [
        d for d in results["datasets"] if all(d in results["runs"][r]["datasets"] for r in runs)
    ]
    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 3.8), squeeze=False)
    for ax, name in zip(axes[0], names):
        for i, label in enumerate(runs):
            gains = results["runs"][label]["datasets"][name]["gains"]
            ax.bar(i, statistics.mean(gains), color="C%d" % i, alpha=0.5)
            ax.scatter([i] * len(gains), gains, color="C%d" % i, zorder=3, s=18)
        ax.axhline(0, color="gray", lw=0.8)
        ax.set_xticks(range(len(runs)))
        ax.set_xticklabels(runs, rotation=15, fontsize=8)
        ax.set_title(f"{name}: test gain over the import (points: seeds)", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)


def main(argv: List[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--reference", required=True, help="results.json of the reference domain_adaptation.py run"
    )
    parser.add_argument(
        "--variant", action="append", default=[], help="LABEL=OUT of a domain_adaptation.py run"
    )
    parser.add_argument("--at", type=int, default=500, help="the checkpoint compared (updates)")
    parser.add_argument(
        "--data-bin", default=None, help="held-out PubMed data-bin (default: the first variant's)"
    )
    parser.add_argument(
        "--general-bin", default=None, help="general-text data-bin of the drift probe"
    )
    parser.add_argument("--out", default="runs/dapt_ablations", help="where the report is written")
    parser.add_argument(
        "--results", default=str(RESULTS), help=f"where it is copied (default {RESULTS})"
    )
    args = parser.parse_args(argv)
    if not args.variant:
        parser.error("give at least one --variant LABEL=OUT")
    variants = {}
    for spec in args.variant:
        label, sep, out = spec.partition("=")
        if not sep or not Path(out).is_dir():
            parser.error(
                f"--variant {spec}: expected LABEL=OUT with OUT a domain_adaptation.py --out directory"
            )
        variants[label] = Path(out).resolve()
    reference = json.loads(Path(args.reference).read_text(encoding="utf-8"))
    data_bin = (
        Path(args.data_bin)
        if args.data_bin
        else next(iter(variants.values())) / "data" / "data-bin"
    )
    results = collect(
        reference, variants, args.at, data_bin, Path(args.general_bin) if args.general_bin else None
    )
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    save_report(
        out,
        results,
        markdown(results),
        lambda path: chart(results, path),
        Path(args.results),
        "dapt_ablations",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What `make demo` shows a person at the end: one table of the encoders' BLURB test scores beside
each dataset's trivial baseline and the pretraining's effect (pretrained minus the same model from
random initialisation), and ``demo.png``: the pretraining loss curve beside the scores as bars."""

import math
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

FLAGS = {"at": " (at trivial)", "below": " (below trivial)"}  # fairseq-bio-blurb's vs_trivial


def rows(columns: Dict[str, Dict]) -> List[Dict]:
    """Per dataset any column ran, in the benchmark's order: its title, metric, trivial baseline and
    each column's test mean and vs_trivial (None where that column did not run it)."""
    from fairseq_bio.runner.datasets import BENCHMARKS

    results = list(columns.values())
    bench = BENCHMARKS[results[0]["benchmark"].lower()]
    found = []
    for name in (n for n in bench.names() if any(n in r["datasets"] for r in results)):
        entries = [r["datasets"].get(name) for r in results]
        first = next(d for d in entries if d)
        scores = [None if d is None else (d["mean"], d.get("vs_trivial")) for d in entries]
        found.append(
            {
                "name": name,
                "title": first["title"],
                "metric": first["metric"],
                "trivial": first.get("trivial_baseline"),
                "scores": scores,
            }
        )
    return found


def comparison_markdown(columns: Dict[str, Dict], effect: Optional[Tuple[str, str]] = None) -> str:
    """One table of several encoders' BLURB results (fairseq-bio-blurb's results.json, keyed by
    column title): per dataset its metric, its trivial baseline and each encoder's test score,
    marked where it is at that baseline; ``effect`` (two column titles) adds their difference, the
    first minus the second."""
    from fairseq_bio.runner.report import TRIVIAL_MARGIN

    titles = list(columns)
    header = ["dataset", "metric", "trivial baseline", *titles] + (
        ["pretraining's effect"] if effect else []
    )
    lines = ["| " + " | ".join(header) + " |", "| --- | --- |" + " ---: |" * (len(header) - 2)]
    for row in rows(columns):
        cells = ["–" if s is None else f"{s[0]:.2f}" + FLAGS.get(s[1], "") for s in row["scores"]]
        if effect:
            cells.append(_signed(difference(row, titles, effect)))
        baseline = "–" if row["trivial"] is None else f"{row['trivial']:.2f}"
        lines.append(
            f"| {row['title']} | {row['metric']} | {baseline} | " + " | ".join(cells) + " |"
        )
    lines += [
        "",
        "Test scores x 100 of the best dev checkpoint, one seed; – : not run. The trivial baseline is the "
        "best score of one answer given to every test example (from the gold labels); a score within "
        f"{TRIVIAL_MARGIN:g} point of it, or below it, means the model learned nothing measurable "
        "there.",
    ]
    if effect:
        lines += [
            "",
            f"Pretraining's effect: {effect[0]} minus {effect[1]}, fine-tuned alike (same updates, batch, "
            "learning rate and seed); – where either is at or below the trivial baseline (no "
            "comparison).",
        ]
    return "\n".join(lines) + "\n"


def difference(row: Dict, titles: Sequence[str], pair: Tuple[str, str]) -> Optional[float]:
    """The first of ``pair``'s columns minus the second on ``row``; None when either did not run it,
    or either is at or below the trivial baseline (a side that learned nothing makes it no
    comparison)."""
    a, b = (row["scores"][titles.index(t)] for t in pair)
    if a is None or b is None or a[1] in FLAGS or b[1] in FLAGS:
        return None
    return a[0] - b[0]


def _signed(value: Optional[float]) -> str:
    return "–" if value is None else f"{value:+.2f}"


def unigram_entropy(dict_txt: Path) -> float:
    """Bits per token of the corpus's unigram distribution (fairseq-preprocess's counts in
    dict.txt): the masked LM loss of a model that ignores the context."""
    counts = [
        int(line.split()[1]) for line in Path(dict_txt).read_text(encoding="utf-8").splitlines()
    ]
    total = sum(counts)
    return -sum(c / total * math.log2(c / total) for c in counts if c)


def demo_figure(
    curves: Dict[str, List[Tuple[int, float]]],
    columns: Dict[str, Dict],
    path: Path,
    effect: Optional[Tuple[str, str]] = None,
    unigram: Optional[float] = None,
) -> None:
    """``path`` (PNG): the pretraining loss curves (``curves``: label -> (update, loss in bits)) on
    the left, with the corpus's ``unigram`` entropy (the loss without context) when given, each
    dataset's test scores as bars per column with its trivial baseline on the right."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fairseq_bio.files import atomic_path

    found = rows(columns) if columns else []
    titles = list(columns)
    fig, (ax_loss, ax_scores) = plt.subplots(
        1, 2, figsize=(12, 4.8), gridspec_kw={"width_ratios": [1, 1.3]}
    )
    for label, points in curves.items():
        if points:
            steps, losses = zip(*points)
            ax_loss.plot(
                steps, losses, marker="o" if len(points) < 30 else None, markersize=3, label=label
            )
    if unigram is not None:
        ax_loss.axhline(
            unigram,
            color="black",
            linestyle="--",
            linewidth=1,
            label=f"unigram entropy {unigram:.2f} (no context)",
        )
    ax_loss.set_xlabel("update")
    ax_loss.set_ylabel("masked LM loss (bits per masked token)")
    ax_loss.set_title("pretraining on the PubMed sample", fontsize=10)
    ax_loss.grid(alpha=0.3)
    ax_loss.legend(fontsize=8)

    width = 0.8 / max(len(titles), 1)
    colours = plt.get_cmap("tab10")
    for j, title in enumerate(titles):
        xs = [i + (j - (len(titles) - 1) / 2) * width for i in range(len(found))]
        values = [0.0 if r["scores"][j] is None else r["scores"][j][0] for r in found]
        bars = ax_scores.bar(xs, values, width * 0.95, color=colours(j), label=title)
        for bar, r in zip(bars, found):
            if r["scores"][j] is not None:
                ax_scores.text(
                    bar.get_x() + bar.get_width() / 2,
                    max(bar.get_height(), 0) + 1,
                    f"{bar.get_height():.1f}",
                    ha="center",
                    va="bottom",
                    fontsize=7,
                )
    label = "trivial baseline"
    for i, r in enumerate(found):
        if r["trivial"] is not None:
            ax_scores.plot(
                [i - 0.45, i + 0.45],
                [r["trivial"]] * 2,
                color="black",
                linewidth=1.5,
                linestyle="--",
                label=label,
            )
            label = None
    ax_scores.set_xticks(range(len(found)))
    ax_scores.set_xticklabels([f"{r['title']}\n({r['metric']})" for r in found], fontsize=9)
    ax_scores.set_ylabel("test score x 100 (one seed)")
    ax_scores.set_ylim(0, 100)
    if titles:
        ax_scores.legend(fontsize=7, loc="upper left")
    effects = (
        [f"{r['title']} {_signed(difference(r, titles, effect))}" for r in found] if effect else []
    )
    ax_scores.set_title(
        "fine-tuned and scored"
        + (f"; pretraining's effect: {', '.join(effects)}" if effects else ""),
        fontsize=10,
    )
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)

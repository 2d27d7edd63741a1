"""How the demo's pretraining recipe was chosen (docs/index.md#the-demos-recipe): variants of the
tiny model's pretraining on the PubMed sample, each pretrained for the same updates and fine-tuned
on NCBI-disease with the demo's fine-tuning budget beside the same architecture from random
initialisation, as ``fairseq-bio-demo`` does.

A variant (``VARIANTS``) is a vocabulary size and overrides of ``bio_roberta_tiny``. Reported per
variant: its vocabulary's unigram entropy (the loss of a model that ignores the context), the valid
loss by update, updates/s, and NCBI-disease test F1 of it and of random init. Finished runs are
reused; ``--report-only`` reports what the work dir holds.

    python benchmarks/demo_recipe.py --variants v4k-lr1e-3,v16k-lr1e-3 --parallel 2

Writes ``<workdir>/demo_recipe.md`` and ``.png``.
"""

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Dict, List

from fairseq_bio import runs
from fairseq_bio_preprocess.demo import FINE_TUNING, blurb, train_command
from fairseq_bio_preprocess.demo_report import unigram_entropy
from fairseq_bio_preprocess.pipeline import build_data_bin, pubmed_sample_inputs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import REPO, pyplot, save_figure  # noqa: E402

BASE = ["model.dropout=0", "model.attention_dropout=0"]
VARIANTS = {  # name -> (vocabulary size, overrides of bio_roberta_tiny)
    "v16k-lr1e-3": (16000, ["optimization.lr=[0.001]"]),
    "v16k-lr2e-3": (16000, ["optimization.lr=[0.002]"]),
    "v16k-lr1e-3-tokens": (16000, ["optimization.lr=[0.001]", "task.mask_whole_words=false"]),
    "v16k-lr1e-3-preln": (
        16000,
        [
            "optimization.lr=[0.001]",
            "task.mask_whole_words=false",
            "model.encoder_normalize_before=true",
        ],
    ),
    "v8k-lr1e-3": (8000, ["optimization.lr=[0.001]"]),
    "v4k-lr1e-3": (4000, ["optimization.lr=[0.001]"]),
    "v4k-lr2e-3": (4000, ["optimization.lr=[0.002]"]),
    "v4k-lr1e-3-2layers": (4000, ["optimization.lr=[0.001]", "model.encoder_layers=2"]),
    "v4k-lr1e-3-block64": (
        4000,
        ["optimization.lr=[0.001]", "task.tokens_per_sample=64", "dataset.batch_size=32"],
    ),
}


def architecture(name: str) -> str:
    """What a variant's random-init twin is named by: its vocabulary and the model options it
    changes."""
    vocab, overrides = VARIANTS[name]
    return "-".join(
        [str(vocab)]
        + [
            o.split("=")[0].split(".")[-1] + o.split("=")[1]
            for o in overrides
            if o.startswith("model.encoder_")
        ]
    )


def pretrain_command(name: str, data_bin: Path, out: Path, updates: int) -> List[str]:
    every = max(1, updates // 6)
    overrides = [
        *BASE,
        *VARIANTS[name][1],
        f"optimization.max_update={updates}",
        f"lr_scheduler.warmup_updates={max(1, updates // 20)}",
        f"dataset.validate_interval_updates={every}",
        f"checkpoint.save_interval_updates={every}",
    ]
    return train_command(
        str(data_bin.resolve()),
        out / "checkpoints",
        out / "train.log",
        overrides,
        "json",
        config="bio_roberta_tiny",
    )


def reached(out: Path) -> int:
    """The update of the last validation ``out``'s run logged (0: none)."""
    last = runs.last_validation(out / "train.log")
    return int(last["num_updates"]) if last else 0


def finished(out: Path, updates: int) -> bool:
    return reached(out) >= updates and (out / "checkpoints" / "checkpoint_best.pt").exists()


def pretrain_all(
    names: List[str], data: Dict[int, Path], workdir: Path, updates: int, parallel: int
) -> None:
    """Every variant not finished yet, ``parallel`` at a time (one thread each when more than one).

    Finished means its last validation at the planned update. A run stopped early (one stuck at its
    unigram entropy) is reported with the update it reached; its latest checkpoint is fine-tuned
    only with ``--fine-tune-stopped``."""
    todo = [n for n in names if not finished(workdir / n, updates)]
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"} if parallel > 1 else None
    running: Dict[str, runs.Run] = {}
    while todo or running:
        while todo and len(running) < parallel:
            name = todo.pop(0)
            out = workdir / name
            print(f"[demo-recipe] pretrain {name} -> {out}", flush=True)
            running[name] = runs.Run(
                pretrain_command(name, data[VARIANTS[name][0]], out, updates),
                out / "stdout.log",
                env=env,
            )
        for name, run in list(running.items()):
            if run.poll() is not None:
                run.check()
                print(f"[demo-recipe] pretrained {name}", flush=True)
                del running[name]
        time.sleep(5)


def fine_tune(checkpoint: Path, out: Path, budget: Dict) -> float:
    """NCBI-disease test entity F1 of ``checkpoint`` after the demo's fine-tuning (the demo's own
    BLURB step)."""
    results = blurb(
        out.name,
        checkpoint,
        REPO.parent / "shared" / "data",
        out,
        "ncbi",
        budget["updates"],
        budget["batch"],
        budget["lr"],
    )
    return results["datasets"]["ncbi-disease"]["mean"]


def speed(log: Path) -> float:
    """Updates/s over the logged intervals after the first (harmonic mean)."""
    inner = list(runs.logged(log, "train_inner").values())[1:]
    return len(inner) / sum(1 / float(e["ups"]) for e in inner) if inner else float("nan")


def report(rows: List[Dict], updates: int, budget: Dict) -> str:
    lines = [
        f"Each variant pretrained for {updates} updates of 16 x 128-token blocks unless it says otherwise "
        "(bio_roberta_tiny, dropout 0), "
        f"then fine-tuned on NCBI-disease for {budget['updates']} updates of {budget['batch']} at lr "
        f"{budget['lr']:g} (one seed), as is the same architecture from random initialisation; – : a run "
        "stopped early, not fine-tuned.",
        "",
        "| variant | vocabulary | unigram entropy (bits) | final valid loss (bits) | below unigram | updates/s | "
        "NCBI-disease F1 | random init F1 | pretraining's effect |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        name = r["name"] + (
            "" if r["reached"] >= updates else f" (stopped at update {r['reached']})"
        )
        scores = (
            ["–"] * 3
            if r["f1"] is None
            else [f"{r['f1']:.2f}", f"{r['random_f1']:.2f}", f"{r['f1'] - r['random_f1']:+.2f}"]
        )
        lines.append(
            f"| {name} | {r['vocab']} | {r['unigram']:.2f} | {r['valid']:.2f} | "
            f"{r['unigram'] - r['valid']:+.2f} | {r['ups']:.2f} | " + " | ".join(scores) + " |"
        )
    return "\n".join(lines) + "\n"


def plot(rows: List[Dict], path: Path) -> None:
    plt = pyplot()

    fig, (ax, bars) = plt.subplots(1, 2, figsize=(12, 4.5))
    for r in rows:
        points = sorted(r["curve"].items())
        ax.plot(
            [u for u, _ in points],
            [r["unigram"] - v for _, v in points],
            marker="o",
            label=r["name"],
        )
    ax.axhline(0, color="black", linewidth=1, linestyle="--")
    ax.set_xlabel("update")
    ax.set_ylabel("valid loss below the vocabulary's unigram entropy (bits)")
    ax.set_title("pretraining: what the context adds", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    tuned = [r for r in rows if r["f1"] is not None]
    xs = range(len(tuned))
    bars.bar([x - 0.2 for x in xs], [r["f1"] for r in tuned], 0.4, label="pretrained")
    bars.bar([x + 0.2 for x in xs], [r["random_f1"] for r in tuned], 0.4, label="random init")
    bars.set_xticks(list(xs))
    bars.set_xticklabels([r["name"] for r in tuned], rotation=30, ha="right", fontsize=8)
    bars.set_ylabel("NCBI-disease test entity F1")
    bars.set_title("fine-tuned alike", fontsize=10)
    bars.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def main(argv=None) -> None:
    from fairseq_bio.encoder_checkpoints import random_init_checkpoint

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"of {', '.join(VARIANTS)}")
    parser.add_argument(
        "--updates", type=int, default=1800, help="pretraining updates of every variant"
    )
    parser.add_argument(
        "--parallel", type=int, default=1, help="pretrainings at once (one thread each when > 1)"
    )
    parser.add_argument(
        "--workdir", default="runs/demo_recipe", help="data, runs and the report; reused"
    )
    parser.add_argument(
        "--report-only", action="store_true", help="pretrain nothing; report the runs there are"
    )
    parser.add_argument(
        "--fine-tune-stopped",
        action="store_true",
        help="also fine-tune the latest checkpoint of runs stopped before --updates",
    )
    args = parser.parse_args(argv)
    names = args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"--variants: unknown {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    workdir = Path(args.workdir)
    budget = dict(FINE_TUNING)

    data = {}
    for vocab in sorted({VARIANTS[n][0] for n in names}):
        data[vocab] = build_data_bin(
            pubmed_sample_inputs(),
            workdir / f"data-{vocab}",
            vocab_size=vocab,
            workers=os.cpu_count() or 1,
        ).data_bin
    if args.report_only:
        names = [n for n in names if (workdir / n / "checkpoints" / "checkpoint_best.pt").exists()]
    else:
        pretrain_all(names, data, workdir, args.updates, args.parallel)

    rows, random_f1 = [], {}
    for name in names:
        out, vocab = workdir / name, VARIANTS[name][0]
        checkpoint = out / "checkpoints" / "checkpoint_best.pt"
        row = {
            "name": name,
            "vocab": vocab,
            "unigram": unigram_entropy(data[vocab] / "dict.txt"),
            "curve": {
                u: float(e["loss"]) for u, e in runs.logged(out / "train.log", "valid").items()
            },
            "ups": speed(out / "train.log"),
            "reached": reached(out),
            "f1": None,
            "random_f1": None,
        }
        row["valid"] = row["curve"][max(row["curve"])]
        if row["reached"] >= args.updates or args.fine_tune_stopped:
            shape = architecture(name)
            if shape not in random_f1:
                twin = workdir / f"random-init-{shape}" / "model.pt"
                if not twin.exists():
                    random_init_checkpoint(checkpoint, twin, seed=1)
                random_f1[shape] = fine_tune(twin, workdir / f"ft-random-init-{shape}", budget)
            row.update(
                f1=fine_tune(checkpoint, workdir / f"ft-{name}", budget), random_f1=random_f1[shape]
            )
        rows.append(row)
    table = report(rows, args.updates, budget)
    (workdir / "demo_recipe.md").write_text(table, encoding="utf-8")
    plot(rows, workdir / "demo_recipe.png")
    print(table + f"\n[demo-recipe] wrote {workdir / 'demo_recipe.md'} and .png", flush=True)


if __name__ == "__main__":
    main()

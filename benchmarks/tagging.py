"""NER fine-tuning benchmark: test entity F1 on NCBI-disease and BC5CDR-disease from an encoder
pretrained here within a wall-clock budget against the same architecture from random initialisation,
with fine-tuning and prediction throughput.

Everything runs through the user-facing tools: the demo's data pipeline, fairseq's hydra entry
point with ``bio_roberta_tiny`` (pretraining) and ``bio_tagging_ner`` (fine-tuning, same updates,
lr and seed for both starting points), and ``fairseq-bio-predict`` for test P/R/F1. How throughput
is counted: ``harness.train_throughput`` and ``harness.predict``.

    python benchmarks/tagging.py --quick    # smoke run: 2 min pretraining, 200 train sentences, few updates

Writes ``benchmarks/results/tagging.md`` and ``tagging.png`` and prints the table.
"""

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Sequence

from fairseq_bio import runs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import (  # noqa: E402
    MAX_POSITIONS,
    NER_DATA,
    REPO,
    RESULTS,
    SIZES,
    Runner,
    architecture,
    conll_blocks,
    encoder_parameters,
    fine_tune,
    ner_data,
    predict,
    prepare_data,
    pretrain,
    pyplot,
    random_init,
    save_figure,
)

DATASETS = ("NCBI-disease", "BC5CDR-disease")
INITS = ("pretrained", "random")

FULL = dict(
    workdir="runs/bench_tagging",
    pretrain_minutes=30.0,
    size="tiny",
    max_docs_per_file=None,
    train_sentences=None,
    dev_sentences=None,
    epochs=10,
    batch_size=32,
    pretrain_updates=None,
    probe_updates=50,
)
QUICK = dict(
    workdir="runs/bench_tagging_quick",
    pretrain_minutes=2.0,
    size="mini",
    max_docs_per_file=3000,
    train_sentences=200,
    dev_sentences=300,
    epochs=5,
    batch_size=16,
    pretrain_updates=300,
    probe_updates=20,
)


def report(rows: List[Dict], meta: Dict, commands: List[str]) -> str:
    """The markdown table (and notes) of ``rows``."""
    enc = meta["encoder"]
    lines = [
        f"# NER fine-tuning: pretrained here vs random initialisation ({runs.HYDRA_TRAIN}, fairseq-bio-predict)",
        "",
        f"{meta['mode']} run, {meta['date']}, {meta['device']}. Encoder: bio_roberta {meta['size']} "
        f"({' x '.join(str(SIZES[meta['size']][k]) for k in ('encoder_layers', 'encoder_embed_dim'))}, "
        f"{enc['params'] / 1e6:.1f} M parameters, {MAX_POSITIONS} positions), pretrained with whole-word masking "
        f"(dropout {meta['pretrain_dropout']:g}) on the PubMed sample for {enc['updates']} updates in "
        f"{enc['minutes']:.1f} min (budget {meta['budget']:g} min, "
        f"valid perplexity {enc['valid_ppl']}). Fine-tuning: bio_tagging_ner, {meta['train']} train sentences, "
        f"{meta['dev']} dev sentences, batch {meta['batch_size']}, lr {meta['lr']:g} with 10 % warm-up, the same "
        "updates and seed for both starting points, best dev entity F1 checkpoint; test: the whole test file.",
        "",
        "| dataset | init | seed | test P | test R | test F1 | best dev F1 | train sent/s | predict sent/s "
        "| predict sent/s net | updates | fine-tune wall s |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        cells = [
            r["dataset"],
            r["init"],
            r["seed"],
            *(f"{r[k]:.2f}" for k in ("p", "r", "f1", "dev_f1")),
            *(f"{r[k]:.1f}" for k in ("train_sps", "predict_sps", "predict_net_sps")),
            r["updates"],
            f"{r['wall']:.0f}",
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    lines.append("")
    for dataset in meta["datasets"]:
        f1 = {
            i: statistics.mean(r["f1"] for r in rows if r["dataset"] == dataset and r["init"] == i)
            for i in INITS
        }
        lines.append(
            f"- {dataset}: test F1 pretrained {f1['pretrained']:.2f} vs random {f1['random']:.2f} "
            f"({f1['pretrained'] - f1['random']:+.2f})"
        )
    lines += [
        "",
        "Train sent/s: training examples (windows of long sentences count once each) per second of fairseq's "
        "per-update log, start-up and the updates after validations left out. Predict sent/s: test sentences per "
        "second of the whole fairseq-bio-predict process; net: without its start-up (wall on the test file minus "
        "wall on its first sentence; nan when machine load swamps the difference). Fine-tune wall: the whole "
        f"{runs.HYDRA_TRAIN} process, validations included.",
        "",
        "Commands run (in this order):",
        "",
        "```",
        *commands,
        "```",
        "",
    ]
    return "\n".join(lines)


def plot(rows: List[Dict], datasets: Sequence[str], path: Path) -> None:
    plt = pyplot()

    def spread(dataset, init, key):
        values = [r[key] for r in rows if r["dataset"] == dataset and r["init"] == init]
        mean = statistics.mean(values)
        return mean, mean - min(values), max(values) - mean

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.38
    for k, init in enumerate(INITS):
        stats = [spread(d, init, "f1") for d in datasets]
        xs = [i + (k - 0.5) * width for i in range(len(datasets))]
        bars = ax1.bar(
            xs,
            [s[0] for s in stats],
            width,
            yerr=[[s[1] for s in stats], [s[2] for s in stats]],
            label=f"{init} init",
        )
        ax1.bar_label(bars, fmt="%.1f", fontsize=8)
    ax1.set_xticks(range(len(datasets)), datasets)
    ax1.set_ylabel("test entity F1 (%)")
    ax1.set_title("NER test F1: pretrained vs random init")
    ax1.legend(fontsize=8)
    for k, (key, label) in enumerate(
        (("train_sps", "fine-tuning"), ("predict_sps", "prediction, end to end"))
    ):
        values = [statistics.mean(r[key] for r in rows if r["dataset"] == d) for d in datasets]
        bars = ax2.bar(
            [i + (k - 0.5) * width for i in range(len(datasets))], values, width, label=label
        )
        ax2.bar_label(bars, fmt="%.0f", fontsize=8)
    ax2.set_xticks(range(len(datasets)), datasets)
    ax2.set_ylabel("sentences / s")
    ax2.set_title("Throughput (mean over runs)")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: " + ", ".join(f"{k}={v}" for k, v in QUICK.items()),
    )
    parser.add_argument(
        "--workdir", help=f"pretraining data and encoder, logs; reused (default {FULL['workdir']})"
    )
    parser.add_argument(
        "--pretrain-minutes", type=float, help="pretraining wall-clock budget (default 30)"
    )
    parser.add_argument(
        "--size", choices=sorted(SIZES), help="encoder size (default tiny: 4 x 256)"
    )
    parser.add_argument(
        "--max-docs-per-file", type=int, help="pretraining corpus: documents per input file"
    )
    parser.add_argument("--vocab-size", type=int, default=16000, help="byte-level BPE size")
    parser.add_argument(
        "--new-encoder", action="store_true", help="pretrain again even if the workdir has one"
    )
    parser.add_argument(
        "--datasets", nargs="+", default=list(DATASETS), help=f"folders of {NER_DATA}"
    )
    parser.add_argument(
        "--train-sentences", type=int, help="first N train sentences (default: all)"
    )
    parser.add_argument("--dev-sentences", type=int, help="first N dev sentences (default: all)")
    parser.add_argument(
        "--epochs", type=float, help="fine-tuning updates = epochs x train sentences / batch"
    )
    parser.add_argument("--updates", type=int, help="fine-tuning updates (instead of --epochs)")
    parser.add_argument(
        "--batch-size", type=int, help="fine-tuning sentences per update (default 32)"
    )
    parser.add_argument(
        "--lr",
        type=float,
        default=5e-4,
        help="fine-tuning peak lr (tiny models need more than 5e-5)",
    )
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=[1], help="one fine-tuning run per seed and init"
    )
    parser.add_argument(
        "--pretrain-dropout",
        type=float,
        default=0.0,
        help="pretraining dropout and attention dropout (default 0: a 30-min encoder underfits, and "
        "dropout only slows it; see tests/test_tagging_margin.py)",
    )
    parser.add_argument(
        "--pretrain-updates", type=int, help="planned pretraining updates (default: from a probe)"
    )
    parser.add_argument(
        "--probe-updates", type=int, help="updates of the pretraining speed probe (default 50)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        help="OMP/MKL threads of every tool (default: torch's, all cores; "
        "1 is far faster on a core shared with other jobs)",
    )
    parser.add_argument(
        "--workers", type=int, default=os.cpu_count() or 1, help="preprocessing processes"
    )
    args = parser.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)

    sys.path.insert(0, str(REPO))
    import torch

    from fairseq_bio.files import InputError as PreprocessError, atomic_write

    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    run = Runner(workdir, args.threads)
    data_bin = prepare_data(workdir, args.workers, args.vocab_size, args.max_docs_per_file)
    encoder = pretrain(args, run, workdir, data_bin)
    encoder = {**encoder, "params": encoder_parameters(Path(encoder["checkpoint"]))}

    inits = {
        "pretrained": [f"checkpoint.restore_file={encoder['checkpoint']}"],
        "random": random_init(args.size),
    }
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-tagging-") as tmp:
        tmp = Path(tmp)
        for n, dataset in enumerate(args.datasets):
            data = ner_data(dataset, args.train_sentences, args.dev_sentences, tmp)
            train_n = len(conll_blocks(data / "train.tsv"))
            updates = args.updates or max(1, math.ceil(args.epochs * train_n / args.batch_size))
            for s, seed in enumerate(args.seeds):
                # alternate which starting point goes first, so drifts in machine load hit both
                # alike
                order = INITS if (n + s) % 2 == 0 else INITS[::-1]
                arch = {}
                for init in order:
                    name = f"{dataset}-{init}-seed{seed}"
                    save_dir = tmp / name
                    save_dir.mkdir()
                    row = {"dataset": dataset, "init": init, "seed": seed}
                    row.update(
                        fine_tune(
                            run, name, data, save_dir, inits[init], args, updates, seed, data_bin
                        )
                    )
                    checkpoint = save_dir / "checkpoint_best.pt"
                    arch[init] = architecture(checkpoint)
                    pred_dir = tmp / f"{name}-predict"
                    pred_dir.mkdir()
                    row.update(predict(run, name, checkpoint, data / "test.tsv", pred_dir))
                    for suffix in ("train.log",):  # keep the logs; checkpoints go with the temp dir
                        (run.logs / f"{name}.{suffix}").write_bytes(
                            (save_dir / suffix).read_bytes()
                        )
                    rows.append(row)
                    print(
                        f"[bench] {name}: test F1 {row['f1']:.2f} (dev {row['dev_f1']:.2f}), "
                        f"{row['train_sps']:.1f} train sent/s, {row['predict_sps']:.1f} predict sent/s "
                        f"({row['predict_net_sps']:.1f} net of start-up), "
                        f"{row['updates']} updates in {row['wall']:.0f} s",
                        flush=True,
                    )
                if arch["pretrained"] != arch["random"]:
                    differ = set(arch["pretrained"].items()) ^ set(arch["random"].items())
                    raise PreprocessError(
                        f"the fine-tuned models differ in architecture: {sorted(differ)[:4]}"
                    )
        dev = "all" if args.dev_sentences is None else f"first {args.dev_sentences}"
        meta = {
            "mode": "quick (smoke)" if args.quick else "full",
            "date": time.strftime("%Y-%m-%d"),
            "device": (
                f"GPU {torch.cuda.get_device_name(0)}"
                if torch.cuda.is_available()
                else f"CPU, {os.cpu_count()} cores, torch {torch.__version__}"
            )
            + (f", {args.threads} thread(s) per tool" if args.threads else ""),
            "size": args.size,
            "encoder": encoder,
            "budget": args.pretrain_minutes,
            "pretrain_dropout": args.pretrain_dropout,
            "train": "all" if args.train_sentences is None else f"first {args.train_sentences}",
            "dev": dev,
            "batch_size": args.batch_size,
            "lr": args.lr,
            "datasets": args.datasets,
        }
    commands = [c.replace(str(tmp), "$TMP") for c in run.commands]
    text = report(rows, meta, commands)
    with atomic_write(RESULTS / "tagging.md") as f:
        f.write(text)
    plot(rows, args.datasets, RESULTS / "tagging.png")
    print(text)
    print(f"wrote {RESULTS / 'tagging.md'} and {RESULTS / 'tagging.png'}")


if __name__ == "__main__":
    from fairseq_bio.cli.options import run_cli

    run_cli("benchmarks/tagging.py", main)

"""NER fine-tuning benchmark: test entity F1 on NCBI-disease and BC5CDR-disease from an encoder pretrained here
within a wall-clock budget against the same architecture from random initialisation, with fine-tuning and
prediction throughput.

Everything runs through the user-facing tools: the demo's data pipeline (real PubMed sample -> byte-level BPE ->
binarised, reused from ``--workdir``), fairseq's hydra entry point (``fairseq_bio.runs``) with ``--config-name
bio_roberta_tiny`` for pretraining (a short probe measures updates/s, then the main run gets as many updates as fit
the budget, with fairseq's ``optimization.stop_time_hours`` as the hard stop) and with ``--config-name
bio_tagging_ner`` for fine-tuning (same updates, lr and seed for both starting points; the best dev entity F1
checkpoint is kept), and ``fairseq-bio-predict`` for test P/R/F1.

Train sentences/s: examples (``bsz``) over seconds (1 / ``ups``) of fairseq's per-update log entries, leaving out
the first update (start-up) and each update that follows a validation (its interval holds validation and
checkpoint saving). Predict sentences/s: test sentences / wall of ``fairseq-bio-predict`` on the test file (what a
user waits for), and net of start-up: (test sentences - 1) / (that wall - the wall on its first sentence alone), so
Python start-up, imports and model loading cancel (n/a when machine load swamps the difference).

    python benchmarks/tagging.py            # full: 30 min pretraining, whole data sets (about 1.5 h on 2 cores)
    python benchmarks/tagging.py --quick    # smoke run: 2 min pretraining, 200 train sentences, few updates

Writes ``benchmarks/results/tagging.md`` and ``tagging.png`` and prints the table.
"""

import argparse
import math
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from fairseq_bio import runs

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
NER_DATA = REPO.parent / "shared" / "data" / "ner"
DATASETS = ("NCBI-disease", "BC5CDR-disease")
INITS = ("pretrained", "random")

# Encoder sizes: "tiny" is the bio_roberta_tiny config's own (about 3 updates/s on 2 cores, ~5k updates in 30 min);
# "mini" learns something useful within the quick mode's 2 minutes.
SIZES = {
    "tiny": dict(encoder_layers=4, encoder_embed_dim=256, encoder_ffn_embed_dim=1024, encoder_attention_heads=4),
    "mini": dict(encoder_layers=2, encoder_embed_dim=128, encoder_ffn_embed_dim=512, encoder_attention_heads=2),
}
PRETRAIN_LR = {"tiny": 5e-4, "mini": 1e-3}
STARTUP_ALLOWANCE = 20.0  # seconds a training process takes to start and stop, when no probe measured it
MAX_POSITIONS = 128  # the CPU pretraining recipe's (recipe/cpu_demo.yaml); random init gets the same

FULL = dict(workdir="runs/bench_tagging", pretrain_minutes=30.0, size="tiny", max_docs_per_file=None,
            train_sentences=None, dev_sentences=None, epochs=10, batch_size=32, pretrain_updates=None,
            probe_updates=50)  # fmt: skip
QUICK = dict(workdir="runs/bench_tagging_quick", pretrain_minutes=2.0, size="mini", max_docs_per_file=3000,
             train_sentences=200, dev_sentences=300, epochs=5, batch_size=16, pretrain_updates=300,
             probe_updates=20)  # fmt: skip


def size_overrides(size: str) -> List[str]:
    return [f"model.{k}={v}" for k, v in SIZES[size].items()]


class Runner:
    """Runs the tools, keeps their output under ``<workdir>/logs`` and records every command line."""

    def __init__(self, workdir: Path, threads: Optional[int]):
        self.logs = workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.commands: List[str] = []
        self.env = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)} if threads else {}

    def __call__(self, cmd: Sequence, name: str, cwd: Path) -> Tuple[float, str]:
        """(wall seconds, stdout) of ``cmd``; a failure is one line naming the file with its output."""
        from fairseq_bio_preprocess.common import PreprocessError

        cmd = [str(c) for c in cmd]
        self.commands.append(" ".join([*(f"{k}={v}" for k, v in self.env.items()), shlex.join(cmd)]))
        out = self.logs / f"{name}.out"
        start = time.perf_counter()
        result = subprocess.run(
            cmd, cwd=cwd, capture_output=True, text=True, env={**os.environ, **self.env, "PYTHONUNBUFFERED": "1"}
        )
        wall = time.perf_counter() - start
        out.write_text(result.stdout + result.stderr, encoding="utf-8")
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise PreprocessError(f"{Path(cmd[0]).name} failed (exit {result.returncode}): {last}; its output: {out}")
        return wall, result.stdout


def last_update(log: Path) -> int:
    """The number of updates a run reached (its last train, train_inner or valid entry in its json log)."""
    return max(max(runs.logged(log, kind), default=0) for kind in runs.KINDS)


def intervals(log: Path) -> List[Dict]:
    """The per-interval (train_inner) entries of a json log with fairseq's updates/s, in update order."""
    return [e for _, e in sorted(runs.logged(log, "train_inner").items()) if "ups" in e]


def prepare_data(workdir: Path, workers: int, vocab_size: int, max_docs: Optional[int]) -> Path:
    """The demo's pipeline (fetch, extract, byte-level BPE, encode, binarise), reusing finished steps (and a demo
    workdir: --workdir runs/demo)."""
    from fairseq_bio_preprocess.pipeline import build_data_bin, pubmed_sample_inputs

    return build_data_bin(pubmed_sample_inputs(), workdir, vocab_size=vocab_size, max_docs_per_file=max_docs,
                          workers=workers).data_bin  # fmt: skip


def speed_probe(run: Runner, config: str, overrides: List[str], updates: int, name: str) -> Dict[str, float]:
    """``updates`` updates of ``config`` with ``overrides`` (no validation, nothing saved): the process's wall seconds,
    the updates/s over the logged intervals after the first (which holds start-up) and that of the fastest one."""
    from fairseq_bio_preprocess.common import PreprocessError

    with tempfile.TemporaryDirectory() as tmp:
        log, interval = Path(tmp) / "train.log", max(1, updates // 5)
        cmd = runs.hydra_train(config, *overrides, f"optimization.max_update={updates}",
                               "dataset.disable_validation=true", "checkpoint.no_save=true",
                               f"common.log_interval={interval}", save_dir=tmp, log=log)  # fmt: skip
        wall, _ = run(cmd, name, Path(tmp))
        inner = intervals(log)[1:]
    if not inner:
        raise PreprocessError(f"the {name} speed probe logged too few updates; raise --probe-updates")
    return {"wall": wall, "ups": len(inner) / sum(1 / float(e["ups"]) for e in inner),
            "fastest": max(float(e["ups"]) for e in inner)}  # fmt: skip


def pretrain(args, run: Runner, workdir: Path, data_bin: Path) -> Dict:
    """The best encoder ``args.size`` gives within ``args.pretrain_minutes`` (reused when already made)."""
    from fairseq_bio_preprocess.common import PreprocessError
    from fairseq_bio_preprocess.demo import train_command
    from fairseq_bio_preprocess.pipeline import Steps

    steps = Steps(workdir)
    params = {
        "data": steps.done.get("binarize"),
        "size": args.size,
        "minutes": args.pretrain_minutes,
        "lr": PRETRAIN_LR[args.size],
        "updates": args.pretrain_updates,
        "probe_updates": args.probe_updates,
        "dropout": args.pretrain_dropout,
    }
    record = steps.done.get("bench_pretrain")
    if record and record["params"] == params and not args.new_encoder and Path(record["checkpoint"]).exists():
        print(f"[bench] pretraining: reusing {record['checkpoint']} ({record['updates']} updates)", flush=True)
        return record

    budget = 60 * args.pretrain_minutes
    start = time.perf_counter()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    common = [*size_overrides(args.size), f"optimization.lr=[{PRETRAIN_LR[args.size]}]",
              f"model.dropout={args.pretrain_dropout}", f"model.attention_dropout={args.pretrain_dropout}"]
    updates, overhead = args.pretrain_updates, STARTUP_ALLOWANCE
    if updates is None:  # 1. probe: updates/s of this size on this machine now, and the tool's start-up time
        probe = speed_probe(run, "bio_roberta_tiny", [f"task.data={data_bin}", *common], args.probe_updates,
                            "pretrain-probe")  # fmt: skip
        ups = probe["ups"]
        overhead = max(0.0, probe["wall"] - args.probe_updates / ups)
        left = budget - (time.perf_counter() - start) - overhead
        # 10 % for validation and checkpoints
        updates = int(0.9 * ups * left)
        print(f"[bench] pretraining probe: {ups:.2f} updates/s, start-up {overhead:.0f} s -> {updates} updates",
              flush=True)  # fmt: skip
    # stop_time_hours stops training at the budget whatever the machine's load does (fairseq counts from start-up)
    left = budget - (time.perf_counter() - start) - overhead
    if updates < 20 or left < 10:
        raise PreprocessError(f"{args.pretrain_minutes} min leave {left:.0f} s for {updates} pretraining updates: "
                              "raise --pretrain-minutes")  # fmt: skip

    # 2. the run itself, in a fresh directory (an interrupted one is never resumed: it would break the budget)
    save_dir = workdir / f"encoder-{args.size}-{stamp}"
    log = save_dir / "train.log"
    save_dir.mkdir(parents=True)
    every = max(100, updates // 10)
    cmd = train_command(str(data_bin), save_dir, log, [
        *common, f"optimization.max_update={updates}", f"lr_scheduler.warmup_updates={max(1, updates // 20)}",
        f"optimization.stop_time_hours={left / 3600:.5f}", f"dataset.validate_interval_updates={every}",
        f"checkpoint.save_interval_updates={every}"], log_format="json", config="bio_roberta_tiny")  # fmt: skip
    run(cmd, "pretrain", save_dir)
    minutes = (time.perf_counter() - start) / 60
    done = last_update(log)
    valid = runs.last_validation(log) or {}
    checkpoint = save_dir / "checkpoint_best.pt"
    record = {"params": params, "checkpoint": str(checkpoint), "updates": done, "planned_updates": updates,
              "minutes": round(minutes, 2), "valid_loss": valid.get("loss"),
              "valid_ppl": valid.get("ppl")}  # fmt: skip
    steps.done["bench_pretrain"] = record
    steps.save()
    print(f"[bench] pretrained {done} updates in {minutes:.1f} min, valid ppl {valid.get('ppl')}", flush=True)
    return record


def conll_blocks(path: Path) -> List[str]:
    return [b for b in path.read_text(encoding="utf-8").split("\n\n") if b.strip()]


def ner_data(dataset: str, train_n: Optional[int], dev_n: Optional[int], tmp: Path,
             test_n: Optional[int] = None) -> Path:  # fmt: skip
    """The dataset's directory (a folder of NER_DATA, or any path), read only; or, with cuts, a new directory under
    ``tmp`` with the first sentences of train/devel/test (a link to the files not cut). Nothing is ever written into
    the dataset."""
    from fairseq_bio_preprocess.common import PreprocessError

    source = (NER_DATA / dataset).resolve()  # an absolute ``dataset`` is taken as it is
    for name in ("train.tsv", "devel.tsv", "test.tsv"):
        if not (source / name).is_file():
            raise PreprocessError(f"{source / name}: not found (NER data: {NER_DATA})")
    if train_n is None and dev_n is None and test_n is None:
        return source
    out = Path(tempfile.mkdtemp(dir=tmp, prefix=f"{source.name}-"))  # always a new directory of ours
    for name, n in (("train.tsv", train_n), ("devel.tsv", dev_n), ("test.tsv", test_n)):
        if n is None:
            (out / name).symlink_to(source / name)  # the shared data is read, never copied
        else:
            (out / name).write_text("\n\n".join(conll_blocks(source / name)[:n]) + "\n\n", encoding="utf-8")
    return out


def train_throughput(log: Path) -> float:
    """Examples/s of training from a json log's per-update entries, leaving out start-up and the updates after
    validations."""
    validated = set(runs.logged(log, "valid"))
    clean = [e for e in intervals(log)[1:] if int(e["num_updates"]) - 1 not in validated]
    return sum(float(e["bsz"]) for e in clean) / sum(1 / float(e["ups"]) for e in clean)


def random_init(size: str) -> List[str]:
    """The fine-tuning overrides of the ``size`` encoder from random initialisation (fairseq's default
    restore_file in a fresh save_dir: nothing is restored)."""
    return ["checkpoint.restore_file=checkpoint_last.pt", *size_overrides(size), f"model.max_positions={MAX_POSITIONS}"]


def fine_tune(run: Runner, name: str, data: Path, save_dir: Path, init_overrides: List[str], args, updates: int,
              seed: int, vocab: Path) -> Dict:  # fmt: skip
    """One training run of bio_tagging_ner; its updates, wall, train throughput and best dev F1."""
    log = save_dir / "train.log"
    cmd = runs.hydra_train("bio_tagging_ner", f"task.data={data}", f"task.vocab={vocab}", f"common.seed={seed}",
                           f"optimization.max_update={updates}", "optimization.max_epoch=0",
                           f"dataset.batch_size={args.batch_size}", f"optimizer.groups.default.lr_float={args.lr}",
                           f"optimizer.groups.default.lr_scheduler.warmup_updates={max(1, updates // 10)}",
                           "common.log_interval=1", *init_overrides, save_dir=save_dir, log=log)  # fmt: skip
    wall, _ = run(cmd, name, save_dir)
    return {
        "updates": last_update(log),
        "wall": wall,
        "train_sps": train_throughput(log),
        "dev_f1": max(float(e["f1"]) for e in runs.logged(log, "valid").values() if "f1" in e),
    }


def predict(run: Runner, name: str, checkpoint: Path, test: Path, tmp: Path) -> Dict:
    """Test P/R/F1 printed by fairseq-bio-predict, and its sentences/s net of start-up (see the module doc)."""
    blocks = conll_blocks(test)
    one = tmp / "one.tsv"
    one.write_text(blocks[0] + "\n\n", encoding="utf-8")
    base = runs.command("fairseq-bio-predict", "--checkpoint", checkpoint, "--no-progress",
                        "--overwrite")  # our outputs
    wall_one, _ = run([*base, "--input", one, "--out", tmp / "one.pred.tsv"], f"{name}-predict-one", tmp)
    wall, printed = run([*base, "--input", test, "--out", tmp / "test.pred.tsv"], f"{name}-predict", tmp)
    line = next(x for x in printed.splitlines() if x.startswith("entity precision"))
    p, r, f1 = (float(line.split()[i]) for i in (2, 4, 6))  # "entity precision P recall R F1 F"
    net = wall - wall_one  # below zero when machine load swamps the difference (short test files)
    return {"p": p, "r": r, "f1": f1, "predict_sps": len(blocks) / wall,
            "predict_net_sps": (len(blocks) - 1) / net if net > 0 else math.nan, "predict_wall": wall,
            "test_sentences": len(blocks)}  # fmt: skip


def architecture(checkpoint: Path) -> Dict[str, tuple]:
    """Name -> shape of every weight of a checkpoint's model (what "the same architecture" has to mean)."""
    from fairseq_bio.checkpoints import load_checkpoint

    return {k: tuple(v.shape) for k, v in load_checkpoint(checkpoint)["model"].items()}


def encoder_parameters(checkpoint: Path) -> int:
    from fairseq_bio.checkpoints import load_checkpoint

    weights = load_checkpoint(checkpoint)["model"]
    return sum(v.numel() for k, v in weights.items() if k.startswith("encoder.sentence_encoder."))


def save_report(out: Path, results: Dict, text: str, plot: Callable[[Path], None], copies: Path, name: str) -> None:
    """``out/results.json``, ``.md`` (``text``) and ``.png`` (drawn by ``plot``), copied to ``copies/<name>.*``;
    prints the report."""
    import shutil

    from fairseq_bio.files import write_json, write_text

    write_json(out / "results.json", results, indent=1)
    write_text(out / "results.md", text)
    plot(out / "results.png")
    copies.mkdir(parents=True, exist_ok=True)
    for suffix in ("json", "md", "png"):
        shutil.copyfile(out / f"results.{suffix}", copies / f"{name}.{suffix}")
    print(text + f"\nwrote {out / 'results.md'}, .json, .png (copied to {copies})")


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
        cells = [r["dataset"], r["init"], r["seed"], *(f"{r[k]:.2f}" for k in ("p", "r", "f1", "dev_f1")),
                 *(f"{r[k]:.1f}" for k in ("train_sps", "predict_sps", "predict_net_sps")), r["updates"],
                 f"{r['wall']:.0f}"]  # fmt: skip
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    lines.append("")
    for dataset in meta["datasets"]:
        f1 = {i: statistics.mean(r["f1"] for r in rows if r["dataset"] == dataset and r["init"] == i) for i in INITS}
        lines.append(f"- {dataset}: test F1 pretrained {f1['pretrained']:.2f} vs random {f1['random']:.2f} "
                     f"({f1['pretrained'] - f1['random']:+.2f})")  # fmt: skip
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def spread(dataset, init, key):
        values = [r[key] for r in rows if r["dataset"] == dataset and r["init"] == init]
        mean = statistics.mean(values)
        return mean, mean - min(values), max(values) - mean

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.38
    for k, init in enumerate(INITS):
        stats = [spread(d, init, "f1") for d in datasets]
        xs = [i + (k - 0.5) * width for i in range(len(datasets))]
        bars = ax1.bar(xs, [s[0] for s in stats], width, yerr=[[s[1] for s in stats], [s[2] for s in stats]],
                       label=f"{init} init")  # fmt: skip
        ax1.bar_label(bars, fmt="%.1f", fontsize=8)
    ax1.set_xticks(range(len(datasets)), datasets)
    ax1.set_ylabel("test entity F1 (%)")
    ax1.set_title("NER test F1: pretrained vs random init")
    ax1.legend(fontsize=8)
    for k, (key, label) in enumerate((("train_sps", "fine-tuning"), ("predict_sps", "prediction, end to end"))):
        values = [statistics.mean(r[key] for r in rows if r["dataset"] == d) for d in datasets]
        bars = ax2.bar([i + (k - 0.5) * width for i in range(len(datasets))], values, width, label=label)
        ax2.bar_label(bars, fmt="%.0f", fontsize=8)
    ax2.set_xticks(range(len(datasets)), datasets)
    ax2.set_ylabel("sentences / s")
    ax2.set_title("Throughput (mean over runs)")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    from fairseq_bio.files import atomic_write

    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=120)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: " + ", ".join(f"{k}={v}" for k, v in QUICK.items())
    )
    parser.add_argument("--workdir", help=f"pretraining data and encoder, logs; reused (default {FULL['workdir']})")
    parser.add_argument("--pretrain-minutes", type=float, help="pretraining wall-clock budget (default 30)")
    parser.add_argument("--size", choices=sorted(SIZES), help="encoder size (default tiny: 4 x 256)")
    parser.add_argument("--max-docs-per-file", type=int, help="pretraining corpus: documents per input file")
    parser.add_argument("--vocab-size", type=int, default=16000, help="byte-level BPE size")
    parser.add_argument("--new-encoder", action="store_true", help="pretrain again even if the workdir has one")
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), help=f"folders of {NER_DATA}")
    parser.add_argument("--train-sentences", type=int, help="first N train sentences (default: all)")
    parser.add_argument("--dev-sentences", type=int, help="first N dev sentences (default: all)")
    parser.add_argument("--epochs", type=float, help="fine-tuning updates = epochs x train sentences / batch")
    parser.add_argument("--updates", type=int, help="fine-tuning updates (instead of --epochs)")
    parser.add_argument("--batch-size", type=int, help="fine-tuning sentences per update (default 32)")
    parser.add_argument("--lr", type=float, default=5e-4, help="fine-tuning peak lr (tiny models need more than 5e-5)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1], help="one fine-tuning run per seed and init")
    parser.add_argument("--pretrain-dropout", type=float, default=0.0,
                        help="pretraining dropout and attention dropout (default 0: a 30-min encoder underfits, and "
                        "dropout only slows it; see tests/test_tagging_margin.py)")
    parser.add_argument("--pretrain-updates", type=int, help="planned pretraining updates (default: from a probe)")
    parser.add_argument("--probe-updates", type=int, help="updates of the pretraining speed probe (default 50)")
    parser.add_argument("--threads", type=int, help="OMP/MKL threads of every tool (default: torch's, all cores; "
                        "1 is far faster on a core shared with other jobs)")  # fmt: skip
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="preprocessing processes")
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
                # alternate which starting point goes first, so drifts in machine load hit both alike
                order = INITS if (n + s) % 2 == 0 else INITS[::-1]
                arch = {}
                for init in order:
                    name = f"{dataset}-{init}-seed{seed}"
                    save_dir = tmp / name
                    save_dir.mkdir()
                    row = {"dataset": dataset, "init": init, "seed": seed}
                    row.update(fine_tune(run, name, data, save_dir, inits[init], args, updates, seed, data_bin))
                    checkpoint = save_dir / "checkpoint_best.pt"
                    arch[init] = architecture(checkpoint)
                    pred_dir = tmp / f"{name}-predict"
                    pred_dir.mkdir()
                    row.update(predict(run, name, checkpoint, data / "test.tsv", pred_dir))
                    for suffix in ("train.log",):  # keep the logs; checkpoints go with the temp dir
                        (run.logs / f"{name}.{suffix}").write_bytes((save_dir / suffix).read_bytes())
                    rows.append(row)
                    print(f"[bench] {name}: test F1 {row['f1']:.2f} (dev {row['dev_f1']:.2f}), "
                          f"{row['train_sps']:.1f} train sent/s, {row['predict_sps']:.1f} predict sent/s "
                          f"({row['predict_net_sps']:.1f} net of start-up), "
                          f"{row['updates']} updates in {row['wall']:.0f} s", flush=True)  # fmt: skip
                if arch["pretrained"] != arch["random"]:
                    differ = set(arch["pretrained"].items()) ^ set(arch["random"].items())
                    raise PreprocessError(f"the fine-tuned models differ in architecture: {sorted(differ)[:4]}")
        dev = "all" if args.dev_sentences is None else f"first {args.dev_sentences}"
        meta = {
            "mode": "quick (smoke)" if args.quick else "full",
            "date": time.strftime("%Y-%m-%d"),
            "device": (
                f"GPU {torch.cuda.get_device_name(0)}"
                if torch.cuda.is_available()
                else f"CPU, {os.cpu_count()} cores, torch {torch.__version__}"
            )
            + (f", {args.threads} thread(s) per tool" if args.threads else ""),  # fmt: skip
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

"""Replaced-token detection against masked LM downstream, at equal compute (seed 003, BioELECTRA).

A tiny ELECTRA and a masked-LM ``bio_roberta`` of its discriminator's size pretrain on the PubMed
sample for the same wall-clock minutes; the discriminator is extracted as a plain encoder, then
each is fine-tuned on NCBI-disease per seed beside the same architecture from random
initialisation. Reported: test entity F1 per seed and the paired differences ELECTRA - MLM. Why
wall-clock, and how the budget is split: benchmarks/README.md.

    python benchmarks/electra_downstream.py                 # 30 min each, all of NCBI-disease, seeds 1 2 3
    python benchmarks/electra_downstream.py --quick         # smoke run: 2 x 128 models, 40 updates, 200 sentences

Writes ``<workdir>/results.md``, ``.json`` and ``.png``, copied to
``benchmarks/results/electra_downstream.*``; a rerun with the same ``--workdir`` reuses the data,
both encoders and every finished fine-tuning.
"""

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, Optional

from fairseq_bio import runs

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402  (data, MLM pretraining, fine-tuning and prediction)
from harness import RESULTS, pyplot, save_figure  # noqa: E402

ELECTRA, MLM, RANDOM = "electra", "mlm", "random"
LABELS = {ELECTRA: "ELECTRA discriminator", MLM: "masked LM", RANDOM: "random init"}
CONFIGS = {ELECTRA: "bio_electra_tiny", MLM: "bio_roberta_tiny"}  # what each is pretrained with
# The generator of each discriminator size: bio_electra_tiny's own (64 / 256 / 1 head) for
# tagging.py's "tiny" (4 x 256), a quarter of the width for "mini" (2 x 128), as ELECTRA's small
# models.
GENERATOR = {
    "tiny": dict(generator_embed_dim=64, generator_ffn_embed_dim=256, generator_attention_heads=1),
    "mini": dict(generator_embed_dim=32, generator_ffn_embed_dim=128, generator_attention_heads=1),
}
# x --pretrain-minutes: where fairseq stops a run whatever its updates. Not the budget itself: a
# change of load during one run would cut that one short and not the other.
PRETRAIN_CAP = 3.0
ELECTRA_WARMUP = (
    300  # recipe/electra_cpu_demo's: a 30-update warm-up collapses the discriminator (electra.py)
)
MASK_PROB = (
    0.15  # both tasks' (whole words); the FLOP estimate's share of positions with an LM head
)

FULL = dict(
    workdir="runs/bench_electra_downstream",
    pretrain_minutes=30.0,
    size="tiny",
    max_docs_per_file=None,
    vocab_size=16000,
    pretrain_updates=None,
    probe_updates=50,
    train_sentences=None,
    dev_sentences=None,
    test_sentences=None,
    epochs=5,
    batch_size=32,
    seeds=[1, 2, 3],
)
QUICK = dict(
    workdir="runs/bench_electra_downstream_quick",
    pretrain_minutes=2.0,
    size="mini",
    max_docs_per_file=300,
    vocab_size=3000,
    pretrain_updates=40,
    probe_updates=20,
    train_sentences=200,
    dev_sentences=100,
    test_sentences=200,
    epochs=2,
    batch_size=16,
    seeds=[1],
)


def overrides(args, model: str, data_bin: Path) -> list:
    """The pretraining overrides of ``model`` on ``data_bin``: harness.pretrain's (size, lr,
    dropout), the ELECTRA generator's size."""
    generator = (
        [f"model.{k}={v}" for k, v in GENERATOR[args.size].items()] if model == ELECTRA else []
    )
    return [
        f"task.data={data_bin}",
        *harness.size_overrides(args.size),
        *generator,
        f"optimization.lr=[{harness.PRETRAIN_LR[args.size]}]",
        f"model.dropout={args.pretrain_dropout}",
        f"model.attention_dropout={args.pretrain_dropout}",
    ]


def probe(args, run: harness.Runner, model: str, data_bin: Path, name: str) -> Dict[str, float]:
    """``args.probe_updates`` updates of ``model`` (harness.speed_probe): its wall seconds,
    updates/s over the intervals after the first (which holds start-up) and that of the fastest of
    them."""
    return harness.speed_probe(
        run, CONFIGS[model], overrides(args, model, data_bin), args.probe_updates, name
    )


def plan(args, run: harness.Runner, workdir: Path, data_bin: Path) -> Dict:
    """The updates of each objective: ``--pretrain-updates`` for both, or what fits
    ``--pretrain-minutes`` at the fastest interval of its probes (run ELECTRA, MLM, MLM, ELECTRA),
    after the least start-up any probe took, 10 % left for validation and checkpoints; reused from
    ``<workdir>/steps.json`` for the same settings.

    The fastest interval, not the mean: other jobs only ever slow a probe down, and on a shared
    machine one probe can run many times slower than the next. Each run's lr schedule ends at its
    planned updates."""
    from fairseq_bio.files import InputError
    from fairseq_bio_preprocess.pipeline import Steps

    if args.pretrain_updates:
        return {
            "updates": {ELECTRA: args.pretrain_updates, MLM: args.pretrain_updates},
            "ups": None,
        }
    steps = Steps(workdir)
    params = {
        "data": str(data_bin),
        "size": args.size,
        "minutes": args.pretrain_minutes,
        "probe_updates": args.probe_updates,
        "dropout": args.pretrain_dropout,
        "speed": "fastest interval",
    }
    record = steps.done.get("bench_electra_plan")
    if record and record["params"] == params and not args.new_encoder:
        return record
    probes = {ELECTRA: [], MLM: []}
    for n, model in enumerate((ELECTRA, MLM, MLM, ELECTRA)):
        probes[model].append(probe(args, run, model, data_bin, f"probe-{n + 1}-{model}"))
    ups = {m: max(x["fastest"] for x in p) for m, p in probes.items()}
    startup = min(
        max(0.0, x["wall"] - args.probe_updates / x["ups"]) for p in probes.values() for x in p
    )
    updates = {m: int(0.9 * ups[m] * (60 * args.pretrain_minutes - startup)) for m in probes}
    if min(updates.values()) < 20:
        raise InputError(
            f"{args.pretrain_minutes} min give {updates} pretraining updates: raise --pretrain-minutes"
        )
    record = {
        "params": params,
        "ups": ups,
        "startup": startup,
        "updates": updates,
        "probes": probes,
    }
    steps = Steps(workdir)  # as it is now
    steps.done["bench_electra_plan"] = record
    steps.save()
    print(
        f"[bench] probes: ELECTRA {ups[ELECTRA]:.2f}, MLM {ups[MLM]:.2f} updates/s, start-up {startup:.0f} s -> "
        f"{updates[ELECTRA]} and {updates[MLM]} updates",
        flush=True,
    )
    return record


def pretrain_electra(
    args, run: harness.Runner, workdir: Path, data_bin: Path, updates: int
) -> Dict:
    """bio_electra_tiny at ``args.size`` for ``updates`` (as harness.pretrain runs the MLM: a fresh
    directory, validation and checkpoints every tenth, the last checkpoint, at most
    ``args.pretrain_cap`` minutes); reused when already made.

    The last checkpoint, as ELECTRA's release uses, not the lowest validation loss: the loss is the
    generator's plus 50 x the discriminator's, and the discriminator's task hardens as the
    generator learns (random replacements turn into plausible words), so the loss rises while both
    improve and "best" would pick an early checkpoint."""
    from fairseq_bio_preprocess.pipeline import Steps

    params = {
        "data": str(data_bin),
        "size": args.size,
        "generator": GENERATOR[args.size],
        "lr": harness.PRETRAIN_LR[args.size],
        "updates": updates,
        "cap": args.pretrain_cap,
        "dropout": args.pretrain_dropout,
        "checkpoint": "last",
    }
    record = Steps(workdir).done.get("bench_electra")
    if (
        record
        and record["params"] == params
        and not args.new_encoder
        and Path(record["checkpoint"]).exists()
    ):
        print(
            f"[bench] ELECTRA pretraining: reusing {record['checkpoint']} ({record['updates']} updates)",
            flush=True,
        )
        return record
    start = time.perf_counter()
    save_dir = (
        workdir / f"electra-{args.size}-{time.strftime('%Y%m%d-%H%M%S')}"
    )  # fresh, never resumed
    save_dir.mkdir(parents=True)
    log, every = save_dir / "train.log", max(100, updates // 10)
    cmd = runs.hydra_train(
        CONFIGS[ELECTRA],
        *overrides(args, ELECTRA, data_bin),
        f"optimization.max_update={updates}",
        f"lr_scheduler.warmup_updates={max(1, min(ELECTRA_WARMUP, updates // 3))}",
        f"optimization.stop_time_hours={args.pretrain_cap / 60:.5f}",
        f"dataset.validate_interval_updates={every}",
        f"checkpoint.save_interval_updates={every}",
        save_dir=save_dir,
        log=log,
    )
    run(cmd, "electra-pretrain", save_dir)
    valid = runs.last_validation(log) or {}
    record = {
        "params": params,
        "checkpoint": str(save_dir / "checkpoint_last.pt"),
        "updates": harness.last_update(log),
        "planned_updates": updates,
        "minutes": round((time.perf_counter() - start) / 60, 2),
        "valid": {
            k: valid.get(k)
            for k in (
                "loss",
                "gen_loss",
                "disc_acc",
                "replaced_recall",
                "replaced_precision",
                "replaced_prob",
                "original_prob",
            )
        },
    }
    steps = Steps(workdir)  # as it is now
    steps.done["bench_electra"] = record
    steps.save()
    print(
        f"[bench] ELECTRA: {record['updates']} updates in {record['minutes']:.1f} min, valid {record['valid']}",
        flush=True,
    )
    return record


def extract(run: harness.Runner, electra: Dict) -> Path:
    """The discriminator of the ELECTRA checkpoint as a bio_roberta encoder
    (``fairseq-bio-extract-encoder``)."""
    checkpoint = Path(electra["checkpoint"])
    out = checkpoint.parent / "discriminator" / "encoder.pt"
    if not out.exists():
        run(
            runs.command("fairseq-bio-extract-encoder", "--checkpoint", checkpoint, "--out", out),
            "extract",
            checkpoint.parent,
        )
    return out


def training_speed(log: Path) -> Dict[str, float]:
    """A pretraining run's tokens (its updates x the mean tokens per batch of its per-interval
    entries) and updates/s of training alone (the intervals after the first, which holds
    start-up)."""
    inner = harness.intervals(log)
    tokens = (
        harness.last_update(log) * statistics.fmean(float(e["wpb"]) for e in inner)
        if inner
        else math.nan
    )
    timed = inner[1:] or inner
    return {
        "tokens": tokens,
        "ups": len(timed) / sum(1 / float(e["ups"]) for e in timed) if timed else math.nan,
    }


def flops_per_token(size: str, vocab: int, block: int, electra: bool) -> float:
    """Training FLOPs per token (3 x the forward's, 2 per multiply-add): the encoder's layers, then
    an LM head (dense + tied ``V``-wide output) at the masked share of positions; ELECTRA adds its
    generator (its layers, the projection of the shared embeddings, its head) and the
    discriminator's dense + one-logit head on every token.
    """

    def layers(n: int, width: int, ffn: int) -> float:
        return n * (
            2 * (4 * width * width + 2 * width * ffn) + 4 * block * width
        )  # projections, attention

    s = harness.SIZES[size]
    d = s["encoder_embed_dim"]
    forward = layers(s["encoder_layers"], d, s["encoder_ffn_embed_dim"])
    if not electra:
        return 3 * (forward + MASK_PROB * 2 * (d * d + d * vocab))
    g = GENERATOR[size]["generator_embed_dim"]
    generator = (
        layers(s["encoder_layers"], g, GENERATOR[size]["generator_ffn_embed_dim"]) + 2 * d * g
    )
    return 3 * (forward + generator + MASK_PROB * 2 * (g * d + d * vocab) + 2 * (d * d + d))


def fine_tune(
    run: harness.Runner,
    args,
    model: str,
    encoder: Optional[Path],
    data: Path,
    updates: int,
    seed: int,
    vocab: Path,
    workdir: Path,
    tmp: Path,
) -> Dict:
    """tagging.py's fine-tuning and prediction (harness) of ``encoder`` (None: the same architecture
    from random initialisation) on ``data``; its row, reused from
    ``<workdir>/finetune/<model>-seed<seed>.json`` when one with the same encoder and settings is
    there."""
    from fairseq_bio.files import write_json

    # the data by name and cut (a cut's directory under tmp is new each run)
    params = {
        "encoder": str(encoder) if encoder else f"random {args.size}",
        "data": args.dataset,
        "updates": updates,
        "seed": seed,
        "lr": args.lr,
        "batch_size": args.batch_size,
        "sentences": [args.train_sentences, args.dev_sentences, args.test_sentences],
    }
    kept = workdir / "finetune" / f"{model}-seed{seed}.json"
    if kept.exists() and json.loads(kept.read_text(encoding="utf-8"))["params"] == params:
        row = json.loads(kept.read_text(encoding="utf-8"))["row"]
        print(f"[bench] {model} seed {seed}: reusing {kept} (test F1 {row['f1']:.2f})", flush=True)
        return row
    name = f"{model}-seed{seed}"
    save_dir, pred_dir = tmp / name, tmp / f"{name}-predict"
    save_dir.mkdir()
    pred_dir.mkdir()
    row = {"model": model, "seed": seed}
    init = [f"checkpoint.restore_file={encoder}"] if encoder else harness.random_init(args.size)
    row.update(harness.fine_tune(run, name, data, save_dir, init, args, updates, seed, vocab))
    row.update(
        harness.predict(run, name, save_dir / "checkpoint_best.pt", data / "test.tsv", pred_dir)
    )
    (run.logs / f"{name}.train.log").write_bytes(
        (save_dir / "train.log").read_bytes()
    )  # checkpoints go with tmp
    write_json(kept, {"params": params, "row": row}, indent=1)
    print(
        f"[bench] {LABELS[model]} seed {seed}: dev F1 {row['dev_f1']:.2f}, test F1 {row['f1']:.2f} "
        f"({row['updates']} updates, {row['wall']:.0f} s)",
        flush=True,
    )
    return row


def report(results: Dict) -> str:
    """The markdown: how each encoder was pretrained, then test F1 per seed and the paired
    differences."""
    meta, pre, f1, diffs = results["meta"], results["pretrain"], results["f1"], results["diffs"]
    shape = " x ".join(
        str(harness.SIZES[meta["size"]][k]) for k in ("encoder_layers", "encoder_embed_dim")
    )
    gen = GENERATOR[meta["size"]]
    spread = f" ± {statistics.stdev(diffs):.2f} (std over seeds)" if len(diffs) > 1 else ""
    ups = results["plan"]["ups"]
    budget = (
        f"for the updates that fit {meta['budget']:g} min each at the speeds of interleaved probes (the "
        f"fastest interval: ELECTRA {ups[ELECTRA]:.2f}, MLM {ups[MLM]:.2f} updates/s), each stopped at "
        f"{PRETRAIN_CAP:g} x that at the latest"
        if ups
        else "for the same updates (--pretrain-updates), each "
        f"stopped at {PRETRAIN_CAP * meta['budget']:g} min at the latest"
    )
    lines = [
        "# Replaced-token detection vs masked LM at equal wall-clock, fine-tuned on NCBI-disease (seed 003)",
        "",
        f"{meta['mode']} run, {meta['date']}, {meta['device']}. Both encoders are bio_roberta {shape} "
        f"({meta['params'] / 1e6:.2f} M encoder parameters, 128 positions), pretrained on the PubMed sample "
        f"({meta['vocab']:,}-symbol byte-level BPE, 16 x 128-token blocks, whole-word masking of 15 %, lr "
        f"{harness.PRETRAIN_LR[meta['size']]:g}, dropout {meta['pretrain_dropout']:g}) {budget}: ELECTRA "
        f"(bio_electra_tiny; generator {gen['generator_embed_dim']} wide, FFN {gen['generator_ffn_embed_dim']}, "
        f"discriminator weight 50, warm-up {ELECTRA_WARMUP} updates or a third of the run), its discriminator "
        "extracted by fairseq-bio-extract-encoder; masked LM (bio_roberta_tiny, tagging.py's pretraining, warm-up "
        "5 %).",
        "",
        "| pretraining | planned updates | updates | minutes | updates/s | tokens (M) | est. TFLOP | last validation |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for model in (ELECTRA, MLM):
        p = pre[model]
        valid = ", ".join(f"{k} {float(v):.4g}" for k, v in p["valid"].items() if v is not None)
        lines.append(
            f"| {LABELS[model]} | {p['planned']} | {p['updates']} | {p['minutes']:.1f} | {p['ups']:.2f} | "
            f"{p['tokens'] / 1e6:.2f} | {p['tflop']:.2f} | {valid} |"
        )
    lines += [
        "",
        "Minutes: the whole process (start-up, validations and checkpoints included); updates/s: training steps "
        "alone (fairseq's per-interval log, the first interval left out); est. TFLOP: tokens x the module's estimate "
        "per token (3 x the forward's multiply-adds x 2, an LM head on 15 % of the positions).",
        "",
        f"Fine-tuning: bio_tagging_ner, {meta['train']} train sentences, {meta['dev']} dev sentences, batch "
        f"{meta['batch_size']}, lr {meta['lr']:g} with 10 % warm-up, {meta['updates']} updates, the same for both "
        f"encoders and the same architecture from random initialisation per seed; the best dev entity F1 checkpoint; "
        f"test: {meta['test']} test sentences (fairseq-bio-predict).",
        "",
        "| seed | ELECTRA test F1 | MLM test F1 | random init test F1 | ELECTRA - MLM | ELECTRA dev F1 | MLM dev F1 | "
        "random init dev F1 |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    rows = {(r["model"], r["seed"]): r for r in results["rows"]}
    for seed, diff in zip(results["seeds"], diffs):
        e, m, r = rows[(ELECTRA, seed)], rows[(MLM, seed)], rows[(RANDOM, seed)]
        lines.append(
            f"| {seed} | {e['f1']:.2f} | {m['f1']:.2f} | {r['f1']:.2f} | {diff:+.2f} | {e['dev_f1']:.2f} | "
            f"{m['dev_f1']:.2f} | {r['dev_f1']:.2f} |"
        )
    lines += [
        "",
        f"Mean test F1: ELECTRA {statistics.fmean(f1[ELECTRA]):.2f}, MLM {statistics.fmean(f1[MLM]):.2f}, "
        f"random init {statistics.fmean(f1[RANDOM]):.2f}; "
        f"paired difference ELECTRA - MLM **{statistics.fmean(diffs):+.2f}**{spread} over "
        f"{len(diffs)} seed(s).",
        "",
        "Commands run (in this order):",
        "",
        "```",
        *(
            results["commands"]
            or ["(none: every piece was reused from the workdir; see its logs/)"]
        ),
        "```",
        "",
    ]
    return "\n".join(lines)


def plot(results: Dict, path: Path) -> None:
    """Test F1 per seed of both encoders and random init (each seed's joined), and the paired
    differences."""
    plt = pyplot()
    f1, diffs = results["f1"], results["diffs"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    models = (ELECTRA, MLM, RANDOM)
    for seed_f1 in zip(*(f1[m] for m in models)):
        ax1.plot(range(len(models)), seed_f1, color="0.6", marker="o")
    ax1.bar(
        range(len(models)),
        [statistics.fmean(f1[m]) for m in models],
        color=["tab:orange", "tab:blue", "0.7"],
        alpha=0.5,
        width=0.5,
    )
    ax1.set_xticks(range(len(models)), [LABELS[m] for m in models])
    ax1.set_ylabel("NCBI-disease test entity F1 (%)")
    ax1.set_title(f"equal wall-clock pretraining ({results['meta']['budget']:g} min each)")
    ax2.bar([0], [statistics.fmean(diffs)], color="tab:green", width=0.5)
    ax2.scatter([0] * len(diffs), diffs, color="black", zorder=3)
    ax2.axhline(0, color="black", linewidth=0.6)
    ax2.set_xticks([0], ["ELECTRA - MLM"])
    ax2.set_xlim(-1, 1)
    ax2.set_ylabel("F1 points, paired by seed")
    fig.tight_layout()
    save_figure(fig, path)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: " + ", ".join(f"{k}={v}" for k, v in QUICK.items()),
    )
    parser.add_argument(
        "--workdir", help=f"data, encoders, fine-tunings, logs; reused (default {FULL['workdir']})"
    )
    parser.add_argument(
        "--results", default=str(RESULTS), help=f"where the results are copied (default {RESULTS})"
    )
    parser.add_argument(
        "--pretrain-minutes",
        type=float,
        help="wall-clock budget of each pretraining, priced by speed "
        f"probes (default 30; a run stops at {PRETRAIN_CAP:g} x that at the latest)",
    )
    parser.add_argument(
        "--size", choices=sorted(GENERATOR), help="encoder size (default tiny: 4 x 256)"
    )
    parser.add_argument(
        "--pretrain-updates",
        type=int,
        help="the same N updates for both instead of probes (quick: 40; 0: probes)",
    )
    parser.add_argument(
        "--probe-updates", type=int, help="updates of each of the 4 speed probes (default 50)"
    )
    parser.add_argument(
        "--pretrain-dropout", type=float, default=0.0, help="pretraining dropout (tagging.py's 0)"
    )
    parser.add_argument(
        "--new-encoders", action="store_true", help="pretrain again even if the workdir has both"
    )
    parser.add_argument(
        "--data",
        help="a binarised PubMed data dir to pretrain on instead of preparing one (a "
        "workdir's masked LM is reused whatever this says: give a new --workdir)",
    )
    parser.add_argument(
        "--max-docs-per-file", type=int, help="pretraining corpus: documents per input file"
    )
    parser.add_argument("--vocab-size", type=int, help="byte-level BPE size (default 16000)")
    parser.add_argument(
        "--dataset",
        default="NCBI-disease",
        help=f"NER set (a folder of {harness.NER_DATA}, or a path)",
    )
    parser.add_argument(
        "--train-sentences", type=int, help="first N train sentences (default: all)"
    )
    parser.add_argument("--dev-sentences", type=int, help="first N dev sentences (default: all)")
    parser.add_argument("--test-sentences", type=int, help="first N test sentences (default: all)")
    parser.add_argument(
        "--epochs", type=float, help="fine-tuning updates = epochs x train sentences / batch"
    )
    parser.add_argument(
        "--batch-size", type=int, help="fine-tuning sentences per update (default 32)"
    )
    parser.add_argument("--lr", type=float, default=5e-4, help="fine-tuning peak lr (tagging.py's)")
    seeds = parser.add_mutually_exclusive_group()
    seeds.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        help="fine-tuning seeds, each for both encoders (default 1 2 3)",
    )
    seeds.add_argument("--seed", type=int, help="one fine-tuning seed (as --seeds N)")
    parser.add_argument(
        "--threads", type=int, help="OMP/MKL threads of every tool (default: the environment's)"
    )
    parser.add_argument(
        "--workers", type=int, default=os.cpu_count() or 1, help="preprocessing processes"
    )
    args = parser.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.seed is not None:
        args.seeds = [args.seed]
    args.new_encoder = args.new_encoders  # harness.pretrain's name

    import torch

    from fairseq_bio.files import InputError

    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    run = harness.Runner(workdir, args.threads)
    if args.data:
        data_bin = Path(args.data).resolve()
    else:
        data_bin = harness.prepare_data(
            workdir, args.workers, args.vocab_size, args.max_docs_per_file
        )
    planned = plan(args, run, workdir, data_bin)
    args.pretrain_cap = PRETRAIN_CAP * args.pretrain_minutes
    # harness.pretrain plans nothing when given the updates; its budget is then only the hard stop
    as_planned = {
        "pretrain_updates": planned["updates"][MLM],
        "pretrain_minutes": args.pretrain_cap,
    }
    mlm = harness.pretrain(
        argparse.Namespace(**{**vars(args), **as_planned}), run, workdir, data_bin
    )
    electra = pretrain_electra(args, run, workdir, data_bin, planned["updates"][ELECTRA])
    encoders = {ELECTRA: extract(run, electra), MLM: Path(mlm["checkpoint"]), RANDOM: None}
    if harness.architecture(encoders[ELECTRA]) != harness.architecture(encoders[MLM]):
        differ = set(harness.architecture(encoders[ELECTRA]).items()) ^ set(
            harness.architecture(encoders[MLM]).items()
        )
        raise InputError(
            f"the extracted discriminator and the MLM encoder differ: {sorted(differ)[:4]}"
        )
    vocab = (
        sum(1 for _ in open(data_bin / "dict.txt", encoding="utf-8")) + 5
    )  # + <s> <pad> </s> <unk> <mask>
    pretrain = {}
    for model, record in ((ELECTRA, electra), (MLM, mlm)):
        speed = training_speed(Path(record["checkpoint"]).parent / "train.log")
        valid = (
            record["valid"]
            if model == ELECTRA
            else {"loss": record["valid_loss"], "ppl": record["valid_ppl"]}
        )
        flops = flops_per_token(args.size, vocab, harness.MAX_POSITIONS, model == ELECTRA)
        pretrain[model] = {
            "checkpoint": record["checkpoint"],
            "planned": planned["updates"][model],
            "updates": record["updates"],
            "minutes": record["minutes"],
            **speed,
            "valid": valid,
            "tflop": speed["tokens"] * flops / 1e12,
        }

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-electra-downstream-") as tmp:
        tmp = Path(tmp)
        data = harness.ner_data(
            args.dataset, args.train_sentences, args.dev_sentences, tmp, args.test_sentences
        )
        updates = max(
            1,
            math.ceil(
                args.epochs * len(harness.conll_blocks(data / "train.tsv")) / args.batch_size
            ),
        )
        for i, seed in enumerate(args.seeds):
            # alternate the order, so drifts in machine load hit each alike
            for model in (ELECTRA, MLM, RANDOM) if i % 2 == 0 else (RANDOM, MLM, ELECTRA):
                rows.append(
                    fine_tune(
                        run,
                        args,
                        model,
                        encoders[model],
                        data,
                        updates,
                        seed,
                        data_bin,
                        workdir,
                        tmp,
                    )
                )
        test_n = len(harness.conll_blocks(data / "test.tsv"))
        commands = [c.replace(str(tmp), "$TMP") for c in run.commands]
    f1 = {
        m: [next(r["f1"] for r in rows if (r["model"], r["seed"]) == (m, s)) for s in args.seeds]
        for m in LABELS
    }
    threads = args.threads or os.environ.get("OMP_NUM_THREADS", "all")
    results = {
        "meta": {
            "mode": "quick (smoke)" if args.quick else "full",
            "date": time.strftime("%Y-%m-%d"),
            "device": f"CPU, {os.cpu_count()} cores, torch {torch.__version__}, {threads} thread(s) per tool"
            + (
                f"; fine-tuning on GPU {torch.cuda.get_device_name(0)}"
                if torch.cuda.is_available()
                else ""
            ),
            "size": args.size,
            "params": harness.encoder_parameters(encoders[MLM]),
            "vocab": vocab,
            "budget": args.pretrain_minutes,
            "pretrain_dropout": args.pretrain_dropout,
            "dataset": args.dataset,
            "train": "all" if args.train_sentences is None else f"the first {args.train_sentences}",
            "dev": "all" if args.dev_sentences is None else f"the first {args.dev_sentences}",
            "test": f"all {test_n}" if args.test_sentences is None else f"the first {test_n}",
            "batch_size": args.batch_size,
            "lr": args.lr,
            "updates": updates,
        },
        "plan": planned,
        "pretrain": pretrain,
        "seeds": args.seeds,
        "rows": rows,
        "f1": f1,
        "diffs": [e - m for e, m in zip(f1[ELECTRA], f1[MLM])],
        "commands": commands,
    }
    harness.save_report(
        workdir,
        results,
        report(results),
        lambda path: plot(results, path),
        Path(args.results),
        "electra_downstream",
    )


if __name__ == "__main__":
    from fairseq_bio.cli.options import run_cli

    run_cli("benchmarks/electra_downstream.py", main)

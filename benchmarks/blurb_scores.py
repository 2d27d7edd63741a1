"""BLURB on this machine: one encoder fine-tuned and scored on every shared dataset (NCBI-disease,
BC5CDR-disease, GAD, DDI, HoC, BIOSSES, PubMedQA) by ``fairseq-bio-blurb``, with the wall time and
the fine-tuning throughput (examples/s) of every task.

The encoder is the real MiniLM-L6-H384 imported once, or any checkpoint given with
``--checkpoint``. The recipes' budgets take days on a CPU, so ``--budget cpu`` (the default without
a GPU) runs one seed each with ``CPU_BUDGETS``; ``--budget recipe`` runs the recipes as they are.
Writes ``<out>/results.*``, copied to ``benchmarks/results/blurb.*``; a rerun reuses finished runs.

    python benchmarks/blurb_scores.py --budget recipe --seeds 5    # the full run (a GPU)
"""

import argparse
import shutil
import sys
from pathlib import Path

from fairseq_bio import runs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from parity_tasks import imported_minilm  # noqa: E402
from harness import REPO, RESULTS  # noqa: E402

# in ../shared/data: NCBI-disease, BC5-disease, GAD, DDI, HoC, BIOSSES, PubMedQA (the rest: listed)
DATASETS = "all"
# One seed each in about 90 minutes on 2 quiet CPU cores, chosen so that each task leaves its
# trivial answer (on dev): NCBI-disease and GAD 2 epochs, BC5-disease 1, BIOSSES its recipe's 30.
# The recipes' learning rates are for 20-40 epochs; cut to a few hundred updates, DDI (lr 2e-5, 300
# updates of 32), HoC (4e-5, 2 epochs of 32) and PubMedQA (2e-5) stayed at the all-negative /
# majority answer, so they get a higher rate and smaller batches (more updates for the same rows).
# The runner sets the warm-up to 10 % of each budget.
CPU_BUDGETS = (
    "ncbi-disease:optimization.max_epoch=2",
    "bc5-disease:optimization.max_epoch=1",
    "gad:optimization.max_epoch=2",
    "ddi:optimization.max_update=800",  # 12,800 of its 25,295 training pairs
    "ddi:dataset.batch_size=16",
    "ddi:optimizer.groups.default.lr_float=1e-4",
    "hoc:optimization.max_epoch=2",
    "hoc:dataset.batch_size=16",
    "hoc:optimizer.groups.default.lr_float=1e-4",
    "pubmedqa:optimization.max_epoch=2",
    "pubmedqa:optimizer.groups.default.lr_float=5e-5",
)


def main(argv=None) -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--checkpoint",
        help="the encoder (default: MiniLM-L6-H384 imported into <out>/minilm-fairseq)",
    )
    parser.add_argument(
        "--data", default=str(REPO.parent / "shared" / "data"), help="root of the task data"
    )
    parser.add_argument("--tasks", default=DATASETS, help=f"datasets (default: {DATASETS})")
    parser.add_argument(
        "--out", default=str(REPO / "runs" / "bench_blurb"), help="runs and results"
    )
    parser.add_argument(
        "--budget",
        choices=("cpu", "recipe"),
        default="recipe" if torch.cuda.is_available() else "cpu",
        help="cpu: CPU_BUDGETS, one seed; recipe: the recipes' epochs (default on a GPU)",
    )
    parser.add_argument(
        "--seeds", type=int, default=None, help="seeds per dataset (cpu: 1; recipe: the runner's)"
    )
    args = parser.parse_args(argv)

    out = Path(args.out).resolve()
    checkpoint = (
        Path(args.checkpoint).resolve()
        if args.checkpoint
        else imported_minilm(out / "minilm-fairseq")
    )
    command = runs.command(
        "fairseq-bio-blurb",
        "--checkpoint",
        checkpoint,
        "--data",
        args.data,
        "--tasks",
        args.tasks,
        "--out",
        out,
    )
    seeds = args.seeds or (1 if args.budget == "cpu" else None)
    if seeds:
        command += ["--seeds", str(seeds)]
    if not torch.cuda.is_available():
        command.append("--cpu")
    if args.budget == "cpu":
        command += ["--", *CPU_BUDGETS]
    print("$ " + " ".join(command), flush=True)
    code = runs.Run(command).finish()
    if (out / "results.md").exists():
        RESULTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / "results.md", RESULTS / "blurb.md")
        shutil.copyfile(out / "results.png", RESULTS / "blurb.png")
        print((out / "results.md").read_text(encoding="utf-8"))
        print(f"copied to {RESULTS / 'blurb.md'} and blurb.png")
    return code


if __name__ == "__main__":
    sys.exit(main())

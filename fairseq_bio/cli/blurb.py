"""fairseq-bio-blurb: one encoder checkpoint fine-tuned and scored on every BLURB (BLUE, bio-lm)
dataset there is data for.

Each (dataset, learning rate, seed) is one ``fairseq-hydra-train`` run with the dataset's standard
recipe, in its own directory under ``--out``, then scored from ``fairseq-bio-predict``'s test
predictions; a finished run made by the same command from the same encoder file is reused.
``--folds K`` cross-validates, ``--lr-grid`` picks the learning rate on dev. ``results.md`` /
``.json`` / ``.png`` give per dataset the test scores over seeds, per task type the average, and
the benchmark score (**partial** when a dataset is missing). What a run does: docs/blurb.md. The
datasets are the table ``hydra_configs/runner/datasets.yaml``; the library behind this command is
``fairseq_bio.runner``. ``--launcher slurm`` runs each run as a SLURM job (docs/cluster.md).
"""

import argparse
import logging
import math
import shlex
import signal
import sys
from pathlib import Path
from typing import List, Optional, Sequence

from ..runner.datasets import BENCHMARKS, RECIPES
from ..runner.execute import run_all
from ..runner.plan import lock_out, make_runs, plan_runs, resolve_tasks, write_random_starts
from ..runner.slurm import describe, run_on_slurm, slurm_options
from ..errors import BioConfigError
from .options import Parser, add_checkpoint, add_data, add_out, run_cli

PROG = "fairseq-bio-blurb"


def _floats(value: str) -> List[float]:
    try:
        values = [float(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a comma-separated list of numbers"
        ) from None
    if not values or not all(math.isfinite(v) and v > 0 for v in values):
        raise argparse.ArgumentTypeError(
            f"{value!r}: learning rates must be positive, finite numbers"
        )
    return sorted(set(values))


def _batch_sizes(value: str) -> List[int]:
    sizes = [v.strip() for v in value.split(",") if v.strip()]
    if not sizes or not all(v.isdigit() and int(v) >= 1 for v in sizes):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a comma-separated list of positive integers"
        )
    return sorted({int(v) for v in sizes})


def _positive(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive integer")
    return int(value)


def _count(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number")
    return int(value)


def _folds(value: str) -> int:
    k = _positive(value)
    if k == 2:
        raise argparse.ArgumentTypeError(
            "2 folds leave nothing to train on (one part is the test, one the dev); give "
            "3 or more, or 1 for the datasets' own splits"
        )
    return k


def _span(seeds: Sequence[int]) -> str:
    return f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]}"


class _Parser(Parser):
    """The command's parser: what follows ``--`` is hydra overrides (``args.overrides``), never
    options."""

    def parse_args(self, args=None, namespace=None):
        argv = list(sys.argv[1:] if args is None else args)
        cut = argv.index("--") if "--" in argv else len(argv)
        parsed = super().parse_args(argv[:cut], namespace)
        parsed.overrides = argv[cut + 1 :]
        return parsed


def build_parser() -> Parser:
    parser = _Parser(
        prog=PROG,
        description=__doc__.split("\n\n")[0],
        epilog="Hydra overrides after `--` go to every run (`<dataset>:key=value`: to that dataset's runs only).",
    )
    add_checkpoint(parser, "the encoder checkpoint (dict.txt + bpe.json beside it)")
    parser.add_argument(
        "--tasks",
        default="all",
        help="all, or dataset names separated by commas (ncbi,gad,hoc,...)",
    )
    parser.add_argument(
        "--seeds",
        type=_positive,
        default=None,
        help="seeds per dataset (default: 5; 10 for BIOSSES, PubMedQA, BioASQ)",
    )
    add_data(parser, "root of the task data (ner/NCBI-disease, re/GAD, hoc, ...)", required=True)
    parser.add_argument(
        "--dataset-dir",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="one dataset's directory, instead of its place under --data (repeatable)",
    )
    add_out(
        parser,
        "where runs and results go; finished runs there are reused (default: runs/blurb)",
        default="runs/blurb",
    )
    parser.add_argument(
        "--preset", choices=sorted(RECIPES), default="blurb", help="benchmark: blurb, blue or biolm"
    )
    parser.add_argument(
        "--folds",
        type=_folds,
        default=None,
        metavar="K",
        help="cross-validate every dataset run over K folds of its train file (K >= 3; 1: the "
        "datasets' own splits; default: the preset's, biolm: 10 for GAD and EU-ADR)",
    )
    parser.add_argument(
        "--lr-grid", type=_floats, default=None, help="learning rates to try, e.g. 1e-5,3e-5,5e-5"
    )
    parser.add_argument(
        "--batch-sizes",
        type=_batch_sizes,
        default=None,
        help="batch sizes to try with each learning rate, e.g. 16,32 (PubMedBERT sec. 6.2); the "
        "(lr, batch) with the best mean dev score is chosen; each size gets its own update budget",
    )
    parser.add_argument(
        "--max-epoch", type=_positive, default=None, help="epochs instead of each dataset's own"
    )
    parser.add_argument(
        "--max-update", type=_positive, default=None, help="updates per run (smoke runs)"
    )
    parser.add_argument(
        "--validate-batch-size", type=_positive, default=32, help="batch size of the test scoring"
    )
    parser.add_argument(
        "--random-init",
        action="store_true",
        help="fine-tune the checkpoint's architecture from random initialisation instead of its "
        "weights, each seed from its own draw (written once to <out>/random-init/seed<N>/model.pt): "
        "the from-scratch side of a pretrained-against-random comparison; give it its own --out",
    )
    parser.add_argument(
        "--cpu", action="store_true", help="train and score on the CPU even when a GPU is present"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the plan and the command lines, run nothing"
    )
    add_slurm_options(parser)
    return parser


def add_slurm_options(parser: Parser) -> None:
    """``--launcher slurm`` and the jobs' resources (submitit's and the slurm_* presets' names;
    unset: the presets' FAIRSEQ_BIO_SLURM_* variables)."""
    group = parser.add_argument_group(
        "SLURM (--launcher slurm; unset options come from FAIRSEQ_BIO_SLURM_PARTITION, _ACCOUNT, "
        "_QOS, _CONSTRAINT, _GRES, _CPUS_PER_TASK, _MEM_GB, _TIMEOUT_MIN)"
    )
    group.add_argument(
        "--launcher",
        choices=("local", "slurm"),
        default="local",
        help="local: the runs one after another here; slurm: one SLURM job per run (a job array), "
        "waited for here (default: local)",
    )
    group.add_argument("--partition", default=None, help="the jobs' partition")
    group.add_argument(
        "--timeout-min", type=_positive, default=None, help="each job's time limit (default: 1440)"
    )
    group.add_argument(
        "--gpus-per-node",
        type=_count,
        default=None,
        help="GPUs of each job (default: 1; 0 with --cpu)",
    )
    group.add_argument(
        "--cpus-per-task", type=_positive, default=None, help="CPUs of each job (default: 10)"
    )
    group.add_argument(
        "--mem-gb", type=_count, default=None, help="memory of each job (default: the cluster's)"
    )
    group.add_argument(
        "--array-parallelism",
        type=_positive,
        default=None,
        help="jobs running at once (default: 256)",
    )
    group.add_argument(
        "--slurm-param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an sbatch option for every job, e.g. account=proj, qos=high, gres=gpu:a100:1 "
        "(repeatable)",
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    slurm = slurm_options(args)  # None: --launcher local
    benchmark = BENCHMARKS[args.preset]
    names = resolve_tasks(benchmark, args.tasks)
    args.checkpoint = Path(args.checkpoint).resolve()
    if not args.checkpoint.is_file():
        raise BioConfigError(f"{args.checkpoint}: encoder checkpoint not found")
    if not Path(args.data).is_dir():
        raise BioConfigError(f"{args.data}: --data is not a directory")
    # importing fairseq set the root logger to DEBUG; the runs' own logs are in their directories
    logging.basicConfig(
        level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", force=True
    )
    out = Path(args.out).resolve()

    plans, missing = plan_runs(args, benchmark, names)
    runs = [run for plan in plans for run in make_runs(plan, args)]
    tag = f"[{args.preset}]"
    for name, why in missing.items():
        if not why.startswith("not run"):
            print(f"{tag} {name}: missing ({why})", flush=True)
    if args.dry_run:
        _print_plans(plans, tag)
        for run in runs:
            print(shlex.join(run.command))
        if slurm is not None:
            print(f"{tag} slurm: one job per run, {describe(slurm)}")
        return 0
    if not plans:
        raise BioConfigError(
            f"no data for any of {', '.join(names)} under {args.data} (see the lines above)"
        )

    lock = lock_out(out)  # before the plan is printed: a refused runner says only why
    try:
        _print_plans(plans, tag)
        if args.random_init:
            write_random_starts(runs, args.checkpoint, out)
        if slurm is not None:
            return run_on_slurm(runs, slurm, args, benchmark, plans, missing, out, tag)
        return run_all(runs, args, benchmark, plans, missing, out, tag)
    finally:
        lock.close()


def _print_plans(plans, tag: str) -> None:
    for plan in plans:
        b = plan.budget
        size = f"{b.train_examples} train examples, " if b.train_examples is not None else ""
        n_runs = (
            len(plan.lrs)
            * max(len(plan.batch_sizes), 1)
            * len(plan.seeds)
            * max(len(plan.folds), 1)
        )
        folds = (
            f", {len(plan.folds)} folds of {plan.cfg['task']['train_file']}" if plan.folds else ""
        )
        print(
            f"{tag} {plan.recipe.name}: {n_runs} run{'s' * (n_runs != 1)} ({size}{b.max_update} updates, "
            f"warm-up {b.warmup}, lr {','.join(f'{lr:g}' for lr in plan.lrs)}{_batches(plan)}, seeds "
            f"{_span(plan.seeds)}{folds})",
            flush=True,
        )
        for note in plan.notes:  # the values a paper table set (recipe=finetune_bioelectra)
            print(f"{tag} {note}", flush=True)


def _batches(plan) -> str:
    """A batch-size grid in a plan's line: each size with its update budget."""
    if not plan.batch_sizes:
        return ""
    return ", batch " + ",".join(
        f"{b} ({plan.budget_for(b).max_update} updates)" for b in plan.batch_sizes
    )


def _terminated(signum, frame):
    # an exception, so that the run being waited for (runs.Run.finish) kills the fairseq-hydra-train
    # it started (SIGTERM: a scheduler ending the job) instead of leaving it running without us
    raise KeyboardInterrupt


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    signal.signal(signal.SIGTERM, _terminated)
    run_cli(
        PROG, main, argv, interrupted="interrupted (finished runs are kept and reused next time)"
    )


if __name__ == "__main__":
    cli_main()

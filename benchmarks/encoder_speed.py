"""Training speed of the bio_roberta encoders against fairseq's stock RoBERTa, a plain PyTorch loop
and HF transformers.

Every variant (``VARIANTS``) trains on the same PubMed 512-token blocks, batches and masked
positions, their steps interleaved in one process; peak memory comes from each variant alone in a
fresh process. It reports tokens/s, the speed-up over stock and the reference, MFU and peak memory;
``--profile VARIANT`` splits one step's time by group. Method notes: "Encoder speed" in
benchmarks/HISTORY.md.

    python benchmarks/encoder_speed.py --data DATA_BIN --device cuda   # bf16, 32 x 512

Writes ``benchmarks/results/encoder_speed[_ARCH].md``, ``.json`` and ``.png`` and prints the table.
"""

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

from fairseq_bio import runs

sys.path.insert(
    0, str(Path(__file__).resolve().parent)
)  # harness.py, reference_encoder.py beside this file
from harness import REPO, RESULTS, pyplot, save_figure  # noqa: E402
from step_measures import (  # noqa: E402
    SEQ,
    cpu_peak_gflops,
    device_peak_tflops,
    grouped_times,
    resident_bytes,
    rss_peak,
    training_flops,
    true_peak,
)

# Every variant sees the same batches and masked positions: each process hashes its batches, and
# results whose hashes differ are refused. stock is fairseq's roberta_base / _large (fairseq has no
# stock model of the other shapes); bio is --arch ARCH (fused QKV + SDPA); +adamw swaps in
# bio_adamw (torch's fused AdamW); +comp compiles each encoder layer, +wholecomp the whole model;
# +fused uses the bio_masked_lm criterion (LM head matmul and loss fused, chunked). reference /
# reference+comp and hf are reference_encoder.py's plain PyTorch and HF yardsticks.
VARIANTS = {
    "stock": dict(kind="fairseq", optimizer="adam", plugin=False, compile=False),
    "bio": dict(kind="fairseq", optimizer="adam", plugin=True, compile=False),
    "bio+adamw": dict(kind="fairseq", optimizer="bio_adamw", plugin=True, compile=False),
    # opt-in: the fused head without compilation (largest_batch.py, where checkpointing excludes
    # compiling)
    "bio+adamw+fused": dict(
        kind="fairseq",
        optimizer="bio_adamw",
        plugin=True,
        compile=False,
        criterion="bio_masked_lm",
        default=False,
    ),
    "bio+adamw+comp": dict(kind="fairseq", optimizer="bio_adamw", plugin=True, compile=True),
    "bio+adamw+comp+fused": dict(
        kind="fairseq", optimizer="bio_adamw", plugin=True, compile=True, criterion="bio_masked_lm"
    ),
    # opt-in: the whole model compiled (model.compile_model=true) instead of each layer, with the
    # fused head and loss
    "bio+adamw+wholecomp+fused": dict(
        kind="fairseq",
        optimizer="bio_adamw",
        plugin=True,
        compile="model",
        criterion="bio_masked_lm",
        default=False,
    ),
    # opt-in (--variants): what the recipes' attention dropout of 0.1 costs (dropout inside the
    # attention kernel)
    "bio+adamw+comp+noattndrop": dict(
        kind="fairseq",
        optimizer="bio_adamw",
        plugin=True,
        compile=True,
        attention_dropout=0.0,
        default=False,
    ),
    "reference": dict(kind="reference", compile=False),
    "reference+comp": dict(kind="reference", compile=True),
    "hf": dict(kind="hf"),
}
# fairseq's stock architecture of the same shape; the others have none
STOCK_ARCH = {"bio_roberta_base": "roberta_base", "bio_roberta_large": "roberta_large"}
SDPA_BACKENDS = ("flash", "efficient", "cudnn", "math")
RATIO_TO = ("stock", "reference", "reference+comp")  # the "vs" columns, for those of them that ran
PROFILE_STEPS = 3
# --tiny (benchmarks/gpu_check.py's dry mode): every code path in seconds on a CPU; a check, not a
# measurement.
TINY = [
    "--encoder-layers",
    "2",
    "--encoder-embed-dim",
    "64",
    "--encoder-ffn-embed-dim",
    "128",
    "--encoder-attention-heads",
    "2",
]


def label(variant: str, arch: str) -> str:
    return {
        "stock": f"stock {STOCK_ARCH.get(arch)} + fairseq adam",
        "bio": f"{arch} + fairseq adam",
        "bio+adamw": f"{arch} + bio_adamw (fused)",
        "bio+adamw+fused": f"{arch} + bio_adamw, fused LM head + loss (bio_masked_lm)",
        "bio+adamw+comp": f"{arch} + bio_adamw, compiled layers",
        "bio+adamw+comp+fused": f"{arch} + bio_adamw, compiled layers, fused LM head + loss (bio_masked_lm)",
        "bio+adamw+wholecomp+fused": f"{arch} + bio_adamw, whole model compiled, fused LM head + loss (bio_masked_lm)",
        "bio+adamw+comp+noattndrop": f"{arch} + bio_adamw, compiled layers, attention dropout 0 (recipes: 0.1)",
        "reference": "plain PyTorch reference (fused QKV, SDPA, fused AdamW)",
        "reference+comp": "plain PyTorch reference, torch.compile",
        "hf": "HF RobertaForMaskedLM (sdpa, fused AdamW)",
    }[variant]


def fairseq_args(
    variant: str,
    data: str,
    batch: int,
    device: str,
    bf16: bool,
    tiny: bool = False,
    arch: str = "bio_roberta_base",
    task: str = "masked_lm",
    criterion=None,
    extra=(),
):
    """fairseq-train's arguments for one fairseq variant (the reference and HF ones read bio's),
    parsed here; ``task``: fairseq's ``masked_lm`` (the masks made by the data loader, the same for
    every variant) or the recipes' ``bio_masked_lm`` (benchmarks/host_reads.py); ``criterion``
    instead of the variant's; ``extra`` arguments last."""
    spec = VARIANTS[variant] if VARIANTS[variant]["kind"] == "fairseq" else VARIANTS["bio"]
    args = [
        "--task",
        task,
        "--criterion",
        criterion or spec.get("criterion", "masked_lm"),
        "--arch",
        arch if spec["plugin"] else STOCK_ARCH[arch],
        "--sample-break-mode",
        "none",
        "--tokens-per-sample",
        str(SEQ),
        "--batch-size",
        str(batch),
        "--optimizer",
        spec["optimizer"],
        "--adam-betas",
        "(0.9,0.98)",
        "--adam-eps",
        "1e-6",
        "--weight-decay",
        "0.01",
        "--lr",
        "1e-4",
        "--clip-norm",
        "0.0",
        "--seed",
        "1",
        "--num-workers",
        "0",
        "--max-update",
        "1000000",
        "--log-format",
        "none",
        "--no-progress-bar",
    ]
    if tiny:
        args += TINY
    args += list(extra)
    if device == "cpu":
        args += ["--cpu"]
    elif bf16:
        args += ["--bf16"]
    return runs.train(data, *args, plugin=spec["plugin"])[1:]  # without the executable


def build(
    variant: str,
    args,
    task=None,
    task_name: str = "masked_lm",
    criterion=None,
    extra=(),
    model=None,
):
    """(task, step, sizes) of one variant: ``step(sample)`` trains one step, ``step.model`` is the
    model; ``task`` reuses an already set-up masked_lm task; ``task_name``, ``criterion`` and
    ``extra`` as for ``fairseq_args``; ``model``: {model option: value} set on the parsed config
    (options bio_roberta has only in its hydra schema, e.g. checkpoint_activations)."""
    import torch
    from fairseq import options, tasks, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer
    from omegaconf import OmegaConf, open_dict

    spec, cuda, bf16 = VARIANTS[variant], args.device == "cuda", not args.fp32
    parser = options.get_training_parser()
    argv = fairseq_args(
        variant,
        str(args.data),
        args.batch,
        args.device,
        bf16,
        args.tiny,
        args.arch,
        task_name,
        criterion,
        extra,
    )
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, argv))
    with open_dict(cfg.common):
        # fairseq 0.12's command line makes --bf16 imply --tpu (options.parse_args_and_arch), which
        # sends the Trainer to torch_xla; the hydra configs' precision=bf16 does not, and a GPU is
        # what is measured here
        cfg.common.tpu = False
    model_options = dict(model or {})
    if (
        spec["kind"] == "fairseq" and spec["compile"]
    ):  # bio_roberta inherits RoBERTa's argparse options: set here
        model_options[
            "compile_model" if spec["compile"] == "model" else "compile_encoder_layers"
        ] = True
    if "attention_dropout" in spec:
        model_options["attention_dropout"] = spec["attention_dropout"]
    for (
        key,
        value,
    ) in model_options.items():  # (stock RoBERTa's model config is an argparse namespace)
        if OmegaConf.is_config(cfg.model):
            with open_dict(cfg.model):
                cfg.model[key] = value
        else:
            setattr(cfg.model, key, value)
    utils.import_user_module(cfg.common)
    if task is None:
        task = tasks.setup_task(cfg.task)
        task.load_dataset("train")
    m, dictionary = cfg.model, task.source_dictionary
    positions = (
        getattr(m, "max_positions", None) or cfg.task.tokens_per_sample
    )  # as RobertaModel.build_model
    # (an ELECTRA, host_reads.py --task bio_electra, has its sizes only once built: None here,
    # unused there)
    layers, dim, ffn, heads = (
        getattr(m, k, None)
        for k in (
            "encoder_layers",
            "encoder_embed_dim",
            "encoder_ffn_embed_dim",
            "encoder_attention_heads",
        )
    )
    pre_ln = bool(getattr(m, "encoder_normalize_before", False))
    sizes = dict(layers=layers, dim=dim, ffn=ffn, heads=heads, vocab=len(dictionary), pre_ln=pre_ln)
    shape = dict(
        vocab=len(dictionary),
        pad=dictionary.pad(),
        layers=layers,
        dim=dim,
        ffn=ffn,
        heads=heads,
        max_positions=positions,
        dropout=getattr(m, "dropout", None),
        attention_dropout=getattr(m, "attention_dropout", None),
        pre_ln=pre_ln,
    )
    torch.manual_seed(1)  # the same initial weights in every variant of a kind
    if spec["kind"] == "fairseq":
        model = task.build_model(cfg.model)
        if spec[
            "plugin"
        ]:  # what fairseq-train builds with the plugin: its trainer (mixed_precision.py's copies)
            from fairseq_cli import train

            trainer_class = train.Trainer
        else:
            trainer_class = Trainer
        return (
            task,
            TrainerStep(trainer_class(cfg, task, model, task.build_criterion(cfg.criterion))),
            sizes,
        )
    from reference_encoder import HFStep, ReferenceMaskedLM, ReferenceStep

    if spec["kind"] == "reference":
        model = ReferenceMaskedLM(
            **shape,
            activation_dropout=m.activation_dropout,
            layernorm_embedding=bool(m.layernorm_embedding),
        )
        return task, ReferenceStep(model, args.device, bf16, compile=spec["compile"]), sizes
    step = HFStep(
        **shape, bos=dictionary.bos(), eos=dictionary.eos(), device=args.device, bf16=bf16 and cuda
    )
    return task, step, sizes


class TrainerStep:
    """One step of fairseq's ``Trainer.train_step``; ``model`` as for the reference and HF steps."""

    def __init__(self, trainer):
        self.trainer, self.model = trainer, trainer.model

    def __call__(self, sample) -> None:
        self.trainer.train_step([sample])


def load_batches(task, batch: int, count: int):
    """The first ``count`` full, unpadded ``batch x 512`` batches (masked by fairseq's masked_lm,
    seed 1) and a hash of each one's tokens and targets; where the data holds fewer, the ones it has
    again in turn (a sample's masked positions are fixed, so a repeated batch is the same work)."""
    iterator = task.get_batch_iterator(
        task.dataset("train"), max_sentences=batch, seed=1, num_workers=0
    ).next_epoch_itr(shuffle=False)
    samples, hashes = [], []
    for sample in iterator:
        tokens = sample["net_input"]["src_tokens"]
        if tokens.shape != (batch, SEQ) or tokens.eq(task.source_dictionary.pad()).any():
            continue
        samples.append(sample)
        digest = hashlib.sha256(tokens.numpy().tobytes())
        digest.update(sample["target"].numpy().tobytes())
        hashes.append(digest.hexdigest()[:16])
        if len(samples) == count:
            return samples, hashes
    if not samples:
        raise SystemExit(f"no full batch of {batch} x {SEQ} tokens in the data")
    print(
        f"only {len(samples)} full batch(es) of {batch} x {SEQ} tokens in the data for {count} steps: repeated",
        flush=True,
    )
    return [samples[i % len(samples)] for i in range(count)], [
        hashes[i % len(hashes)] for i in range(count)
    ]


def timed_step(step, sample, cuda: bool) -> float:
    """Seconds of one training step (forward, backward, gradient norm, optimizer step)."""
    import torch

    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    step(sample)
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start


def timing(variants, args) -> dict:
    """Every variant built in this process, their steps interleaved (A B C D A B C D ...) on the
    same batches.

    Interleaving makes drifts in the load of a shared machine hit every variant alike. The first
    ``--warmup`` rounds (compilation included) are not timed; tokens/s is the batch's tokens over
    the median timed step, and "vs stock" / "vs reference" are medians over rounds of that
    variant's step time over this one's in the same round."""
    import torch
    from fairseq.logging import metrics

    cuda = args.device == "cuda"
    task, steps = None, {}
    for variant in variants:
        task, steps[variant], sizes = build(variant, args, task)
    samples, hashes = load_batches(task, args.batch, args.warmup + args.steps)
    pad = task.source_dictionary.pad()
    result = {v: {"warmup_seconds": [], "step_seconds": []} for v in variants}
    with metrics.aggregate("train"):
        for i, sample in enumerate(samples):
            for variant in variants:
                seconds = timed_step(steps[variant], sample, cuda)
                result[variant]["warmup_seconds" if i < args.warmup else "step_seconds"].append(
                    seconds
                )
                print(f"step {i + 1}/{len(samples)}: {variant}: {seconds:.2f} s", flush=True)
    return {
        "variants": result,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "dtype": "bf16" if (cuda and not args.fp32) else "fp32",
        "threads": torch.get_num_threads(),
        "batch_hashes": hashes,
        "tokens_per_step": args.batch * SEQ,
        "predicted_per_step": [int(s["target"].ne(pad).sum()) for s in samples[args.warmup :]],
        "sizes": sizes,
    }


def memory_worker(variant: str, args) -> dict:
    """(fresh process) Peak memory of ``warmup + 1`` steps of one variant, and its batch hash.

    CPU: peak RSS minus the RSS before the first step (model, data and libraries loaded), i.e. what
    training adds: activations, gradients, optimizer state. CUDA: ``true_peak`` of
    ``max_memory_allocated``, parameters included."""
    from fairseq.logging import metrics

    cuda = args.device == "cuda"
    task, step, _ = build(variant, args)
    samples, hashes = load_batches(task, args.batch, args.warmup + 1)
    base = 0 if cuda else resident_bytes()
    with metrics.aggregate("train"), true_peak() if cuda else rss_peak() as peak:
        first = timed_step(step, samples[0], cuda)
        for sample in samples[1:]:
            timed_step(step, sample, cuda)
        peak_mib = (peak() - base) / 2**20
    return {
        "variant": variant,
        "peak_mib": peak_mib,
        "first_step_seconds": first,
        "batch_hashes": hashes,
    }


def profile(variant: str, args) -> str:
    """Time by group of ``PROFILE_STEPS`` steps of one variant (after ``--warmup``), as a markdown
    table.

    CPU: each op's self time grouped by its name and its callers' (everything under
    ``Optimizer.step`` or a gradient norm is the optimizer's, everything under an SDPA call
    attention's), plus the time outside any op (Python). CUDA: kernel time grouped by the kernel's
    and the launching ops' names, plus the time no kernel ran."""
    import torch
    from fairseq.logging import metrics
    from torch.profiler import ProfilerActivity

    cuda = args.device == "cuda"
    task, step, sizes = build(variant, args)
    samples, _ = load_batches(task, args.batch, args.warmup + PROFILE_STEPS)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with metrics.aggregate("train"):
        for sample in samples[: args.warmup]:
            timed_step(step, sample, cuda)
        with torch.profiler.profile(activities=activities) as prof:
            wall = (
                sum(timed_step(step, sample, cuda) for sample in samples[args.warmup :])
                / PROFILE_STEPS
            )
    per_step = {g: us / PROFILE_STEPS / 1e3 for g, us in grouped_times(prof.events(), cuda).items()}
    rest = (
        "no kernel running (GPU idle)" if cuda else "outside any op (Python: Trainer, model code)"
    )
    per_step[rest] = max(wall * 1e3 - sum(per_step.values()), 0.0)
    what = "CUDA kernels' time" if cuda else "CPU ops' self time"
    lines = [
        f"# Step profile: {label(variant, args.arch)}, {args.batch} x {SEQ}, "
        f"{torch.cuda.get_device_name() if cuda else 'cpu'}, {torch.get_num_threads()} thread(s)",
        "",
        f"{sizes['layers']} x {sizes['dim']}; {PROFILE_STEPS} steps under torch.profiler after {args.warmup} untimed "
        f"(the profiler's own overhead included): {wall * 1e3:.1f} ms per step; {what} by group.",
        "",
        "| group | ms per step | share of the step |",
        "| --- | ---: | ---: |",
        *[f"| {g} | {ms:.1f} | {100 * ms / (wall * 1e3):.1f} % |" for g, ms in per_step.items()],
        "",
    ]
    return "\n".join(lines)


def run_memory_worker(variant: str, args) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--memory-worker",
        variant,
        "--data",
        str(args.data),
        "--batch",
        str(args.batch),
        "--warmup",
        str(args.warmup),
        "--device",
        args.device,
        "--arch",
        args.arch,
    ]
    if args.fp32:
        cmd.append("--fp32")
    if args.tiny:
        cmd.append("--tiny")
    if args.sdpa_backend:
        cmd += ["--sdpa-backend", args.sdpa_backend]
    out = runs.capture(cmd)
    if out.returncode != 0:
        raise SystemExit(f"{variant} (memory) failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def sdpa_only(backend: str) -> None:
    """From here on, ``F.scaled_dot_product_attention`` runs through ``backend``'s kernel only (for
    the process)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    kernel = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "math": SDPBackend.MATH,
    }[backend]
    sdpa_kernel([kernel]).__enter__()  # left open: the whole run


def choose_variants(given, arch: str):
    """The variants asked for (default: every one this architecture has, but the opt-in ones),
    checked."""
    if given is None:
        variants = [
            v
            for v in VARIANTS
            if VARIANTS[v].get("default", True) and (v != "stock" or arch in STOCK_ARCH)
        ]
        if arch not in STOCK_ARCH:
            print(
                f"{arch}: fairseq has no stock model of this shape; the stock variant is left out",
                flush=True,
            )
        return variants
    variants = [v for v in given.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        raise SystemExit(
            f"--variants {given}: unknown {', '.join(unknown)}; known: {', '.join(VARIANTS)}"
        )
    if "stock" in variants and arch not in STOCK_ARCH:
        raise SystemExit(
            f"--variants stock: fairseq has no stock model of {arch}'s shape (only "
            f"{', '.join(f'{a} ({s})' for a, s in STOCK_ARCH.items())})"
        )
    return variants


def main(argv=None):
    from fairseq_bio.files import write_text
    from fairseq_bio.models.bio_roberta import ARCHITECTURES

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data",
        type=Path,
        default=REPO / "runs" / "demo" / "data-bin",
        help="binarised data dir (default: the one `make demo` writes)",
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--arch",
        choices=list(ARCHITECTURES),
        default="bio_roberta_base",
        help="the bio variants' architecture; the others take its shape",
    )
    parser.add_argument(
        "--batch", type=int, default=None, help="sequences per step (default: CPU 2, CUDA 32)"
    )
    parser.add_argument(
        "--steps", type=int, default=None, help="timed steps per variant (default: CPU 6, CUDA 30)"
    )
    parser.add_argument(
        "--warmup", type=int, default=None, help="untimed first steps (default: CPU 1, CUDA 5)"
    )
    parser.add_argument(
        "--variants",
        default=None,
        help="comma-separated subset of " + ",".join(VARIANTS) + " (default: the arch's)",
    )
    parser.add_argument("--fp32", action="store_true", help="CUDA: train in fp32 instead of bf16")
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="a 2 x 64 encoder instead of the arch's size: the code "
        "paths in seconds, not a measurement (writes encoder_speed_tiny.*)",
    )
    parser.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="peak FLOP/s for MFU (default: see docstring)",
    )
    parser.add_argument(
        "--out", type=Path, default=RESULTS, help="directory of the tables, records and plots"
    )
    parser.add_argument(
        "--no-memory", action="store_true", help="skip the fresh-process peak-memory runs"
    )
    parser.add_argument(
        "--sdpa-backend",
        choices=SDPA_BACKENDS,
        default=None,
        help="every variant's scaled_dot_product_attention through this kernel only (default: torch's "
        "choice); a kernel that cannot run a call fails it",
    )
    parser.add_argument(
        "--profile",
        choices=list(VARIANTS),
        default=None,
        help=f"instead of the comparison: {PROFILE_STEPS} steps of this variant under torch.profiler, "
        "time by kernel group",
    )
    parser.add_argument("--memory-worker", choices=list(VARIANTS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cpu = args.device == "cpu"
    args.batch = args.batch or (2 if cpu else 32)
    args.steps = args.steps or (6 if cpu else 30)
    args.warmup = args.warmup if args.warmup is not None else (1 if cpu else 5)
    if args.sdpa_backend:
        sdpa_only(args.sdpa_backend)
    if args.memory_worker:
        print(json.dumps(memory_worker(args.memory_worker, args)))
        return
    if not (args.data / "dict.txt").exists():
        raise SystemExit(
            f"{args.data}: no dict.txt, not a binarised data dir; run `make demo` (it writes "
            "runs/demo/data-bin) or give --data DATA_BIN"
        )
    arch = "" if args.arch == "bio_roberta_base" else f"_{args.arch}"
    stem = args.out / f"encoder_speed{'_tiny' if args.tiny else ''}{arch}{'' if cpu else '_cuda'}"
    args.out.mkdir(parents=True, exist_ok=True)
    if args.profile:
        choose_variants(args.profile, args.arch)
        text = profile(args.profile, args)
        path = stem.with_name(f"{stem.name}_profile_{args.profile.replace('+', '_')}.md")
        write_text(path, text)
        print(text + f"\nwrote {path}")
        return
    variants = choose_variants(args.variants, args.arch)

    memory = {}
    for variant in [] if args.no_memory else variants:
        memory[variant] = run_memory_worker(variant, args)
        print(
            f"{variant}: peak {memory[variant]['peak_mib']:.0f} MiB, first step "
            f"{memory[variant]['first_step_seconds']:.1f} s (fresh process)",
            flush=True,
        )
    timed = timing(variants, args)
    for variant, m in memory.items():  # the memory runs take the timing run's first batches
        if m["batch_hashes"] != timed["batch_hashes"][: len(m["batch_hashes"])]:
            raise SystemExit(
                f"{variant}'s memory run trained on other batches than the timing run: not comparable"
            )

    sizes, device, tokens = timed["sizes"], timed["device"], timed["tokens_per_step"]
    if args.peak_tflops:
        peak = args.peak_tflops * 1e12
        peak_note = f"{args.peak_tflops:g} TFLOP/s (given)"
    elif cpu:
        peak = cpu_peak_gflops(timed["threads"]) * 1e9
        peak_note = f"{peak / 1e9:.0f} GFLOP/s (fp32 4096^3 matmul measured here after the runs, {timed['threads']} thread(s))"
    else:
        tflops = device_peak_tflops(device, bf16=not args.fp32)
        peak = tflops * 1e12 if tflops else None
        peak_note = (
            f"{tflops:g} TFLOP/s ({device}, {timed['dtype']})"
            if tflops
            else "unknown device: no MFU"
        )
    flops = training_flops(
        **sizes, tokens=tokens, predicted=statistics.mean(timed["predicted_per_step"])
    )

    bases = [b for b in RATIO_TO if b in variants]
    rows = []
    for variant in variants:
        steps = timed["variants"][variant]["step_seconds"]
        median = statistics.median(steps)
        m = memory.get(variant, {})
        row = dict(
            variant=variant,
            label=label(variant, args.arch),
            tokens_per_s=tokens / median,
            step_ms=1e3 * median,
            min=tokens / max(steps),
            max=tokens / min(steps),
            mfu=(flops / median / peak) if peak else None,
            peak_mib=m.get("peak_mib"),
            first_step_s=m.get("first_step_seconds"),
            ratios={},
        )
        for base in bases:
            # Per interleaved round, so that each ratio compares steps taken back to back under the
            # same load.
            paired = [b / s for b, s in zip(timed["variants"][base]["step_seconds"], steps)]
            row["ratios"][base] = (statistics.median(paired), min(paired), max(paired))
        rows.append(row)
    flops_token = training_flops(**sizes, tokens=1, predicted=0)

    def fmt(value, pattern):
        return pattern % value if value is not None else "-"

    lines = [
        f"# Encoder training speed: {args.arch}{' (--tiny)' if args.tiny else ''}, {device}, {timed['dtype']}, "
        f"{timed['threads']} thread(s)",
        "",
        f"{sizes['layers']} x {sizes['dim']} (FFN {sizes['ffn']}{', pre-LN' if sizes['pre_ln'] else ''}), vocabulary "
        f"{sizes['vocab']:,}, {args.batch} x {SEQ} tokens per step (packed, no padding), the variants' steps "
        f"interleaved on the same batches ({args.warmup} untimed + {args.steps} timed rounds); fairseq's variants: "
        f"masked_lm task and criterion, fairseq's Trainer. FLOPs per token {flops_token / 1e6:.1f} M + the LM head on "
        f"the masked positions; peak {peak_note}.",
        "",
        "| variant | step (ms, median) | tokens/s (median) | min | max | "
        + "".join(f"vs {b} (median of rounds) | rounds' range | " for b in bases)
        + "MFU | peak memory (MiB) | first step (s) |",
        "| --- | ---: | ---: | ---: | ---: | "
        + "---: | ---: | " * len(bases)
        + "---: | ---: | ---: |",
        *[
            f"| {r['label']} | {r['step_ms']:.1f} | {r['tokens_per_s']:.0f} | {r['min']:.0f} | {r['max']:.0f} | "
            + "".join(
                f"{r['ratios'][b][0]:.3f}x | {r['ratios'][b][1]:.2f}-{r['ratios'][b][2]:.2f} | "
                for b in bases
            )
            + f"{fmt(r['mfu'] and 100 * r['mfu'], '%.1f %%')} | {fmt(r['peak_mib'], '%.0f')} | "
            f"{fmt(r['first_step_s'], '%.1f')} |"
            for r in rows
        ],
        "",
        "Peak memory and first step: each variant alone in a fresh process ("
        + (
            "peak RSS minus the RSS before the first step: activations, gradients, optimizer state"
            if cpu
            else "the true peak of max_memory_allocated across fairseq's per-step resets, parameters included"
        )
        + "; the first step includes the compilation for the compiled variants, shorter when torch's inductor cache "
        "already holds it).",
        "",
    ]
    write_text(stem.with_suffix(".md"), "\n".join(lines))
    record = {
        "rows": rows,
        "timing": timed,
        "memory": memory,
        "peak": peak_note,
        "argv": sys.argv[1:],
    }
    write_text(stem.with_suffix(".json"), json.dumps(record, indent=1))
    plot(
        rows,
        stem.with_suffix(".png"),
        f"{args.arch}, {device}, {timed['dtype']}, {args.batch} x {SEQ}",
    )
    print("\n".join(lines))
    print(f"wrote {stem}.md, .json and .png")


def plot(rows, path: Path, title: str) -> None:
    plt = pyplot()

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 4.2))
    names = [
        r["label"].replace(" + ", "\n+ ").replace(", ", ",\n").replace(" (", "\n(") for r in rows
    ]
    x = range(len(rows))
    spread = [
        [r["tokens_per_s"] - r["min"] for r in rows],
        [r["max"] - r["tokens_per_s"] for r in rows],
    ]
    ax1.bar(x, [r["tokens_per_s"] for r in rows], yerr=spread)
    for i, r in enumerate(rows):
        if r["ratios"]:
            base, (ratio, _, _) = next(iter(r["ratios"].items()))
            ax1.text(
                i, r["tokens_per_s"], f"{ratio:.2f}x {base}", ha="center", va="bottom", fontsize=7
            )
    ax1.set_xticks(list(x), names, fontsize=6)
    ax1.set_ylabel("tokens / s (training)")
    ax1.set_title(f"training speed: {title}", fontsize=9)
    ax2.bar(x, [r["peak_mib"] or 0 for r in rows])
    ax2.set_xticks(list(x), names, fontsize=6)
    ax2.set_ylabel("peak memory (MiB)")
    ax2.set_title("peak memory", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


if __name__ == "__main__":
    main()

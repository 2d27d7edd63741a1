"""Training speed of bio_roberta_base (the fast encoder) against fairseq's stock roberta_base + masked_lm.

Every variant trains through fairseq's own ``Trainer`` (forward, backward, gradient norm, optimizer step) with the
``masked_lm`` task and criterion on the same binarised PubMed blocks: 512-token blocks packed without padding
(``sample_break_mode none``), the same batches and the same masked positions in every variant (every process hashes
its batches, and results whose hashes differ are refused). Variants:

    stock           --arch roberta_base      (fairseq's RobertaModel and MultiheadAttention), --optimizer adam
    bio             --arch bio_roberta_base  (fused QKV + scaled_dot_product_attention),      --optimizer adam
    bio+adamw       bio, --optimizer bio_adamw (torch's fused AdamW)
    bio+adamw+comp  bio+adamw, model.compile_encoder_layers=true (torch.compile of each encoder layer)

Timing: all variants are built in one process and their steps interleave, step i of stock, bio, bio+adamw,
bio+adamw+comp, then step i + 1 of each, ..., on the same batch i, so that drifts in the load of a shared machine hit
every variant alike; the first ``--warmup`` rounds are not timed (they include the compilation). tokens/s is the
batch's tokens over the median timed step; "vs stock" is the median over rounds of stock's step time over the
variant's in the same round.

Peak memory: each variant alone in a fresh process (``--warmup`` + 1 steps). CPU: the process's peak RSS (VmHWM,
the kernel's counter reset just before the first step) minus its RSS at that moment (model, data and libraries
loaded), i.e. what training adds: activations, gradients, optimizer state. CUDA: ``torch.cuda.max_memory_allocated``
over those steps (parameters included).

MFU = achieved FLOP/s / peak FLOP/s, with the training FLOPs of one step counted as

    6 * N * tokens  +  12 * L * s * d * tokens  +  6 * (d^2 + d * V) * predicted

N = L * (4 d^2 + 2 d f) the encoder layers' matmul weights (QKV, output projection, FFN; biases, norms and
embeddings left out), s = 512 the sequence length, d the width, f the FFN width, L the layers, V the vocabulary
(output matrix), ``predicted`` the masked positions of the step (the LM head's dense + vocabulary matmul run only
there). The attention term is QK^T and attention x V (2 * 2 * s * d per token and layer forward, x 3 for
forward + backward). Peak: CUDA, the dense bf16 (or fp32 with --fp32) tensor-core peak of the device
(H100/H200 SXM 989 TFLOP/s bf16; --peak-tflops overrides); CPU, a 4096 x 4096 fp32 matmul measured on this machine
with the same threads (so MFU there is "of what this core's BLAS reaches").

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 nice -n 15 python benchmarks/encoder_speed.py  # CPU: 2 x 512, 6 rounds
    python benchmarks/encoder_speed.py --data DATA_BIN --device cuda            # bf16, 32 x 512, 30 timed rounds

Writes ``benchmarks/results/encoder_speed.md``, ``.json`` and ``.png`` (``encoder_speed_cuda.*`` on CUDA) and prints
the table.
"""

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
PLUGIN = REPO / "fairseq_bio"
VARIANTS = {
    "stock": dict(arch="roberta_base", optimizer="adam", plugin=False, compile=False),
    "bio": dict(arch="bio_roberta_base", optimizer="adam", plugin=True, compile=False),
    "bio+adamw": dict(arch="bio_roberta_base", optimizer="bio_adamw", plugin=True, compile=False),
    "bio+adamw+comp": dict(arch="bio_roberta_base", optimizer="bio_adamw", plugin=True, compile=True),
}
LABELS = {
    "stock": "stock roberta_base + fairseq adam",
    "bio": "bio_roberta_base + fairseq adam",
    "bio+adamw": "bio_roberta_base + bio_adamw (fused)",
    "bio+adamw+comp": "bio_roberta_base + bio_adamw, compiled layers",
}
BASELINE = "stock"
SEQ = 512
# --tiny (benchmarks/gpu_check.py's dry mode): every code path in seconds on a CPU; a check, not a measurement.
TINY = ["--encoder-layers", "2", "--encoder-embed-dim", "64", "--encoder-ffn-embed-dim", "128",
        "--encoder-attention-heads", "2"]  # fmt: skip
PEAK_TFLOPS = {"H100": 989.4, "H200": 989.4, "A100": 312.0}  # dense bf16 tensor-core peaks (SXM)
PEAK_TFLOPS_FP32 = {"H100": 494.7, "H200": 494.7, "A100": 156.0}  # TF32 tensor-core peaks (what fp32 matmuls use)


def training_flops(layers: int, dim: int, ffn: int, vocab: int, tokens: int, predicted: int) -> float:
    """Training FLOPs of one step (see the module docstring)."""
    n = layers * (4 * dim * dim + 2 * dim * ffn)
    return 6 * n * tokens + 12 * layers * SEQ * dim * tokens + 6 * (dim * dim + dim * vocab) * predicted


def fairseq_args(variant: str, data: str, batch: int, device: str, bf16: bool, tiny: bool = False):
    """fairseq-train's command line for one variant."""
    spec = VARIANTS[variant]
    args = [data, "--task", "masked_lm", "--criterion", "masked_lm", "--arch", spec["arch"],
            "--sample-break-mode", "none", "--tokens-per-sample", str(SEQ), "--batch-size", str(batch),
            "--optimizer", spec["optimizer"], "--adam-betas", "(0.9,0.98)", "--adam-eps", "1e-6",
            "--weight-decay", "0.01", "--lr", "1e-4", "--clip-norm", "0.0", "--seed", "1", "--num-workers", "0",
            "--max-update", "1000000", "--log-format", "none", "--no-progress-bar"]  # fmt: skip
    if spec["plugin"]:
        args += ["--user-dir", str(PLUGIN)]
    if tiny:
        args += TINY
    if device == "cpu":
        args += ["--cpu"]
    elif bf16:
        args += ["--bf16"]
    return args


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def build(variant: str, data: str, batch: int, device: str, bf16: bool, task=None, tiny: bool = False):
    """(fairseq config, task, Trainer) of one variant; ``task`` reuses an already set-up masked_lm task."""
    import torch
    from fairseq import options, tasks, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer
    from omegaconf import open_dict

    parser = options.get_training_parser()
    cfg = convert_namespace_to_omegaconf(
        options.parse_args_and_arch(parser, fairseq_args(variant, data, batch, device, bf16, tiny))
    )
    with open_dict(cfg.common):
        # fairseq 0.12's command line makes --bf16 imply --tpu (options.parse_args_and_arch), which sends the Trainer
        # to torch_xla; fairseq-hydra-train's precision=bf16 does not, and a GPU is what is measured here
        cfg.common.tpu = False
    if VARIANTS[variant]["compile"]:  # bio_roberta inherits RoBERTa's argparse options, so it is set here
        with open_dict(cfg.model):
            cfg.model.compile_encoder_layers = True
    utils.import_user_module(cfg.common)
    if task is None:
        task = tasks.setup_task(cfg.task)
        task.load_dataset("train")
    torch.manual_seed(1)  # the same initial weights in every variant
    model = task.build_model(cfg.model)
    return cfg, task, Trainer(cfg, task, model, task.build_criterion(cfg.criterion))


def load_batches(task, batch: int, count: int):
    """The first ``count`` full, unpadded ``batch x 512`` batches (masked by fairseq's masked_lm, seed 1) and a hash
    of each one's tokens and targets."""
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
    raise SystemExit(f"only {len(samples)} full batches of {batch} x {SEQ} tokens in the data; need {count}")


def timed_step(trainer, sample, cuda: bool) -> float:
    """Seconds of one fairseq training step (forward, backward, gradient norm, optimizer step)."""
    import torch

    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    trainer.train_step([sample])
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start


def timing(variants, args) -> dict:
    """Every variant built in this process, their steps interleaved (A B C D A B C D ...) on the same batches."""
    import torch
    from fairseq.logging import metrics

    cuda, bf16 = args.device == "cuda", not args.fp32
    task, trainers = None, {}
    for variant in variants:
        cfg, task, trainers[variant] = build(variant, str(args.data), args.batch, args.device, bf16, task, args.tiny)
    samples, hashes = load_batches(task, args.batch, args.warmup + args.steps)
    pad = task.source_dictionary.pad()
    result = {v: {"warmup_seconds": [], "step_seconds": []} for v in variants}
    with metrics.aggregate("train"):
        for i, sample in enumerate(samples):
            for variant in variants:
                seconds = timed_step(trainers[variant], sample, cuda)
                result[variant]["warmup_seconds" if i < args.warmup else "step_seconds"].append(seconds)
                print(f"step {i + 1}/{len(samples)}: {variant}: {seconds:.2f} s", flush=True)
    model = cfg.model
    return {
        "variants": result,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "dtype": "bf16" if (cuda and bf16) else "fp32",
        "threads": torch.get_num_threads(),
        "batch_hashes": hashes,
        "tokens_per_step": args.batch * SEQ,
        "predicted_per_step": [int(s["target"].ne(pad).sum()) for s in samples[args.warmup :]],
        "sizes": dict(layers=model.encoder_layers, dim=model.encoder_embed_dim, ffn=model.encoder_ffn_embed_dim,
                      vocab=len(task.source_dictionary)),  # fmt: skip
    }


def memory_worker(variant: str, args) -> dict:
    """(fresh process) Peak memory of ``warmup + 1`` steps of one variant, and its batch hash."""
    import torch
    from fairseq.logging import metrics

    cuda = args.device == "cuda"
    _, task, trainer = build(variant, str(args.data), args.batch, args.device, not args.fp32, tiny=args.tiny)
    samples, hashes = load_batches(task, args.batch, args.warmup + 1)
    base_rss = _status_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:  # restart the peak-RSS counter (VmHWM) from here
        f.write("5")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    with metrics.aggregate("train"):
        first = timed_step(trainer, samples[0], cuda)
        for sample in samples[1:]:
            timed_step(trainer, sample, cuda)
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else (_status_kib("VmHWM") - base_rss) / 1024
    return {"variant": variant, "peak_mib": peak, "first_step_seconds": first, "batch_hashes": hashes}


def cpu_peak_gflops(threads: int) -> float:
    """fp32 GFLOP/s of a 4096 x 4096 matmul on this machine with ``threads`` threads (best of 5)."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(4096, 4096), torch.randn(4096, 4096)
    a @ b
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * 4096**3 / best / 1e9


def device_peak_tflops(name: str, bf16: bool):
    for key in PEAK_TFLOPS:
        if key in name:
            return (PEAK_TFLOPS if bf16 else PEAK_TFLOPS_FP32)[key]
    return None


def run_memory_worker(variant: str, args) -> dict:
    cmd = [sys.executable, __file__, "--memory-worker", variant, "--data", str(args.data), "--batch", str(args.batch),
           "--warmup", str(args.warmup), "--device", args.device]  # fmt: skip
    if args.fp32:
        cmd.append("--fp32")
    if args.tiny:
        cmd.append("--tiny")
    out = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{variant} (memory) failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=REPO / "runs" / "demo" / "data-bin",
                        help="binarised data dir (default: the one `make demo` writes)")  # fmt: skip
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--batch", type=int, default=None, help="sequences per step (default: CPU 2, CUDA 32)")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per variant (default: CPU 6, CUDA 30)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed first steps (default: CPU 1, CUDA 5)")
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help="comma-separated subset of " + ",".join(VARIANTS)
    )
    parser.add_argument("--fp32", action="store_true", help="CUDA: train in fp32 instead of bf16")
    parser.add_argument("--tiny", action="store_true", help="a 2 x 64 encoder instead of base: the code paths in "
                        "seconds, not a measurement (writes encoder_speed_tiny.*)")  # fmt: skip
    parser.add_argument("--peak-tflops", type=float, default=None, help="peak FLOP/s for MFU (default: see docstring)")
    parser.add_argument("--memory-worker", choices=list(VARIANTS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cpu = args.device == "cpu"
    args.batch = args.batch or (2 if cpu else 32)
    args.steps = args.steps or (6 if cpu else 30)
    args.warmup = args.warmup if args.warmup is not None else (1 if cpu else 5)
    if args.memory_worker:
        print(json.dumps(memory_worker(args.memory_worker, args)))
        return
    if not (args.data / "dict.txt").exists():
        raise SystemExit(f"{args.data}: no dict.txt, not a binarised data dir; run `make demo` (it writes "
                         "runs/demo/data-bin) or give --data DATA_BIN")  # fmt: skip
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or BASELINE not in variants:
        raise SystemExit(f"--variants {args.variants}: must include {BASELINE}; known: {', '.join(VARIANTS)}")

    memory = {}
    for variant in variants:
        memory[variant] = run_memory_worker(variant, args)
        print(f"{variant}: peak {memory[variant]['peak_mib']:.0f} MiB, first step "
              f"{memory[variant]['first_step_seconds']:.1f} s (fresh process)", flush=True)  # fmt: skip
    timed = timing(variants, args)
    for variant, m in memory.items():  # the memory runs take the timing run's first batches
        if m["batch_hashes"] != timed["batch_hashes"][: len(m["batch_hashes"])]:
            raise SystemExit(f"{variant}'s memory run trained on other batches than the timing run: not comparable")

    sizes, device, tokens = timed["sizes"], timed["device"], timed["tokens_per_step"]
    if args.peak_tflops:
        peak = args.peak_tflops * 1e12
        peak_note = f"{args.peak_tflops:g} TFLOP/s (given)"
    elif cpu:
        peak = cpu_peak_gflops(timed["threads"]) * 1e9
        peak_note = (
            f"{peak / 1e9:.0f} GFLOP/s (fp32 4096^3 matmul measured here after the runs, {timed['threads']} thread(s))"
        )
    else:
        tflops = device_peak_tflops(device, bf16=not args.fp32)
        peak = tflops * 1e12 if tflops else None
        peak_note = f"{tflops:g} TFLOP/s ({device}, {timed['dtype']})" if tflops else "unknown device: no MFU"
    flops = training_flops(**sizes, tokens=tokens, predicted=statistics.mean(timed["predicted_per_step"]))

    rows = []
    for variant in variants:
        steps = timed["variants"][variant]["step_seconds"]
        median = statistics.median(steps)
        rows.append(dict(variant=variant, label=LABELS[variant], tokens_per_s=tokens / median,
                         min=tokens / max(steps), max=tokens / min(steps),
                         mfu=(flops / median / peak) if peak else None, peak_mib=memory[variant]["peak_mib"],
                         first_step_s=memory[variant]["first_step_seconds"]))  # fmt: skip
    for row in rows:
        # Per interleaved round, so that each ratio compares steps taken back to back under the same load.
        paired = [b / s for b, s in zip(timed["variants"][BASELINE]["step_seconds"],
                                        timed["variants"][row["variant"]]["step_seconds"])]  # fmt: skip
        row["ratio"] = statistics.median(paired)
        row["ratio_min"], row["ratio_max"] = min(paired), max(paired)
    flops_token = training_flops(**sizes, tokens=1, predicted=0)
    lines = [
        f"# Encoder training speed: {device}, {timed['dtype']}, {timed['threads']} thread(s)",
        "",
        f"{sizes['layers']} x {sizes['dim']} (FFN {sizes['ffn']}), vocabulary {sizes['vocab']:,}, {args.batch} x {SEQ} "
        f"tokens per step (packed, no padding), the variants' steps interleaved on the same batches ({args.warmup} "
        f"untimed + {args.steps} timed rounds); masked_lm task and criterion, fairseq's Trainer. FLOPs per token "
        f"{flops_token / 1e6:.1f} M + the LM head on the masked positions; peak {peak_note}.",
        "",
        "| variant | tokens/s (median) | min | max | vs stock (median of rounds) | rounds' range | MFU | "
        "peak memory (MiB) | first step (s) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *[f"| {r['label']} | {r['tokens_per_s']:.0f} | {r['min']:.0f} | {r['max']:.0f} | {r['ratio']:.3f}x | "
          f"{r['ratio_min']:.2f}-{r['ratio_max']:.2f} | "
          f"{'%.1f %%' % (100 * r['mfu']) if r['mfu'] is not None else 'n/a'} | {r['peak_mib']:.0f} | "
          f"{r['first_step_s']:.1f} |" for r in rows],
        "",
        "Peak memory and first step: each variant alone in a fresh process (" + (
            "peak RSS minus the RSS before the first step: activations, gradients, optimizer state"
            if cpu else "max_memory_allocated, parameters included") + "; the first step includes the "
        "compilation for the compiled variant, shorter when torch's inductor cache already holds it).",
        "",
    ]  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / f"encoder_speed{'_tiny' if args.tiny else ''}{'' if cpu else '_cuda'}"
    _atomic_write(stem.with_suffix(".md"), "\n".join(lines))
    record = {"rows": rows, "timing": timed, "memory": memory, "peak": peak_note, "argv": sys.argv[1:]}
    _atomic_write(stem.with_suffix(".json"), json.dumps(record, indent=1))
    plot(rows, stem.with_suffix(".png"), f"{device}, {timed['dtype']}, {args.batch} x {SEQ}")
    print("\n".join(lines))
    print(f"wrote {stem}.md, .json and .png")


def _atomic_write(path: Path, text: str) -> None:
    from fairseq_bio.files import write_text

    write_text(path, text)


def plot(rows, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2))
    names = [r["label"].replace(" + ", "\n+ ").replace(", ", ",\n") for r in rows]
    x = range(len(rows))
    spread = [[r["tokens_per_s"] - r["min"] for r in rows], [r["max"] - r["tokens_per_s"] for r in rows]]
    ax1.bar(x, [r["tokens_per_s"] for r in rows], yerr=spread)
    for i, r in enumerate(rows):
        ax1.text(i, r["tokens_per_s"], f"{r['ratio']:.2f}x", ha="center", va="bottom", fontsize=8)
    ax1.set_xticks(list(x), names, fontsize=7)
    ax1.set_ylabel("tokens / s (training)")
    ax1.set_title(f"bio_roberta_base vs stock: {title}", fontsize=9)
    ax2.bar(x, [r["peak_mib"] for r in rows])
    ax2.set_xticks(list(x), names, fontsize=7)
    ax2.set_ylabel("peak memory (MiB)")
    ax2.set_title("peak memory", fontsize=9)
    fig.tight_layout()
    from fairseq_bio.files import atomic_path

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120)


if __name__ == "__main__":
    main()

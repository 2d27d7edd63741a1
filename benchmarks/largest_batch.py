"""The largest batch of 512-token blocks that trains within a memory limit, per architecture, with and without
activation checkpointing, and its speed there (bio_roberta_large and the BioMegatron sizes on
80 GB and on the 32 GB of a V100).

Two probe batches give the fixed and the per-block peak memory; the batch predicted to fit is then
trained with the allocator capped at the limit, 10 % smaller until one fits, and timed (tokens/s,
MFU). On a CPU this checks the code and measures nothing.

    python benchmarks/largest_batch.py --device cuda                              # every size, ~10 min on an H100

Writes ``benchmarks/results/largest_batch[_cuda].md`` and ``.json`` after every configuration and
prints the table.
"""

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
sys.path.insert(0, str(Path(__file__).resolve().parent))
import encoder_speed  # noqa: E402
import step_measures  # noqa: E402

# encoder_speed.py's, in bf16 through the trainer fairseq-train builds with the plugin, layers not
# compiled (which activation checkpointing excludes): the bio_masked_lm criterion's fused LM head
# and loss, which never holds the masked positions' N x V logits, or the recipes' masked_lm, which
# does.
VARIANTS = ("bio+adamw+fused", "bio+adamw")
ARCHS = ["bio_roberta_large", "bio_megatron_345m", "bio_megatron_800m", "bio_megatron_1_2b"]
PROBES = (1, 2)  # blocks per batch measured to fit the memory model
MARGIN = 0.97  # of the limit: room for the caching allocator's fragmentation
SHRINK = 0.9  # after an out-of-memory, the next try
POOL = 1024  # single blocks the batches are cut from


def predicted_batch(peaks: dict, limit_bytes: float):
    """The largest batch whose peak, on the line through the measured ``{batch: peak bytes}``, stays
    within ``MARGIN`` of ``limit_bytes``; 0 when not even the fixed part fits; None when the peak
    did not grow with the batch (no line to follow: a measurement to look at, not a prediction)."""
    (b1, p1), (b2, p2) = sorted(peaks.items())[:2]
    per_block = (p2 - p1) / (b2 - b1)
    if per_block <= 0:
        return None
    fixed = p1 - per_block * b1
    return max(0, math.floor((MARGIN * limit_bytes - fixed) / per_block))


def out_of_memory(error: BaseException) -> bool:
    return "out of memory" in str(error).lower()


class Config:
    """One architecture with activation checkpointing on or off: its trainer, batches and peak
    measurement."""

    def __init__(self, args, arch: str, checkpointing: bool):
        self.args = argparse.Namespace(**{**vars(args), "arch": arch, "batch": 1, "tiny": False})
        self.cuda = args.device == "cuda"
        options = {"checkpoint_activations": True} if checkpointing else {}
        self.task, self.step, self.sizes = encoder_speed.build(
            args.variant, self.args, model=options
        )
        self.checkpointing = checkpointing
        # fairseq's task hands out one cached batch iterator per dataset, so every batch is cut from
        # one pool of single full blocks (fewer in the data: repeated; a repeated block is the same
        # work)
        self.pool = encoder_speed.load_batches(self.task, 1, POOL)[0]

    def samples(self, batch: int, count: int):
        """``count`` batches of ``batch`` blocks from the pool, in turn."""
        out, start = [], 0
        for _ in range(count):
            rows = [self.pool[(start + i) % len(self.pool)] for i in range(batch)]
            start += batch
            out.append(stack(rows))
        return out

    def peak(self, batch: int, steps: int = 2):
        """(peak bytes, seconds per step) of ``steps`` steps at ``batch``; None where it ran out of
        memory."""
        import torch
        from fairseq.logging import metrics

        samples = self.samples(batch, steps)
        times = []
        if self.cuda:
            torch.cuda.empty_cache()
        try:
            measured = step_measures.true_peak() if self.cuda else step_measures.rss_peak()
            with metrics.aggregate("train"), measured as peak:
                for sample in samples:
                    start = time.perf_counter()
                    out = self.step.trainer.train_step([sample])
                    if self.cuda:
                        torch.cuda.synchronize()
                    times.append(time.perf_counter() - start)
                    if (
                        out is None
                    ):  # fairseq's trainer recovers from an OOM in forward/backward and returns None
                        return None
                return peak(), statistics.median(times)
        except RuntimeError as e:  # torch.OutOfMemoryError included
            if out_of_memory(e):
                self.step.trainer.zero_grad()
                return None
            raise


def stack(samples):
    """One masked_lm batch of single-block batches (``id``, ``net_input``, ``target``,
    ``nsentences``, ``ntokens``)."""
    import torch

    return {
        "id": torch.cat([s["id"] for s in samples]),
        "net_input": {
            k: torch.cat([s["net_input"][k] for s in samples]) for k in samples[0]["net_input"]
        },
        "target": torch.cat([s["target"] for s in samples]),
        "nsentences": sum(s["nsentences"] for s in samples),
        "ntokens": sum(s["ntokens"] for s in samples),
    }


def cap(limit_bytes: float):
    """Cap the CUDA caching allocator at ``limit_bytes`` (of the device's memory)."""
    import torch

    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, limit_bytes / total))


def measure(config: Config, limit_gib: float, steps: int) -> dict:
    """The largest batch within ``limit_gib`` for one configuration, and its speed.

    The peak is ``step_measures.true_peak``: parameters, gradients, fp32 master weights, Adam's
    moments and activations. On the CPU it is the process's resident memory, which the allocator
    keeps high once reached, and nothing is capped: there this is a check of the code, not a
    measurement."""
    limit = limit_gib * 2**30
    if config.cuda:
        cap(2**50)  # uncapped for the probes
    config.peak(
        1, steps=1
    )  # the optimizer's state exists from the first step on: in every probe alike
    peaks = {}
    for batch in PROBES:
        result = config.peak(batch)
        if result is None:
            return {
                "limit_gib": limit_gib,
                "batch": 0,
                "note": f"out of memory at {batch} block(s)",
            }
        peaks[batch] = result[0]
    batch = predicted_batch(peaks, limit)
    row = {
        "limit_gib": limit_gib,
        "predicted": batch,
        "probe_peaks_mib": {b: p / 2**20 for b, p in peaks.items()},
    }
    if batch is None:
        return {
            **row,
            "batch": 0,
            "note": "the peak did not grow from 1 to 2 blocks: no prediction",
        }
    if batch == 0:
        return {
            **row,
            "batch": 0,
            "note": "the parameters and optimizer state alone exceed the limit",
        }
    if not config.cuda:
        return {
            **row,
            "batch": batch,
            "verified": False,
            "note": "CPU: a check of the code, not a measurement",
        }
    cap(limit)
    try:
        while batch > 0 and config.peak(batch) is None:
            batch = int(batch * SHRINK)
        if batch == 0:
            return {**row, "batch": 0, "note": "nothing fits under the cap"}
        peak, seconds = config.peak(batch, steps)
    finally:
        cap(2**50)
    tokens = batch * step_measures.SEQ
    return {
        **row,
        "batch": batch,
        "verified": True,
        "peak_mib": peak / 2**20,
        "step_seconds": seconds,
        "tokens_per_s": tokens / seconds,
    }


def mfu(config: Config, row: dict, peak_flops) -> float:
    if not row.get("tokens_per_s") or not peak_flops:
        return None
    tokens = row["batch"] * step_measures.SEQ
    flops = step_measures.training_flops(
        **config.sizes, tokens=tokens, predicted=round(0.15 * tokens)
    )
    return flops / row["step_seconds"] / peak_flops


def table(rows, device: str, variant: str = VARIANTS[0]) -> str:
    step = encoder_speed.label(variant, "ARCH").removeprefix("ARCH + ")
    lines = [
        f"Largest batch of 512-token blocks within a memory limit, bf16, {step}, {device}",
        "",
        "| architecture | activation checkpointing | limit (GiB) | batch | tokens/s | MFU | peak (MiB) | note |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        speed = f"{r['tokens_per_s']:,.0f}" if r.get("tokens_per_s") else "-"
        util = f"{100 * r['mfu']:.1f} %" if r.get("mfu") else "-"
        peak = f"{r['peak_mib']:,.0f}" if r.get("peak_mib") else "-"
        lines.append(
            f"| {r['arch']} | {'on' if r['checkpointing'] else 'off'} | {r['limit_gib']:g} | {r['batch']} | "
            f"{speed} | {util} | {peak} | {r.get('note', '')} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO / "runs" / "gpu_check" / "data-bin")
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--archs", default=",".join(ARCHS))
    parser.add_argument(
        "--limits-gib", default=None, help="comma-separated (default: the GPU's memory, and 32)"
    )
    parser.add_argument("--checkpointing", default="off,on", help="off, on or off,on")
    parser.add_argument("--steps", type=int, default=3, help="timed steps at the batch found")
    parser.add_argument(
        "--variant",
        choices=VARIANTS,
        default=VARIANTS[0],
        help="the fused LM head and loss (criterion bio_masked_lm), or the recipes' masked_lm",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="results stem (default benchmarks/results/...)"
    )
    args = parser.parse_args(argv)
    import torch

    from fairseq_bio.files import write_text

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("largest_batch.py: --device cuda: no CUDA device here")
    if not (args.data / "dict.txt").is_file():
        raise SystemExit(
            f"largest_batch.py: --data {args.data}: no dict.txt (make gpu-check builds one, or make demo)"
        )
    args.fp32, args.sdpa_backend = False, None
    if args.limits_gib:
        limits = [float(x) for x in args.limits_gib.split(",")]
    elif args.device == "cuda":
        limits = [torch.cuda.get_device_properties(0).total_memory / 2**30, 32.0]
    else:
        raise SystemExit("largest_batch.py: --device cpu needs --limits-gib")
    peak_flops = None
    if args.device == "cuda":
        tflops = step_measures.device_peak_tflops(torch.cuda.get_device_name(0), bf16=True)
        peak_flops = tflops * 1e12 if tflops else None
    device = torch.cuda.get_device_name(0) if args.device == "cuda" else "CPU (prediction only)"
    stem = args.out or RESULTS / ("largest_batch" + ("_cuda" if args.device == "cuda" else ""))
    stem.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for arch in args.archs.split(","):
        for checkpointing in [c == "on" for c in args.checkpointing.split(",")]:
            config = Config(args, arch, checkpointing)
            for limit in limits:
                row = {
                    "arch": arch,
                    "checkpointing": checkpointing,
                    **measure(config, limit, args.steps),
                    "criterion": type(config.step.trainer.criterion).__name__,
                }
                row["mfu"] = mfu(config, row, peak_flops)
                rows.append(row)
                print(json.dumps(row), flush=True)
                write_text(
                    stem.with_suffix(".json"),
                    json.dumps({"device": device, "rows": rows}, indent=2) + "\n",
                )
                write_text(stem.with_suffix(".md"), table(rows, device, args.variant))
            del config
            if args.device == "cuda":
                torch.cuda.empty_cache()
    print(table(rows, device, args.variant))


if __name__ == "__main__":
    main()

"""Memory per parameter of fully sharded training (``ddp_backend=fully_sharded``, FSDP2 through
``fairseq_bio/patches/sharded.py``) in fp32 / bf16 / fp16, and the BioMegatron sizes per GPU from it
(docs/cluster.md, "Which sizes fit").

``--world`` processes (gloo on the CPU, NCCL on CUDA) each build an architecture at its width and a
50k vocabulary with ``--layers`` layers, shard it with the plugin's ``shard_model`` and
``precision_policy`` and take bio_adamw updates (fp16 through ``ShardedFP16Optimizer``, plus a
forced overflow that must be skipped) on a 1 x ``--tokens`` batch, too small for activations to
count.
**kept**: the weight, gradient and Adam shards a rank holds after an update, counted tensor by
tensor, x world / parameters. **transient**: the peak during an update above that (gathered layers,
their gradients, communication buffers: CUDA's allocator, or torch's CPU memory profiler); it does
not shrink with more GPUs. Per GPU at G GPUs: kept x parameters / G + transient.

    OMP_NUM_THREADS=1 python benchmarks/sharded_memory.py [--device cuda --world 1] [--out STEM]
"""

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import torch

ARCHS = ["bio_megatron_345m", "bio_megatron_800m", "bio_megatron_1_2b"]
VOCAB = 50_265  # RoBERTa's, as docs/cluster.md counts
GiB = 2**30


def build(arch: str, layers: int):
    """``arch`` at its width over ``VOCAB`` words with ``layers`` layers; (model, its layer count
    at full size)."""
    from fairseq.data import Dictionary
    from fairseq.models import ARCH_CONFIG_REGISTRY

    import fairseq_bio  # noqa: F401  (registration)
    from fairseq_bio.models.bio_roberta import BioRobertaModel

    dictionary = Dictionary()
    for i in range(VOCAB - len(dictionary)):
        dictionary.add_symbol(f"w{i}")

    class Task:
        source_dictionary = target_dictionary = dictionary

    args = argparse.Namespace(arch=arch, _name=arch, dropout=0.0, attention_dropout=0.0)
    ARCH_CONFIG_REGISTRY[arch](args)
    full = args.encoder_layers
    args.encoder_layers = layers
    torch.manual_seed(0)
    return BioRobertaModel.build_model(args, Task()), full


def settings(precision: str):
    """The run's settings as fairseq's trainer reads them (precision, bio_adamw, loss scaler)."""
    from omegaconf import OmegaConf

    return OmegaConf.create(
        {
            "common": {
                "fp16": precision == "fp16",
                "bf16": precision == "bf16",
                "fp16_init_scale": 128,
                "fp16_scale_window": 128,
                "fp16_scale_tolerance": 0.0,
                "threshold_loss_scale": None,
                "min_loss_scale": 1e-4,
            },
            "optimization": {"update_freq": [1]},
            "distributed_training": {"distributed_world_size": 1},
            "optimizer": {
                "_name": "bio_adamw",
                "lr": [1e-4],
                "adam_betas": "(0.9, 0.98)",
                "adam_eps": 1e-6,
                "weight_decay": 0.01,
                "fused": True,
            },
        }
    )


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def local_bytes(tensors) -> int:
    total = 0
    for t in tensors:
        t = t.to_local() if hasattr(t, "to_local") else t
        total += t.numel() * t.element_size()
    return total


def rank(r: int, world: int, port: int, args, out: Path) -> None:
    """One process: every (architecture, precision) measured in turn; rank 0 writes all ranks'
    rows to ``out``."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    os.environ.update(MASTER_ADDR="localhost", MASTER_PORT=str(port))
    if args.device == "cuda":
        torch.cuda.set_device(r)
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo", rank=r, world_size=world)
    mesh = init_device_mesh(args.device, (world,))
    rows = [
        measure(arch, precision, mesh, args)
        for arch in args.archs.split(",")
        for precision in args.precisions.split(",")
    ]
    gathered = [None] * world
    dist.all_gather_object(gathered, rows)
    if r == 0:
        out.write_text(json.dumps({"world": world, "device": args.device, "ranks": gathered}))
    dist.destroy_process_group()


def measure(arch: str, precision: str, mesh, args) -> dict:
    """This rank's row for ``arch`` sharded in ``precision``: what it keeps and its transient peak
    in an update after the first (Adam's states exist from then on)."""
    from fairseq import optim

    from fairseq_bio.patches.sharded import (
        ShardedFP16Optimizer,
        precision_policy,
        shard_model,
        total_norm,
    )

    cuda = args.device == "cuda"
    model, full_layers = build(arch, args.layers)
    layer = sum(p.numel() for p in model.encoder.sentence_encoder.layers[0].parameters())
    built = sum(p.numel() for p in model.parameters())
    cfg = settings(precision)
    model = shard_model(model.to(args.device), mesh, precision_policy(cfg))
    params = list(model.parameters())
    optimizer = optim.build_optimizer(cfg.optimizer, params)
    if precision == "fp16":
        optimizer = ShardedFP16Optimizer(cfg, params, optimizer)
    tokens = torch.randint(4, VOCAB, (1, args.tokens), device=args.device)

    def update():
        optimizer.zero_grad()
        logits = model(tokens)[0]
        loss = torch.nn.functional.cross_entropy(
            logits.float().view(-1, logits.size(-1)), tokens.view(-1)
        )
        optimizer.backward(loss)
        if precision == "fp16":
            optimizer.clip_grad_norm(0.0)  # the loss scaler's all-reduced norm
        else:
            total_norm(p.grad for p in params)
        optimizer.step()

    update()
    optimizer.zero_grad()
    if cuda:
        torch.cuda.synchronize()
        start = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        update()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - start
    else:
        peak = profiled_peak(update)
    state = optimizer.optimizer.state.values()
    kept = {
        "weights": local_bytes(params),
        "grads": local_bytes(p.grad for p in params if p.grad is not None),
        "states": local_bytes(v for s in state for v in s.values() if torch.is_tensor(v)),
    }
    row = {
        "arch": arch,
        "precision": precision,
        "layers": args.layers,
        "built": built,
        "full": built + (full_layers - args.layers) * layer,
        "kept": kept,
        # allocated above the weight and Adam shards the update started from, less the gradient
        # shards it keeps
        "transient": peak - kept["grads"],
        "overflow": (
            forced_overflow(model, optimizer, params, tokens) if precision == "fp16" else None
        ),
    }
    if cuda:
        del model, optimizer, params, state
        torch.cuda.empty_cache()
    return row


def forced_overflow(model, optimizer, params, tokens) -> str:
    """An update whose loss (x 1e30) overflows fp16: fairseq's ``OverflowError`` from the loss
    scaler's all-reduced norm, no step, the scale halved; else a ``RuntimeError``."""
    scale, first = optimizer.scaler.loss_scale, params[0].to_local().clone()
    optimizer.zero_grad()
    optimizer.backward(model(tokens)[0].float().sum() * 1e30)
    try:
        optimizer.clip_grad_norm(0.0)
        optimizer.step()
        raise RuntimeError("fp16: an overflowing update was applied")
    except OverflowError:
        optimizer.zero_grad()  # fairseq's trainer: no step
    if optimizer.scaler.loss_scale != scale / 2 or not torch.equal(first, params[0].to_local()):
        raise RuntimeError(f"fp16 overflow: scale {scale} -> {optimizer.scaler.loss_scale}")
    return f"skipped, scale {scale:g} -> {optimizer.scaler.loss_scale:g}"


def profiled_peak(work) -> int:
    """The most CPU memory ``work()`` held at once above what existed before it: torch's memory
    profiler's running total of the tensors allocated inside it."""
    from torch.profiler import ProfilerActivity, profile

    with tempfile.TemporaryDirectory() as tmp:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            work()
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
    totals = [
        e["args"].get("Total Allocated", 0)
        for e in events
        if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0
    ]
    return max(totals, default=0)


def summarise(result: dict, gpus) -> list:
    """One row per (arch, precision): per-parameter bytes (ranks' largest), per GPU at ``gpus``."""
    world, rows = result["world"], []
    for entries in zip(*result["ranks"]):
        first = entries[0]
        kept = {k: max(e["kept"][k] for e in entries) for k in first["kept"]}
        per_param = {k: v * world / first["built"] for k, v in kept.items()}
        transient = max(e["transient"] for e in entries)
        total = sum(per_param.values())
        rows.append(
            {
                "arch": first["arch"],
                "precision": first["precision"],
                "parameters": first["full"],
                "kept_per_parameter": per_param,
                "transient_bytes": transient,
                "per_gpu_gib": {g: (total * first["full"] / g + transient) / GiB for g in gpus},
                "overflow": first["overflow"],
            }
        )
    return rows


def table(rows, result, gpus) -> str:
    backend = "NCCL on CUDA" if result["device"] == "cuda" else "gloo on the CPU"
    lines = [
        f"Measured on {result['world']} ranks, {backend}, each size at its width with {result['ranks'][0][0]['layers']} layers "
        "(50k vocabulary); per GPU = kept x parameters / GPUs + transient, activations not included.",
        "",
        "| model | precision | parameters | kept per parameter (weights + grads + Adam) | transient "
        + "".join(f"| per GPU, {g} GPUs " for g in gpus)
        + "|",
        "| --- | --- | ---: | --- | ---: " + "| ---: " * len(gpus) + "|",
    ]
    for row in rows:
        kept = row["kept_per_parameter"]
        lines.append(
            f"| `{row['arch']}` | {row['precision']} | {row['parameters'] / 1e6:,.0f} M | "
            f"{sum(kept.values()):.2f} B ({kept['weights']:.2f} + {kept['grads']:.2f} + {kept['states']:.2f}) | "
            f"{row['transient_bytes'] / 2**20:,.0f} MiB "
            + "".join(f"| {row['per_gpu_gib'][g]:.2f} GiB " for g in gpus)
            + "|"
        )
    lines += [
        f"\n`{row['arch']}` fp16, a forced overflow: {row['overflow']}."
        for row in rows
        if row["overflow"]
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default=",".join(ARCHS))
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--layers", type=int, default=3, help="layers built (default 3)")
    parser.add_argument("--tokens", type=int, default=32, help="tokens in the one-row batch")
    parser.add_argument("--world", type=int, default=2, help="processes (CUDA: one per GPU)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--gpus", default="8,16,32", help="GPU counts of the projection")
    parser.add_argument("--out", type=Path, default=None, help="also write STEM.md and STEM.json")
    args = parser.parse_args(argv)
    gpus = [int(g) for g in args.gpus.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        record = Path(tmp) / "ranks.json"
        torch.multiprocessing.spawn(
            rank, (args.world, free_port(), args, record), nprocs=args.world
        )
        result = json.loads(record.read_text())
    rows = summarise(result, gpus)
    text = table(rows, result, gpus)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".md").write_text(text)
        args.out.with_suffix(".json").write_text(json.dumps({**result, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

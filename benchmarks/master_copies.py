"""The master-weight copies and fairseq adam's step of one bf16 update: fairseq's against the plugin's trainer.

fairseq's wrapper copies each gradient into its fp32 master copy and each master weight back with
one kernel per tensor; the plugin (``fairseq_bio/patches/mixed_precision.py``) uses one
multi-tensor kernel per device. fairseq ``adam``'s gradient norm and step are compared with
``fairseq_bio/patches/foreach_adam.py`` the same way. For each architecture's real parameter
shapes: ops dispatched per update (on a GPU, kernel launches) and wall time, the two wrappers
alternating. On a CPU the time only shows whether anything regressed; on CUDA it is the
measurement.

    OMP_NUM_THREADS=1 python benchmarks/master_copies.py [--device cuda]

Writes ``benchmarks/results/master_copies[_cuda].md``, ``.json`` and ``.png`` and prints the table.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import RESULTS, pyplot, save_figure  # noqa: E402

ARCHS = ["bio_roberta_tiny", "bio_roberta_base", "bio_roberta_large", "bio_megatron_345m"]
VOCAB = 50_265  # RoBERTa's
COPY_OPS = ("copy_", "zero_", "_foreach_copy_", "_foreach_zero_")


def parameter_shapes(arch: str):
    """The trained tensors' shapes of ``arch`` over a ``VOCAB``-word dictionary (fairseq's
    initialisation copies through the CPU, so the model is built there, once, and dropped)."""
    import argparse as ap

    from fairseq.data import Dictionary
    from fairseq.models import ARCH_CONFIG_REGISTRY

    import fairseq_bio  # noqa: F401  (registration)
    from fairseq_bio.models.bio_roberta import BioRobertaModel

    dictionary = Dictionary()
    for i in range(VOCAB - len(dictionary)):
        dictionary.add_symbol(f"w{i}")

    class Task:
        source_dictionary = target_dictionary = dictionary

    args = ap.Namespace(arch=arch, _name=arch)
    ARCH_CONFIG_REGISTRY[arch](args)
    model = BioRobertaModel.build_model(args, Task())
    return [tuple(p.shape) for p in model.parameters() if p.requires_grad]


def wrapper(cls, shapes, device: str, optimizer: str = "bio_adamw"):
    """fairseq's bf16 wrapper of ``cls`` (built by fairseq's ``build_optimizer``) around bf16
    parameters of ``shapes`` with ``optimizer`` (bio_adamw or adam) inside, and gradients on the
    parameters."""
    import torch
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(
        {
            "common": {"bf16": True, "fp16_scale_window": None, "model_parallel_size": 1},
            "optimization": {"update_freq": [1]},
            "distributed_training": {"distributed_world_size": 1},
            "optimizer": {
                "_name": optimizer,
                "lr": [1e-4],
                "adam_betas": "(0.9, 0.98)",
                "adam_eps": 1e-6,
                "weight_decay": 0.01,
                **(
                    {"fused": True}
                    if optimizer == "bio_adamw"
                    else {"use_old_adam": False, "fp16_adam_stats": False, "tpu": False}
                ),
            },
        }
    )
    params = [
        torch.nn.Parameter(torch.zeros(s, dtype=torch.bfloat16, device=device)) for s in shapes
    ]
    optimizer = cls.build_optimizer(cfg, params)
    for p in params:
        p.grad = torch.zeros_like(p)
    return optimizer


def copies(optimizer) -> None:
    """The three copies of one update, as the trainer makes them (the gradients stay: no backward
    here)."""
    grads = [p.grad for p in optimizer.fp16_params]
    optimizer.zero_grad()
    for p, g in zip(optimizer.fp16_params, grads):
        p.grad = g
    optimizer._needs_sync = True
    optimizer._sync_fp16_grads_to_fp32()
    optimizer._sync_fp32_params_to_fp16()


def adam_step(optimizer) -> None:
    """The optimizer's part of one update on the fp32 master weights: the gradient norm, clipped at
    1, and the step (fairseq's wrapper syncs the master gradients first: done once before, by
    ``copies``)."""
    inner = optimizer.fp32_optimizer
    inner.clip_grad_norm(1.0)
    inner.step()


def count_ops(optimizer, work=None, names=COPY_OPS) -> dict:
    """{op: times dispatched} of ``work(optimizer)`` (default ``copies``) for ``names`` (None: every
    op that computes, not ``.data``'s detached views)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            self.ops[name] = self.ops.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    with Count() as seen:
        (work or copies)(optimizer)
    if names is None:
        return {
            op: n
            for op, n in seen.ops.items()
            if op != "detach" and not op.startswith("_record_function")
        }
    return {op: seen.ops.get(op, 0) for op in names}


def timed(built: dict, work, device: str, repeats: int) -> dict:
    """{name: seconds of ``work(optimizer)`` per repeat} for the ``built`` optimizers, alternating.

    On a CPU the copies are memory-bound and torch runs a multi-tensor op as a loop of the same
    copies, so only the op count shows the gain: the launches are what a GPU pays for in host
    time."""
    import torch

    times = {name: [] for name in built}
    for _ in range(repeats):
        for name, optimizer in built.items():
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            work(optimizer)
            if device == "cuda":
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - start)
    return times


def measure(arch: str, device: str, repeats: int) -> dict:
    import torch
    from fairseq.optim.fp16_optimizer import FP16Optimizer

    from fairseq_bio.patches.mixed_precision import MultiTensorFP16Optimizer
    from fairseq_bio.patches import foreach_adam

    shapes = parameter_shapes(arch)
    built = {"fairseq": wrapper(FP16Optimizer, shapes, device)}
    built["plugin"] = MultiTensorFP16Optimizer.adopt(wrapper(FP16Optimizer, shapes, device))
    assert type(built["plugin"]) is MultiTensorFP16Optimizer
    result = {"tensors": len(shapes), "parameters": sum(torch.Size(s).numel() for s in shapes)}
    for name, optimizer in built.items():
        result[name] = {"ops": count_ops(optimizer)}
        copies(optimizer)  # warm
    times = timed(built, copies, device, repeats)
    for name in built:
        result[name]["ms"] = 1000 * statistics.median(times[name])
        result[name]["launches"] = sum(result[name]["ops"].values())
    result["paired_speedup"] = statistics.median(
        a / b for a, b in zip(times["fairseq"], times["plugin"])
    )
    del built
    # fairseq's adam: the gradient norm and the step, fairseq's loops against the plugin's trainer's
    built = {"fairseq": wrapper(FP16Optimizer, shapes, device, "adam")}
    built["plugin"] = foreach_adam.adopt(
        MultiTensorFP16Optimizer.adopt(wrapper(FP16Optimizer, shapes, device, "adam"))
    )
    assert type(built["plugin"].fp32_optimizer.optimizer) is foreach_adam.ForeachAdam
    step = {}
    for name, optimizer in built.items():
        copies(optimizer)  # the master gradients
        adam_step(optimizer)  # the optimizer's state exists from here on, as in training
        step[name] = {"launches": sum(count_ops(optimizer, adam_step, None).values())}
    times = timed(built, adam_step, device, repeats)
    for name in built:
        step[name]["ms"] = 1000 * statistics.median(times[name])
    step["paired_speedup"] = statistics.median(
        a / b for a, b in zip(times["fairseq"], times["plugin"])
    )
    result["adam_step"] = step
    return result


def table(results: dict, device: str) -> str:
    lines = [
        f"Master-weight copies of one bf16 update ({device}): fairseq's FP16Optimizer vs the plugin's "
        "MultiTensorFP16Optimizer",
        "",
        "| architecture | tensors | parameters | fairseq: copy ops | fairseq: ms | plugin: copy ops | plugin: ms | "
        "speed-up (median of paired updates) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for arch, r in results.items():
        lines.append(
            f"| {arch} | {r['tensors']} | {r['parameters']:,} | {r['fairseq']['launches']} | "
            f"{r['fairseq']['ms']:.2f} | {r['plugin']['launches']} | {r['plugin']['ms']:.2f} | "
            f"{r['paired_speedup']:.2f}x |"
        )
    lines += [
        "",
        f"fairseq adam's gradient norm (clipped at 1) and step on the fp32 master weights ({device}): fairseq's loops "
        "vs the plugin's multi-tensor ones (patches/foreach_adam.py)",
        "",
        "| architecture | tensors | fairseq: ops | fairseq: ms | plugin: ops | plugin: ms | speed-up (median of paired "
        "updates) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for arch, r in results.items():
        a = r["adam_step"]
        lines.append(
            f"| {arch} | {r['tensors']} | {a['fairseq']['launches']} | {a['fairseq']['ms']:.2f} | "
            f"{a['plugin']['launches']} | {a['plugin']['ms']:.2f} | {a['paired_speedup']:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path, device: str) -> None:
    plt = pyplot()
    archs = list(results)
    x = range(len(archs))
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    panels = (
        (axes[0][0], None, "launches", "copy ops dispatched per update"),
        (axes[0][1], None, "ms", f"copies' time per update, ms ({device})"),
        (axes[1][0], "adam_step", "launches", "adam: norm + step ops per update"),
        (axes[1][1], "adam_step", "ms", f"adam: norm + step time per update, ms ({device})"),
    )
    labels = {
        None: ("fairseq FP16Optimizer", "MultiTensorFP16Optimizer"),
        "adam_step": ("fairseq adam", "plugin: foreach_adam"),
    }
    for ax, part, key, title in panels:
        for offset, name, text in (
            (-0.2, "fairseq", labels[part][0]),
            (0.2, "plugin", labels[part][1]),
        ):
            values = [(results[a][part] if part else results[a])[name][key] for a in archs]
            ax.bar([i + offset for i in x], values, width=0.4, label=text)
        ax.set_xticks(list(x), [a.replace("bio_", "") for a in archs], rotation=15)
        ax.set_title(title)
        ax.legend()
    fig.tight_layout()
    save_figure(fig, path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--archs", default=",".join(ARCHS))
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument(
        "--out", type=Path, default=None, help="results stem (default benchmarks/results/...)"
    )
    args = parser.parse_args(argv)
    from fairseq_bio.files import write_text

    results = {}
    for arch in args.archs.split(","):
        results[arch] = measure(arch, args.device, args.repeats)
        print(f"{arch}: {json.dumps(results[arch])}", flush=True)
    stem = args.out or RESULTS / ("master_copies" + ("_cuda" if args.device == "cuda" else ""))
    stem.parent.mkdir(parents=True, exist_ok=True)
    text = table(results, args.device)
    write_text(stem.with_suffix(".md"), text)
    write_text(stem.with_suffix(".json"), json.dumps(results, indent=2) + "\n")
    plot(results, stem.with_suffix(".png"), args.device)
    print(text)


if __name__ == "__main__":
    main()

"""Host reads of a pretraining step: every place one training step reads a tensor's value into Python.

On a GPU each read (``.item()``, a truth value, boolean-mask indexing, ...) makes the host wait for
the device, which then idles while the host runs the Python that follows. This trains the
pretraining recipe's step and lists each read by call site and kind, per step, counted by a
``TorchFunctionMode`` (with ``--device cuda`` also the synchronisations CUDA reports). See "Host
reads per pretraining step" in benchmarks/README.md.

    OMP_NUM_THREADS=1 python benchmarks/host_reads.py --tiny --batch 2           # CPU, seconds

Writes ``benchmarks/results/host_reads[_cuda].md`` and ``.json`` and prints the table.
"""

import argparse
import collections
import json
import sys
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
sys.path.insert(0, str(Path(__file__).resolve().parent))
import encoder_speed  # noqa: E402

# Tensor methods and torch functions that hand a tensor's value to Python (or need it to size their
# result).
READ_NAMES = (
    "item",
    "__bool__",
    "__int__",
    "__float__",
    "__index__",
    "tolist",
    "numpy",
    "nonzero",
    "masked_select",
    "equal",
    "allclose",
    "unique",
    "is_nonzero",
    "repeat_interleave",
)


def _reads():
    import torch

    found = set()
    for name in READ_NAMES:
        for owner in (torch.Tensor, torch):
            if hasattr(owner, name):
                found.add(getattr(owner, name))
    return found


def _bool_index(index) -> bool:
    import torch

    items = index if isinstance(index, tuple) else (index,)
    return any(torch.is_tensor(i) and i.dtype == torch.bool for i in items)


def _to_cpu(func, args, kwargs) -> bool:
    """``t.cpu()``, or ``t.to(cpu)`` of a tensor on another device. (On a CPU run ``t.to(device)``
    of a tensor already there is no read, and cannot be told from a copy to the CPU written as such:
    not counted.)"""
    import torch

    name = getattr(func, "__name__", "")
    if name == "cpu":
        return True
    if name != "to" or not args or not torch.is_tensor(args[0]) or args[0].device.type == "cpu":
        return False
    targets = list(args[1:]) + [kwargs.get("device")]
    return any(str(t).startswith("cpu") for t in targets if isinstance(t, (str, torch.device)))


def call_site() -> str:
    """``path:line (function)`` of the innermost frame outside torch and this file, relative to
    site-packages or the repository."""
    frame = sys._getframe(2)
    here = str(Path(__file__).resolve())
    while frame is not None:
        path = frame.f_code.co_filename
        if path != here and "/torch/" not in path and not path.startswith("<"):
            break
        frame = frame.f_back
    if frame is None:
        return "?"
    path = frame.f_code.co_filename
    for root in ("site-packages/", str(REPO) + "/"):
        if root in path:
            path = path.split(root, 1)[1]
            break
    return f"{path}:{frame.f_lineno} ({frame.f_code.co_name})"


def host_read_mode():
    """A ``TorchFunctionMode`` whose ``reads`` counts {(call site, what): n} of the host reads made
    under it."""
    import torch
    from torch.overrides import TorchFunctionMode

    reads = _reads()
    INDEXING = (torch.Tensor.__getitem__, torch.Tensor.__setitem__)

    class HostReads(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.reads = collections.Counter()

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = getattr(func, "__name__", str(func))
            if func in reads:
                what = name
            elif func in INDEXING and len(args) > 1 and _bool_index(args[1]):
                what = f"{name} with a boolean mask"
            elif _to_cpu(func, args, kwargs):
                what = f"{name} (to the CPU)"
            else:
                what = None
            if what is not None:
                self.reads[(call_site(), what)] += 1
            return func(*args, **kwargs)

    return HostReads()


def batches(task, batch: int, count: int):
    """The first ``count`` batches of ``batch`` blocks (fewer: repeated)."""
    iterator = task.get_batch_iterator(
        task.dataset("train"), max_sentences=batch, seed=1, num_workers=0
    )
    samples = []
    for sample in iterator.next_epoch_itr(shuffle=False):
        samples.append(sample)
        if len(samples) == count:
            break
    if not samples:
        raise SystemExit("host_reads.py: no batch in the data")
    return [samples[i % len(samples)] for i in range(count)]


def measure(args) -> dict:
    """{"reads": [{site, what, per_step}], "cuda_syncs_per_step": n or None, ...} over
    ``args.steps`` steps (after one untimed step).

    The step: the ``bio_masked_lm`` task (which masks on the batch's device), fairseq's
    ``masked_lm`` criterion or ``--criterion bio_masked_lm``, ``bio_adamw``, the trainer
    fairseq-train builds with the plugin. The same Python runs on either device, so reads counted
    on the CPU are what a GPU step makes (tensors created on the CPU on purpose aside). Reads
    fairseq-train's loop makes only every ``common.log_interval`` updates are not counted."""
    import copy

    import torch

    extra = ["--encoder-layers", str(args.layers)] if getattr(args, "layers", None) else []
    task_name = getattr(args, "task", "bio_masked_lm")
    task, step, sizes = encoder_speed.build(
        "bio+adamw", args, task_name=task_name, criterion=args.criterion, extra=extra
    )
    trainer = step.trainer
    samples = batches(task, args.batch, args.steps + 1)
    trainer.train_step(
        [copy.deepcopy(samples[0])]
    )  # first step: allocation, warnings, the optimizer's state
    mode = host_read_mode()
    syncs = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if args.device == "cuda":
            torch.cuda.set_sync_debug_mode("warn")
        try:
            with mode:
                for sample in samples[1:]:
                    trainer.train_step([copy.deepcopy(sample)])
        finally:
            if args.device == "cuda":
                torch.cuda.set_sync_debug_mode(0)
    if args.device == "cuda":
        syncs = sum("synchroniz" in str(w.message) for w in caught) / args.steps
    rows = [
        {"site": site, "what": what, "per_step": n / args.steps}
        for (site, what), n in mode.reads.items()
    ]
    rows.sort(key=lambda r: (-r["per_step"], r["site"]))
    return {
        "arch": args.arch,
        "batch": args.batch,
        "device": args.device,
        "task": task_name,
        "criterion": args.criterion,
        "steps": args.steps,
        "reads": rows,
        "reads_per_step": sum(r["per_step"] for r in rows),
        "cuda_syncs_per_step": syncs,
        "sizes": sizes,
    }


def table(result: dict) -> str:
    lines = [
        f"Host reads per training step: {result['arch']}, {result['batch']} x 512, task {result['task']}, criterion "
        f"{result['criterion']}, bio_adamw, the plugin's trainer, {result['device']}; {result['steps']} steps",
        "",
        "| where (first frame outside torch) | what | per step |",
        "| --- | --- | ---: |",
        *[f"| `{r['site']}` | {r['what']} | {r['per_step']:g} |" for r in result["reads"]],
        f"| **all** | | **{result['reads_per_step']:g}** |",
    ]
    if result["cuda_syncs_per_step"] is not None:
        lines += [
            "",
            f"CUDA's own count (torch.cuda.set_sync_debug_mode): {result['cuda_syncs_per_step']:g} "
            "synchronisations per step.",
        ]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data",
        type=Path,
        default=REPO / "runs" / "demo" / "data-bin",
        help="binarised text (make demo's, or the GPU check's runs/gpu_check*/data-bin)",
    )
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument(
        "--task",
        default="bio_masked_lm",
        choices=["bio_masked_lm", "bio_electra"],
        help="bio_electra: ELECTRA's step (its criterion, --arch bio_electra_*)",
    )
    parser.add_argument(
        "--arch", default=None, help="default bio_roberta_base, or bio_electra_base for ELECTRA"
    )
    parser.add_argument(
        "--tiny", action="store_true", help="a 2 x 64 encoder (encoder_speed.py's --tiny)"
    )
    parser.add_argument(
        "--layers", type=int, default=None, help="instead of the architecture's number of layers"
    )
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument(
        "--criterion",
        default=None,
        choices=["masked_lm", "bio_masked_lm", "bio_electra"],
        help="masked LM: the recipes' masked_lm (default), or bio_masked_lm (the LM head and loss "
        "fused); ELECTRA: bio_electra",
    )
    parser.add_argument("--fp32", action="store_true", help="CUDA: fp32 instead of bf16")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="results stem (default benchmarks/results/host_reads)",
    )
    args = parser.parse_args(argv)
    electra = args.task == "bio_electra"
    args.arch = args.arch or ("bio_electra_base" if electra else "bio_roberta_base")
    args.criterion = args.criterion or ("bio_electra" if electra else "masked_lm")
    if electra != (args.criterion == "bio_electra") or electra != args.arch.startswith(
        "bio_electra"
    ):
        raise SystemExit(
            f"host_reads.py: --task {args.task} --arch {args.arch} --criterion {args.criterion}: the "
            "ELECTRA task goes with a bio_electra architecture and criterion, the masked LM with neither"
        )
    from fairseq_bio.files import write_text

    if not (args.data / "dict.txt").is_file():
        raise SystemExit(
            f"host_reads.py: --data {args.data}: no dict.txt (run make demo, or pass a data-bin)"
        )
    result = measure(args)
    stem = args.out or RESULTS / ("host_reads" + ("_cuda" if args.device == "cuda" else ""))
    stem.parent.mkdir(parents=True, exist_ok=True)
    text = table(result)
    write_text(stem.with_suffix(".md"), text)
    write_text(stem.with_suffix(".json"), json.dumps(result, indent=2) + "\n")
    print(text)


if __name__ == "__main__":
    main()

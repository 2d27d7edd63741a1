"""`make gpu-check`: what only a GPU shows, in under 10 minutes of a lent CUDA machine, as one table
to record.

Parts, each with its share of ``--budget`` (``SHARES``): encoder speed (encoder_speed.py), the
large sizes (largest_batch.py; sharded_memory.py: fully sharded fp32 / bf16 / fp16 over NCCL),
master-weight copies (master_copies.py), then the GPU tests (tests/gpu: training in fp16 and bf16,
NCCL data parallel and FSDP on 2+ GPUs) with what is left. ``--only`` runs some of them. The table
goes to benchmarks/results/gpu_check.md; exits 1 when a step failed, 0 with a note when there is no
CUDA. ``--dry`` (or GPU_CHECK_DRY=1; CI runs it) runs every step on the CPU at tiny sizes and writes
gpu_check_dry.md instead. What each step runs: "GPU check" in benchmarks/README.md and its method
notes in HISTORY.md.

It runs as benchmarks/gpu_check.py (the path the shared GPU runner and `make gpu-check` call) and
lives here, beside the tests it runs; its name is no test file's, so pytest does not collect it.
"""

import argparse
import ast
import datetime
import json
import os
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from fairseq_bio import runs

REPO = Path(__file__).resolve().parents[2]  # tests/gpu/check.py
RESULTS = REPO / "benchmarks" / "results"
GPU_TESTS = "tests/gpu"
DATA_PARALLEL = "tests/gpu/test_gpu_data_parallel.py"
FSDP = "tests/gpu/test_gpu_fsdp.py"
# under a GPU loan's 10-minute command limit, with room for .gpu/run.sh's set-up and the table
BUDGET_S = 540
# The parts in the order they run, each with its share of the budget; the last one taken gets what
# the others left. The speed and memory measurements first: the whole check does not fit one lent
# machine's 10-minute command, and the tests passed on a GPU before; when they time out here, a
# second command (--only tests) runs them.
PARTS = ("speed", "large", "copies", "tests")
SHARES = {"speed": 300 / 540, "large": 105 / 540, "copies": 25 / 540, "tests": 110 / 540}
# of the large part's time, largest_batch.py's share (sharded_memory.py gets the rest)
LARGEST_BATCH = 75 / 105
# the large sizes' targets: the largest batch in the GPU's memory without checkpointing, and its
# MFU
GPU_LARGE = [
    "--device",
    "cuda",
    "--archs",
    "bio_roberta_large,bio_megatron_345m",
    "--checkpointing",
    "off",
    "--steps",
    "3",
]
DRY_LARGE = [
    "--device",
    "cpu",
    "--archs",
    "bio_roberta_tiny",
    "--checkpointing",
    "off",
    "--limits-gib",
    "1",
    "--steps",
    "1",
]
# fully sharded fp32 / bf16 / fp16 (sharded_memory.py): BioMegatron-345m's width, 3 layers
GPU_SHARDED = ["--device", "cuda", "--archs", "bio_megatron_345m", "--layers", "3"]
GPU_SHARDED += ["--precisions", "fp32,bf16,fp16"]
DRY_SHARDED = ["--device", "cpu", "--archs", "bio_roberta_tiny", "--layers", "2"]
DRY_SHARDED += ["--precisions", "fp32,bf16,fp16", "--tokens", "16"]
# the speed targets: bio_roberta_base at 128 x 512 in bf16 against the plain PyTorch reference in
# the same run (and stock fairseq and HF beside them), each variant's true peak memory from its own
# process
GPU_SPEED = [
    "--device",
    "cuda",
    "--batch",
    "128",
    "--warmup",
    "3",
    "--steps",
    "10",
    "--variants",
    "stock,bio+adamw+comp+fused,bio+adamw+wholecomp+fused,reference+comp,hf",
]
# a fresh process per variant; the others only swap the optimizer or compile the layers
DRY_SPEED = [
    "--device",
    "cpu",
    "--tiny",
    "--batch",
    "1",
    "--steps",
    "2",
    "--warmup",
    "1",
    "--variants",
    "stock,bio,reference,hf",
]


@dataclass
class Step:
    """One row of the table."""

    name: str
    result: str  # pass | FAIL | skipped | timeout
    seconds: float
    details: str


def run(cmd, env, timeout: float) -> int:
    """Run ``cmd`` in the repository with its output on ours; its exit status. Past ``timeout``
    (``RunTimeout``) its whole process group is killed: pytest-xdist workers and their training runs
    with it."""
    return runs.Run(cmd, cwd=REPO, env=env, session=True).finish(max(timeout, 1))


@dataclass
class Outcome:
    """What pytest's junit report says of the tests of one file."""

    passed: int = 0
    failed: list = field(default_factory=list)
    skipped: set = field(default_factory=set)  # the reasons
    seconds: float = 0.0  # the tests' own time (setup, call, teardown)


def junit_outcomes(path: Path) -> dict:
    """{test file stem: Outcome} of a pytest --junitxml report (a file skipped whole is one skipped
    case)."""
    outcomes = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = outcomes.setdefault(
            (case.get("classname") or case.get("name")).split(".")[-1], Outcome()
        )
        outcome.seconds += float(case.get("time") or 0)
        problem = next(
            (child for child in case if child.tag in ("failure", "error", "skipped")), None
        )
        if problem is None:
            outcome.passed += 1
        elif problem.tag != "skipped":
            outcome.failed.append(case.get("name"))
        elif (
            problem.get("message") == "collection skipped"
        ):  # text: ('<file>', <line>, 'Skipped: <reason>')
            outcome.skipped.add(ast.literal_eval(problem.text)[2].removeprefix("Skipped: "))
        else:
            outcome.skipped.add(problem.get("message", ""))
    return outcomes


def summarise(name: str, outcome: Outcome, seconds: float) -> Step:
    if outcome.failed:
        failed = (
            f"{outcome.passed} passed, {len(outcome.failed)} failed: {', '.join(outcome.failed)}"
        )
        return Step(name, "FAIL", seconds, failed)
    if not outcome.passed:
        return Step(name, "skipped", seconds, "; ".join(sorted(outcome.skipped)) or "no tests")
    skipped = (
        f", {len(outcome.skipped)} skipped: {'; '.join(sorted(outcome.skipped))}"
        if outcome.skipped
        else ""
    )
    return Step(name, "pass", seconds, f"{outcome.passed} passed{skipped}")


def pytest_steps(dry: bool, env, timeout: float):
    """Steps 1, 3 and 4: one pytest session over tests/gpu (the data built once, the files side by
    side), reported per file."""
    over = "gloo on the CPU" if dry else "NCCL"
    names = (
        f"1. GPU tests ({GPU_TESTS}, fp16 + bf16)",
        f"3. 2-process data parallel, {over} ({DATA_PARALLEL})",
        f"4. fully sharded data parallel, PyTorch FSDP2 over {over} ({FSDP})",
    )
    workers = (
        2 if dry else 6
    )  # the dry mode's 2 cores; on a GPU machine (16 cores) several runs share the one GPU
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "junit.xml"
        try:
            rc = run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-q",
                    "-rs",
                    "-n",
                    str(workers),
                    "--dist",
                    "load",
                    f"--junitxml={report}",
                    GPU_TESTS,
                ],
                env,
                timeout,
            )
        except runs.RunTimeout:
            stopped = f"pytest stopped after {timeout:.0f} s"
            return [Step(name, "timeout", time.time() - start, stopped) for name in names]
        outcomes = junit_outcomes(report) if report.exists() else {}
    if not outcomes:
        return [
            Step(name, "FAIL", time.time() - start, f"no test report (pytest exit status {rc})")
            for name in names
        ]
    parallel = outcomes.pop(Path(DATA_PARALLEL).stem, Outcome(failed=["not collected"]))
    sharded = outcomes.pop(Path(FSDP).stem, Outcome(failed=["not collected"]))
    training = Outcome(
        sum(o.passed for o in outcomes.values()),
        [n for o in outcomes.values() for n in o.failed],
        set().union(*(o.skipped for o in outcomes.values())),
    )
    first = summarise(names[0], training, time.time() - start)
    first.details += " (time: the whole pytest session, steps 3 and 4 alongside)"
    return (
        first,
        summarise(names[1], parallel, parallel.seconds),
        summarise(names[2], sharded, sharded.seconds),
    )


def built_data(dry: bool) -> Path:
    """Binarised PubMed text for encoder_speed.py, built once into runs/gpu_check[_dry]/data-bin
    from the PubMed sample the way the demo does, with the 16k byte-level BPE the recorded speeds
    were measured with (the demo's own is 4k: a quarter of the LM head); needs the sample in the
    cache, FAIRSEQ_BIO_CACHE, or pip's access to PyPI once.
    """
    out = REPO / "runs" / ("gpu_check_dry" if dry else "gpu_check") / "data-bin"
    if (out / "dict.txt").exists():
        return out
    from fairseq_bio_preprocess.pipeline import build_data_bin, pubmed_sample_inputs

    docs, vocab_size, workers = (
        (1500, 3000, 1) if dry else (10000, 16000, min(os.cpu_count() or 1, 16))
    )
    inputs = pubmed_sample_inputs(xml_only=True)[: 1 if dry else None]
    return build_data_bin(
        inputs,
        out.parent,
        vocab_size=vocab_size,
        max_docs_per_file=docs,
        workers=workers,
        progress=False,
    ).data_bin


def encoder_speed_step(dry: bool, env, timeout: float) -> Step:
    name = "2. encoder speed (benchmarks/encoder_speed.py" + (
        " --tiny, CPU)" if dry else " --device cuda, bf16)"
    )
    record = RESULTS / ("encoder_speed_tiny.json" if dry else "encoder_speed_cuda.json")

    def describe(result):
        return "; ".join(
            f"{r['variant']} {r['tokens_per_s']:,.0f} tokens/s, "
            + "".join(
                f"{ratio:.2f}x {base}, "
                for base, (ratio, _, _) in r["ratios"].items()
                if base != r["variant"]
            )
            + f"MFU {'%.1f %%' % (100 * r['mfu']) if r['mfu'] is not None else 'n/a'}, peak {r['peak_mib']:,.0f} MiB"
            for r in result["rows"]
        )

    return data_step(
        name,
        dry,
        env,
        timeout,
        "encoder_speed.py",
        DRY_SPEED if dry else GPU_SPEED,
        record,
        describe,
    )


def copies_step(dry: bool, env, timeout: float) -> Step:
    name = "5. master-weight copies, adam step (benchmarks/master_copies.py" + (
        " bio_roberta_tiny, CPU)" if dry else " --device cuda, bf16)"
    )
    start = time.time()
    stem = RESULTS / ("master_copies_dry" if dry else "master_copies_cuda")
    cmd = [sys.executable, REPO / "benchmarks" / "master_copies.py", "--out", stem]
    cmd += (
        ["--archs", "bio_roberta_tiny", "--repeats", "2"]
        if dry
        else ["--device", "cuda", "--archs", "bio_roberta_base", "--repeats", "30"]
    )

    def describe(result):
        return "; ".join(
            f"{arch} ({r['tensors']} tensors): fairseq {r['fairseq']['launches']} ops {r['fairseq']['ms']:.2f} ms, "
            f"plugin {r['plugin']['launches']} ops {r['plugin']['ms']:.2f} ms, {r['paired_speedup']:.2f}x; "
            f"adam's norm + step: fairseq {r['adam_step']['fairseq']['launches']} ops "
            f"{r['adam_step']['fairseq']['ms']:.2f} ms, plugin {r['adam_step']['plugin']['launches']} ops "
            f"{r['adam_step']['plugin']['ms']:.2f} ms, {r['adam_step']['paired_speedup']:.2f}x"
            for arch, r in result.items()
        )

    return benchmark_step(name, cmd, env, timeout, start, stem.with_suffix(".json"), describe)


def large_step(dry: bool, env, timeout: float) -> Step:
    """Row 6: the largest batch of the large sizes, then fully sharded fp16 / bf16 over NCCL with
    what is left (one row: pass when both pass)."""
    start = time.time()
    largest = largest_batch_step(dry, env, LARGEST_BATCH * timeout)
    sharded = sharded_step(dry, env, timeout - (time.time() - start))
    failed = [s for s in (largest, sharded) if s.result != "pass"]
    return Step(
        f"{largest.name}; {sharded.name}",
        failed[0].result if failed else "pass",
        time.time() - start,
        f"{largest.details}; {sharded.details}",
    )


def largest_batch_step(dry: bool, env, timeout: float) -> Step:
    name = "6. large sizes (benchmarks/largest_batch.py" + (
        " bio_roberta_tiny, CPU)" if dry else " --device cuda, bf16)"
    )
    stem = RESULTS / ("largest_batch_dry" if dry else "largest_batch_check")
    options = ["--out", stem, *(DRY_LARGE if dry else GPU_LARGE)]

    def describe(result):
        return "; ".join(
            f"{r['arch']} in {r['limit_gib']:.0f} GiB: batch {r['batch']}"
            + (
                f", {r['tokens_per_s']:,.0f} tokens/s, MFU {100 * r['mfu']:.1f} %, peak {r['peak_mib']:,.0f} MiB"
                if r.get("tokens_per_s") and r.get("mfu")
                else f" ({r.get('note', 'not timed')})"
            )
            for r in result["rows"]
        )

    return data_step(
        name, dry, env, timeout, "largest_batch.py", options, stem.with_suffix(".json"), describe
    )


def sharded_step(dry: bool, env, timeout: float) -> Step:
    """Fully sharded training (FSDP2) in fp32, bf16 and fp16 through the plugin's pieces: NCCL on
    CUDA (one rank per GPU, up to 2; one rank shards nothing but runs every collective and cast),
    gloo in the dry mode; bytes per parameter, the allocator's peak, a forced fp16 overflow."""
    start = time.time()
    if dry:
        world, options = 2, DRY_SHARDED
    else:
        import torch

        world, options = min(2, torch.cuda.device_count()), GPU_SHARDED
    name = (
        f"fully sharded fp32 / bf16 / fp16 (benchmarks/sharded_memory.py, {world} rank(s) over "
        + ("gloo, CPU)" if dry else "NCCL)")
    )
    stem = RESULTS / ("sharded_memory_dry" if dry else "sharded_memory_cuda")
    cmd = [sys.executable, REPO / "benchmarks" / "sharded_memory.py", "--out", stem]
    cmd += [*options, "--world", str(world)]

    def describe(result):
        return "; ".join(
            f"{r['arch']} {r['precision']}: {sum(r['kept_per_parameter'].values()):.1f} B/parameter "
            f"kept, {r['transient_bytes'] / 2**20:,.0f} MiB transient"
            + (f", overflow {r['overflow']}" if r["overflow"] else "")
            for r in result["rows"]
        )

    return benchmark_step(name, cmd, env, timeout, start, stem.with_suffix(".json"), describe)


def data_step(
    name: str, dry: bool, env, timeout: float, script: str, options, record: Path, describe
) -> Step:
    """``benchmark_step`` for a benchmark that reads PubMed blocks (``--data``): the data-bin found
    or built first, within the same ``timeout``; without it a FAIL row (the other steps' rows still
    get written)."""
    start = time.time()
    try:
        data = built_data(dry)
    except Exception as e:  # no PubMed sample in the cache and no PyPI, say
        return Step(name, "FAIL", time.time() - start, f"no data for it: {type(e).__name__}: {e}")
    cmd = [sys.executable, REPO / "benchmarks" / script, "--data", data, *options]
    return benchmark_step(name, cmd, env, timeout, start, record, describe)


def benchmark_step(
    name: str, cmd, env, timeout: float, start: float, record: Path, describe
) -> Step:
    """Run a benchmark script with what is left of ``timeout`` (counted from ``start``): its row,
    "timeout", "FAIL" (an exit status, or no ``record``), or "pass" with
    ``describe(the record's JSON)`` and the path of its table.
    """
    try:
        rc = run(cmd, env, timeout - (time.time() - start))
    except runs.RunTimeout:
        return Step(name, "timeout", time.time() - start, f"stopped after {timeout:.0f} s")
    seconds = time.time() - start
    if rc != 0 or not record.exists():
        return Step(name, "FAIL", seconds, f"exit status {rc}")
    details = describe(json.loads(record.read_text()))
    return Step(
        name, "pass", seconds, f"{details} (table: {record.with_suffix('.md').relative_to(REPO)})"
    )


def device_name(dry: bool) -> str:
    if dry:
        cpu = next(
            (
                line.split(":", 1)[1].strip()
                for line in open("/proc/cpuinfo")
                if line.startswith("model name")
            ),
            "unknown CPU",
        )
        return f"CPU ({cpu}, {os.cpu_count()} cores)"
    query = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]
    try:
        found = runs.capture(query)
    except OSError as e:
        return f"nvidia-smi failed ({e})"
    if found.returncode:
        return f"nvidia-smi failed (exit status {found.returncode})"
    gpus = found.stdout.strip().splitlines()
    return f"{len(gpus)} x {gpus[0]} (name, memory, driver)"


def table(steps, dry: bool) -> str:
    import torch

    when = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    lines = [
        f"# GPU check{' (dry mode)' if dry else ''}: {device_name(dry)}, {when}",
        "",
        f"torch {torch.__version__} (CUDA {torch.version.cuda or 'none'}), commit {git_commit()}; `make gpu-check` "
        "(benchmarks/gpu_check.py).",
        "",
        "| step | result | time | details |",
        "| --- | --- | ---: | --- |",
        *[f"| {s.name} | {s.result} | {minutes(s.seconds)} | {s.details} |" for s in steps],
        "",
    ]
    return "\n".join(lines)


def git_commit() -> str:
    out = runs.capture(["git", "rev-parse", "--short", "HEAD"], cwd=REPO)
    dirty = runs.capture(["git", "status", "--porcelain"], cwd=REPO).stdout.strip()
    return (out.stdout.strip() or "unknown") + (" with local changes" if dirty else "")


def minutes(seconds: float) -> str:
    return (
        f"{int(seconds // 60)} min {seconds % 60:02.0f} s" if seconds >= 60 else f"{seconds:.0f} s"
    )


def plan(parts, budget: float) -> dict:
    """{part: its seconds, None for "what is left"} in ``PARTS``' order: each its share of
    ``budget`` (the shares of the parts taken, scaled to fill it), the last part taken what the
    others left."""
    taken = [p for p in PARTS if p in parts]
    total = sum(SHARES[p] for p in taken)
    return {p: None if p == taken[-1] else SHARES[p] / total * budget for p in taken}


STEPS = {
    "copies": (5, copies_step),
    "large": (6, large_step),
    "speed": (2, encoder_speed_step),
}  # row, function


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dry",
        action="store_true",
        help="every step on the CPU at tiny sizes (or GPU_CHECK_DRY=1)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=BUDGET_S,
        help=f"seconds for the parts taken (default {BUDGET_S}); each part's share: "
        + ", ".join(f"{k} {100 * v:.0f} %%" for k, v in SHARES.items())
        + ", the last what is left",
    )
    parser.add_argument(
        "--only",
        default=",".join(PARTS),
        metavar="PART,...",
        help=f"some of the parts ({', '.join(PARTS)}; default all): a lent machine's second command",
    )
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    if not parts or any(p not in PARTS for p in parts):
        parser.error(f"--only {args.only!r}: a comma-separated choice of {', '.join(PARTS)}")
    dry = args.dry or os.environ.get("GPU_CHECK_DRY") == "1"
    env = dict(os.environ)
    if dry:
        # The CPU even where a GPU is; one BLAS thread per process on the 2 cores.
        env.update(
            GPU_CHECK_DRY="1",
            CUDA_VISIBLE_DEVICES="",
            OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
        )
    else:
        import torch

        if not torch.cuda.is_available():
            print(
                "gpu-check: no CUDA GPU here (torch.cuda.is_available() is False), nothing checked; "
                "GPU_CHECK_DRY=1 make gpu-check runs every step on the CPU at tiny sizes"
            )
            return 0
    deadline = time.time() + args.budget
    done = {}
    for part, seconds in plan(parts, args.budget).items():
        left = deadline - time.time()
        timeout = left if seconds is None else min(left, seconds)
        if part == "tests":
            done[1], done[3], done[4] = pytest_steps(dry, env, timeout)
        else:
            number, function = STEPS[part]
            done[number] = function(dry, env, timeout)
    steps = [done[n] for n in sorted(done)]
    text = table(steps, dry)
    RESULTS.mkdir(parents=True, exist_ok=True)
    some = (
        "" if set(parts) == set(PARTS) else "_" + "_".join(p for p in PARTS if p in parts)
    )  # never over all's
    out = RESULTS / (f"gpu_check{'_dry' if dry else ''}{some}.md")
    from fairseq_bio.files import write_text

    write_text(out, text)
    print("\n" + text + f"\nwrote {out.relative_to(REPO)}")
    return 1 if any(s.result in ("FAIL", "timeout") for s in steps) else 0


if __name__ == "__main__":
    sys.exit(main())

"""Each seed paper's headline findings, re-derived here by the existing benchmarks:
``make reproduce``.

A finding (``reproduce_findings.FINDINGS``) names the step that gives our number (``STEPS``: an
existing benchmark or console script, with its budget at each scale). Steps run cheapest first,
each only when its record (``benchmarks/records/reproduce/<step>.json``, tracked, same budget) is
not there yet; an interrupted one starts again. The page is made from the records alone.

    python benchmarks/reproduce.py                       # every finding at the CPU scale
    python benchmarks/reproduce.py --only vocab-terms blurb-arithmetic     # some findings
    python benchmarks/reproduce.py --device cuda         # a GPU: the GPU scale (larger budgets)
    python benchmarks/reproduce.py --from-records        # the page from the records, no runs
    python benchmarks/reproduce.py --check               # fails unless the page is the records'

Writes ``docs/reproduction.md`` and ``docs/reproduction.png``, each through a temp file and a
rename.
"""

import argparse
import json
import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from fairseq_bio import runs
from fairseq_bio.files import write_json, write_text

BENCH = Path(__file__).resolve().parent
sys.path.insert(
    0, str(BENCH)
)  # the findings, and the benchmarks whose helpers the steps use (parity_tasks)
from harness import pyplot, save_figure  # noqa: E402
from reproduce_findings import FINDINGS, SEED_NAMES  # noqa: E402
from reproduce_rule import (  # noqa: E402
    CLAIM_WORDS,
    DIRECTION,
    NO_COMPARISON,
    NONE,
    NOT_REPRODUCED,
    REPRODUCED,
    RULE,
    VALUE,
    VERDICTS,
    Row,
    evaluate,
)
from reproduce_steps import REPO, STEP, STEPS, Context, Step, display  # noqa: E402

PAGE = REPO / "docs" / "reproduction.md"


def record_path(ctx: Context, step: Step) -> Path:
    return ctx.results / f"{step.name}.json"


def load_record(ctx: Context, step: Step) -> Optional[Dict]:
    """The step's last finished record (at whatever scale), or None."""
    path = record_path(ctx, step)
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def ensure(ctx: Context, step: Step, number: str = "") -> Dict:
    """The step's record at ``ctx.scale``: reused when one with the same budget is there, else the
    step is run."""
    params = step.budgets[ctx.scale]
    record = load_record(ctx, step)
    if record and (record["params"], record["scale"], record.get("on")) == (
        params,
        ctx.scale,
        ctx.device,
    ):
        print(
            f"[reproduce] {number}{step.name}: reusing {display([record_path(ctx, step)])} ({record['date']})",
            flush=True,
        )
        return record
    print(
        f"[reproduce] {number}{step.name}: running (about {step.minutes[ctx.scale]} min at the {ctx.scale} scale)",
        flush=True,
    )
    ctx.commands = []
    start = time.time()
    results = step.run(ctx, params)
    record = {
        "step": step.name,
        "scale": ctx.scale,
        "on": ctx.device,
        "params": params,
        "device": machine(ctx.device),
        "date": time.strftime("%Y-%m-%d"),
        "seconds": round(time.time() - start),
        "commands": ctx.commands,
        "results": results,
    }
    write_json(record_path(ctx, step), record)
    print(f"[reproduce] {number}{step.name}: done in {record['seconds'] / 60:.1f} min", flush=True)
    return record


def machine(device: str) -> str:
    if device == "cuda":
        import torch

        return f"GPU {torch.cuda.get_device_name(0)}"
    return f"CPU, {os.cpu_count()} cores"


# --- the page ------------------------------------------------------------------------------------------------------


TRANSCRIBED = (
    "; its record transcribed"  # a record rebuilt from an earlier page (its note says how)
)


def page(rows: List[Row], png: str) -> str:
    """docs/reproduction.md: the table, the rule, per row its scale, time, source and why, the PNG,
    the commands."""
    runs_of = {r.record["step"]: r.record for r in rows if r.record}
    lines = [
        "# Reproduction: the seed papers' findings, measured here",
        "",
        "Written by `make reproduce` (`python benchmarks/reproduce.py`) from the steps' records in "
        "`benchmarks/records/reproduce/`, which are committed with it; never edited by hand. "
        "`python benchmarks/reproduce.py --check` (run by the test suite) fails when this page is "
        "not what the records give. Each row reuses an existing benchmark or console script at a "
        "budget this machine finishes (the scale per row below); `--scale gpu` (the default on a "
        "CUDA machine) runs larger budgets.",
        "",
        "| seed | finding | paper | ours | verdict |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        f = row.finding
        ours = row.ours.text if row.ours else "not measured"
        lines.append(
            f"| {f.seed} {SEED_NAMES[f.seed]} | {f.finding} | {row.paper.text} | {ours} | **{row.verdict}** |"
        )
    counts = {v: sum(r.verdict == v for r in rows) for v in VERDICTS}
    lines += [
        "",
        "; ".join(f"{n} {v}" for v, n in counts.items()) + f" of {len(rows)}.",
        "",
        RULE,
        "",
        f"![paper vs ours per finding]({png})",
        "",
        "## Per row",
        "",
    ]
    for row in rows:
        f, rec = row.finding, row.record
        ran = (
            (
                f"{rec['scale']} scale ({rec['device']}, {rec['date']}, step `{rec['step']}` took "
                f"{rec['seconds'] / 60:.1f} min{TRANSCRIBED if 'transcribed' in rec else ''})"
            )
            if rec
            else "not run"
        )
        lines.append(f"- **{f.key}** ({f.seed}, {CLAIM_WORDS[f.claim]}): {ran}. Ours: {f.reads}.")
        if f.claim == VALUE:
            lines.append(f"  Tolerance {f.tolerance:.2g}: {f.why}.")
        if f.claim == NONE:
            lines.append(
                f"  Margin ±{f.tolerance:g} {f.unit}: a difference within it is no difference "
                "(fixed; the seeds' spread does not widen it)."
            )
        if row.detail:
            lines.append(f"  Also measured: {row.detail}.")
        if row.verdict == NO_COMPARISON:
            lines += [f"  No comparison: {row.note}.", f"  Why: {f.why}."]
        elif row.verdict != REPRODUCED:
            why = (
                "ours differs from the published number by more than that"
                if f.claim == VALUE
                else f.why
            )
            lines.append(f"  Why: {row.note or why}.")
    lines += [
        "",
        "## Commands",
        "",
        "```",
        "make reproduce                      # = python benchmarks/reproduce.py",
        "python benchmarks/reproduce.py --only KEY ...   # some rows (the keys above)",
        "python benchmarks/reproduce.py --scale gpu      # larger budgets (default with --device cuda)",
        "python benchmarks/reproduce.py --from-records   # this page and its PNG from the records",
        "python benchmarks/reproduce.py --check          # fails unless this page is the records'",
        "```",
        "",
        "What each step ran the last time (paths relative to the repository):",
        "",
    ]
    for step in STEPS:
        rec = runs_of.get(step.name)
        if rec is None:
            continue
        lines += [
            f"- `{step.name}` ({rec['scale']} scale, budget `{json.dumps(rec['params'])}`): {step.what}.",
            "",
        ]
        if "transcribed" in rec:
            lines += [f"  Its record is transcribed: {rec['transcribed']}", ""]
        now = step.budgets.get(rec["scale"])
        if now != rec["params"]:  # what it is described as doing is what it does now
            lines += [
                f"  Its budget has changed since (now `{json.dumps(now)}`): it runs again on the "
                "next `make reproduce`.",
                "",
            ]
        lines += [
            "  ```",
            *(f"  {c}" for c in rec["commands"] or ["(computed in this process)"]),
            "  ```",
            "",
        ]
    return "\n".join(lines).rstrip() + "\n"


VERDICT_COLOURS = {
    REPRODUCED: "tab:green",
    DIRECTION: "tab:olive",
    NOT_REPRODUCED: "tab:red",
    NO_COMPARISON: "tab:gray",
}


def plot(rows: List[Row], path: Path) -> None:
    """One panel per finding: the paper's effect beside ours (with its seeds as dots and its
    spread), the panel's title coloured by the verdict."""
    plt = pyplot()
    columns = 4
    lines = (len(rows) + columns - 1) // columns
    fig, axes = plt.subplots(lines, columns, figsize=(4 * columns, 3.1 * lines), squeeze=False)
    for ax, row in zip(axes.flat, rows):
        ax.bar([0], [row.paper.effect], color="0.6", width=0.6)
        if row.ours is not None:
            err = [row.ours.spread] if row.ours.spread else None
            ax.bar([1], [row.ours.effect], yerr=err, color="tab:blue", width=0.6, capsize=4)
            ax.scatter([1] * len(row.ours.values), row.ours.values, color="black", s=10, zorder=3)
        else:
            ax.text(0.75, 0.5, "not measured", ha="center", transform=ax.transAxes, fontsize=8)
        f = row.finding
        if f.claim == NONE:  # what counts as no difference
            ax.axhspan(-f.tolerance, f.tolerance, color="tab:green", alpha=0.12)
        elif f.claim == VALUE:  # the inputs' rounding
            ax.axhline(f.tolerance, color="tab:green", linestyle="--", linewidth=0.8)
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_xticks([0, 1], ["paper", "ours"])
        ax.set_xlim(-0.7, 1.7)
        ax.set_ylabel(f.unit, fontsize=8)
        ax.set_title(
            f"{f.seed} {f.key}\n{row.verdict} ({CLAIM_WORDS[f.claim]})",
            fontsize=9,
            color=VERDICT_COLOURS[row.verdict],
        )
    for ax in list(axes.flat)[len(rows) :]:
        ax.axis("off")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


def rows_from_records(ctx: Context, failed: Optional[Dict[str, str]] = None) -> List[Row]:
    """Every finding evaluated from its step's record in ``ctx.results``; a step in ``failed``
    (name: why) without a record says so."""
    failed = failed or {}
    rows = [evaluate(f, load_record(ctx, STEP[f.step]) if f.step else None) for f in FINDINGS]
    return [
        (
            replace(r, note=f"its step failed ({failed[r.finding.step]})")
            if r.record is None and r.finding.step in failed
            else r
        )
        for r in rows
    ]


def reproduce(
    ctx: Context, keys: Optional[Sequence[str]], out: Path, run: bool = True
) -> List[Row]:
    """Run the steps the findings ``keys`` (None: all) need, cheapest first (none when not
    ``run``), then write the page ``out`` and its PNG beside it from every step's record. A failing
    step is reported and the others still run; its findings read whatever record it had (without
    one, the page says the step failed)."""
    wanted = [f for f in FINDINGS if keys is None or f.key in keys]
    needed = [s for s in STEPS if any(f.step == s.name for f in wanted)]
    failed: Dict[str, str] = {}
    for number, step in enumerate(needed, 1) if run else ():
        try:
            ensure(ctx, step, f"{number}/{len(needed)} ")
        except (runs.RunError, OSError, KeyError, ValueError, StopIteration) as e:
            failed[step.name] = str(e).splitlines()[0] if str(e) else type(e).__name__
            print(f"[reproduce] {step.name} FAILED: {e}", flush=True)
    rows = rows_from_records(ctx, failed)
    png = out.with_suffix(".png")
    plot(rows, png)
    write_text(out, page(rows, png.name))
    print(
        f"[reproduce] wrote {display([out])} and {display([png])}"
        + (f"; failed: {', '.join(failed)}" if failed else ""),
        flush=True,
    )
    if failed:
        raise SystemExit(
            f"benchmarks/reproduce.py: {len(failed)} step(s) failed: {', '.join(failed)}"
        )
    return rows


def check(ctx: Context, out: Path) -> None:
    """SystemExit (one line, status 1) unless ``out`` is byte for byte the page the records give;
    nothing is run or written."""
    text = page(rows_from_records(ctx), out.with_suffix(".png").name)
    if not out.is_file() or out.read_bytes() != text.encode("utf-8"):
        raise SystemExit(
            f"benchmarks/reproduce.py: {display([out])} is not the page its records give "
            f"({display([ctx.results])}); write it with --from-records"
        )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="KEY",
        choices=[f.key for f in FINDINGS],
        help="findings to run (default: all): " + ", ".join(f.key for f in FINDINGS),
    )
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), help="default: cuda when torch sees a GPU"
    )
    parser.add_argument(
        "--scale",
        choices=("cpu", "gpu"),
        help="budgets (default: gpu with --device cuda, else cpu)",
    )
    records = parser.add_mutually_exclusive_group()
    records.add_argument(
        "--from-records",
        action="store_true",
        help="write the page and its PNG from the steps' records alone (no step runs)",
    )
    records.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if the page differs from the one the records give",
    )
    parser.add_argument(
        "--out", type=Path, default=PAGE, help=f"the page (its PNG beside it; default {PAGE})"
    )
    args = parser.parse_args(argv)
    if args.check or args.from_records:
        ctx = Context()
        if args.check:
            return check(ctx, args.out.resolve())
        reproduce(ctx, None, args.out.resolve(), run=False)
        return
    device = args.device
    if device is None or device == "cuda":
        import torch

        if device == "cuda" and not torch.cuda.is_available():
            parser.error("--device cuda: torch sees no GPU here")
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    ctx = Context(scale=args.scale or ("gpu" if device == "cuda" else "cpu"), device=device)
    signal.signal(
        signal.SIGTERM, lambda *_: sys.exit(143)
    )  # as Ctrl-C: the running benchmark is killed with us
    reproduce(ctx, args.only, args.out.resolve())


if __name__ == "__main__":
    main()

"""MLM pretraining throughput of bio_roberta + bio_masked_lm against fairseq's stock roberta +
masked_lm, and preprocessing throughput of the real PubMed sample.

Both trainers run through ``fairseq-train`` on the same binarised real PubMed data with the same
small config (token-level masking, ``sample_break_mode none`` so both see identical blocks),
alternating runs; tokens/s is fairseq's own ``wps`` over the updates after the first logging
interval. bio_masked_lm with whole-word masking is measured too. Preprocessing throughput is
uncompressed MB of MEDLINE XML per second from XML to binarised data (extract + encode +
fairseq-preprocess) with 1 and 2 workers.

    python benchmarks/mlm_throughput.py [--updates 200] [--repeats 3]

Writes ``benchmarks/results/mlm_throughput.md`` and ``.png`` and prints the ratios.
"""

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from fairseq_bio import runs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import REPO, RESULTS, pyplot, save_figure  # noqa: E402

MODEL = [
    "--encoder-layers",
    "4",
    "--encoder-embed-dim",
    "256",
    "--encoder-ffn-embed-dim",
    "1024",
    "--encoder-attention-heads",
    "4",
    "--tokens-per-sample",
    "128",
    "--batch-size",
    "16",
    "--sample-break-mode",
    "none",
    "--optimizer",
    "adam",
    "--lr",
    "1e-4",
    "--cpu",
    "--num-workers",
    "0",
    "--no-save",
    "--disable-validation",
    "--log-format",
    "json",
    "--seed",
    "1",
]
VARIANTS = {  # the stock one without the plugin (no --user-dir)
    "stock roberta + masked_lm": [
        "--task",
        "masked_lm",
        "--arch",
        "roberta_base",
        "--criterion",
        "masked_lm",
    ],
    "bio_roberta + bio_masked_lm": [
        "--task",
        "bio_masked_lm",
        "--arch",
        "bio_roberta_base",
        "--criterion",
        "masked_lm",
    ],
    "bio_roberta + bio_masked_lm, whole words": [
        "--task",
        "bio_masked_lm",
        "--arch",
        "bio_roberta_base",
        "--criterion",
        "masked_lm",
        "--mask-whole-words",
    ],
}
BASELINE = "stock roberta + masked_lm"


def preprocess(workdir: Path, workers: int, max_docs: int):
    """XML -> binarised data; returns (uncompressed XML MB, seconds, data dir)."""
    sys.path.insert(0, str(REPO))
    from fairseq_bio_preprocess.pipeline import build_data_bin, pubmed_sample_inputs

    prepared = build_data_bin(
        pubmed_sample_inputs(xml_only=True),
        workdir,
        max_docs_per_file=max_docs,
        workers=workers,
        progress=False,
    )
    stats = json.loads((prepared.corpus / "extract_stats.json").read_text(encoding="utf-8"))
    # Vocabulary learning is a one-off, not part of the XML -> binarised path.
    seconds = sum(t for step, t in prepared.steps.seconds.items() if step != "vocab")
    return stats["xml_mb"], seconds, prepared.data_bin


def train_wps(data: Path, variant: str, updates: int, log_interval: int) -> float:
    """Tokens/s of one fairseq-train run, excluding the first logging interval (start-up, allocator
    warm-up)."""
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "train.log"
        cmd = runs.train(
            data,
            *VARIANTS[variant],
            *MODEL,
            "--max-update",
            updates,
            "--log-interval",
            log_interval,
            "--save-dir",
            tmp,
            "--log-file",
            log,
            plugin=variant != BASELINE,
        )
        runs.run(cmd, Path(tmp) / "train.out")
        inner = [e for _, e in sorted(runs.logged(log, "train_inner").items())]
    later = inner[1:]
    total_updates = sum(log_interval for _ in later)
    seconds = sum(log_interval / float(e["ups"]) for e in later)
    tokens = sum(float(e["wpb"]) * log_interval for e in later)
    assert total_updates > 0, "too few updates to measure"
    return tokens / seconds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=200, help="updates per training run")
    parser.add_argument("--log-interval", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=3, help="runs per variant (alternating)")
    parser.add_argument(
        "--max-docs-per-file", type=int, default=None, help="smaller slice of the sample"
    )
    args = parser.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)

    prep = {}
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (1, 2):
            xml_mb, seconds, data = preprocess(
                Path(tmp) / f"w{workers}", workers, args.max_docs_per_file
            )
            prep[workers] = (xml_mb, seconds)
            print(
                f"preprocessing, {workers} worker(s): {xml_mb:.1f} MB XML in {seconds:.1f} s = {xml_mb / seconds:.2f} MB/s"
            )

        wps = {v: [] for v in VARIANTS}
        for r in range(args.repeats):
            for variant in VARIANTS:  # alternate, so drifts in machine load hit every variant alike
                wps[variant].append(train_wps(data, variant, args.updates, args.log_interval))
                print(
                    f"run {r + 1}/{args.repeats}: {variant}: {wps[variant][-1]:.0f} tokens/s",
                    flush=True,
                )

    base = statistics.median(wps[BASELINE])
    rows = [
        (v, statistics.median(x), min(x), max(x), statistics.median(x) / base)
        for v, x in wps.items()
    ]
    lines = [
        "# MLM training throughput (CPU, fairseq-train, real PubMed data)",
        "",
        f"4 layers x 256, 128-token blocks, batch 16, {args.updates} updates per run, {args.repeats} alternating runs; "
        "tokens/s from fairseq's wps after the first logging interval.",
        "",
        "| trainer | median tokens/s | min | max | ratio vs stock |",
        "| --- | ---: | ---: | ---: | ---: |",
        *[
            f"| {v} | {m:.0f} | {lo:.0f} | {hi:.0f} | {ratio:.3f}x |"
            for v, m, lo, hi, ratio in rows
        ],
        "",
        "# Preprocessing throughput (MEDLINE XML -> binarised, both baseline files)",
        "",
        "| workers | XML MB | seconds | MB/s |",
        "| ---: | ---: | ---: | ---: |",
        *[f"| {w} | {mb:.1f} | {s:.1f} | {mb / s:.2f} |" for w, (mb, s) in prep.items()],
        "",
    ]
    (RESULTS / "mlm_throughput.md").write_text("\n".join(lines))
    print("\n".join(lines))

    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    names = [v for v, *_ in rows]
    ax1.bar(
        range(len(rows)),
        [m for _, m, *_ in rows],
        yerr=[[m - lo for _, m, lo, _, _ in rows], [hi - m for _, m, _, hi, _ in rows]],
    )
    ax1.set_xticks(
        range(len(rows)), [n.replace(" + ", "\n+ ").replace(", ", ",\n") for n in names], fontsize=8
    )
    ax1.set_ylabel("tokens / s")
    ax1.set_title("MLM training throughput (CPU)")
    ax2.bar([str(w) for w in prep], [mb / s for mb, s in prep.values()])
    ax2.set_xlabel("workers")
    ax2.set_ylabel("MB XML / s")
    ax2.set_title("XML -> binarised")
    fig.tight_layout()
    save_figure(fig, RESULTS / "mlm_throughput.png", dpi=120)
    ratio = statistics.median(wps["bio_roberta + bio_masked_lm"]) / base
    print(f"\nratio bio/stock (token masking): {ratio:.3f}x  (target >= 1.0x)")
    print(f"wrote {RESULTS / 'mlm_throughput.md'} and {RESULTS / 'mlm_throughput.png'}")


if __name__ == "__main__":
    main()

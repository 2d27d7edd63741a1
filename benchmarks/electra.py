"""What ELECTRA costs per step, and how its discriminator learns on the PubMed slice.

(a) a ``bio_electra`` training step against a ``bio_roberta`` masked-LM step with the
    discriminator's encoder, on the same PubMed batches, in alternating runs (target <= 1.3x: the
    generator is narrow and shares the embeddings);
(b) the replaced-token curve: training runs of ``bio_electra_tiny`` on the tests' slice, per
    ``VARIANTS`` (warm-up 300 or 30 updates, temperature 2), logging replaced recall and precision,
    P(replaced) and the generator's loss.
See docs/electra.md.

    python benchmarks/electra.py [--steps 8] [--variants warmup300,warmup30] [--no-curve]

Writes ``benchmarks/results/electra.md`` and ``electra.png`` (the curve) and prints the ratio.
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

from fairseq_bio import runs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import REPO, RESULTS, bio_roberta, pyplot, save_figure  # noqa: E402

# The end-to-end test's learning check (tests/test_electra_e2e.py).
LEARN = [
    "model.encoder_layers=2",
    "model.encoder_embed_dim=64",
    "model.encoder_ffn_embed_dim=256",
    "model.encoder_attention_heads=1",
    "model.generator_embed_dim=32",
    "model.generator_ffn_embed_dim=128",
    "model.generator_attention_heads=1",
    "model.max_positions=64",
    "task.tokens_per_sample=64",
    "optimization.lr=[0.002]",
]
# name: (label, overrides of bio_electra_tiny, default updates)
VARIANTS = {
    "warmup300": (
        "2 x 64 / 32, 64 tokens, lr 2e-3, warm-up 300 (the test's)",
        [*LEARN, "lr_scheduler.warmup_updates=300"],
        1500,
    ),
    "warmup30": (
        "2 x 64 / 32, 64 tokens, lr 2e-3, warm-up 30",
        [*LEARN, "lr_scheduler.warmup_updates=30"],
        1500,
    ),
    "temperature2": (
        "2 x 64 / 32, 64 tokens, lr 2e-3, warm-up 300, temperature 2",
        [*LEARN, "lr_scheduler.warmup_updates=300", "criterion.temperature=2.0"],
        1500,
    ),
    "tiny30": (
        "bio_electra_tiny (4 x 256 / 64, 128 tokens, lr 5e-4), warm-up 30",
        ["lr_scheduler.warmup_updates=30"],
        480,
    ),
    "tiny": ("bio_electra_tiny as shipped (warm-up 300)", [], 480),
}
CURVE_KEYS = (
    "replaced_recall",
    "replaced_precision",
    "replaced_prob",
    "original_prob",
    "disc_acc",
    "replaced_frac",
    "gen_loss",
)


def prepare_data(workdir: Path) -> Path:
    """The tests' PubMed slice (tests/conftest.py), binarised once under ``workdir``."""
    sys.path.insert(0, str(REPO))
    from fairseq_bio_preprocess.fetch import pubmed_sample_dir
    from fairseq_bio_preprocess.pipeline import build_data_bin

    inputs = [pubmed_sample_dir() / "pubmed20n0014.xml.gz"]
    return build_data_bin(
        inputs,
        workdir,
        vocab_size=3000,
        max_docs_per_file=1500,
        valid_fraction=0.05,
        progress=False,
    ).data_bin


def build(kind: str, data: Path, arch: str, tokens: int):
    """(task, model, criterion, optimizer) of an ELECTRA (``kind="electra"``) or MLM step with
    ``arch``'s discriminator as the encoder."""
    import torch
    from fairseq.criterions.masked_lm import MaskedLmConfig, MaskedLmLoss
    from omegaconf import OmegaConf

    import fairseq_bio  # noqa: F401  (registration)
    from fairseq_bio.criterions.bio_electra import BioElectraCriterion
    from fairseq_bio.models.bio_electra import ARCHITECTURES, BioElectraConfig, BioElectraModel
    from fairseq_bio.tasks.bio_electra import BioElectraTask, BioElectraTaskConfig
    from fairseq_bio.tasks.bio_masked_lm import BioMaskedLMConfig, BioMaskedLMTask

    torch.manual_seed(1)
    common = dict(data=str(data), tokens_per_sample=tokens, mask_whole_words=True, seed=1)
    if kind == "electra":
        task = BioElectraTask.setup_task(OmegaConf.structured(BioElectraTaskConfig(**common)))
        model = BioElectraModel.build_model(
            OmegaConf.structured(BioElectraConfig(_name=arch, max_positions=tokens)), task
        )
        criterion = BioElectraCriterion(task)
    else:
        task = BioMaskedLMTask.setup_task(OmegaConf.structured(BioMaskedLMConfig(**common)))
        sizes = {k: v for k, v in ARCHITECTURES[arch].items() if k.startswith("encoder_")}
        model = bio_roberta(task, tokens, **sizes)
        criterion = MaskedLmLoss(MaskedLmConfig(tpu=False), task)  # (its default reads common.tpu)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01
    )
    return task, model, criterion, optimizer


def step_times(
    data: Path, arch: str, batch: int, tokens: int, steps: int, repeats: int
) -> Dict[str, List[float]]:
    """Seconds per training step of each kind, one median per run; runs alternate (ELECTRA first on
    even repeats)."""
    builds = {kind: build(kind, data, arch, tokens) for kind in ("electra", "mlm")}
    task = builds["electra"][0]
    task.load_dataset("train")
    dataset = task.dataset("train")
    ids = list(range(len(dataset)))
    batches = [
        dataset.collater([dataset[i] for i in ids[b * batch : (b + 1) * batch]])
        for b in range(steps + 2)
    ]

    def run(kind: str) -> float:
        task, model, criterion, optimizer = builds[kind]
        model.train()
        times = []
        for update, sample in enumerate(batches):
            start = time.perf_counter()
            loss, _, _ = criterion(model, task.mask_sample(sample, 0.15, stream=update))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if update >= 2:  # the first two: allocator and thread-pool warm-up
                times.append(time.perf_counter() - start)
        return statistics.median(times)

    results = {"electra": [], "mlm": []}
    for repeat in range(repeats):
        for kind in ("electra", "mlm") if repeat % 2 == 0 else ("mlm", "electra"):
            results[kind].append(run(kind))
            print(
                f"  run {repeat + 1}/{repeats} {kind}: {results[kind][-1] * 1000:.0f} ms/step",
                flush=True,
            )
    return results


def curve_command(data: Path, variant: str, updates: int, save: Path, log: Path) -> List[str]:
    return runs.hydra_train(
        "bio_electra_tiny",
        f"task.data={data}",
        *VARIANTS[variant][1],
        f"optimization.max_update={updates}",
        "checkpoint.no_save=true",
        f"dataset.validate_interval_updates={max(updates // 6, 1)}",
        "common.log_interval=50",
        "common.tensorboard_logdir=null",
        save_dir=save,
        log=log,
    )


def curve(data: Path, variant: str, updates: int, workdir: Path) -> Dict[str, Dict[int, Dict]]:
    """{"train": {update: entry}, "valid": {...}} of one training run of ``variant``."""
    save, log = workdir / variant, workdir / f"{variant}.log"
    cmd = curve_command(data, variant, updates, save, log)
    start = time.perf_counter()
    runs.run(cmd, workdir / f"{variant}.out", cwd=workdir)
    print(
        f"  curve {variant}: {updates} updates in {time.perf_counter() - start:.0f} s", flush=True
    )
    entries = {"train": {}, "valid": {}, "interval": max(updates // 6, 1)}
    for kind, logged_as in (("train", "train_inner"), ("valid", "valid")):
        for update, entry in runs.logged(log, logged_as).items():
            entries[kind][update] = {k: float(entry[k]) for k in CURVE_KEYS}
    return entries


def plot(curves: Dict[str, Dict], path: Path) -> None:
    plt = pyplot()

    fig, axes = plt.subplots(1, 3, figsize=(15, 5))
    for variant, entries in curves.items():
        train = entries["train"]
        updates = sorted(train)[
            1:
        ]  # from the second interval: the untrained discriminator's ~50 % guesses first
        label = VARIANTS[variant][0]
        axes[0].plot(updates, [train[u]["replaced_recall"] for u in updates], label=label)
        axes[1].plot(
            updates,
            [train[u]["replaced_prob"] - train[u]["original_prob"] for u in updates],
            label=label,
        )
        axes[2].plot(updates, [train[u]["gen_loss"] for u in updates], label=label)
    axes[0].set_title("replaced recall (all-'original' guess: 0)")
    axes[1].set_title("mean P(replaced): replaced - original tokens")
    axes[2].set_title("generator loss (bits; unigram 9.79, uniform 11.55)")
    for ax in axes:
        ax.set_xlabel("update (training batches, 50-update means)")
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=9)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    save_figure(fig, path)


def report(
    args, times: Dict[str, List[float]], curves: Dict[str, Dict], commands: List[str]
) -> str:
    lines = ["# ELECTRA: step time against MLM, and the replaced-token curve", ""]
    if times:
        electra, mlm = statistics.median(times["electra"]), statistics.median(times["mlm"])
        lines += [
            f"## Step time ({args.arch}'s discriminator as the MLM encoder; batch {args.batch} x {args.tokens} "
            f"tokens; {args.repeats} alternating runs of {args.steps} steps, medians)",
            "",
            "| step | ms/step (per run) | median |",
            "| --- | --- | --- |",
            f"| bio_electra | {', '.join(f'{t * 1000:.0f}' for t in times['electra'])} | {electra * 1000:.0f} |",
            f"| bio_roberta MLM | {', '.join(f'{t * 1000:.0f}' for t in times['mlm'])} | {mlm * 1000:.0f} |",
            "",
            f"ELECTRA / MLM = **{electra / mlm:.2f}x** (target <= 1.3x)",
            "",
        ]
    if curves:
        lines += [
            "## Replaced-token detection on the PubMed slice (valid split)",
            "",
            "bio_electra_tiny with the overrides named (discriminator / generator width), 16 blocks per update, "
            "temperature 1 unless named. P(rep) / P(orig): the discriminator's mean probability of 'replaced' "
            "on replaced / original tokens.",
            "",
            "| variant | update | recall | precision | P(rep) | P(orig) | disc acc (all-original) | gen bits |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for variant, entries in curves.items():
            last = max(entries["valid"])
            for update, e in sorted(entries["valid"].items()):
                if update % entries["interval"] and update != last:
                    continue  # the epoch-end validations in between
                lines.append(
                    f"| {VARIANTS[variant][0]} | {update} | {e['replaced_recall']:.4f} | "
                    f"{e['replaced_precision']:.3f} | {e['replaced_prob']:.4f} | {e['original_prob']:.4f} | "
                    f"{e['disc_acc']:.4f} ({1 - e['replaced_frac']:.4f}) | {e['gen_loss']:.2f} |"
                )
        lines += ["", "![curve](electra.png)", ""]
    lines += ["## Commands", "", "```", *commands, "```", ""]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--arch", default="bio_electra_tiny", help="bio_electra architecture of the step-time runs"
    )
    parser.add_argument("--batch", type=int, default=16, help="sequences per step")
    parser.add_argument(
        "--tokens", type=int, default=128, help="block length (tokens per sequence)"
    )
    parser.add_argument(
        "--steps", type=int, default=8, help="timed steps per run (after 2 warm-up steps)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs of each kind")
    parser.add_argument(
        "--curve-updates", type=int, help="updates of each curve run (default: the variant's)"
    )
    parser.add_argument(
        "--variants", default="warmup300,warmup30,tiny30,tiny", help=f"of {','.join(VARIANTS)}"
    )
    parser.add_argument("--no-curve", action="store_true", help="step times only")
    parser.add_argument("--no-speed", action="store_true", help="curve only")
    parser.add_argument(
        "--data",
        type=Path,
        help="binarised data dir (default: the tests' PubMed slice, built once)",
    )
    args = parser.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"--variants: unknown {unknown[0]!r}; choose from {', '.join(VARIANTS)}")

    out = RESULTS / "electra"
    out.mkdir(parents=True, exist_ok=True)
    data = args.data or prepare_data(out / "data")
    commands = [
        " ".join(["python benchmarks/electra.py", *(argv if argv is not None else sys.argv[1:])])
    ]
    times = {}
    if not args.no_speed:
        print(f"step time: {args.arch}, batch {args.batch} x {args.tokens}", flush=True)
        times = step_times(data, args.arch, args.batch, args.tokens, args.steps, args.repeats)
        ratio = statistics.median(times["electra"]) / statistics.median(times["mlm"])
        print(f"ELECTRA / MLM step time: {ratio:.2f}x (target <= 1.3x)", flush=True)
    curves = {}
    if not args.no_curve:
        with tempfile.TemporaryDirectory() as tmp:
            for variant in variants:
                updates = args.curve_updates or VARIANTS[variant][2]
                curves[variant] = curve(data, variant, updates, Path(tmp))
                command = curve_command(
                    Path("<slice>"), variant, updates, Path("<dir>"), Path("<log>")
                )
                commands.append(
                    " ".join([Path(command[0]).name, *command[1:]]).replace(str(REPO) + "/", "")
                )
        plot(curves, RESULTS / "electra.png")
    text = report(args, times, curves, commands)
    from fairseq_bio.files import write_text

    write_text(RESULTS / "electra.md", text)
    print(text)


if __name__ == "__main__":
    main()

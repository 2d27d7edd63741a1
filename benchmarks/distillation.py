"""What distillation costs and what the students buy (issue 9; Rohanian et al. 2022, Figure 2).

(a) Step time of a ``bio_distillation`` training step (student forward + backward + Adam, teacher forward without
    gradients, the loss terms) against the sum of its parts measured alone: a plain student MLM step and the teacher
    forward the step needs. The ratio is the overhead of the criterion itself (target <= 1.1x). Measured for
    DistilBioBERT's terms (logits, last hidden states) and TinyBioBERT's (every layer's states and attention maps).
(b) Inference tokens/s and peak memory of the 12 x 768 teacher and the 6 x 768 (DistilBioBERT/CompactBioBERT) and
    4 x 312 (TinyBioBERT) students at batch 32 x 128 tokens, each in a fresh process (CPU: peak RSS over the
    process's baseline; CUDA: peak allocated).

Weights are random (speed does not depend on them); tokens are real PubMed blocks when ``--data`` names a
binarised data dir (its dict.txt sets the vocabulary), otherwise uniform over a BioBERT-sized vocabulary (28,996).

    python benchmarks/distillation.py [--sizes paper|small] [--steps 5] [--data <data-bin>] [--device cpu|cuda]

Writes ``benchmarks/results/distillation.md`` and ``.png`` and prints the ratios. ``--sizes small`` (4 x 256
teacher, 2 x 256 and 2 x 128 students) is a quick check, not the measurement.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
SIZES = {
    "paper": {
        "teacher 12 x 768": dict(encoder_layers=12, encoder_embed_dim=768, encoder_ffn_embed_dim=3072,
                                 encoder_attention_heads=12),
        "student 6 x 768": dict(encoder_layers=6, encoder_embed_dim=768, encoder_ffn_embed_dim=3072,
                                encoder_attention_heads=12),
        "student 4 x 312": dict(encoder_layers=4, encoder_embed_dim=312, encoder_ffn_embed_dim=1200,
                                encoder_attention_heads=12),
    },
    "small": {
        "teacher 4 x 256": dict(encoder_layers=4, encoder_embed_dim=256, encoder_ffn_embed_dim=1024,
                                encoder_attention_heads=4),
        "student 2 x 256": dict(encoder_layers=2, encoder_embed_dim=256, encoder_ffn_embed_dim=1024,
                                encoder_attention_heads=4),
        "student 2 x 128": dict(encoder_layers=2, encoder_embed_dim=128, encoder_ffn_embed_dim=512,
                                encoder_attention_heads=4),
    },
}  # fmt: skip
# (name, student index in SIZES, criterion terms): the presets' terms, without their weights' values mattering here
PRESETS = [
    ("DistilBioBERT terms", 1, dict(mlm_weight=2.0, kl_weight=5.0, temperature=2.0, cos_weight=1.0)),
    ("TinyBioBERT terms", 2, dict(mlm_weight=0.0, kl_weight=1.0, temperature=1.0, cos_weight=0.0, embed_weight=1.0,
                                  hidden_weight=1.0, attn_weight=1.0)),
]  # fmt: skip
BIOBERT_VOCAB = 28996


def vocabulary(workdir: Path, data):
    """A data dir with dict.txt: ``data``'s, or BIOBERT_VOCAB synthetic symbols."""
    if data:
        return Path(data)
    workdir.mkdir(parents=True, exist_ok=True)
    lines = [f"t{i} 1" for i in range(BIOBERT_VOCAB - 5)]  # + <s> <pad> </s> <unk> <mask>
    (workdir / "dict.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return workdir


def setup(data_dir: Path):
    from fairseq import tasks
    from omegaconf import OmegaConf

    import fairseq_bio  # noqa: F401  (registration)
    from fairseq_bio.tasks.bio_masked_lm import BioMaskedLMConfig

    cfg = OmegaConf.structured(BioMaskedLMConfig(data=str(data_dir), max_update=1, seed=1, tokens_per_sample=128))
    cfg._name = "bio_masked_lm"
    return tasks.setup_task(cfg)


def build(task, sizes, attention_dropout=0.1):
    from omegaconf import OmegaConf

    from fairseq_bio.models.bio_roberta import BioRobertaConfig, BioRobertaModel

    cfg = OmegaConf.structured(BioRobertaConfig(max_positions=130, attention_dropout=attention_dropout, **sizes))
    cfg._name = "bio_roberta"
    return BioRobertaModel.build_model(cfg, task)


def batch(task, size: int, tokens: int, seed: int, data):
    """A masked batch (15 %, the task's own masking) of real blocks from ``data``, or of uniform symbols."""
    import torch

    d = task.source_dictionary
    if data:
        task.load_dataset("valid")
        itr = task.get_batch_iterator(task.dataset("valid"), max_sentences=size).next_epoch_itr(shuffle=False)
        sample = next(itr)
    else:
        g = torch.Generator().manual_seed(seed)
        body = torch.randint(d.nspecial, len(d) - 1, (size, tokens - 2), generator=g)
        src = torch.cat([torch.full((size, 1), d.bos()), body, torch.full((size, 1), d.eos())], 1)
        sample = {"id": torch.arange(size), "net_input": {"src_tokens": src, "src_lengths": torch.full((size,), tokens)},
                  "ntokens": size * tokens, "nsentences": size}  # fmt: skip
    return task.mask_sample(sample, 0.15, stream=seed)


def to(sample, device):
    from fairseq import utils

    return utils.move_to_cuda(sample) if device == "cuda" else sample


def timed_alternately(fns, steps: int, device: str):
    """Median seconds of each of ``fns``, called in turn ``steps`` times after one warm-up round (alternating, so
    that a busy machine slows them alike)."""
    import torch

    times = [[] for _ in fns]
    for rep in range(steps + 1):
        for fn, spent in zip(fns, times):
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            if device == "cuda":
                torch.cuda.synchronize()
            if rep:
                spent.append(time.perf_counter() - start)
    return [statistics.median(spent) for spent in times]


def step_times(sizes, data, steps: int, device: str, workdir: Path, step_batch: int):
    """[(preset, distill s, mlm s, teacher s, ratio)] for each preset."""
    import torch
    from omegaconf import OmegaConf

    from fairseq_bio.cli.hf_convert import encoder_checkpoint, encoder_checkpoint_cfg
    from fairseq_bio.criterions.bio_distillation import BioDistillationConfig, BioDistillationCriterion

    data_dir = vocabulary(workdir / "vocab", data)
    task = setup(data_dir)
    names = list(sizes)
    teacher_sizes = sizes[names[0]]
    torch.manual_seed(0)
    teacher = build(task, teacher_sizes)
    teacher_path = data_dir / "bench_teacher.pt" if not data else workdir / "bench_teacher.pt"
    if data:  # the teacher's dict.txt must be found beside it
        (workdir / "dict.txt").write_bytes((Path(data) / "dict.txt").read_bytes())
    cfg = encoder_checkpoint_cfg(str(data_dir), {**teacher_sizes, "max_positions": 130}, tokens_per_sample=128)
    torch.save(encoder_checkpoint(cfg, teacher.state_dict(), {}), teacher_path)
    sample = to(batch(task, step_batch, 128, seed=1, data=data), device)
    rows = []
    for preset, index, weights in PRESETS:
        student_sizes = sizes[names[index]]
        attn = weights.get("attn_weight", 0) > 0
        torch.manual_seed(1)
        student = build(task, student_sizes, attention_dropout=0.0 if attn else 0.1).to(device).train()

        def criterion(**w):
            c = BioDistillationConfig(teacher=str(teacher_path), student_layers=student_sizes["encoder_layers"],
                                      student_embed_dim=student_sizes["encoder_embed_dim"], student_arch="bio_roberta",
                                      **w)  # fmt: skip
            return BioDistillationCriterion(OmegaConf.structured(c), task).to(device)

        distill = criterion(**weights)
        mlm = criterion(mlm_weight=1.0, kl_weight=0.0, cos_weight=0.0)
        optimizer = torch.optim.Adam(list(student.parameters()) + list(distill.parameters()), lr=1e-5)

        def step(crit):
            def run():
                optimizer.zero_grad()
                loss, _, _ = crit(student, sample)
                loss.backward()
                optimizer.step()

            return run

        tokens = sample["net_input"]["src_tokens"]
        positions = sample["target"].ne(task.source_dictionary.pad())
        states = bool(distill.on & {"embed_loss", "hidden_loss"})
        the_teacher = distill._teacher_like(student)

        def teacher_forward():
            with torch.no_grad():
                features, _ = the_teacher(tokens, features_only=True, return_all_hiddens=states, return_attn=attn)
                the_teacher.encoder.output_layer(features, masked_tokens=positions)

        t_distill, t_mlm, t_teacher = timed_alternately([step(distill), step(mlm), teacher_forward], steps, device)
        rows.append((f"{preset} ({names[index]})", t_distill, t_mlm, t_teacher, t_distill / (t_mlm + t_teacher)))
        print(f"{rows[-1][0]}: distill {t_distill:.3f} s, MLM {t_mlm:.3f} s + teacher {t_teacher:.3f} s -> "
              f"{rows[-1][4]:.3f}x", flush=True)  # fmt: skip
    return rows


def memory_worker(sizes_json: str, device: str, data, workdir: str) -> None:
    """(fresh child process) peak memory of one encoder's forward at 32 x 128 over the process's state before the
    model was built (CPU: peak RSS, the kernel's counter reset first; CUDA: peak allocated); prints one JSON line."""
    import torch

    task = setup(vocabulary(Path(workdir) / "vocab", data))
    tokens = to(batch(task, 32, 128, seed=2, data=data), device)["net_input"]["src_tokens"]
    base_rss = _status_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:  # restart the peak-RSS counter (VmHWM) from here
        f.write("5")
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base_cuda = torch.cuda.memory_allocated()
    torch.manual_seed(0)
    model = build(task, json.loads(sizes_json)).to(device).eval()
    with torch.no_grad():
        model(tokens, features_only=True)
    if device == "cuda":
        peak = (torch.cuda.max_memory_allocated() - base_cuda) / 2**20
    else:
        peak = (_status_kib("VmHWM") - base_rss) / 1024
    print(json.dumps({"peak_mib": peak, "params": sum(p.numel() for p in model.parameters())}))


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def inference(sizes, data, steps: int, device: str, workdir: Path):
    """[(model, parameters, tokens/s, peak MiB)]: speeds timed alternately in this process, memory in fresh ones."""
    import torch

    task = setup(vocabulary(workdir / "vocab", data))
    tokens = to(batch(task, 32, 128, seed=2, data=data), device)["net_input"]["src_tokens"]
    forwards = []
    for model_sizes in sizes.values():
        torch.manual_seed(0)
        model = build(task, model_sizes).to(device).eval()

        def forward(model=model):
            with torch.no_grad():
                model(tokens, features_only=True)

        forwards.append(forward)
    seconds = timed_alternately(forwards, steps, device)
    del forwards
    rows = []
    for (name, model_sizes), spent in zip(sizes.items(), seconds):
        out = subprocess.run(
            [sys.executable, __file__, "--memory-worker", json.dumps(model_sizes), "--device", device,
             "--workdir", str(workdir)] + (["--data", str(data)] if data else []),
            capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        result = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append((name, result["params"], tokens.numel() / spent, result["peak_mib"]))
        print(f"{name}: {rows[-1][2]:.0f} tokens/s, peak {result['peak_mib']:.0f} MiB", flush=True)
    return rows


def write_results(step_rows, infer_rows, args) -> None:
    import logging

    import matplotlib

    matplotlib.use("Agg")
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib.pyplot as plt

    RESULTS.mkdir(parents=True, exist_ok=True)
    teacher_tps, teacher_mem = infer_rows[0][2], infer_rows[0][3]
    lines = [
        f"# Distillation benchmark ({args.sizes} sizes, {args.device}, {os.environ.get('OMP_NUM_THREADS', 'all')} "
        f"threads, {'real PubMed blocks' if args.data else 'uniform tokens'}, batch 32 x 128, median of {args.steps})",
        "",
        f"Training steps (a) on batches of {args.step_batch} x 128:",
        "",
        "| step | distillation s | student MLM s | teacher forward s | ratio |",
        "| --- | ---: | ---: | ---: | ---: |",
        *[f"| {n} | {d:.3f} | {m:.3f} | {t:.3f} | {r:.3f}x |" for n, d, m, t, r in step_rows],
        "",
        "| model | parameters | tokens/s | speed-up | peak memory MiB | memory ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        *[f"| {n} | {p / 1e6:.1f} M | {tps:.0f} | {tps / teacher_tps:.2f}x | {mem:.0f} | {mem / teacher_mem:.2f}x |"
          for n, p, tps, mem in infer_rows],
    ]  # fmt: skip
    text = "\n".join(lines) + "\n"
    fd, tmp = tempfile.mkstemp(dir=RESULTS, prefix=".distillation.md.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, RESULTS / "distillation.md")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    names = [n for n, *_ in infer_rows]
    ax1.bar(names, [r[2] for r in infer_rows], color="tab:blue")
    ax1.set_ylabel("inference tokens/s")
    ax2.bar(names, [r[3] for r in infer_rows], color="tab:orange")
    ax2.set_ylabel("peak memory MiB")
    for ax in (ax1, ax2):
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle(f"batch 32 x 128, {args.device}")
    fig.tight_layout()
    fd, tmp = tempfile.mkstemp(dir=RESULTS, prefix=".distillation.png.", suffix=".png")
    os.close(fd)
    fig.savefig(tmp, dpi=120)
    os.chmod(tmp, 0o644)
    os.replace(tmp, RESULTS / "distillation.png")
    print(text)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", choices=sorted(SIZES), default="paper")
    parser.add_argument("--steps", type=int, default=5, help="timed repetitions (after one warm-up)")
    parser.add_argument("--data", help="a binarised data dir (real PubMed blocks and its dict.txt)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--step-batch", type=int, default=32, help="sequences per training step in (a)")
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    parser.add_argument("--memory-worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_worker:
        return memory_worker(args.memory_worker, args.device, args.data, args.workdir)
    with tempfile.TemporaryDirectory() as work:
        step_rows = step_times(SIZES[args.sizes], args.data, args.steps, args.device, Path(work), args.step_batch)
        infer_rows = inference(SIZES[args.sizes], args.data, args.steps, args.device, Path(work))
    write_results(step_rows, infer_rows, args)


if __name__ == "__main__":
    main()

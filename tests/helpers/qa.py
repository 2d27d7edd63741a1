"""Extractive QA in tests: the suite's SQuAD-format questions on real PubMed abstracts
(tests/data/qa), a hand-made batch with hand-set logits to decode, and a short bio_extractive_qa
fine-tuning run and what it logged."""

import numpy as np
import torch
from conftest import FINE_TUNE, REPO, run_cli
from helpers.small_models import make_dictionary

from fairseq_bio import runs
from fairseq_bio.data.qa_dataset import collate_qa, doc_windows, max_context_windows

QA_DATA = REPO / "tests" / "data" / "qa"
METRICS = (
    "exact_match",
    "f1",
    "strict_acc",
    "lenient_acc",
    "mrr",
)  # the dev metrics the criterion logs


def hand_batch():
    """One question on a 10-piece context in windows (0, 6), (3, 9), (6, 10) (pieces 5-7 belong to
    the second, 8-9 to the third), pieces with hand-set character spans ("depend" + "ent" are one
    word)."""
    context = "The EDTA-dependent agglutination TEST test remains reliable."
    spans = [
        (0, 3),
        (4, 8),
        (8, 9),
        (9, 15),
        (15, 18),
        (19, 32),
        (33, 37),
        (38, 42),
        (43, 50),
        (51, 60),
    ]
    symbols = [context[a:b] for a, b in spans] + ["Which", "test?"]
    dictionary, _ = make_dictionary(symbols)
    pieces = np.asarray([dictionary.index(s) for s in symbols[:10]])
    question = np.asarray([dictionary.index("Which"), dictionary.index("test?")])
    windows = doc_windows(10, 6, 3)
    sample = {
        "id": 0,
        "question": question,
        "pieces": pieces,
        "windows": windows,
        "owner": max_context_windows(windows, 10),
        "target": None,
        "context": (context, np.asarray([a for a, _ in spans]), np.asarray([b for _, b in spans])),
        "gold": ["agglutination TEST"],
    }
    return collate_qa([sample], dictionary), context


def set_logits(batch, values):
    """R x T start and end logits: -10 everywhere but ``values[(row, piece)] = (start, end)`` at the
    piece's column."""
    start = torch.full(batch["span_mask"].shape, -10.0)
    end = torch.full(batch["span_mask"].shape, -10.0)
    for (r, piece), (s, e) in values.items():
        column = int(batch["context_column"][r]) + piece - int(batch["window_start"][r])
        start[r, column], end[r, column] = s, e
    return start, end


def fine_tune_qa(encoder, save_dir, *overrides, updates=20, data=QA_DATA):
    """bio_extractive_qa trained on ``data``; returns the json log's path."""
    save_dir.mkdir(parents=True, exist_ok=True)
    log = save_dir / "train.log"
    run_cli(
        runs.hydra_train(
            "bio_extractive_qa",
            f"task.data={data}",
            f"checkpoint.restore_file={encoder}",
            f"optimization.max_update={updates}",
            *FINE_TUNE,
            "dataset.batch_size=8",
            "task.doc_stride=32",
            *overrides,
            save_dir=save_dir,
            log=log,
        ),
        cwd=save_dir,
        timeout=900,
    )
    return log


def hydra_log(save_dir):
    """What the run logged (hydra's job log beside its checkpoints: the plugin's own lines too)."""
    return "".join(
        p.read_text(encoding="utf-8") for p in sorted(save_dir.glob("hydra/*/hydra_train.log"))
    )

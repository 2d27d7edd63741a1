"""Sentence-level prediction (``bio_sentence_prediction``: relation extraction, HoC, BIOSSES,
PubMedQA, NLI) with a fine-tuned checkpoint: a file read as the task reads its splits, one JSON row
per example, and its metrics when it has labels
(``fairseq_bio.metrics.benchmark_scores.prediction_scores`` of the rows, as fairseq-bio-blurb scores
them)."""

import json
import os
import sys
from typing import Optional

import torch

from ..files import atomic_write
from ..metrics.benchmark_scores import percentages, prediction_scores
from .loading import batches, criterion_metrics
from .predictions import PREDICT, row_columns


def predict_examples(
    task, model, examples, max_tokens: int = 4096, max_sentences: int = 64, progress=True
):
    """One JSON-able row per example (input order): ``id``, ``line``, ``pred``, ``probabilities``
    and, for labelled examples, ``gold``."""
    from fairseq import utils
    from tqdm import tqdm

    from ..criterions.bio_sentence_prediction import BioSentencePredictionCriterion

    criterion = BioSentencePredictionCriterion(None, task)
    dataset = task.build_dataset(examples, shuffle=False)
    device = next(model.parameters()).device
    kind, labels = task.kind, task.labels
    outputs = [None] * len(examples)
    with torch.no_grad(), tqdm(
        total=len(examples), unit="ex", disable=not progress, file=sys.stderr
    ) as bar:
        for indices in batches(dataset, max_tokens, max_sentences):
            sample = dataset.collater([dataset[i] for i in indices])
            sample = utils.move_to_cuda(sample) if device.type == "cuda" else sample
            pooled = criterion.pool(model, sample).cpu()
            for i, row in zip(sample["id"].tolist(), pooled):
                outputs[i] = row
            bar.update(len(indices))
    pooled = torch.stack(outputs)
    predicted = criterion.predict(pooled).tolist()
    rows = []
    for ex, p, out in zip(examples, predicted, pooled):
        row = {"id": ex.id, "line": ex.line}
        if kind == "classification":
            row.update(
                pred=labels[p], probabilities=dict(zip(labels, torch.softmax(out, -1).tolist()))
            )
        elif kind == "multilabel":
            row.update(pred=[int(v) for v in p], probabilities=torch.sigmoid(out).tolist())
        else:
            row.update(pred=p)
        if ex.label is not None:
            row["gold"] = [int(v) for v in ex.label] if kind == "multilabel" else ex.label
        rows.append(row)
    return rows


def sentence_scores(task, rows) -> Optional[dict]:
    """The metrics (percentages) of labelled rows, ``prediction_scores`` with the task's negative
    classes (sentences of one document, BLUE's HoC, ORed per document and scored per document too);
    None for unlabelled rows.
    """
    if not rows or "gold" not in rows[0]:
        return None
    gold, pred, ids = row_columns(rows)
    grouped = bool(task.cfg.group_documents)
    return percentages(
        prediction_scores(
            task.kind, gold, pred, ids if grouped else None, task.negatives, example_based=grouped
        )
    )


def sentence_metrics(logging_output) -> dict:
    """The corpus-level metrics (percentages) the criterion derives from its summed statistics (the
    dev score)."""
    from ..criterions.bio_sentence_prediction import BioSentencePredictionCriterion

    return criterion_metrics(BioSentencePredictionCriterion, logging_output)


def read_examples(task, input_path: str, split: str = "test"):
    """The examples of ``input_path`` read as the task reads its splits, with their labels when the
    file has them."""
    from ..data.sentence_files import SentenceDataError

    cfg = task.cfg
    if str(cfg.format) == "pubmedqa" or os.path.isdir(input_path):
        data = (
            input_path
            if os.path.isdir(input_path)
            else os.path.dirname(os.path.abspath(input_path))
        )
        overrides = {"data": data, "valid_from_train": 0}
        if not os.path.isdir(input_path):
            overrides["train_file"] = os.path.basename(input_path)
    else:
        overrides = {
            "data": os.path.dirname(os.path.abspath(input_path)),
            "valid_from_train": 0,
            "test_file": os.path.basename(input_path),
        }
        split = "test"
    saved = {k: getattr(cfg, k) for k in overrides}
    try:
        for key, value in overrides.items():
            setattr(cfg, key, value)
        try:
            task.read_split(split, check=False)
        except SentenceDataError:  # no label column / field: a file to predict, not to score
            return task.read_split(split, require_labels=False)
        return task.read_split(split)
    finally:
        for key, value in saved.items():
            setattr(cfg, key, value)


def predict_sentence_file(
    task, model, input_path: str, output_path: str, split: str = "test", **kwargs
):
    """Predict every example of ``input_path`` into JSON lines; returns the metrics
    (``sentence_scores``) when it has labels, else None."""
    rows = predict_examples(task, model, read_examples(task, input_path, split), **kwargs)
    with atomic_write(output_path, by=PREDICT) as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return sentence_scores(task, rows)

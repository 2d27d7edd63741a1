"""Extractive QA (``bio_extractive_qa``) with a fine-tuned checkpoint: the top answers of every
question of a SQuAD file (BioASQ snippets grouped per question on request; SQuAD v2.0's no-answer
decision), and the SQuAD / BioASQ factoid metrics when it has answers, computed by the criterion's
code (SQuAD v2.0: with the HasAns / NoAns breakdown and the best null score diff thresholds)."""

import json
import sys
from typing import Dict, List, Optional

import torch

from ..files import InputError, atomic_write
from .loading import batches, criterion_metrics
from .predictions import PREDICT


def predict_questions(
    task, model, squad, max_tokens: int = 4096, max_sentences: int = 64, progress=True
):
    """One JSON-able row per question of ``squad`` (file order): ``id``, ``question``, ``answers``,
    for SQuAD v2.0 (``task.version_2_with_negative``) ``prediction`` ("" for no answer) and
    ``null_score_diff`` (None without a span), and when the file has answers ``gold``; plus the
    criterion's logging output over all of them (None when unlabelled)."""
    from fairseq import utils
    from tqdm import tqdm

    from ..criterions.bio_extractive_qa import BioExtractiveQACriterion
    from ..data.squad import gold_texts

    criterion = BioExtractiveQACriterion(None, task)
    dataset = task.build_dataset(squad)
    device = next(model.parameters()).device
    answers: List[Optional[list]] = [None] * len(squad.examples)
    predictions: List[Optional[str]] = [None] * len(squad.examples)
    diffs: List[Optional[float]] = [None] * len(squad.examples)
    with torch.no_grad(), tqdm(
        total=len(answers), unit="q", disable=not progress, file=sys.stderr
    ) as bar:
        for indices in batches(dataset, max_tokens, max_sentences):
            sample = dataset.collater([dataset[i] for i in indices])
            sample = utils.move_to_cuda(sample) if device.type == "cuda" else sample
            start_logits, end_logits = criterion.span_logits(model, sample)
            ranked = criterion.answers(start_logits, end_logits, sample)
            answered, null_diffs = criterion.predictions(ranked, start_logits, end_logits, sample)
            for k, i in enumerate(sample["id"].tolist()):
                answers[i], diffs[i] = ranked[k], null_diffs[k]
                predictions[i] = answered[k] if answered is not None else None
            bar.update(len(indices))
    v2 = task.cfg.version_2_with_negative
    rows = []
    for ex, ranked, prediction, diff in zip(squad.examples, answers, predictions, diffs):
        row = {"id": ex.id, "question": ex.question, "answers": ranked}
        if v2:
            row.update(prediction=prediction, null_score_diff=diff)
        if ex.answers is not None:
            row["gold"] = gold_texts(ex)
        rows.append(row)
    if not squad.labelled:
        return rows, None
    return rows, criterion.score(answers, [r["gold"] for r in rows], predictions if v2 else None)


def qa_metrics(logging_output) -> dict:
    """SQuAD EM/F1 and BioASQ factoid strict/lenient accuracy and MRR (percentages), as the
    criterion derives them."""
    from ..criterions.bio_extractive_qa import SUMS, V2_SUMS, BioExtractiveQACriterion

    return criterion_metrics(BioExtractiveQACriterion, logging_output, SUMS + V2_SUMS)


def group_snippet_rows(rows: List[dict]) -> List[dict]:
    """BioBERT's BioASQ factoid answers: the rows of one question's snippets (ids
    ``<question id>_<nnn>``) become one row (first-seen order) with the question id, its
    ``snippets``, the answers of all of them merged (``metrics.qa.merge_snippet_answers``) and their
    gold answers together."""
    from ..metrics.qa import merge_snippet_answers, snippet_question_id

    groups: Dict[str, List[dict]] = {}
    for row in rows:
        groups.setdefault(snippet_question_id(str(row["id"])), []).append(row)
    grouped = []
    for question_id, members in groups.items():
        row = {
            "id": question_id,
            "question": members[0]["question"],
            "snippets": [m["id"] for m in members],
            "answers": merge_snippet_answers([a for m in members for a in m["answers"] or ()]),
        }
        if "gold" in members[0]:
            row["gold"] = list(dict.fromkeys(g for m in members for g in m["gold"]))
        grouped.append(row)
    return grouped


def best_thresholds(rows: List[dict]) -> dict:
    """SQuAD v2.0 rows with gold answers: the null score diff thresholds that maximise EM and F1 on
    them (``metrics.qa.best_null_threshold``, the official script's ``--na-prob-file`` search)."""
    from ..metrics.qa import best_null_threshold

    spans = [r["answers"][0]["text"] if r["answers"] else "" for r in rows]
    return best_null_threshold(
        spans, [r["null_score_diff"] for r in rows], [r["gold"] for r in rows]
    )


def predict_qa_file(
    task,
    model,
    input_path: str,
    output_path: str,
    group_snippets=False,
    null_threshold=None,
    **kwargs
) -> Optional[dict]:
    """Answer every question of a SQuAD file into JSON lines; returns the metrics when it has
    answers, else None (SQuAD v2.0: with the best thresholds, ``best_thresholds``).
    ``group_snippets``: one row per BioASQ question from its snippets' n-best answers
    (``group_snippet_rows``). ``null_threshold``: SQuAD v2.0's null score diff threshold (default:
    the checkpoint's ``task.null_score_diff_threshold``)."""
    if group_snippets and task.cfg.version_2_with_negative:
        raise InputError(
            "--group-snippets merges BioASQ factoid snippets; a SQuAD v2.0 checkpoint has no such input"
        )
    squad = task.read_file(input_path, require_answers=None)
    saved = task.cfg.top_answers, task.cfg.null_score_diff_threshold
    if group_snippets:  # BioBERT pools each snippet's whole n-best list
        task.cfg.top_answers = task.cfg.n_best
    if null_threshold is not None:
        task.cfg.null_score_diff_threshold = null_threshold
    try:
        rows, scored = predict_questions(task, model, squad, **kwargs)
    finally:
        task.cfg.top_answers, task.cfg.null_score_diff_threshold = saved
    if group_snippets:
        rows = group_snippet_rows(rows)
        if scored is not None:
            from ..criterions.bio_extractive_qa import BioExtractiveQACriterion

            scored = BioExtractiveQACriterion.score(
                [r["answers"] for r in rows], [r["gold"] for r in rows]
            )
    with atomic_write(output_path, by=PREDICT) as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    if scored is None:
        return None
    scores = qa_metrics(scored)
    if task.cfg.version_2_with_negative:
        scores.update(best_thresholds(rows))
    return scores

"""Extractive QA (``bio_extractive_qa``) with a fine-tuned checkpoint: the top answers of every question of a SQuAD
file (BioASQ snippets grouped per question on request), and the SQuAD / BioASQ factoid metrics when it has answers,
computed by the criterion's code."""

import json
import sys
from typing import Dict, List, Optional

import torch

from ..files import atomic_write
from .loading import batches, criterion_metrics


def predict_questions(task, model, squad, max_tokens: int = 4096, max_sentences: int = 64, progress=True):
    """One JSON-able row per question of ``squad`` (file order): ``id``, ``question``, ``answers`` and, when the
    file has answers, ``gold``; plus the criterion's logging output over all of them (None when unlabelled)."""
    from fairseq import utils
    from tqdm import tqdm

    from ..criterions.bio_extractive_qa import BioExtractiveQACriterion
    from ..data.squad import gold_texts

    criterion = BioExtractiveQACriterion(None, task)
    dataset = task.build_dataset(squad)
    device = next(model.parameters()).device
    answers: List[Optional[list]] = [None] * len(squad.examples)
    with torch.no_grad(), tqdm(total=len(answers), unit="q", disable=not progress, file=sys.stderr) as bar:
        for indices in batches(dataset, max_tokens, max_sentences):
            sample = dataset.collater([dataset[i] for i in indices])
            sample = utils.move_to_cuda(sample) if device.type == "cuda" else sample
            start_logits, end_logits = criterion.span_logits(model, sample)
            for i, ranked in zip(sample["id"].tolist(), criterion.answers(start_logits, end_logits, sample)):
                answers[i] = ranked
            bar.update(len(indices))
    rows = []
    for ex, ranked in zip(squad.examples, answers):
        row = {"id": ex.id, "question": ex.question, "answers": ranked}
        if ex.answers is not None:
            row["gold"] = gold_texts(ex)
        rows.append(row)
    scored = criterion.score(answers, [r["gold"] for r in rows]) if squad.labelled else None
    return rows, scored


def qa_metrics(logging_output) -> dict:
    """SQuAD EM/F1 and BioASQ factoid strict/lenient accuracy and MRR (percentages), as the criterion derives them."""
    from ..criterions.bio_extractive_qa import SUMS, BioExtractiveQACriterion

    return criterion_metrics(BioExtractiveQACriterion, logging_output, SUMS)


def group_snippet_rows(rows: List[dict]) -> List[dict]:
    """BioBERT's BioASQ factoid answers: the rows of one question's snippets (ids ``<question id>_<nnn>``) become one
    row (first-seen order) with the question id, its ``snippets``, the answers of all of them merged
    (``metrics.qa.merge_snippet_answers``) and their gold answers together."""
    from ..metrics.qa import merge_snippet_answers, snippet_question_id

    groups: Dict[str, List[dict]] = {}
    for row in rows:
        groups.setdefault(snippet_question_id(str(row["id"])), []).append(row)
    grouped = []
    for question_id, members in groups.items():
        row = {"id": question_id, "question": members[0]["question"], "snippets": [m["id"] for m in members],
               "answers": merge_snippet_answers([a for m in members for a in m["answers"] or ()])}  # fmt: skip
        if "gold" in members[0]:
            row["gold"] = list(dict.fromkeys(g for m in members for g in m["gold"]))
        grouped.append(row)
    return grouped


def predict_qa_file(task, model, input_path: str, output_path: str, group_snippets=False, **kwargs) -> Optional[dict]:
    """Answer every question of a SQuAD file into JSON lines; returns the metrics when it has answers, else None.
    ``group_snippets``: one row per BioASQ question from its snippets' n-best answers (``group_snippet_rows``)."""
    squad = task.read_file(input_path, require_answers=None)
    top_answers = task.cfg.top_answers
    if group_snippets:  # BioBERT pools each snippet's whole n-best list
        task.cfg.top_answers = task.cfg.n_best
    try:
        rows, scored = predict_questions(task, model, squad, **kwargs)
    finally:
        task.cfg.top_answers = top_answers
    if group_snippets:
        rows = group_snippet_rows(rows)
        if scored is not None:
            from ..criterions.bio_extractive_qa import BioExtractiveQACriterion

            scored = BioExtractiveQACriterion.score([r["answers"] for r in rows], [r["gold"] for r in rows])
    with atomic_write(output_path) as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return qa_metrics(scored) if scored is not None else None

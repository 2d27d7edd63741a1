"""fairseq-bio-predict's name, and reading back what it wrote: (gold, predicted, ids) of a
predictions file, the form ``fairseq_bio.metrics.benchmark_scores.prediction_scores`` scores. No
torch: the command reads its command line with this module."""

import json
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple, Union

from ..data.conll import read_conll_predictions

# the command the prediction files are recorded as made by (files.record_made)
PREDICT = "fairseq-bio-predict"


def row_columns(rows: Sequence[Dict[str, Any]]) -> Tuple[List[Any], List[Any], List[str]]:
    """(gold, predicted, ids) of sentence-level prediction rows; a row without an id is named by its
    input line."""
    ids = [str(r["id"] if r.get("id") is not None else r["line"]) for r in rows]
    return [r["gold"] for r in rows], [r["pred"] for r in rows], ids


def read_predictions(
    path: Union[str, Path], tagging: bool
) -> Tuple[List[Any], List[Any], List[str]]:
    """(gold, predicted, ids) of a labelled input's predictions: conlleval's token, gold, prediction
    for tagging (tag lists per sentence, ids the sentence numbers); JSON lines with the label, 0/1
    row or score per example for the sentence tasks."""
    if tagging:
        gold, pred = read_conll_predictions(path)
        return gold, pred, [str(i) for i in range(len(gold))]
    rows = [
        json.loads(line)
        for line in Path(path).read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    return row_columns(rows)

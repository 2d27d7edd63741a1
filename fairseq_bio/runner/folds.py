"""K-fold cross-validation of one train file (``fairseq-bio-blurb --folds K``; bio-lm sec. 5.2
scores GAD and EU-ADR over 10 folds).

The file's rows (sentence level: its TSV or JSON-lines rows, as the task's own reader finds them;
tagging: its CoNLL sentences) are dealt into K parts by one fixed permutation, so the folds are the
same on every run and machine and never depend on the runs' seeds. Fold k (1..K) tests on part k,
validates on part k+1 (part 1 for fold K) and trains on the other K-2 parts: every row is in exactly
one fold's test split, and a fold's dev rows come out of what it would otherwise train on. Each
fold's files keep the source's format (its header and the raw text of its rows, in file order) and
are written atomically, only when their contents change, under ``<out>/<dataset>/folds/``.
"""

import hashlib
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from ..errors import BioConfigError
from ..files import write_text

MIN_FOLDS = 3  # one part to test on, one to validate on, the rest to train on
FOLD_SEED = 1  # of the permutation that deals rows into parts


@dataclass(frozen=True)
class Fold:
    """One fold's files: ``<dir>/train<ext>``, ``dev<ext>``, ``test<ext>`` and what they hold
    (``digest``)."""

    index: int  # 1..k
    k: int
    dir: Path
    train_file: str
    valid_file: str
    test_file: str
    digest: str  # sha256 of the three files' text: a run is reused only on the same fold data

    @property
    def name(self) -> str:
        return f"fold{self.index}-of-{self.k}"

    def task_values(self, tagging: bool) -> Dict[str, Any]:
        """The task options that point a run at this fold's files (no dev rows cut from its train
        file)."""
        values: Dict[str, Any] = {
            "data": str(self.dir),
            "train_file": self.train_file,
            "valid_file": self.valid_file,
            "test_file": self.test_file,
        }
        if not tagging:
            values["valid_from_train"] = 0
        return values

    def overrides(self, tagging: bool) -> List[str]:
        """``task_values`` as hydra overrides."""
        return [f"task.{key}={value}" for key, value in self.task_values(tagging).items()]


def fold_parts(n: int, k: int, seed: int = FOLD_SEED) -> List[int]:
    """The part (0..k-1) of each of ``n`` rows: a seeded permutation dealt in turn, so parts differ
    by one row at most."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    parts = [0] * n
    for i, row in enumerate(order):
        parts[row] = i % k
    return parts


def fold_rows(parts: Sequence[int], k: int, index: int) -> Tuple[List[int], List[int], List[int]]:
    """(train, dev, test) row numbers of fold ``index`` (1..k), in file order."""
    test, dev = index - 1, index % k
    split: Tuple[List[int], List[int], List[int]] = ([], [], [])
    for row, part in enumerate(parts):
        split[2 if part == test else 1 if part == dev else 0].append(row)
    return split


def _lines(path: str, tagging: bool) -> List[str]:
    """The file's lines with their ends, split where its reader counts lines (CoNLL: at ``\\n``; TSV and JSON lines:
    at any line end, as ``csv`` and text-mode files do)."""
    if tagging:
        with open(path, "rb") as f:
            raw = f.read().decode("utf-8").split("\n")
        return [line + "\n" for line in raw[:-1]] + ([raw[-1]] if raw[-1] else [])
    with open(path, encoding="utf-8", newline="") as f:
        return list(f)


def _row_starts(path: str, tagging: bool, task: Mapping[str, Any]) -> List[int]:
    """The first line (1-based) of each row, found by the task's own reader (one reader per
    format)."""
    if tagging:
        from ..data.conll import read_conll

        return [sentence.lines[0] for sentence in read_conll(path)]
    from ..data import sentence_files as sd

    fmt = sd.file_format(path, str(task.get("format") or "auto"))
    if fmt == "pubmedqa":
        raise BioConfigError(
            f"{path}: PubMedQA's file is split by its split file, not a file of rows to cross-validate"
        )
    fields = [n.strip() for n in str(task["text_fields"]).split(",") if n.strip()]
    read = sd.read_tsv if fmt == "tsv" else sd.read_jsonl
    return [
        example.line for example in read(path, fields, task["label_field"], task.get("id_field"))
    ]


def read_rows(path: str, tagging: bool, task: Mapping[str, Any]) -> Tuple[str, List[str]]:
    """(header, rows) of a train file: the text before its first row (a TSV header) and each row's
    text up to the next row's (ending in a line end; a CoNLL sentence in a blank line)."""
    starts = _row_starts(path, tagging, task)  # first: the reader's one-line errors for a bad file
    lines = _lines(path, tagging)
    rows = []
    for i, start in enumerate(starts):
        end = starts[i + 1] - 1 if i + 1 < len(starts) else len(lines)
        row = "".join(lines[start - 1 : end])
        row += "" if row.endswith(("\n", "\r")) else "\n"
        blank_last = (
            not row.split("\n")[-2].strip() if tagging else True
        )  # a CoNLL sentence ends in a blank line
        rows.append(row if blank_last else row + "\n")
    return "".join(lines[: starts[0] - 1]) if starts else "", rows


def write_folds(path: str, tagging: bool, task: Mapping[str, Any], k: int, out: Path) -> List[Fold]:
    """The ``k`` folds of train file ``path`` written under ``out/fold<i>-of-<k>/`` (files the same
    as before are left untouched); one-line errors for a file with fewer rows than folds."""
    if k < MIN_FOLDS:
        raise BioConfigError(
            f"{path}: {k} folds; cross-validation needs at least {MIN_FOLDS} (test, dev, train)"
        )
    header, rows = read_rows(path, tagging, task)
    if len(rows) < k:
        raise BioConfigError(f"{path}: {len(rows)} rows, fewer than the {k} folds")
    parts, ext = fold_parts(len(rows), k), os.path.splitext(path)[1]
    names = (f"train{ext}", f"dev{ext}", f"test{ext}")
    folds = []
    for index in range(1, k + 1):
        directory = Path(out) / f"fold{index}-of-{k}"
        texts = [header + "".join(rows[r] for r in split) for split in fold_rows(parts, k, index)]
        for name, text in zip(names, texts):
            target = directory / name
            if not target.is_file() or target.read_bytes() != text.encode("utf-8"):
                write_text(target, text)
        digest = hashlib.sha256("\0".join(texts).encode("utf-8")).hexdigest()
        folds.append(Fold(index, k, directory, *names, digest))
    return folds

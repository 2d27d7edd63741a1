"""Readers of the sentence-level task files users have (no fairseq import): BLUE-style TSV with or without a
header, JSON lines (BLURB's seqcls files, MedNLI), and PubMedQA's ``ori_pqal.json`` with a split file. Each gives
``Example`` rows that remember their line, so that every check below fails in one line naming file and line."""

import csv
import json
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

KINDS = ("classification", "multilabel", "regression")
FORMATS = ("auto", "tsv", "jsonl", "pubmedqa")


class SentenceDataError(ValueError):
    """Bad task data; the message is one line naming the file and line."""


@dataclass
class Example:
    """One input: a text or a text pair, its label as read (None when unlabelled), and where it came from."""

    texts: Tuple[str, ...]
    label: Any
    line: int
    id: Optional[str] = None


def file_format(path: str, fmt: str = "auto") -> str:
    """``fmt``, or for ``auto`` the format the file's extension names (.tsv/.txt: tsv, .json/.jsonl: jsonl)."""
    if fmt != "auto":
        if fmt not in FORMATS:
            raise SentenceDataError(f"{path}: unknown format {fmt!r} (one of {', '.join(FORMATS)})")
        return fmt
    ext = os.path.splitext(path)[1].lower()
    if ext in (".tsv", ".txt"):
        return "tsv"
    if ext in (".json", ".jsonl"):
        return "jsonl"
    raise SentenceDataError(f"{path}: cannot tell the format from the extension {ext!r}; set task.format=tsv|jsonl")


def read_tsv(path: str, text_fields: Sequence[str], label_field: Optional[str]) -> List[Example]:
    """Rows of a tab-separated file (CSV quoting, as pandas reads BLUE's files). A first row naming the label or
    a text column is a header and columns are found by name (BLUE's ``index sentence label``, BIOSSES); otherwise
    the label is the last column and the texts the columns before it (BLUE's ``sentence<TAB>label``)."""
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t")
        rows = []
        start = 1
        for row in reader:
            if any(cell.strip() for cell in row):
                rows.append((start, row))
            start = reader.line_num + 1
    if not rows:
        raise SentenceDataError(f"{path}: no rows")
    names = [*text_fields, *([label_field] if label_field else [])]
    first_line, first = rows[0]
    header = [cell.strip() for cell in first]
    examples = []
    if set(header) & set(names):
        missing = [name for name in names if name not in header]
        if missing:
            raise SentenceDataError(
                f"{path}:{first_line}: no column {missing[0]!r} in the header ({', '.join(repr(h) for h in header)})"
            )
        columns = [header.index(name) for name in names]
        for line, row in rows[1:]:
            if len(row) != len(header):
                raise SentenceDataError(f"{path}:{line}: {len(row)} fields, the header has {len(header)}")
            values = [row[c] for c in columns]
            examples.append(_example(values, text_fields, label_field, line))
        return examples
    for line, row in rows:
        if len(row) < len(names):
            raise SentenceDataError(
                f"{path}:{line}: {len(row)} field(s), expected {' <TAB> '.join(names)} (no header: the label is the "
                "last column, the texts the ones before it)"
            )
        # Without a header the label is the last column, also when it is not wanted (a labelled file predicted).
        end = len(row) if label_field or len(row) == len(names) else len(row) - 1
        examples.append(_example(row[end - len(names) : end], text_fields, label_field, line))
    return examples


def _example(values: Sequence[str], text_fields, label_field, line: int, row_id=None) -> Example:
    texts = tuple(values[: len(text_fields)])
    label = values[len(text_fields)] if label_field else None
    return Example(texts, label.strip() if isinstance(label, str) else label, line, row_id)


def read_jsonl(
    path: str, text_fields: Sequence[str], label_field: Optional[str], id_field: Optional[str] = None
) -> List[Example]:
    """Objects of a JSON-lines file (BLURB's ``{"id", "sentence", "label"}``, MedNLI's ``sentence1/2, gold_label``)."""
    examples = []
    with open(path, encoding="utf-8") as f:
        for line, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as e:
                raise SentenceDataError(f"{path}:{line}: not a JSON object ({e.msg})") from None
            if not isinstance(obj, dict):
                raise SentenceDataError(f"{path}:{line}: expected a JSON object, got {type(obj).__name__}")
            values = []
            for name in [*text_fields, *([label_field] if label_field else [])]:
                if name not in obj:
                    raise SentenceDataError(f"{path}:{line}: no field {name!r} (fields: {', '.join(obj)})")
                values.append(obj[name])
            for name, text in zip(text_fields, values):
                if not isinstance(text, str):
                    raise SentenceDataError(f"{path}:{line}: field {name!r} is not a string")
            row_id = obj.get(id_field) if id_field else None
            examples.append(_example(values, text_fields, label_field, line, None if row_id is None else str(row_id)))
    if not examples:
        raise SentenceDataError(f"{path}: no rows")
    return examples


def _key_lines(text: str) -> Dict[str, int]:
    """Line of each ``"key": {`` in a JSON text (PubMedQA's top-level PMIDs; its entries hold no objects)."""
    lines, line, offset = {}, 1, 0
    for m in re.finditer(r'"([^"\\]+)"\s*:\s*\{', text):
        line += text.count("\n", offset, m.start())
        offset = m.start()
        lines.setdefault(m.group(1), line)
    return lines


def _load_json(path: str) -> Tuple[Any, str]:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        return json.loads(text), text
    except json.JSONDecodeError as e:
        raise SentenceDataError(f"{path}:{e.lineno}: not JSON ({e.msg})") from None


def read_pubmedqa(
    path: str, split_path: str, split: str, label_field: Optional[str] = "final_decision"
) -> List[Example]:
    """PubMedQA's PQA-L (``ori_pqal.json``: PMID -> QUESTION, CONTEXTS, final_decision) for the PMIDs that
    ``split_path`` (BLURB's ``blurb_split.json``) lists under ``split``: question ‖ the contexts joined by spaces."""
    data, text = _load_json(path)
    splits, split_text = _load_json(split_path)
    if not isinstance(data, dict):
        raise SentenceDataError(f"{path}:1: expected an object of PMID -> entry")
    if not isinstance(splits, dict) or split not in splits:
        keys = ", ".join(splits) if isinstance(splits, dict) else "none"
        raise SentenceDataError(f"{split_path}:1: no split {split!r} (splits: {keys})")
    lines = _key_lines(text)
    examples = []
    for pmid in splits[split]:
        pmid = str(pmid)
        if pmid not in data:
            at = split_text.find(f'"{pmid}"')
            line = split_text.count("\n", 0, at) + 1 if at >= 0 else 1
            raise SentenceDataError(f"{split_path}:{line}: PMID {pmid} of split {split!r} is not in {path}")
        entry, line = data[pmid], lines.get(pmid, 1)
        if not isinstance(entry, dict):
            raise SentenceDataError(f"{path}:{line}: entry {pmid} is not an object")
        contexts = entry.get("CONTEXTS")
        if not isinstance(contexts, list) or not any(isinstance(c, str) and c.strip() for c in contexts):
            raise SentenceDataError(f"{path}:{line}: entry {pmid} has no CONTEXTS")
        question = entry.get("QUESTION")
        if not isinstance(question, str):
            raise SentenceDataError(f"{path}:{line}: entry {pmid} has no QUESTION")
        label = None
        if label_field:
            if label_field not in entry:
                raise SentenceDataError(f"{path}:{line}: entry {pmid} has no {label_field}")
            label = entry[label_field]
        texts = (question, " ".join(c.strip() for c in contexts if isinstance(c, str)))
        examples.append(Example(texts, label, line, pmid))
    if not examples:
        raise SentenceDataError(f"{split_path}: split {split!r} lists no PMIDs")
    return examples


def check_examples(
    examples: Sequence[Example],
    path: str,
    kind: str,
    text_fields: Sequence[str],
    labels: Optional[Sequence[str]] = None,
    width: Optional[int] = None,
    score_range: Tuple[Optional[float], Optional[float]] = (None, None),
    entity_markers: Sequence[str] = (),
) -> None:
    """Normalise labels in place (classification: str; multilabel: tuple of 0/1; regression: float) and refuse
    empty texts, labels outside ``labels``, rows of another ``width``, scores outside ``score_range``, and
    (relation extraction) a row in which none of ``entity_markers`` occurs."""
    known = None if labels is None else set(labels)
    low, high = score_range
    for ex in examples:
        where = f"{path}:{ex.line}"
        for name, text in zip(text_fields, ex.texts):
            if not text.strip():
                raise SentenceDataError(f"{where}: empty text in field {name!r}")
        if entity_markers and not any(m in text for text in ex.texts for m in entity_markers):
            raise SentenceDataError(f"{where}: no entity marker ({', '.join(entity_markers)}) in the text")
        if ex.label is None:
            continue
        if kind == "classification":
            if isinstance(ex.label, bool) or not isinstance(ex.label, (str, int)):
                raise SentenceDataError(f"{where}: label {ex.label!r} is not a class name")
            ex.label = str(ex.label).strip()
            if not ex.label:
                raise SentenceDataError(f"{where}: empty label")
            if known is not None and ex.label not in known:
                raise SentenceDataError(f"{where}: label {ex.label!r} is not one of {', '.join(labels)}")
        elif kind == "multilabel":
            if not isinstance(ex.label, list) or any(v not in (0, 1) or isinstance(v, float) for v in ex.label):
                raise SentenceDataError(f"{where}: label {ex.label!r} is not a list of 0/1")
            if width is not None and len(ex.label) != width:
                raise SentenceDataError(f"{where}: {len(ex.label)} labels, expected {width}")
            ex.label = tuple(int(v) for v in ex.label)
        elif kind == "regression":
            try:
                score = float(ex.label)
            except (TypeError, ValueError):
                raise SentenceDataError(f"{where}: score {ex.label!r} is not a number") from None
            if not math.isfinite(score):
                raise SentenceDataError(f"{where}: score {ex.label!r} is not finite")
            if (low is not None and score < low) or (high is not None and score > high):
                bounds = f"{'-inf' if low is None else f'{low:g}'}-{'inf' if high is None else f'{high:g}'}"
                raise SentenceDataError(f"{where}: score {score:g} is outside {bounds}")
            ex.label = score
        else:
            raise ValueError(f"unknown kind {kind!r} (one of {', '.join(KINDS)})")

"""Readers of the sentence-level task files users have (no fairseq import): BLUE-style TSV with or
without a header, JSON lines (BLURB's seqcls files, MedNLI), and PubMedQA's ``ori_pqal.json`` with a
split file. Each gives ``Example`` rows that remember their line, so that every check below fails in
one line naming file and line.

**Entities of a relation (entity markers).** A relation-extraction row may carry its two entities as
character offsets into its text, in JSON lines as
``"entities": [{"start": 10, "end": 16, "type": "GENE"}, {"start": 40,
"end": 49, "type": "DISEASE"}]`` (``end`` exclusive, ``type`` optional; the first entity is E1, the
second E2). Dummified rows without offsets (BLUE/BLURB's ``@GENE$``, ``@DRUG$``) get them from their
placeholders (``placeholder_entities``: the placeholder spans in text order; one combined
placeholder such as ``@DRUG-DRUG$`` is both entities). ``marked_words`` then wraps E1 in
``[E1] ... [/E1]`` and E2 in ``[E2] ... [/E2]`` (Baldini Soares et al. 2019's markers, which
PubMedBERT's Table 12 pools from), as words of their own; ``entity_words`` also gives each entity's
mention as a span of those words (Table 12's MENTION pools the mention's states).
"""

import csv
import json
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from ..files import atomic_write

from ..errors import BioError, json_error

KINDS = ("classification", "multilabel", "regression")
FORMATS = ("auto", "tsv", "jsonl", "pubmedqa")


class SentenceDataError(BioError, ValueError):
    """Bad task data; the message is one line naming the file and line."""


@dataclass
class Example:
    """One input: a text or a text pair, its label as read (None when unlabelled), and where it came
    from."""

    texts: Tuple[str, ...]
    label: Any
    line: int
    id: Optional[str] = None
    entities: Any = (
        None  # as read (JSON), then the relation's two ``Entity`` after ``attach_entities``
    )
    source: Optional[str] = (
        None  # the file it was read from, for errors found after reading (windows)
    )


def file_format(path: str, fmt: str = "auto") -> str:
    """``fmt``, or for ``auto`` the format the file's extension names (.tsv/.txt: tsv, .json/.jsonl:
    jsonl)."""
    if fmt != "auto":
        if fmt not in FORMATS:
            raise SentenceDataError(f"{path}: unknown format {fmt!r} (one of {', '.join(FORMATS)})")
        return fmt
    ext = os.path.splitext(path)[1].lower()
    if ext in (".tsv", ".txt"):
        return "tsv"
    if ext in (".json", ".jsonl"):
        return "jsonl"
    raise SentenceDataError(
        f"{path}: cannot tell the format from the extension {ext!r}; set task.format=tsv|jsonl"
    )


def read_tsv(
    path: str,
    text_fields: Sequence[str],
    label_field: Optional[str],
    id_field: Optional[str] = None,
) -> List[Example]:
    """Rows of a tab-separated file (CSV quoting, as pandas reads BLUE's files). A first row naming
    the label or a text column is a header and columns are found by name (BLUE's
    ``index sentence label``, BIOSSES; the row id from ``id_field`` when the header has it);
    otherwise the label is the last column and the texts the columns before it (BLUE's
    ``sentence<TAB>label``)."""
    with open(path, encoding="utf-8-sig", newline="") as f:
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
        id_column = header.index(id_field) if id_field and id_field in header else None
        for line, row in rows[1:]:
            if len(row) != len(header):
                raise SentenceDataError(
                    f"{path}:{line}: {len(row)} fields, the header has {len(header)}"
                )
            values = [row[c] for c in columns]
            row_id = row[id_column].strip() if id_column is not None else None
            examples.append(_example(values, text_fields, label_field, line, row_id))
        if not examples:
            raise SentenceDataError(f"{path}: a header and no rows")
        return examples
    for line, row in rows:
        if len(row) < len(names):
            raise SentenceDataError(
                f"{path}:{line}: {len(row)} field(s), expected {' <TAB> '.join(names)} (no header: the label is the "
                "last column, the texts the ones before it)"
            )
        # Without a header the label is the last column, also when it is not wanted (a labelled file
        # predicted).
        end = len(row) if label_field or len(row) == len(names) else len(row) - 1
        examples.append(_example(row[end - len(names) : end], text_fields, label_field, line))
    return examples


def _example(values: Sequence[str], text_fields, label_field, line: int, row_id=None) -> Example:
    texts = tuple(values[: len(text_fields)])
    label = values[len(text_fields)] if label_field else None
    return Example(texts, label.strip() if isinstance(label, str) else label, line, row_id)


def read_jsonl(
    path: str,
    text_fields: Sequence[str],
    label_field: Optional[str],
    id_field: Optional[str] = None,
    entities_field: Optional[str] = None,
) -> List[Example]:
    """Objects of a JSON-lines file (BLURB's ``{"id", "sentence", "label"}``, MedNLI's
    ``sentence1/2, gold_label``); ``entities_field``: the row's entity offsets as read, when it has
    them (checked by ``attach_entities``).
    """
    examples = []
    with open(path, encoding="utf-8-sig") as f:
        for line, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as e:
                raise SentenceDataError(_whole_json(path) or json_error(path, e, line)) from None
            if not isinstance(obj, dict):
                raise SentenceDataError(
                    (line == 1 and _whole_json(path))
                    or f"{path}:{line}: expected a JSON object, got {type(obj).__name__}"
                )
            values = []
            for name in [*text_fields, *([label_field] if label_field else [])]:
                if name not in obj:
                    raise SentenceDataError(
                        f"{path}:{line}: no field {name!r} (fields: {', '.join(obj)})"
                    )
                values.append(obj[name])
            for name, text in zip(text_fields, values):
                if not isinstance(text, str):
                    raise SentenceDataError(f"{path}:{line}: field {name!r} is not a string")
            row_id = obj.get(id_field) if id_field else None
            example = _example(
                values, text_fields, label_field, line, None if row_id is None else str(row_id)
            )
            if entities_field:
                example.entities = obj.get(entities_field)
            examples.append(example)
    if not examples:
        raise SentenceDataError(f"{path}: no rows")
    return examples


def _whole_json(path: str) -> Optional[str]:
    """What a file that is one JSON value, not JSON lines, holds, for the error (None when it is not
    valid JSON)."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            value = json.load(f)
    except (ValueError, OSError):
        return None
    kinds = {
        dict: "object",
        str: "string",
        bool: "boolean",
        int: "number",
        float: "number",
        type(None): "null",
    }
    what = (
        f"an array of {len(value)} items"
        if isinstance(value, list)
        else f"one JSON {kinds[type(value)]}"
    )
    return (
        f"{path}: valid JSON, but {what}, where JSON lines are expected (one object per line; "
        f"jq -c '.[]' {path} writes an array so)"
    )


def _key_lines(text: str) -> Dict[str, int]:
    """Line of each ``"key": {`` in a JSON text (PubMedQA's top-level PMIDs; its entries hold no
    objects)."""
    lines, line, offset = {}, 1, 0
    for m in re.finditer(r'"([^"\\]+)"\s*:\s*\{', text):
        line += text.count("\n", offset, m.start())
        offset = m.start()
        lines.setdefault(m.group(1), line)
    return lines


def _load_json(path: str) -> Tuple[Any, str]:
    with open(path, encoding="utf-8-sig") as f:
        text = f.read()
    try:
        return json.loads(text), text
    except json.JSONDecodeError as e:
        raise SentenceDataError(json_error(path, e)) from None


def read_pubmedqa(
    path: str, split_path: str, split: str, label_field: Optional[str] = "final_decision"
) -> List[Example]:
    """PubMedQA's PQA-L (``ori_pqal.json``: PMID -> QUESTION, CONTEXTS, final_decision) for the
    PMIDs that ``split_path`` (BLURB's ``blurb_split.json``) lists under ``split``: question ‖ the
    contexts joined by spaces.
    """
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
            raise SentenceDataError(
                f"{split_path}:{line}: PMID {pmid} of split {split!r} is not in {path}"
            )
        entry, line = data[pmid], lines.get(pmid, 1)
        if not isinstance(entry, dict):
            raise SentenceDataError(f"{path}:{line}: entry {pmid} is not an object")
        contexts = entry.get("CONTEXTS")
        if not isinstance(contexts, list) or not any(
            isinstance(c, str) and c.strip() for c in contexts
        ):
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
    label_names: Optional[Sequence[str]] = None,
    strict_placeholders: bool = True,
) -> None:
    """Normalise labels in place (classification: str; multilabel: tuple of 0/1; regression: float)
    and refuse empty texts, labels outside ``labels``, rows of another ``width``, scores outside
    ``score_range``, and (relation extraction) a row without its relation's ``entity_markers``
    (placeholders): both entities, once each (``relation_placeholders``), or with
    ``strict_placeholders=False`` at least one. A multi-label label given as text (BLUE's HoC TSVs)
    is read with ``parse_label_set`` against ``label_names``."""
    known = None if labels is None else set(labels)
    low, high = score_range
    for ex in examples:
        where = f"{path}:{ex.line}"
        for name, text in zip(text_fields, ex.texts):
            if not text.strip():
                raise SentenceDataError(f"{where}: empty text in field {name!r}")
        if entity_markers and not strict_placeholders:
            if not any(m in text for text in ex.texts for m in entity_markers):
                raise SentenceDataError(
                    f"{where}: no entity marker ({', '.join(entity_markers)}) in the text"
                )
        elif entity_markers:
            try:
                placeholder_entities(ex.texts[0], entity_markers)
            except ValueError as e:
                raise SentenceDataError(f"{where}: {e}") from None
        if ex.label is None:
            continue
        if kind == "classification":
            if isinstance(ex.label, bool) or not isinstance(ex.label, (str, int)):
                raise SentenceDataError(f"{where}: label {ex.label!r} is not a class name")
            ex.label = str(ex.label).strip()
            if not ex.label:
                raise SentenceDataError(f"{where}: empty label")
            if known is not None and ex.label not in known:
                raise SentenceDataError(
                    f"{where}: label {ex.label!r} is not one of {', '.join(labels)}"
                )
        elif kind == "multilabel":
            if isinstance(ex.label, str):
                ex.label = parse_label_set(ex.label, label_names, where)
            if not isinstance(ex.label, list) or any(
                v not in (0, 1) or isinstance(v, float) for v in ex.label
            ):
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


def parse_label_set(value: str, names: Optional[Sequence[str]], where: str) -> List[int]:
    """0/1 per label of a multi-label label written as text: BLUE's released HoC form
    ``"0_0,1_1,...,9_0"`` (``<position>_<0|1>`` per label), or the label names present separated by
    commas (``create_hoc.py``'s form); empty: none. ``names`` (``task.labels``, in model order) give
    the width and the names."""
    if not names:
        raise SentenceDataError(
            f"{where}: label {value!r} is text; give the label names in order (task.labels)"
        )
    row = [0] * len(names)
    index = {name: i for i, name in enumerate(names)}
    for item in (v.strip() for v in value.split(",")):
        if not item:
            continue
        position, _, flag = item.rpartition("_")
        if position.isdigit() and flag in ("0", "1"):
            if int(position) >= len(names):
                raise SentenceDataError(
                    f"{where}: label {item!r} names position {position} of {len(names)} labels"
                )
            row[int(position)] |= int(flag)
        elif item in index:
            row[index[item]] = 1
        else:
            raise SentenceDataError(
                f"{where}: label {item!r} is neither <position>_<0|1> nor one of task.labels"
            )
    return row


# ---------------------------------------------------------------------------------------------------------------
# Entities of a relation and the markers around them

ENTITY_MARKERS = (
    "[E1]",
    "[/E1]",
    "[E2]",
    "[/E2]",
)  # the words inserted; the task adds them to its dictionary
START_MARKERS = ("[E1]", "[E2]")
Span = Tuple[int, int]  # [start, end) words of a text


@dataclass(frozen=True)
class Entity:
    """One entity of a relation: characters ``[start, end)`` of the text, and its type (may be
    empty)."""

    start: int
    end: int
    type: str = ""


def _split_placeholders(placeholders: Sequence[str]) -> Tuple[List[str], List[str]]:
    """(single, combined): placeholders of one entity, and those naming both (a '-' in the name, as
    ``@DRUG-DRUG$`` / ``@CHEM-GENE$``: both entities are one mention)."""
    combined = [p for p in placeholders if "-" in p.strip("@$")]
    return [p for p in placeholders if p not in combined], combined


def relation_placeholders(placeholders: Sequence[str]) -> str:
    """What a row of a relation with these ``placeholders`` must hold, in words: one placeholder per
    entity (two different ones once each, or the only one twice), or one combined placeholder
    alone."""
    single, combined = _split_placeholders(placeholders)
    if len(single) == 1:
        need = f"{single[0]} twice"
    elif len(single) == 2:
        need = f"{single[0]} and {single[1]} once each"
    else:
        need = f"two different ones of {', '.join(single)}" if single else ""
    alone = " or ".join(combined)
    return " or ".join(part for part in (need, f"{alone} alone" if alone else "") if part)


def placeholder_entities(
    text: str, placeholders: Sequence[str], strict: bool = True
) -> List[Entity]:
    """The relation's (E1, E2) in a dummified text: the spans of its ``placeholders`` in text order
    (BLUE/BLURB's ``@GENE$ ... @DISEASE$``); one combined placeholder (``@DRUG-DRUG$``: both
    entities are one mention) is both. ``strict``: the placeholders must be those of one relation
    (``relation_placeholders``), else ValueError; not strict: any one or two placeholders."""
    if not placeholders:
        raise ValueError(
            "no entity offsets and no placeholders to find them by (task.entity_markers)"
        )
    pattern = "|".join(re.escape(p) for p in sorted(placeholders, key=len, reverse=True))
    matches = list(re.finditer(pattern, text))
    found = [Entity(m.start(), m.end(), m.group(0).strip("@$")) for m in matches]
    names = [m.group(0) for m in matches]
    if strict:
        single, combined = _split_placeholders(placeholders)
        pair = (
            len(names) == 2
            and not set(combined) & set(names)
            and (len(single) == 1 or names[0] != names[1])
        )
        if not (pair or (len(names) == 1 and names[0] in combined)):
            counts = (
                ", ".join(f"{p} x{names.count(p)}" for p in placeholders if p in names) or "none"
            )
            raise ValueError(
                f"entity placeholders {counts}; a relation's row holds {relation_placeholders(placeholders)} "
                "(task.entity_placeholders=any accepts other counts)"
            )
    if len(found) == 1:
        return found * 2
    if len(found) != 2:
        raise ValueError(
            f"{len(found)} entity placeholders ({', '.join(placeholders)}) in the text; entity markers need the "
            "relation's two"
        )
    return found


def parse_entities(raw: Any, text: str) -> List[Entity]:
    """The two ``Entity`` of a row's ``entities`` field (``[{"start", "end", "type"}, ...]``),
    checked against ``text``: offsets inside it, non-empty, E1 and E2 disjoint or the same
    mention."""
    if not isinstance(raw, list) or len(raw) != 2:
        n = f"{len(raw)} entities" if isinstance(raw, list) else f"a {type(raw).__name__}"
        raise ValueError(f"entities: {n}; entity markers need a list of the relation's two")
    entities = []
    for k, item in enumerate(raw, 1):
        if not isinstance(item, dict) or "start" not in item or "end" not in item:
            raise ValueError(f"entity {k}: expected an object with start and end, got {item!r}")
        start, end, kind = item["start"], item["end"], item.get("type", "")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)):
            raise ValueError(f"entity {k}: start {start!r} and end {end!r} must be integers")
        if not 0 <= start < end <= len(text):
            raise ValueError(
                f"entity {k}: offsets {start}-{end} lie outside the text (0-{len(text)}) or are empty"
            )
        if not text[start:end].strip():
            raise ValueError(f"entity {k}: offsets {start}-{end} cover only whitespace")
        entities.append(Entity(start, end, str(kind or "")))
    first, second = entities
    same = (first.start, first.end) == (second.start, second.end)
    if not same and first.start < second.end and second.start < first.end:
        raise ValueError(
            f"entities overlap: {first.start}-{first.end} and {second.start}-{second.end} (they must be disjoint, "
            "or one mention that is both)"
        )
    return entities


def attach_entities(
    examples: Iterable[Example],
    path: str,
    placeholders: Sequence[str],
    strict_placeholders: bool = True,
    markers: bool = True,
) -> None:
    """Set each example's ``entities`` to its relation's (E1, E2): from its offsets when it has
    them, else from its ``placeholders`` (``placeholder_entities``); anything else is a one-line
    error naming file and line, as is (when ``markers`` are to be inserted) a text that has a marker
    word already."""
    for ex in examples:
        text = ex.texts[0]
        try:
            if ex.entities is not None:
                ex.entities = parse_entities(ex.entities, text)
            else:
                ex.entities = placeholder_entities(text, placeholders, strict_placeholders)
        except ValueError as e:
            raise SentenceDataError(f"{path}:{ex.line}: {e}") from None
        taken = set(ENTITY_MARKERS) & set(text.split()) if markers else set()
        if taken:
            raise SentenceDataError(
                f"{path}:{ex.line}: the text has the word {sorted(taken)[0]!r}, an entity marker"
            )


def marked_words(text: str, entities: Sequence[Entity]) -> List[str]:
    """The words of ``text`` (split at whitespace) with ``[E1]``/``[/E1]`` around E1 and
    ``[E2]``/``[/E2]`` around E2 as words of their own (a word an offset cuts becomes two); one
    mention that is both: ``[E1] [E2] x [/E2] [/E1]``."""
    return entity_words(text, entities)[0]


def entity_words(
    text: str, entities: Sequence[Entity], markers: bool = True
) -> Tuple[List[str], List[Span]]:
    """(words, mentions): the words of ``text`` cut at the entities' offsets (a word an offset cuts
    becomes two), with the entity markers as words of their own when ``markers`` (``marked_words``);
    ``mentions``: per entity, its words ``[start, end)`` in that list, the markers left out (one
    mention that is both: the same span twice).
    """
    cuts: Dict[int, List[Tuple[int, int, str]]] = {}
    for k, entity in enumerate(entities[:2]):
        start, end = ENTITY_MARKERS[2 * k], ENTITY_MARKERS[2 * k + 1]
        # at one offset: ends before starts, E1's start before E2's, E2's end before E1's (nesting)
        cuts.setdefault(entity.start, []).append((1 + k, k, start))
        cuts.setdefault(entity.end, []).append((-1 - k, k, end))
    words: List[str] = []
    spans = [[0, 0] for _ in entities[:2]]
    last = 0
    for offset in sorted(cuts):
        words.extend(text[last:offset].split())
        for order, k, _ in cuts[offset]:
            if order < 0:  # a mention ends before any marker at its end offset
                spans[k][1] = len(words)
        if markers:
            words.extend(marker for _, _, marker in sorted(cuts[offset]))
        for order, k, _ in cuts[offset]:
            if order > 0:  # and starts after every marker at its start offset
                spans[k][0] = len(words)
        last = offset
    words.extend(text[last:].split())
    return words, [(start, end) for start, end in spans]


def entity_rows(examples: Sequence[Example], label_field: str = "label") -> List[Dict[str, Any]]:
    """JSON-lines objects ``{"id", "sentence", "label", "entities"}`` of examples with attached
    entities (the offset form of a dummified file: ``attach_entities`` with its placeholders, then
    this)."""
    rows = []
    for i, ex in enumerate(examples):
        if not ex.entities or not isinstance(ex.entities[0], Entity):
            raise ValueError(f"example {i} (line {ex.line}) has no attached entities")
        row: Dict[str, Any] = {
            "id": ex.id if ex.id is not None else str(ex.line),
            "sentence": ex.texts[0],
        }
        if ex.label is not None:
            row[label_field] = ex.label
        row["entities"] = [{"start": e.start, "end": e.end, "type": e.type} for e in ex.entities]
        rows.append(row)
    return rows


def write_jsonl(rows: Sequence[Dict[str, Any]], dest: str) -> None:
    """JSON lines written to a temp file beside ``dest`` and renamed onto it when complete."""
    os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
    with atomic_write(dest) as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")

"""``fairseq-bio-convert-tagging pubtator``: offset annotations, PubTator (``PMID|t|title``,
``PMID|a|abstract``, then mention lines) or BioC JSON, to word tags the way BLURB's BC5CDR and
NCBI-disease files look: BLURB's words, ``B-<type>`` on the first word a mention overlaps and
``I-<type>`` on the others, one sentence per block.

``--types`` keeps some types (BC5CDR-chem and -disease: the CDR files with ``--types Chemical`` /
``Disease``); ``--rename OLD=NEW`` merges types first (NCBI-disease's four classes into
``Disease``). ``tag_document`` says what is kept whole or dropped, and counted. ``tag_document``
and ``convert_documents`` (splits, outputs) serve the other offset converters too: ``standoff`` and
``i2b2``.
"""

import dataclasses
import json
import random
import re
from bisect import bisect_left, bisect_right
from collections import Counter
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from fairseq_bio.data.conll import words_with_offsets
from fairseq_bio.data.sentence_splitter import DEFAULT_TRAINING_TEXTS, SentenceSplitter
from fairseq_bio.errors import json_error

from .common import PreprocessError
from .tagging_outputs import (
    MAX_EXAMPLES,
    SPLITS,
    Tagged,
    check_outputs,
    decode,
    id_key,
    read_bytes,
    read_id_list,
    write_outputs,
)


# ---------------------------------------------------------------------------------------------------
# PubTator / BioC JSON


@dataclasses.dataclass
class Mention:
    """A mention: character offsets into its document's text, the text there, its type, and where it
    was read."""

    start: int
    end: int
    text: str
    type: str
    where: str


@dataclasses.dataclass
class Document:
    """A document: its id, full text, the spans of text split into sentences on their own, and its
    mentions."""

    pmid: str
    text: str
    segments: List[Tuple[int, int]]
    mentions: List[Mention]
    where: str


@dataclasses.dataclass
class PubtatorStats:
    """Summary of one PubTator/BioC conversion (also written to ``convert_stats.json``)."""

    documents: Dict[str, int] = dataclasses.field(default_factory=dict)  # per split
    sentences: Dict[str, int] = dataclasses.field(default_factory=dict)
    words: Dict[str, int] = dataclasses.field(default_factory=dict)
    mentions: Dict[str, Dict[str, int]] = dataclasses.field(
        default_factory=dict
    )  # split -> type -> kept mentions
    mentions_read: int = 0
    types_read: Dict[str, int] = dataclasses.field(
        default_factory=dict
    )  # mentions per type (after --rename)
    other_types: Dict[str, int] = dataclasses.field(default_factory=dict)  # dropped by --types
    boundary_inside_word: int = 0  # kept; the whole word is tagged
    overlapping_dropped: int = 0
    duplicates_dropped: int = 0
    discontinuous_dropped: int = 0  # BioC annotations with several locations
    sentence_joins: int = 0  # sentence boundaries removed because a mention crossed them
    relations_skipped: int = 0
    unassigned_documents: int = 0  # in the inputs but in none of the --<split>-pmids lists
    held_out: Dict[str, str] = dataclasses.field(
        default_factory=dict
    )  # split -> how it was held out of train
    examples: List[str] = dataclasses.field(default_factory=list)


_TEXT_LINE = re.compile(r"^([^|\t]+)\|([ta])\|(.*)$")
_INT = re.compile(r"^-?\d+$")


def read_pubtator(path, stats: Optional[PubtatorStats] = None) -> List[Document]:
    """Documents of a PubTator file; every mention checked against the text (one-line errors with
    file:line)."""
    path = Path(path)
    text = decode(read_bytes(path), str(path), "utf-8")
    documents: List[Document] = []
    current: Optional[dict] = None

    def close():
        if current is not None:
            documents.append(_pubtator_document(current))

    for number, line in enumerate(text.split("\n"), start=1):
        line = line.rstrip("\r")
        if not line.strip():
            close()
            current = None
            continue
        m = _TEXT_LINE.match(line)
        if m:
            pmid, kind, body = m.groups()
            if kind == "t":
                close()  # a title line always starts a new document, blank line or not
                current = dict(
                    pmid=pmid, title=body, abstract=None, mentions=[], where=f"{path}:{number}"
                )
            elif current is None or current["pmid"] != pmid:
                raise PreprocessError(
                    f"{path}:{number}: abstract of PMID {pmid} without its title line before it"
                )
            elif current["abstract"] is not None or current["mentions"]:
                raise PreprocessError(
                    f"{path}:{number}: a second abstract line, or one after the annotations"
                )
            else:
                current["abstract"] = body
            continue
        columns = line.split("\t")
        if len(columns) < 3:
            raise PreprocessError(
                f"{path}:{number}: not a title (PMID|t|), abstract (PMID|a|), mention or relation line"
            )
        if current is None:
            raise PreprocessError(
                f"{path}:{number}: an annotation line before any title line (PMID|t|title)"
            )
        if columns[0] != current["pmid"]:
            raise PreprocessError(
                f"{path}:{number}: annotation for PMID {columns[0]} inside document {current['pmid']}"
            )
        if len(columns) >= 3 and _INT.match(columns[1]) and _INT.match(columns[2]):
            if len(columns) < 5:
                raise PreprocessError(
                    f"{path}:{number}: {len(columns)} columns; a mention is PMID, start, end, text, type[, id]"
                )
            start, end = int(columns[1]), int(columns[2])
            current["mentions"].append(
                Mention(start, end, columns[3], columns[4].strip(), f"{path}:{number}")
            )
        elif stats is not None:
            stats.relations_skipped += 1
    close()
    if not documents:
        raise PreprocessError(
            f"{path}: no documents (expected PubTator: PMID|t|title, PMID|a|abstract, mentions)"
        )
    return documents


def _pubtator_document(raw: dict) -> Document:
    title, abstract = raw["title"], raw["abstract"]
    # PubTator offsets run over title + one space + abstract.
    text = title if abstract is None else f"{title} {abstract}"
    segments = [(0, len(title))]
    if abstract:
        segments.append((len(title) + 1, len(text)))
    document = Document(raw["pmid"], text, segments, raw["mentions"], raw["where"])
    for mention in document.mentions:
        check_mention(document, mention)
    return document


def check_mention(document: Document, mention: Mention) -> None:
    """The mention lies inside its document, has a type, and its text is the document's text at its
    offsets."""
    if not 0 <= mention.start < mention.end <= len(document.text):
        raise PreprocessError(
            f"{mention.where}: offsets {mention.start}-{mention.end} are outside the text of document "
            f"{document.pmid} (0-{len(document.text)})"
        )
    found = document.text[mention.start : mention.end]
    if found != mention.text:
        raise PreprocessError(
            f"{mention.where}: mention {mention.text!r} does not match the text of document {document.pmid} at "
            f"{mention.start}-{mention.end} ({found!r})"
        )
    if not mention.type:
        raise PreprocessError(f"{mention.where}: mention {mention.text!r} has an empty type")


def read_bioc_json(path, stats: Optional[PubtatorStats] = None) -> List[Document]:
    """Documents of a BioC JSON file (collection, list of documents, PubTator3 export, or one
    document per line)."""
    path = Path(path)
    text = decode(read_bytes(path), str(path), "utf-8")
    try:
        items = [(json.loads(text), None)]
    except json.JSONDecodeError as e:
        if e.msg != "Extra data":
            raise PreprocessError(json_error(path, e)) from None
        items = []
        for number, line in enumerate(text.split("\n"), start=1):
            if line.strip():
                try:
                    items.append((json.loads(line), number))
                except json.JSONDecodeError as e:
                    raise PreprocessError(json_error(path, e, number)) from None
    documents = []
    for obj, line in items:
        for i, raw in enumerate(_bioc_documents(obj, path, line)):
            documents.append(_bioc_document(raw, path, line, i, stats))
    if not documents:
        raise PreprocessError(f"{path}: no BioC documents")
    return documents


def _bioc_documents(obj, path: Path, line: Optional[int]) -> list:
    if isinstance(obj, list):
        return [d for item in obj for d in _bioc_documents(item, path, line)]
    if isinstance(obj, dict):
        if "documents" in obj:
            return _bioc_documents(obj["documents"], path, line)
        if "PubTator3" in obj:
            return _bioc_documents(obj["PubTator3"], path, line)
        if "passages" in obj:
            return [obj]
    where = f"{path}:{line}" if line else str(path)
    raise PreprocessError(
        f"{where}: not BioC JSON (expected a collection, documents or a document with passages)"
    )


def _bioc_document(raw: dict, path: Path, line: Optional[int], index: int, stats) -> Document:
    pmid = str(raw.get("id", "")).strip()
    where = f"{path}:{line}" if line else str(path)
    where = f"{where}: document {pmid or f'#{index + 1}'}"
    if not pmid:
        raise PreprocessError(f"{where}: no id")
    text, segments, mentions = "", [], []
    for p, passage in enumerate(raw.get("passages") or []):
        offset = passage.get("offset", 0)
        body = passage.get("text")
        if body is None:
            if passage.get("sentences"):
                raise PreprocessError(
                    f"{where}, passage {p + 1}: sentence-level BioC is not supported (no text)"
                )
            body = ""
        if not isinstance(offset, int) or not isinstance(body, str):
            raise PreprocessError(
                f"{where}, passage {p + 1}: offset must be a number and text a string"
            )
        if offset < len(text):
            raise PreprocessError(
                f"{where}, passage {p + 1}: offset {offset} overlaps the passage before"
            )
        text += " " * (offset - len(text)) + body
        if body:
            segments.append((offset, offset + len(body)))
        for a, annotation in enumerate(passage.get("annotations") or []):
            ann_where = f"{where}, annotation {annotation.get('id', a + 1)}"
            infons = annotation.get("infons") or {}
            type_ = infons.get("type") or infons.get("Type") or ""
            locations = annotation.get("locations") or []
            if len(locations) != 1:
                if not locations:
                    raise PreprocessError(f"{ann_where}: no locations")
                if stats is not None:
                    stats.discontinuous_dropped += 1
                continue
            start, length = locations[0].get("offset"), locations[0].get("length")
            if not isinstance(start, int) or not isinstance(length, int):
                raise PreprocessError(f"{ann_where}: location offset and length must be numbers")
            mentions.append(
                Mention(
                    start, start + length, str(annotation.get("text", "")), str(type_), ann_where
                )
            )
    document = Document(pmid, text, segments, mentions, where)
    for mention in mentions:
        check_mention(document, mention)
    return document


def read_documents(path, stats: Optional[PubtatorStats] = None) -> List[Document]:
    """Documents of a PubTator or BioC JSON file (told apart by the first character)."""
    path = Path(path)
    head = read_bytes(path)[:4096].lstrip()
    if head[:1] in (b"{", b"["):
        return read_bioc_json(path, stats)
    return read_pubtator(path, stats)


def _sentence_spans(
    splitter: Optional[SentenceSplitter], text: str, start: int, end: int
) -> List[Tuple[int, int]]:
    """Character spans of the sentences of ``text[start:end]``, from the splitter's
    whitespace-collapsed output; without a splitter the segment is one sentence (none if it is
    blank)."""
    segment = text[start:end]
    if splitter is None:
        stripped = segment.strip()
        if not stripped:
            return []
        first = start + segment.index(stripped[0])
        return [(first, first + len(stripped))]
    # The splitter drops only whitespace, so the k-th non-space character of its output is the k-th
    # of the input.
    visible = [i for i, c in enumerate(segment) if not c.isspace()]
    spans, k = [], 0
    for sentence in splitter.split(segment):
        n = len(sentence) - sentence.count(" ")
        spans.append((start + visible[k], start + visible[k + n - 1] + 1))
        k += n
    if k != len(visible):
        raise PreprocessError(
            f"sentence splitter lost characters of {segment[:60]!r}"
        )  # a bug, not bad input
    return spans


def note(stats: PubtatorStats, message: str) -> None:
    """Keep ``message`` as an example of a counted oddity (the first ``MAX_EXAMPLES``)."""
    if len(stats.examples) < MAX_EXAMPLES:
        stats.examples.append(message)


def tag_document(
    document: Document,
    splitter: Optional[SentenceSplitter],
    stats: PubtatorStats,
    types: Optional[Set[str]] = None,
    rename: Optional[Dict[str, str]] = None,
) -> Tuple[List[Tagged], Counter]:
    """BIO-tagged sentences of one document, and its kept mentions per type; ``splitter`` None:
    each segment is one sentence.

    Words are cut by ``words_with_offsets`` (``Parkinson ' s``); title and abstract (BioC: each
    passage) are split on their own by the Punkt splitter trained on the input, as
    ``fairseq-bio-extract`` does, offsets mapped back exactly. Kept whole, and counted: a mention
    boundary inside a word tags the whole word; a sentence boundary inside a mention joins the two
    sentences. Dropped, and counted: a mention overlapping a word already tagged by an earlier (at
    the same start: longer) mention, the same mention twice, discontinuous BioC annotations."""
    rename = rename or {}
    words = words_with_offsets(document.text)
    starts = [w[1] for w in words]
    ends = [w[2] for w in words]
    sentences = [
        span
        for a, b in document.segments
        for span in _sentence_spans(splitter, document.text, a, b)
    ]
    sentence_starts = [a for a, _ in sentences]
    sentence_of = [bisect_right(sentence_starts, s) - 1 for s in starts]

    tags = ["O"] * len(words)
    kept: Counter = Counter()
    seen = set()
    joined = [False] * len(sentences)  # joined[i]: sentence i continues into sentence i + 1
    # Earlier mentions first, the longer one first at the same start: that is the one kept on
    # overlap.
    for mention in sorted(document.mentions, key=lambda m: (m.start, -m.end, m.type)):
        stats.mentions_read += 1
        type_ = rename.get(mention.type, mention.type)
        stats.types_read[type_] = stats.types_read.get(type_, 0) + 1
        if types is not None and type_ not in types:
            stats.other_types[type_] = stats.other_types.get(type_, 0) + 1
            continue
        key = (mention.start, mention.end, type_)
        if key in seen:
            stats.duplicates_dropped += 1
            continue
        seen.add(key)
        first = bisect_right(ends, mention.start)  # the first word ending after the mention starts
        last = bisect_left(starts, mention.end) - 1  # the last word starting before it ends
        if first > last:
            raise PreprocessError(f"{mention.where}: mention {mention.text!r} covers no word")
        if any(tags[i] != "O" for i in range(first, last + 1)):
            stats.overlapping_dropped += 1
            note(stats, f"{mention.where}: overlaps an earlier mention; dropped: {mention.text!r}")
            continue
        if starts[first] < mention.start or ends[last] > mention.end:
            stats.boundary_inside_word += 1
            whole = document.text[starts[first] : ends[last]]
            note(
                stats,
                f"{mention.where}: boundary inside a word; tagged {whole!r} for {mention.text!r}",
            )
        tags[first] = f"B-{type_}"
        for i in range(first + 1, last + 1):
            tags[i] = f"I-{type_}"
        kept[type_] += 1
        for s in range(sentence_of[first], sentence_of[last]):
            if not joined[s]:
                joined[s] = True
                stats.sentence_joins += 1
                note(
                    stats,
                    f"{mention.where}: sentence boundary inside {mention.text!r}; sentences joined",
                )

    out: List[Tagged] = []
    current: Tagged = ([], [])
    for i, (word, _, _) in enumerate(words):
        current[0].append(word)
        current[1].append(tags[i])
        s = sentence_of[i]
        last_of_sentence = i + 1 == len(words) or sentence_of[i + 1] != s
        if last_of_sentence and not joined[s]:
            out.append(current)
            current = ([], [])
    if current[0]:
        out.append(current)
    return out, kept


def _parse_rename(pairs: Optional[Sequence[str]]) -> Dict[str, str]:
    rename = {}
    for pair in pairs or []:
        old, sep, new = pair.partition("=")
        if not sep or not old.strip() or not new.strip():
            raise PreprocessError(f"--rename {pair!r}: expected OLD=NEW")
        rename[old.strip()] = new.strip()
    return rename


def _parse_types(types: Optional[Sequence[str]]) -> Optional[Set[str]]:
    if not types:
        return None
    return {t.strip() for item in types for t in item.split(",") if t.strip()}


def _hold_out(ordered, source: str, target: str, fraction: float, seed: int, group, stats) -> list:
    """``ordered`` with ``int(fraction * n)`` of the ``source`` split's documents moved to
    ``target``: a seeded shuffle of their sorted ids; ``group`` (name, id -> group id) moves whole
    groups (a patient's records).
    """
    option = f"--{'dev' if target == 'devel' else target}-fraction"
    if not 0.0 < fraction < 1.0:
        raise PreprocessError(f"{option} {fraction}: expected a number in (0, 1)")
    unit, group = group or ("documents", lambda pmid: pmid)
    groups = sorted({group(d.pmid) for d, split in ordered if split == source}, key=id_key)
    order = list(groups)
    random.Random(seed).shuffle(order)
    chosen = set(order[: int(len(order) * fraction)])
    if not chosen or len(chosen) == len(groups):
        raise PreprocessError(
            f"{option} {fraction}: {len(groups)} {source} {unit} cannot give both a {source} and a {target} split"
        )
    stats.held_out[target] = (
        f"int({fraction} * {len(groups)}) = {len(chosen)} {source} {unit}, seed {seed}"
    )
    return [
        (d, target if split == source and group(d.pmid) in chosen else split)
        for d, split in ordered
    ]


def convert_documents(
    out_dir,
    read: Callable[[Path], List[Document]],
    stats: PubtatorStats,
    *,
    split_files: Optional[Dict[str, Sequence]] = None,
    inputs: Optional[Sequence] = None,
    split_pmids: Optional[Dict[str, object]] = None,
    types: Optional[Sequence[str]] = None,
    rename: Optional[Sequence[str]] = None,
    one_type: Optional[str] = None,
    split_segments: bool = True,
    sentence_training_texts: int = DEFAULT_TRAINING_TEXTS,
    dev_fraction: Optional[float] = None,
    test_fraction: Optional[float] = None,
    seed: int = 1,
    group: Optional[Tuple[str, Callable[[str], str]]] = None,
    overwrite: bool = False,
) -> PubtatorStats:
    """Documents with offset mentions (``read(path)`` of each input) -> ``out_dir/<split>.tsv``.
    Splits: input files per split (``split_files``), id lists over ``inputs`` (``split_pmids``:
    split -> list file), or ``inputs`` alone as train; ``test_fraction`` then ``dev_fraction`` hold
    train documents out for a split not given (``group``: whole groups of them, see ``_hold_out``).
    ``split_segments``: Punkt splits each segment of a document into sentences; False: each segment
    is one sentence."""
    split_files = {s: list(f) for s, f in (split_files or {}).items() if f}
    split_pmids = {s: p for s, p in (split_pmids or {}).items() if p}
    fractions = {"test": test_fraction, "devel": dev_fraction}
    fractions = {s: f for s, f in fractions.items() if f is not None}
    if split_files and split_pmids:
        raise PreprocessError(
            "give the splits either as input files (--train/--devel/--test FILE...) or as PMID lists over the "
            "inputs (INPUT... --train-pmids/--devel-pmids/--test-pmids FILE), not both"
        )
    if split_files and inputs:
        raise PreprocessError(
            "positional inputs are used only without --train/--devel/--test; drop them"
        )
    if not split_files and not inputs:
        raise PreprocessError("no input: give INPUT... or --train/--devel/--test FILE...")
    if not split_files and not split_pmids and not fractions:
        raise PreprocessError(
            "give the splits either as input files (--train/--devel/--test FILE...), as PMID lists over the inputs "
            "(INPUT... --train-pmids/--devel-pmids/--test-pmids FILE), or held out of the inputs (INPUT... "
            "--dev-fraction/--test-fraction)"
        )
    for split in list(split_files) + list(split_pmids):
        if split not in SPLITS:
            raise PreprocessError(f"unknown split {split!r}: expected one of {', '.join(SPLITS)}")
    for split in fractions:
        if split in split_files or split in split_pmids:
            name = "dev" if split == "devel" else split
            raise PreprocessError(
                f"--{name}-fraction: the {split} split is already given; drop one of the two"
            )
    if one_type is not None and (rename or not one_type.strip()):
        raise PreprocessError("--one-type NAME: a non-empty name, and not together with --rename")
    rename_map = _parse_rename(rename)
    wanted_types = _parse_types(types)
    if sentence_training_texts < 1:
        raise PreprocessError("--sentence-training-texts must be >= 1")
    out_dir = Path(out_dir)
    given = set(split_files) | set(split_pmids) | set(fractions)
    if not split_files and not split_pmids:
        given.add("train")  # the inputs are train, the fractions held out of it
    splits = [s for s in SPLITS if s in given]
    check_outputs(out_dir, splits, overwrite)

    # Read and check everything first.
    read_docs: Dict[str, Tuple[Document, str]] = {}  # pmid -> (document, split or "")
    ordered: List[Tuple[Document, str]] = []
    for split, paths in split_files.items() if split_files else [("train", inputs)]:
        for path in paths:
            for document in read(Path(path)):
                if document.pmid in read_docs:
                    raise PreprocessError(
                        f"{document.where}: document {document.pmid} already read at "
                        f"{read_docs[document.pmid][0].where}"
                    )
                read_docs[document.pmid] = (document, split)
                ordered.append((document, split))
    if split_pmids:
        owner: Dict[str, Tuple[str, object]] = {}
        for split, list_path in split_pmids.items():
            for pmid, line in read_id_list(list_path):
                if pmid in owner:
                    raise PreprocessError(
                        f"{list_path}:{line}: PMID {pmid} is also in {owner[pmid][1]}"
                    )
                if pmid not in read_docs:
                    raise PreprocessError(
                        f"{list_path}:{line}: PMID {pmid} is in none of the input files"
                    )
                owner[pmid] = (split, list_path)
        ordered = [(d, owner[d.pmid][0]) for d, _ in ordered if d.pmid in owner]
        stats.unassigned_documents = len(read_docs) - len(ordered)
    for split, fraction in fractions.items():
        ordered = _hold_out(ordered, "train", split, fraction, seed, group, stats)
    if one_type is not None:
        rename_map = {m.type: one_type.strip() for d, _ in ordered for m in d.mentions}

    splitter = None  # without one, each segment (title, abstract, line, ...) is a sentence
    if split_segments:
        splitter = SentenceSplitter.train(
            (document.text[a:b] for document, _ in ordered for a, b in document.segments),
            sentence_training_texts,
        )
    outputs: Dict[str, List[Tuple[str, List[Tagged]]]] = {s: [] for s in splits}
    kept_by_split: Dict[str, Counter] = {s: Counter() for s in splits}
    for document, split in ordered:
        tagged, kept = tag_document(document, splitter, stats, wanted_types, rename_map)
        outputs[split].append((document.pmid, tagged))
        kept_by_split[split].update(kept)
    for type_ in sorted(wanted_types or ()):
        if type_ not in stats.types_read:
            seen = ", ".join(sorted(stats.types_read)) or "none"
            raise PreprocessError(
                f"--types {type_}: no mention has this type (types in the input: {seen})"
            )
    for split in splits:
        if not outputs[split]:
            raise PreprocessError(f"split {split}: no documents")
        stats.documents[split] = len(outputs[split])
        stats.sentences[split] = sum(len(s) for _, s in outputs[split])
        stats.words[split] = sum(len(w) for _, s in outputs[split] for w, _ in s)
        stats.mentions[split] = dict(sorted(kept_by_split[split].items()))
    write_outputs(out_dir, outputs, stats)
    return stats


def convert_pubtator(out_dir, **options) -> PubtatorStats:
    """PubTator/BioC JSON -> ``out_dir/<split>.tsv`` (``convert_documents``'s options)."""
    stats = PubtatorStats()
    return convert_documents(out_dir, lambda path: read_documents(path, stats), stats, **options)

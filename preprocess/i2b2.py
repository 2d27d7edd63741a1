"""``fairseq-bio-convert-tagging i2b2-2010 | i2b2-2012 | i2b2-2014``: the i2b2 / n2c2 clinical NER
releases (under a data use agreement; never shipped with this project) -> CoNLL, tagged, split and
written as the ``pubtator`` converter does (``pubtator.convert_documents``). bio-lm (Lewis et
al. 2020) evaluates on all three with the clinicalBERT preprocessing; what that does, this does too,
and where it differs it says so.

2010: ``.txt`` + ``.con`` concept files (``read_i2b2_2010``); 2012 (``EVENT`` tags) and 2014 (PHI
tags): XML with character offsets into the record (``read_tagged_xml``). A mention whose text is
not the record's is an error naming the file and line. Sentences: each line of the record;
``--dev-fraction`` holds out records (2014: whole patients, as clinicalBERT's split does). The
release layouts: docs/fine-tuning.md.
"""

import dataclasses
import html
import re
import xml.parsers.expat
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from .common import PreprocessError
from .pubtator import Document, Mention, PubtatorStats, check_mention, convert_documents, note
from .standoff import line_segments, parse_offsets, read_text


@dataclasses.dataclass
class I2b2Stats(PubtatorStats):
    """Summary of an i2b2 conversion (also written to ``convert_stats.json``)."""

    tags_skipped: Dict[str, int] = dataclasses.field(
        default_factory=dict
    )  # per tag name; "<name> without type"
    text_mismatches_kept: int = 0  # with --allow-text-mismatch


def _same_text(found: str, expected: str, lower: bool = False) -> bool:
    """Whether the record's text at the offsets is the annotation's: whitespace runs as one space,
    XML entities of the record (``&apos;``) as their characters, ``lower``: case ignored."""
    want = " ".join(expected.split())
    for candidate in (found, html.unescape(found)):
        got = " ".join(candidate.split())
        if got == want or (lower and got.lower() == want.lower()):
            return True
    return False


def _mention(
    document: Document,
    span: Tuple[int, int],
    expected: str,
    type_: str,
    where: str,
    allow: bool,
    stats,
    lower=False,
) -> Mention:
    """The mention at ``span`` of ``document``, its annotated text checked (or, with ``allow``,
    counted if not)."""
    start, end = span
    mention = Mention(start, end, document.text[start:end], type_, where)
    check_mention(document, mention)  # offsets inside the record, a type
    if not _same_text(mention.text, expected, lower):
        if not allow:
            raise PreprocessError(
                f"{where}: annotated text {expected!r} is not the record's text at {start}-{end} ({mention.text!r}); "
                "--allow-text-mismatch keeps the offsets"
            )
        stats.text_mismatches_kept += 1
        note(
            stats,
            f"{where}: kept offsets {start}-{end} ({mention.text!r}) for annotated text {expected!r}",
        )
    return mention


# ---------------------------------------------------------------------------------------------------
# 2010: line:token concepts over tokenised text

_CONCEPT = re.compile(r'^c="(.*)" (\d+):(\d+) (\d+):(\d+)\|\|t="([^"]*)"')


def _token_spans(text: str) -> List[List[Tuple[int, int]]]:
    """Per line of ``text``: the character span of each token, tokens being the pieces between
    single spaces."""
    lines, start = [], 0
    for line in text.split("\n"):
        body = line.rstrip("\r")
        spans, offset = [], start
        for token in body.split(" "):
            spans.append((offset, offset + len(token)))
            offset += len(token) + 1
        lines.append(spans)
        start += len(line) + 1
    return lines


def _record_text(con: Path, text_dirs: Sequence[Path]) -> Path:
    """The ``.txt`` of a ``.con``: in ``../txt/`` (the training layout), beside it, or in one of
    ``text_dirs``."""
    name = con.stem + ".txt"
    candidates = [con.parent.parent / "txt" / name, con.with_suffix(".txt")] + [
        d / name for d in text_dirs
    ]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    looked = ", ".join(str(c.parent) for c in candidates)
    raise PreprocessError(
        f"{con}: no record text {name} (looked in {looked}; --texts DIR adds a directory)"
    )


def read_i2b2_2010(
    path: Path, stats: I2b2Stats, text_dirs: Sequence[Path] = (), allow: bool = False
) -> List[Document]:
    """Documents of the ``.con`` files below ``path`` (or of one ``.con``), each with its record
    text.

    A ``.txt`` holds one sentence per line, tokens separated by single spaces; a ``.con`` line is
    ``c="text" L:T L:T||t="type"`` (types problem/test/treatment), lines counted from 1 and tokens
    from 0 by splitting at each space, so a line that starts with a space has an empty token 0
    (clinicalBERT corrects this by hand). The concept's text (lower case in the release) must be
    the record's at its tokens."""
    concept_files = sorted(path.rglob("*.con")) if path.is_dir() else [path]
    if not concept_files:
        raise PreprocessError(f"{path}: no .con files below it (i2b2 2010 concepts)")
    documents = []
    for con in concept_files:
        txt = _record_text(con, text_dirs)
        document = Document(con.stem, read_text(txt), [], [], str(txt))
        document.segments = line_segments(document.text)
        tokens = _token_spans(document.text)
        for number, line in enumerate(read_text(con).split("\n"), start=1):
            line = line.rstrip("\r")
            if not line.strip():
                continue
            where = f"{con}:{number}"
            m = _CONCEPT.match(line)
            if not m:
                raise PreprocessError(
                    f'{where}: not a concept line (c="text" LINE:TOKEN LINE:TOKEN||t="type")'
                )
            text, l1, t1, l2, t2, type_ = m.group(1), *map(int, m.group(2, 3, 4, 5)), m.group(6)
            for line_no, token in ((l1, t1), (l2, t2)):
                if not 1 <= line_no <= len(tokens) or token >= len(tokens[line_no - 1]):
                    raise PreprocessError(f"{where}: token {line_no}:{token} is not in {txt}")
            start, end = tokens[l1 - 1][t1][0], tokens[l2 - 1][t2][1]
            if end <= start:
                raise PreprocessError(
                    f"{where}: concept ends ({l2}:{t2}) before it starts ({l1}:{t1})"
                )
            document.mentions.append(
                _mention(document, (start, end), text, type_, where, allow, stats, lower=True)
            )
        documents.append(document)
    return documents


# ---------------------------------------------------------------------------------------------------
# 2012 and 2014: XML with the record as CDATA and offset tags

_TEXT = re.compile(r"<TEXT>\s*<!\[CDATA\[")
_TEXT_END = "]]></TEXT>"
# '&' that starts no entity: the 2012 release has some in attribute values, which no XML parser
# accepts.
_BARE_AMPERSAND = re.compile(r"&(?!(?:amp|lt|gt|quot|apos|#[0-9]+|#x[0-9a-fA-F]+);)")

Tag = Tuple[str, Dict[str, str], int]  # name, attributes, file line


def read_i2b2_xml(path: Path) -> Tuple[str, List[Tag]]:
    """(record text, the children of ``<TAGS>``) of one i2b2 XML file; offsets count the CDATA text
    as stored."""
    raw = read_text(path)
    m = _TEXT.search(raw)
    close = raw.find(_TEXT_END, m.end()) if m else -1
    if close < 0:
        raise PreprocessError(f"{path}: no <TEXT><![CDATA[...]]></TEXT>; not an i2b2 XML record")
    text = raw[m.end() : close]
    fixed = (
        _BARE_AMPERSAND.sub("&amp;", raw[: m.end()])
        + text
        + _BARE_AMPERSAND.sub("&amp;", raw[close:])
    )
    tags: List[Tag] = []
    stack: List[str] = []
    parser = xml.parsers.expat.ParserCreate()

    def start(name, attributes):
        if stack[-1:] == ["TAGS"]:
            tags.append((name, attributes, parser.CurrentLineNumber))
        stack.append(name)

    parser.StartElementHandler = start
    parser.EndElementHandler = lambda name: stack.pop()
    try:
        parser.Parse(fixed, True)
    except xml.parsers.expat.ExpatError as e:
        raise PreprocessError(
            f"{path}:{e.lineno}: XML {xml.parsers.expat.errors.messages[e.code]}"
        ) from None
    return text, tags


def _xml_files(path: Path) -> List[Path]:
    files = sorted(path.rglob("*.xml")) if path.is_dir() else [path]
    if not files:
        raise PreprocessError(f"{path}: no .xml files below it (i2b2 XML records)")
    return files


def read_tagged_xml(
    path: Path, stats: I2b2Stats, wanted: Optional[Sequence[str]], type_of, allow: bool = False
) -> List[Document]:
    """Documents of the XML records below ``path``: their ``wanted`` tags (None: all), typed by
    ``type_of(name, attributes)``.

    The record is ``<TEXT><![CDATA[...]]></TEXT>``, the tags are children of ``<TAGS>`` with
    ``start``/``end`` (exclusive) into it. 2012: ``EVENT`` by its ``type`` (bio-lm's task; ``--tags
    EVENT TIMEX3`` adds time expressions), other tags skipped and counted. 2014: every PHI tag by
    its ``TYPE`` (``--phi-level category``: the tag name). A tag's ``text`` must be the record's at
    its offsets (whitespace runs as one space, XML entities read as characters);
    ``--allow-text-mismatch`` keeps such offsets, counted (clinicalBERT compares nothing on the
    test sets and hand-patches two 2014 training records)."""
    documents = []
    for record in _xml_files(path):
        text, tags = read_i2b2_xml(record)
        document = Document(record.stem, text, line_segments(text), [], str(record))
        for name, attributes, line in tags:
            where = f"{record}:{line}"
            if wanted is not None and name not in wanted:
                stats.tags_skipped[name] = stats.tags_skipped.get(name, 0) + 1
                continue
            missing = [a for a in ("start", "end", "text") if a not in attributes]
            if missing:
                raise PreprocessError(f"{where}: {name} tag without {', '.join(missing)}")
            type_ = type_of(name, attributes).strip()
            if not type_:
                key = f"{name} without type"
                stats.tags_skipped[key] = stats.tags_skipped.get(key, 0) + 1
                continue
            span = parse_offsets((attributes["start"], attributes["end"]), where)
            document.mentions.append(
                _mention(document, span, attributes["text"], type_, where, allow, stats)
            )
        documents.append(document)
    return documents


def _event_type(name: str, attributes: Dict[str, str]) -> str:
    return attributes.get("type", "")


def _phi_type(name: str, attributes: Dict[str, str]) -> str:
    return attributes.get("TYPE", "")


def _phi_category(name: str, attributes: Dict[str, str]) -> str:
    return name


# ---------------------------------------------------------------------------------------------------
# Conversions


def _convert(out_dir, read, options) -> I2b2Stats:
    stats = I2b2Stats()
    options.setdefault(
        "split_segments", False
    )  # a line of the record is a sentence (clinicalBERT's)
    return convert_documents(out_dir, lambda path: read(path, stats), stats, **options)


def convert_i2b2_2010(
    out_dir, *, texts: Sequence = (), allow_text_mismatch: bool = False, **options
) -> I2b2Stats:
    """i2b2 2010 concepts -> ``out_dir/<split>.tsv``; ``texts``: more directories holding the
    records' ``.txt``."""
    text_dirs = [Path(t) for t in texts]
    for directory in text_dirs:
        if not directory.is_dir():
            raise PreprocessError(f"--texts {directory}: not a directory")
    return _convert(
        out_dir, lambda p, stats: read_i2b2_2010(p, stats, text_dirs, allow_text_mismatch), options
    )


def convert_i2b2_2012(
    out_dir, *, tags: Sequence[str] = ("EVENT",), allow_text_mismatch: bool = False, **options
) -> I2b2Stats:
    """i2b2 2012 temporal XML -> ``out_dir/<split>.tsv``; ``tags``: EVENT (bio-lm), TIMEX3 or
    both."""
    for name in tags:
        if name not in ("EVENT", "TIMEX3"):
            raise PreprocessError(f"--tags {name}: expected EVENT and/or TIMEX3")
    return _convert(
        out_dir,
        lambda p, stats: read_tagged_xml(p, stats, tuple(tags), _event_type, allow_text_mismatch),
        options,
    )


def convert_i2b2_2014(
    out_dir, *, phi_level: str = "type", allow_text_mismatch: bool = False, **options
) -> I2b2Stats:
    """i2b2 2014 de-identification XML -> ``out_dir/<split>.tsv``; ``phi_level``: type (TYPE,
    bio-lm) or category."""
    if phi_level not in ("type", "category"):
        raise PreprocessError(f"--phi-level {phi_level}: expected type or category")
    type_of = _phi_type if phi_level == "type" else _phi_category
    options.setdefault("group", ("patients", lambda record: record.split("-", 1)[0]))
    return _convert(
        out_dir,
        lambda p, stats: read_tagged_xml(p, stats, None, type_of, allow_text_mismatch),
        options,
    )

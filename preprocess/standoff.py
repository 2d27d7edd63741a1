"""``fairseq-bio-convert-tagging brat | linnaeus | s800 | chemdner``: texts with stand-off mentions
(character offsets into the text, kept in a separate file) -> CoNLL, tagged, split and written as
the ``pubtator`` converter does (``pubtator.convert_documents``: BLURB's words, ``B-``/``I-<type>``,
the same counted oddities).

Each release's layout is read by its ``read_*`` function. Texts are split into sentences line by
line (``--sentences punkt``: Punkt inside each line). A mention whose text is not the document's at
its offsets is an error naming the annotation file and line (and saying when the other end
convention would match); so are a missing text file, a row with too few columns and an offset that
is not a number.
"""

import dataclasses
from pathlib import Path
from typing import Callable, Dict, List, Tuple

from .common import PreprocessError
from .pubtator import Document, Mention, PubtatorStats, check_mention, convert_documents
from .tagging_outputs import decode, id_key, read_bytes

# A row of a mention table as a reader understands it: (document, start, end exclusive, text, type).
Row = Tuple[str, int, int, str, str]


@dataclasses.dataclass
class StandoffStats(PubtatorStats):
    """Summary of a stand-off conversion (also written to ``convert_stats.json``)."""

    annotations_skipped: Dict[str, int] = dataclasses.field(
        default_factory=dict
    )  # brat lines by kind (R, E, A, ...)
    documents_without_mentions: int = 0


def line_segments(text: str) -> List[Tuple[int, int]]:
    """``(start, end)`` of every line of ``text`` with something on it: the units split into
    sentences."""
    segments, start = [], 0
    for line in text.split("\n"):
        if line.strip():
            segments.append((start, start + len(line)))
        start += len(line) + 1
    return segments


def read_text(path: Path, encoding: str = "utf-8") -> str:
    """A text file exactly as stored (no newline translation: offsets count every character)."""
    return decode(read_bytes(path), str(path), encoding)


def checked(document: Document, mention: Mention) -> None:
    """``check_mention``, saying when the text is there under the other end convention
    (inclusive/exclusive)."""
    try:
        check_mention(document, mention)
    except PreprocessError as e:
        for shift, convention in ((1, "inclusive"), (-1, "exclusive")):
            if document.text[mention.start : mention.end + shift] == mention.text:
                raise PreprocessError(f"{e}; with an {convention} end it would match") from None
        raise


def parse_offsets(values, where: str) -> Tuple[int, int]:
    """(start, end) from two strings; a one-line error naming ``where`` if they are not whole
    numbers."""
    try:
        start, end = (int(v) for v in values)
    except ValueError:
        raise PreprocessError(
            f"{where}: offsets {' '.join(values)!r} are not two whole numbers"
        ) from None
    return start, end


def _document(
    doc_id: str, text: str, where: str, mentions: List[Mention], stats: StandoffStats
) -> Document:
    document = Document(doc_id, text, line_segments(text), mentions, where)
    for mention in mentions:
        checked(document, mention)
    if not mentions:
        stats.documents_without_mentions += 1
    return document


# ---------------------------------------------------------------------------------------------------
# brat


def read_brat(path: Path, stats: StandoffStats, encoding: str = "utf-8") -> List[Document]:
    """Documents of a brat directory (every ``X.ann`` below it, with ``X.txt``) or of one
    ``.ann``/``.txt``.

    Text-bound lines ``T1<TAB>Type START END<TAB>text``; a discontinuous span (``START END;START
    END``) is dropped and counted, and every other annotation line (``R``, ``E``, ``A``/``M``,
    ``N``, ``#``, ``*``) is skipped and counted by kind."""
    if path.is_dir():
        annotation_files = sorted(path.rglob("*.ann"))
        if not annotation_files:
            raise PreprocessError(
                f"{path}: no .ann files below it (brat stand-off: X.txt with X.ann beside it)"
            )
    elif path.suffix in (".ann", ".txt"):
        annotation_files = [path.with_suffix(".ann")]
    else:
        raise PreprocessError(f"{path}: not a brat .ann/.txt file or a directory of them")
    documents = []
    for ann in annotation_files:
        mentions = []
        for number, line in enumerate(read_text(ann, encoding).split("\n"), start=1):
            line = line.rstrip("\r")
            if not line.strip():
                continue
            if not line.startswith("T"):
                kind = line[0]
                stats.annotations_skipped[kind] = stats.annotations_skipped.get(kind, 0) + 1
                continue
            columns = line.split("\t")
            type_, _, spans = columns[1].partition(" ") if len(columns) >= 3 else ("", "", "")
            if not spans:
                raise PreprocessError(
                    f"{ann}:{number}: not a text-bound annotation (ID<TAB>TYPE START END<TAB>TEXT)"
                )
            fragments = spans.split(";")
            if len(fragments) > 1:
                stats.discontinuous_dropped += 1
                continue
            start, end = parse_offsets(fragments[0].split(), f"{ann}:{number}")
            mentions.append(Mention(start, end, "\t".join(columns[2:]), type_, f"{ann}:{number}"))
        txt = ann.with_suffix(".txt")
        documents.append(_document(ann.stem, read_text(txt, encoding), str(txt), mentions, stats))
    return documents


# ---------------------------------------------------------------------------------------------------
# LINNAEUS and Species-800: one table of mentions over a directory of texts


def read_mention_table(
    table: Path,
    texts: Path,
    parse: Callable[[List[str], str], Row],
    stats: StandoffStats,
    encoding: str = "utf-8",
) -> List[Document]:
    """Documents of every ``<doc>.txt`` in ``texts``, with the mentions of ``table``
    (``parse(columns, where)`` reads a row; ``#`` lines are comments)."""
    if not texts.is_dir():
        raise PreprocessError(f"{texts}: not found (the directory of the corpus's .txt files)")
    files = {p.stem: p for p in texts.glob("*.txt")}
    if not files:
        raise PreprocessError(f"{texts}: no .txt files")
    mentions: Dict[str, List[Mention]] = {doc_id: [] for doc_id in files}
    for number, line in enumerate(read_text(table, encoding).split("\n"), start=1):
        line = line.rstrip("\r")
        if not line.strip() or line.startswith("#"):
            continue
        where = f"{table}:{number}"
        doc_id, start, end, text, type_ = parse(line.split("\t"), where)
        if doc_id not in mentions:
            raise PreprocessError(f"{where}: document {doc_id!r} has no text file in {texts}")
        mentions[doc_id].append(Mention(start, end, text, type_, where))
    return [
        _document(
            doc_id, read_text(files[doc_id], encoding), str(files[doc_id]), mentions[doc_id], stats
        )
        for doc_id in sorted(files, key=id_key)
    ]


def _columns(columns: List[str], least: int, layout: str, where: str) -> None:
    if len(columns) < least:
        raise PreprocessError(f"{where}: {len(columns)} columns; expected {layout}")


def _linnaeus_row(columns: List[str], where: str) -> Row:
    _columns(columns, 5, "species-id, document, start, end, text[, comment]", where)
    species, doc_id, start, end, text = columns[:5]
    start_end = parse_offsets((start, end), where)
    type_ = species.split(":", 1)[0].strip()
    if not type_:
        raise PreprocessError(f"{where}: empty species id")
    return doc_id.strip(), *start_end, text, type_


def _s800_row(columns: List[str], where: str) -> Row:
    _columns(columns, 5, "taxid, document:PMID, start, end (inclusive), text", where)
    _, doc_id, start, end, text = columns[:5]
    start, last = parse_offsets((start, end), where)
    return doc_id.split(":", 1)[0].strip(), start, last + 1, text, "species"


def _release(path: Path, table: str, texts: str) -> Tuple[Path, Path]:
    """(mention table, text directory) of a release directory, or of its table file given
    directly."""
    if path.is_dir():
        return path / table, path / texts
    return path, path.parent / texts


def read_linnaeus(
    path: Path, stats: StandoffStats, annotations: str = "tags.tsv"
) -> List[Document]:
    # manual-corpus-species-1.0/: txt/<doc>.txt and tags.tsv (or filtered_tags.tsv): a #-commented
    # header, then species-id<TAB>document<TAB>start<TAB>end<TAB>text[<TAB>comment], the end
    # exclusive; the type is the id's prefix (species:ncbi:9606 -> species). Every text file is a
    # document, annotated or not (counted).
    table, texts = _release(path, annotations, "txt")
    return read_mention_table(table, texts, _linnaeus_row, stats)


def read_s800(path: Path, stats: StandoffStats) -> List[Document]:
    # S800/: abstracts/<doc>.txt and S800.tsv: taxid<TAB><doc>:<PMID><TAB>start<TAB>end<TAB>text,
    # the end *inclusive*; the type is species.
    table, texts = _release(path, "S800.tsv", "abstracts")
    return read_mention_table(table, texts, _s800_row, stats)


# ---------------------------------------------------------------------------------------------------
# CHEMDNER (BC4CHEMD)


def read_chemdner(path: Path, stats: StandoffStats) -> List[Document]:
    """Documents of ``<part>.abstracts.txt`` with the mentions of ``<part>.annotations.txt`` beside
    it.

    Abstracts are ``PMID<TAB>title<TAB>abstract``, annotations
    ``PMID<TAB>T|A<TAB>start<TAB>end<TAB>text<TAB>class`` with offsets into the title (T) or the
    abstract (A); the text is title + space + abstract, as PubTator's."""
    if "abstracts" not in path.name:
        raise PreprocessError(
            f"{path}: expected a CHEMDNER <part>.abstracts.txt (its annotations file beside it)"
        )
    annotations = path.with_name(path.name.replace("abstracts", "annotations"))
    documents: Dict[str, Document] = {}
    for number, line in enumerate(read_text(path).split("\n"), start=1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        columns = line.split("\t")
        _columns(columns, 3, "PMID, title, abstract", f"{path}:{number}")
        pmid, title, abstract = columns[0].strip(), columns[1], "\t".join(columns[2:])
        if pmid in documents:
            raise PreprocessError(
                f"{path}:{number}: PMID {pmid} already read at {documents[pmid].where}"
            )
        text = f"{title} {abstract}"
        segments = [(0, len(title)), (len(title) + 1, len(text))]
        documents[pmid] = Document(pmid, text, segments, [], f"{path}:{number}")
    if not documents:
        raise PreprocessError(f"{path}: no abstracts (PMID<TAB>title<TAB>abstract lines)")
    for number, line in enumerate(read_text(annotations).split("\n"), start=1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        where = f"{annotations}:{number}"
        columns = line.split("\t")
        _columns(columns, 6, "PMID, T|A, start, end, text, class", where)
        pmid, section, start, end, text, class_ = columns[:6]
        if pmid not in documents:
            raise PreprocessError(f"{where}: PMID {pmid} is not in {path}")
        if section not in ("T", "A"):
            raise PreprocessError(
                f"{where}: section {section!r}; expected T (title) or A (abstract)"
            )
        shift = 0 if section == "T" else documents[pmid].segments[1][0]
        start, end = parse_offsets((start, end), where)
        documents[pmid].mentions.append(
            Mention(start + shift, end + shift, text, class_.strip(), where)
        )
    for document in documents.values():
        for mention in document.mentions:
            checked(document, mention)
        if not document.mentions:
            stats.documents_without_mentions += 1
    return list(documents.values())


# ---------------------------------------------------------------------------------------------------
# Conversions


def _convert(
    out_dir, read: Callable[[Path, StandoffStats], List[Document]], options
) -> StandoffStats:
    stats = StandoffStats()
    return convert_documents(out_dir, lambda path: read(path, stats), stats, **options)


def convert_brat(out_dir, *, encoding: str = "utf-8", **options) -> StandoffStats:
    """brat directories/files -> ``out_dir/<split>.tsv`` (``pubtator.convert_documents``'s
    options)."""
    return _convert(out_dir, lambda path, stats: read_brat(path, stats, encoding), options)


def convert_linnaeus(out_dir, *, annotations: str = "tags.tsv", **options) -> StandoffStats:
    """LINNAEUS's manual corpus -> ``out_dir/<split>.tsv``; ``annotations``: ``tags.tsv`` or
    ``filtered_tags.tsv``."""
    return _convert(out_dir, lambda path, stats: read_linnaeus(path, stats, annotations), options)


def convert_s800(out_dir, **options) -> StandoffStats:
    """Species-800 -> ``out_dir/<split>.tsv``."""
    return _convert(out_dir, read_s800, options)


def convert_chemdner(out_dir, **options) -> StandoffStats:
    """CHEMDNER (BC4CHEMD) parts -> ``out_dir/<split>.tsv``, usually ``--one-type Chemical``
    (BioBERT's files)."""
    return _convert(out_dir, read_chemdner, options)

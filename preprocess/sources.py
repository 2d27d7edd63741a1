"""The corpus inputs fairseq-bio-extract reads, as records: MEDLINE/PubMed XML, PMC articles, plain
text, MIMIC-III clinical notes (``NOTEEVENTS.csv``, parsed in ``mimic``).

``find_input_files`` lists what a path names (directories searched for ``*.xml``, ``*.xml.gz``,
``*.nxml``, ``*.txt``, and ``*.csv``/``*.csv.gz`` named ``NOTEEVENTS*`` or with its header);
``iter_records`` yields each file's ``Document`` records (and, for MEDLINE update files,
``Deletion`` records); ``describe_error`` turns a parser's exception into one line. See ``extract``
for what is done with them.
"""

import gzip
import os
import zlib
from pathlib import Path
from typing import Iterator, List, NamedTuple, Optional, Sequence, Union

from fairseq_bio.errors import BioError

from .mimic import (
    NOTES_SUFFIXES,
    NoteOptions,
    NotesError,
    NoteStats,
    is_notes_header,
    is_notes_name,
    iter_notes,
)

XML_SUFFIXES = (".xml", ".xml.gz", ".nxml")
TEXT_SUFFIXES = (".txt",)
MEDLINE_ROOT = "PubmedArticleSet"
PMC_ROOT = "article"


class InputFile(NamedTuple):
    path: Path  # where to read it
    display: str  # how messages name it (as the user gave it)
    rel: str  # stable name for document ids (relative to the input directory it was found in)


class Document(NamedTuple):
    doc_id: (
        str  # "pmid:123", "pmc:456", "mimic:174" (ROW_ID), "txt:notes/a.txt#0", "file:<rel>#<n>"
    )
    title: str
    paragraphs: List[str]


class Deletion(NamedTuple):
    doc_id: str


class _InputError(BioError):
    """A problem with one input file (the message does not repeat the file name)."""


# ---------------------------------------------------------------------------------------------------
# Finding and opening inputs


def find_input_files(
    inputs: Sequence[Union[str, os.PathLike]], exclude: Optional[Path] = None
) -> List[InputFile]:
    """The corpus files named by ``inputs`` (files or directories), sorted by base name then
    path."""
    found = []
    exclude = exclude.resolve() if exclude is not None else None
    for given in inputs:
        root = Path(given)
        if root.is_dir():
            for path in root.rglob("*"):
                name = path.name
                if name.startswith(".") or not path.is_file() or not _is_corpus_file(path):
                    continue
                if exclude is not None and path.resolve().parent == exclude:
                    continue  # never read our own train.txt/valid.txt back in
                found.append(InputFile(path, str(path), path.relative_to(root).as_posix()))
        else:
            # Missing or odd files are kept: processing reports them (or counts them with
            # --skip-bad-files).
            found.append(InputFile(root, str(root), root.name))
    return sorted(set(found), key=lambda f: (f.path.name, str(f.path)))


def _is_corpus_file(path: Path) -> bool:
    """Whether a directory search reads ``path``: other CSV files (MIMIC's other tables) are left
    alone."""
    if path.name.endswith(XML_SUFFIXES + TEXT_SUFFIXES):
        return True
    return path.name.lower().endswith(NOTES_SUFFIXES) and (
        is_notes_name(path.name) or _has_notes_header(path)
    )


def _has_notes_header(path: Path) -> bool:
    try:
        with _open_binary(path) as f:
            return is_notes_header(f.readline(1 << 16).decode("utf-8", errors="replace"))
    except (OSError, EOFError, zlib.error, _InputError):
        return False  # not readable: not something a directory search should report


class _CountingReader:
    """File wrapper counting the (decompressed) bytes the XML parser reads."""

    def __init__(self, f):
        self._f = f
        self.bytes = 0

    def read(self, n=-1):
        data = self._f.read(n)
        self.bytes += len(data)
        return data


def _open_binary(path: Path):
    """Open a plain or gzipped file; reject missing and empty files with a clear message."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise _InputError("no such file") from None
    if path.is_dir():
        raise _InputError("is a directory")
    if size == 0:
        raise _InputError("empty file")
    f = open(path, "rb")
    if f.read(2) == b"\x1f\x8b":
        f.seek(0)
        return gzip.GzipFile(fileobj=f, mode="rb")
    f.seek(0)
    return f


def _root_tag(path: Path) -> str:
    """The local name of the root element, read without parsing the whole file."""
    from lxml import etree

    with _open_binary(path) as f:
        for _, element in etree.iterparse(f, events=("start",)):
            return etree.QName(element).localname
    raise _InputError("no XML root element")


# ---------------------------------------------------------------------------------------------------
# Parsers: each yields Document (and, for MEDLINE, Deletion) records


def _medline_document(element, position: int, source: InputFile) -> Document:
    from pubmed_parser.medline_parser import parse_article_info

    try:
        record = parse_article_info(element, True, False, False, False)
    except Exception as e:  # pubmed_parser fails on malformed records with assorted errors
        raise _InputError(
            f"record {position + 1}: pubmed_parser cannot parse it ({type(e).__name__}: {e})"
        )
    pmid = (record["pmid"] or "").strip()
    doc_id = f"pmid:{pmid}" if pmid.isdigit() else f"file:{source.rel}#{position}"
    abstract = record["abstract"] or ""
    sections = element.findall("MedlineCitation/Article/Abstract/AbstractText")
    if len(sections) > 1:
        # pubmed_parser joins structured sections as "LABEL\ntext" blocks; keep the texts, drop the
        # labels.
        labels = {(s.get("Label") or "").strip() for s in sections}
        paragraphs = [
            line for line in abstract.split("\n") if line.strip() and line.strip() not in labels
        ]
    else:
        paragraphs = [abstract] if abstract.strip() else []
    return Document(doc_id, record["title"] or "", paragraphs)


class Stripe(NamedTuple):
    """Records ``position % count == index`` of a file: lets several workers share one large
    file."""

    index: int = 0
    count: int = 1

    def __contains__(self, position: int) -> bool:
        return position % self.count == self.index


def _iter_medline(
    source: InputFile, max_docs: Optional[int], stripe: Stripe, readers: list
) -> Iterator:
    # Each <PubmedArticle> goes through pubmed_parser's own record parser (parse_article_info, what
    # parse_medline_xml calls). The loop is ours: parse_medline_xml 0.5.1 only opens gzipped files
    # and silently drops <DeleteCitation>, and a citation an update file deletes must not survive
    # from an earlier file.
    from lxml import etree

    with _open_binary(source.path) as f:
        reader = _CountingReader(f)
        readers.append(reader)
        position = 0
        articles = 0
        for _, element in etree.iterparse(
            reader, events=("end",), tag=("PubmedArticle", "DeleteCitation")
        ):
            if element.tag == "PubmedArticle":
                if max_docs is not None and articles >= max_docs:
                    break
                if position in stripe:  # other stripes' records cost only the XML parse
                    yield position, _medline_document(element, articles, source)
                position += 1
                articles += 1
            else:
                for pmid in element.iterfind("PMID"):
                    if position in stripe:
                        yield position, Deletion(f"pmid:{(pmid.text or '').strip()}")
                    position += 1
            # Free parsed records: clear this one and drop the already-processed siblings.
            element.clear(keep_tail=True)
            while element.getprevious() is not None:
                del element.getparent()[0]


def _iter_pmc(source: InputFile) -> Iterator:
    import pubmed_parser
    from lxml import etree

    path = str(source.path)
    # Parse once ourselves first: pubmed_parser prints to stdout and re-raises an unrelated error on
    # bad XML.
    etree.parse(path)
    meta = pubmed_parser.parse_pubmed_xml(path, nxml=True)
    body = [p["text"] for p in pubmed_parser.parse_pubmed_paragraph(path, all_paragraph=True)]
    pmc = (meta["pmc"] or "").strip().removeprefix("PMC")
    doc_id = f"pmc:{pmc}" if pmc.isdigit() else f"file:{source.rel}#0"
    abstract = meta["abstract"] or ""
    yield Document(
        doc_id, meta["full_title"] or "", ([abstract] if abstract.strip() else []) + body
    )


def _iter_text(source: InputFile, readers: list) -> Iterator:
    # Each block of non-blank lines is a document, each line a paragraph: lines are never joined,
    # so headings and list items (clinical notes) stay separate.
    reader = _CountingReader(None)
    readers.append(reader)
    with _open_binary(source.path) as f:
        lines: List[str] = []
        index = 0
        offset = 0
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode(
                    "utf-8-sig" if lineno == 1 else "utf-8"
                )  # no byte-order mark in the text
            except UnicodeDecodeError as e:
                raise _InputError(
                    f"line {lineno}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at byte offset {offset + e.start})"
                ) from None
            offset += len(raw)
            reader.bytes = offset
            if lineno == 1:
                line = line.lstrip("\ufeff")
            if line.strip():
                lines.append(line)
            elif lines:
                yield Document(f"txt:{source.rel}#{index}", "", lines)
                index += 1
                lines = []
        if lines:
            yield Document(f"txt:{source.rel}#{index}", "", lines)


def _iter_notes(
    source: InputFile, max_docs, stripe: Stripe, readers: list, options: NoteOptions, stats
) -> Iterator:
    with _open_binary(source.path) as f:
        for position, note in iter_notes(f, options, stripe, max_docs, stats, readers):
            # No title: a category line ("Radiology") repeated over millions of notes would teach
            # the model nothing.
            yield position, Document(f"mimic:{note.row_id}", "", note.paragraphs)


def iter_records(
    source: InputFile,
    max_docs: Optional[int] = None,
    stripe: Stripe = Stripe(),
    readers: Optional[list] = None,
    notes: NoteOptions = NoteOptions(),
    note_stats: Optional[NoteStats] = None,
) -> Iterator:
    """``(position, record)`` for the Documents and Deletions of one file, in file order.

    ``notes`` filters and cleans MIMIC-III notes; ``note_stats`` counts their rows. Raises
    ``_InputError`` (or a ``NotesError``, an lxml/gzip/OS error, see ``describe_error``) for bad
    input.
    """
    readers = readers if readers is not None else []
    name = source.path.name
    if name.lower().endswith(NOTES_SUFFIXES):
        yield from _iter_notes(source, max_docs, stripe, readers, notes, note_stats)
        return
    if name.endswith(XML_SUFFIXES):
        root = _root_tag(source.path)
        if root == MEDLINE_ROOT:
            yield from _iter_medline(source, max_docs, stripe, readers)
            return
        if root != PMC_ROOT:
            raise _InputError(
                f"not a MEDLINE/PubMed or PMC article file (root element <{root}>, "
                f"expected <{MEDLINE_ROOT}> or <{PMC_ROOT}>)"
            )
        readers.append(_CountingReader(None))
        readers[-1].bytes = source.path.stat().st_size
        records = _iter_pmc(source)
    elif name.endswith(TEXT_SUFFIXES):
        records = _iter_text(source, readers)
    else:
        _open_binary(source.path).close()  # missing/empty files get their own message
        expected = ", ".join(XML_SUFFIXES + TEXT_SUFFIXES)
        raise _InputError(
            f"unsupported file type (expected {expected}, or MIMIC-III NOTEEVENTS .csv/.csv.gz)"
        )
    for position, record in enumerate(records):
        if max_docs is not None and position >= max_docs:
            break
        if position in stripe:
            yield position, record


def describe_error(exc: BaseException) -> Optional[str]:
    """One-line description of a file-level input error, or None for errors that are bugs."""
    from lxml import etree

    if isinstance(exc, (_InputError, NotesError)):
        return str(exc)
    if isinstance(exc, etree.XMLSyntaxError):
        return f"line {exc.lineno}: not well-formed XML ({exc.msg})"
    if isinstance(exc, EOFError):
        return "truncated gzip file (the compressed data ends before its end-of-stream marker)"
    if isinstance(exc, gzip.BadGzipFile):
        return f"not a valid gzip file ({exc})"
    if isinstance(exc, zlib.error):
        return f"corrupt gzip data ({exc})"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return None

"""MIMIC-III clinical notes: the rows of ``NOTEEVENTS.csv`` (or ``.csv.gz``) as notes, one per row.

Columns are found by name in the header, so any export with ``ROW_ID``, ``CATEGORY`` and ``TEXT``
works. Rows marked ``ISERROR`` or outside ``NoteOptions.categories`` are skipped and counted;
``TEXT`` becomes paragraphs (``note_paragraphs``) and its de-identification placeholders are kept,
typed or dropped (``replace_placeholders``). A bad row (wrong number of fields, a ROW_ID that is
not a number, a quote never closed, bytes that are not UTF-8) is an error of the file:
``NotesError`` with one line naming the line and the field.
"""

import csv
import dataclasses
import re
from typing import Container, Dict, Iterable, Iterator, List, NamedTuple, Optional, Tuple

from fairseq_bio.errors import BioError

NOTES_SUFFIXES = (".csv", ".csv.gz")
REQUIRED_COLUMNS = ("ROW_ID", "CATEGORY", "TEXT")
DEID_MODES = ("keep", "normalise", "drop")

# (token, pattern searched in the placeholder's lower-cased text); first match wins, e.g. "Hospital
# Ward Name" is a HOSPITAL (not a NAME) and "E-mail address" a CONTACT (not a LOCATION). A
# placeholder of digits and separators only ("2151-7-16", "7-16", "2151") is a shifted date.
PLACEHOLDER_TYPES: Tuple[Tuple[str, str], ...] = (
    ("[HOSPITAL]", r"hospital|ward"),
    ("[CONTACT]", r"e-?mail|url|telephone|fax|pager|contact"),
    ("[LOCATION]", r"location|address|street|state|country|city|po box"),
    ("[DATE]", r"date|month|year|holiday|\bday\b|^[\d\s/.-]*\d[\d\s/.-]*$"),
    ("[NAME]", r"name|initials"),
    ("[AGE]", r"\bage\b"),
    ("[NUMBER]", r"number|identifier|\d"),
)
FALLBACK_TOKEN = "[DEID]"

_PLACEHOLDER = re.compile(r"\[\*\*(.*?)\*\*\]")  # never across a line break
_TYPE_PATTERNS = [(token, re.compile(pattern)) for token, pattern in PLACEHOLDER_TYPES]
_BLANK_LINES = re.compile(r"\n[ \t\r\f\v]*(?:\n[ \t\r\f\v]*)+")
_ROW_LINES_KEPT = 1000  # lines of the current row kept to name the field of a quoting error
_CSV_FIELD_LIMIT = 2**31 - 1  # notes exceed csv's default 128 KiB field limit; a C long everywhere


class NotesError(BioError):
    """A bad notes file or row (one line, without the file name)."""


class NoteOptions(NamedTuple):
    categories: Optional[Tuple[str, ...]] = None  # CATEGORY values to keep (None: all)
    deid: str = "normalise"  # what to do with [**...**] placeholders: one of DEID_MODES


class Note(NamedTuple):
    row_id: str
    category: str  # stripped
    description: str  # stripped
    paragraphs: List[str]


@dataclasses.dataclass
class NoteStats:
    """Counts over the NOTEEVENTS rows read:
    ``read == kept + skipped_iserror + skipped_category``."""

    read: int = 0
    kept: int = 0  # passed both filters: became documents
    skipped_iserror: int = 0
    skipped_category: int = 0
    categories: Dict[str, int] = dataclasses.field(
        default_factory=dict
    )  # rows read per (stripped) CATEGORY
    category_filter: Optional[List[str]] = None  # --note-categories (None: all)
    deid_placeholders: str = "normalise"

    def add(self, other: "NoteStats") -> None:
        self.read += other.read
        self.kept += other.kept
        self.skipped_iserror += other.skipped_iserror
        self.skipped_category += other.skipped_category
        for name, count in other.categories.items():
            self.categories[name] = self.categories.get(name, 0) + count


def note_options(categories=None, deid: str = "normalise") -> NoteOptions:
    """Checked options; ``categories`` a list or a comma-separated string ("Discharge
    summary,Radiology")."""
    if deid not in DEID_MODES:
        raise ValueError(
            f"--deid-placeholders must be one of {', '.join(DEID_MODES)}, not {deid!r}"
        )
    if categories is None:
        return NoteOptions(None, deid)
    names = categories.split(",") if isinstance(categories, str) else list(categories)
    names = tuple(dict.fromkeys(name.strip() for name in names if name.strip()))
    if not names:
        raise ValueError("--note-categories names no category")
    return NoteOptions(names, deid)


def is_notes_name(name: str) -> bool:
    """Whether a file name is MIMIC-III's notes table (``NOTEEVENTS*.csv``, ``.csv.gz``)."""
    return name.upper().startswith("NOTEEVENTS") and name.lower().endswith(NOTES_SUFFIXES)


def is_notes_header(line: str) -> bool:
    """Whether a CSV header line names the columns a notes file needs."""
    try:
        columns = {c.strip().upper() for c in next(csv.reader([line.lstrip("\ufeff")]), [])}
    except csv.Error:
        return False
    return set(REQUIRED_COLUMNS) <= columns


def placeholder_type(text: str) -> str:
    """The typed token for a placeholder's inner text ("Known lastname 1234" -> "[NAME]")."""
    text = text.strip().lower()
    return next(
        (token for token, pattern in _TYPE_PATTERNS if pattern.search(text)), FALLBACK_TOKEN
    )


def replace_placeholders(text: str, mode: str) -> str:
    """``text`` with each ``[**...**]`` kept, replaced by its typed token ("normalise") or removed
    ("drop").

    Placeholders look like ``[**Known lastname 1234**]`` or ``[**2151-7-16**]``; the type is the
    first match in ``PLACEHOLDER_TYPES``, ``[DEID]`` when none matches."""
    if mode == "keep":
        return text
    if mode == "drop":
        return _PLACEHOLDER.sub("", text)
    return _PLACEHOLDER.sub(lambda m: placeholder_type(m.group(1)), text)


def note_paragraphs(text: str) -> List[str]:
    """Blank-line separated blocks of ``text``, each with its lines joined and whitespace
    collapsed.

    MIMIC notes are hard-wrapped at ~80 columns, hence the joining; header blocks ("Admission Date:
    ... Discharge Date: ...") stay paragraphs of their own."""
    paragraphs = (
        " ".join(block.split()) for block in _BLANK_LINES.split(text.replace("\r\n", "\n"))
    )
    return [p for p in paragraphs if p]


class _Lines:
    """A binary file's lines, decoded for ``csv.reader``; counts lines and bytes, keeps the current
    row's lines."""

    def __init__(self, f):
        self._f = f
        self.lineno = 0
        self.bytes = 0  # read so far (what extract reports as parsed bytes)
        self.row: List[str] = []

    def __iter__(self):
        return self

    def __next__(self) -> str:
        raw = next(self._f)
        self.lineno += 1
        self.bytes += len(raw)
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise NotesError(
                f"line {self.lineno}: not valid UTF-8 (byte 0x{raw[e.start]:02x})"
            ) from None
        if len(self.row) < _ROW_LINES_KEPT:
            self.row.append(line)
        return line.lstrip("\ufeff") if self.lineno == 1 else line


def _quoting_error_field(lines: List[str]) -> int:
    """Index of the field a quoting error is in, for the message (csv.Error does not say): the
    quoted field that closes into something other than a comma or a line end, or the one still open
    where ``lines`` end.
    """
    field, quoted, start = 0, False, True
    text = "".join(lines)
    i = 0
    while i < len(text):
        c = text[i]
        if quoted and c == '"':
            if text[i + 1 : i + 2] == '"':  # a doubled quote inside the field
                i += 2
                continue
            quoted = False
            if text[i + 1 : i + 2] not in ("", ",", "\n", "\r"):
                return field
        elif not quoted and c == '"' and start:
            quoted = True
        elif not quoted and c == ",":
            field += 1
            start = True
            i += 1
            continue
        start = False
        i += 1
    return field


def iter_notes(
    f: Iterable[bytes],
    options: NoteOptions = NoteOptions(),
    stripe: Container[int] = range(2**62),
    max_notes: Optional[int] = None,
    stats: Optional[NoteStats] = None,
    readers: Optional[list] = None,
) -> Iterator[Tuple[int, Note]]:
    """``(position, Note)`` for the rows of a binary NOTEEVENTS file whose position is in
    ``stripe``, kept by ``options``; ``stats`` counts those rows (so stripes add up). Raises
    ``NotesError`` for a bad file or row.

    Categories are compared after ``strip()``, case-insensitively: real values such as
    ``"Physician "`` end in a space."""
    csv.field_size_limit(max(csv.field_size_limit(), _CSV_FIELD_LIMIT))
    stats = stats if stats is not None else NoteStats()
    lines = _Lines(iter(f))
    if readers is not None:
        readers.append(lines)
    reader = csv.reader(lines, strict=True)
    wanted = None if options.categories is None else {c.casefold() for c in options.categories}
    columns: List[str] = []
    index: Dict[str, int] = {}
    position = 0
    while max_notes is None or position < max_notes:
        start = lines.lineno + 1
        lines.row = []
        try:
            row = next(reader, None)
        except csv.Error as e:
            at = _quoting_error_field(lines.row)
            field = (
                "header" if not columns else columns[at] if at < len(columns) else f"field {at + 1}"
            )
            at_end = "end of data" in str(e)
            what = "quoted field not closed before the end of the file" if at_end else str(e)
            where = (
                f" (the parser stopped on line {lines.lineno})"
                if lines.lineno != start and not at_end
                else ""
            )
            raise NotesError(f"line {start}: {field}: malformed CSV: {what}{where}") from None
        if row is None:
            break
        if not columns:
            columns = [c.strip().upper() for c in row]
            index = {name: i for i, name in enumerate(columns)}
            missing = [c for c in REQUIRED_COLUMNS if c not in index]
            if missing:
                raise NotesError(
                    f"line {start}: not a MIMIC-III NOTEEVENTS header (no {', '.join(missing)} column)"
                )
            continue
        if not row:
            continue  # a blank line between rows
        if len(row) != len(columns):
            what = "missing" if len(row) < len(columns) else "extra field after it"
            field = columns[min(len(row), len(columns) - 1)]
            raise NotesError(
                f"line {start}: {field}: {what} ({len(row)} fields, the header has {len(columns)})"
            )
        row_id = row[index["ROW_ID"]].strip()
        if not row_id.isdigit():
            raise NotesError(f"line {start}: ROW_ID: not a number ({row_id[:40]!r})")
        if position in stripe:
            category = row[index["CATEGORY"]].strip()
            stats.read += 1
            stats.categories[category] = stats.categories.get(category, 0) + 1
            if "ISERROR" in index and row[index["ISERROR"]].strip() not in ("", "0"):
                stats.skipped_iserror += 1
            elif wanted is not None and category.casefold() not in wanted:
                stats.skipped_category += 1
            else:
                stats.kept += 1
                description = row[index["DESCRIPTION"]].strip() if "DESCRIPTION" in index else ""
                text = replace_placeholders(row[index["TEXT"]], options.deid)
                yield position, Note(row_id, category, description, note_paragraphs(text))
        position += 1

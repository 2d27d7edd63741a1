"""CoNLL-style tagging files (``token<TAB>tag`` per line, blank line between sentences; conlleval's
``token<TAB>gold<TAB>prediction`` for predictions) and raw-text words.

What users have: BLURB's NER folders (NCBI-disease, BC5CDR, BC2GM, JNLPBA) and EBM-NLP PICO in this
form. Reading is strict where a mistake would silently change the data (a ragged line, non-UTF-8
bytes, an empty token) and lenient where nothing is lost (CRLF endings, trailing spaces, several
blank lines, ``-DOCSTART-``). Every error is one line naming the file and line.
"""

import codecs
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple

import regex

from ..errors import BioError
from ..metrics.tagging import get_entities

DOCSTART = "-DOCSTART-"
# What a line of each width holds, for the message naming a ragged line.
EXPECTED = {
    1: "a token alone, as the lines before",
    2: "token<TAB>tag",
    3: "token<TAB>gold<TAB>prediction",
}


class TaggingDataError(BioError, ValueError):
    """Bad tagging input; the message names the file and line."""


@dataclass
class Sentence:
    """One sentence: its words, their tags (None for untagged input), the file line of each word
    and, read from a predictions file, the predicted tags."""

    words: List[str]
    tags: Optional[List[str]] = None
    lines: List[int] = field(default_factory=list)
    predicted: Optional[List[str]] = None


def _raw_lines(path) -> List[bytes]:
    """The lines of a tagging input file as bytes, a UTF-8 byte-order mark removed (an editor's,
    never a token's); one-line errors for a missing file or a directory."""
    try:
        with open(path, "rb") as f:
            return f.read().removeprefix(codecs.BOM_UTF8).split(b"\n")
    except FileNotFoundError:
        raise TaggingDataError(f"{path}: not found") from None
    except IsADirectoryError:
        raise TaggingDataError(f"{path}: is a directory, not a CoNLL file") from None


def read_conll(path, require_tags: bool = True, predictions: bool = False) -> List[Sentence]:
    """Sentences of a CoNLL file; with ``require_tags=False`` a file of bare tokens (one column) is
    allowed; with ``predictions`` the file is conlleval's ``token<TAB>gold<TAB>prediction``
    (fairseq-bio-predict's output for tagged input), the predictions in ``Sentence.predicted``."""
    raw_lines = _raw_lines(path)
    sentences: List[Sentence] = []

    def new() -> Sentence:
        return Sentence(words=[], tags=[], lines=[], predicted=[] if predictions else None)

    current = new()
    columns = (
        3 if predictions else None
    )  # else fixed by the first token line: 2 (token, tag) or 1 (token)
    for number, raw in enumerate(raw_lines, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise TaggingDataError(
                f"{path}:{number}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})"
            ) from None
        line = line.rstrip("\r\n").rstrip(" ")
        if not line.strip():
            if current.words:
                sentences.append(current)
                current = new()
            continue
        parts = line.split("\t") if "\t" in line else line.split()
        parts = [p.strip() for p in parts]
        if parts[0] == DOCSTART:
            continue
        if columns is None:
            columns = len(parts)
            if columns == 1 and require_tags:
                raise TaggingDataError(
                    f"{path}:{number}: a token without a tag (expected token<TAB>tag)"
                )
            if columns > 2:
                raise TaggingDataError(
                    f"{path}:{number}: {columns} columns; expected token<TAB>tag"
                    + ("" if require_tags else " or token")
                    + (
                        " (token, gold, prediction is what fairseq-bio-predict writes: keep the first two columns, "
                        "cut -f1,2)"
                        if columns == 3
                        else ""
                    )
                )
        if len(parts) != columns:
            raise TaggingDataError(
                f"{path}:{number}: {len(parts)} column(s); expected {EXPECTED[columns]}"
            )
        if not parts[0]:
            raise TaggingDataError(f"{path}:{number}: empty token")
        if columns >= 2 and not all(parts[1:]):
            raise TaggingDataError(
                f"{path}:{number}: empty {'tag' if not parts[1] else 'prediction'}"
            )
        current.words.append(parts[0])
        current.lines.append(number)
        if columns >= 2:
            current.tags.append(parts[1])
        if columns == 3:
            current.predicted.append(parts[2])
    if current.words:
        sentences.append(current)
    if not sentences:
        raise TaggingDataError(f"{path}: no sentences (empty file?)")
    if columns == 1:
        for sentence in sentences:
            sentence.tags = None
    return sentences


CONLL_SUFFIXES = (".tsv", ".conll", ".iob", ".iob2", ".bio", ".txt.conll")
# A tag as BLURB's NER and PICO files write them, for lines whose columns are split by spaces, not a
# tab.
_TAG = re.compile(r"O|[BIESLU]-\S+")


def _tagged(line: str) -> bool:
    """Whether a non-blank line reads as ``token<TAB>tag`` with any number of tag columns
    (conlleval's ``token<TAB>gold<TAB>prediction``, more features), or ``token tag`` with a
    BIO-style tag."""
    if "\t" in line:
        parts = [p.strip() for p in line.rstrip("\r\n ").split("\t")]
        return len(parts) >= 2 and all(parts) and not any(c.isspace() for p in parts[1:] for c in p)
    parts = line.split()
    return len(parts) == 2 and _TAG.fullmatch(parts[1]) is not None


def sniff_format(path) -> str:
    """``conll`` or ``text``: what a tagging input holds, by its content, whatever its name. Every
    non-blank line ``token<TAB>tag`` (``-DOCSTART-`` lines aside): CoNLL. No such line: raw text, or
    bare tokens when the name says CoNLL (.tsv, .conll, .iob, .bio). Some such lines and some not:
    CoNLL when the name says so (the reader then names the bad line), else refused in one line
    naming ``--format``."""
    lines = [raw.decode("utf-8", errors="replace") for raw in _raw_lines(path)]
    named_conll = str(path).lower().endswith(CONLL_SUFFIXES)
    tagged = untagged = None
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.split()[0] == DOCSTART:
            continue
        if _tagged(line):
            tagged = tagged or number
        else:
            untagged = untagged or number
    if tagged is None:
        return "conll" if named_conll else "text"
    if untagged is None or named_conll:
        return "conll"
    raise TaggingDataError(
        f"{path}: line {tagged} reads as CoNLL (token<TAB>tag) but line {untagged} does not; pass --format conll "
        "(the bad lines are then named) or --format text"
    )


def read_conll_predictions(path) -> Tuple[List[List[str]], List[List[str]]]:
    """(gold, predicted) tags per sentence of a ``token<TAB>gold<TAB>prediction`` file
    (fairseq-bio-predict's)."""
    sentences = read_conll(path, predictions=True)
    return [s.tags for s in sentences], [s.predicted for s in sentences]


def parse_type_merge(spec: str) -> Optional[Callable[[str], str]]:
    """The entity-type renaming ``spec`` asks for: empty, none; ``NAME``, every type becomes NAME
    (PubMedBERT's JNLPBA, all five types one); ``OLD=NEW,OLD2=NEW2``, the listed types renamed, the
    others kept. ValueError (one line) for anything else."""
    spec = spec.strip()
    if not spec:
        return None
    if "=" not in spec:
        if "," in spec or any(c.isspace() for c in spec):
            raise ValueError(
                f"{spec!r}: expected one type name (every type becomes it) or OLD=NEW,... pairs"
            )
        return lambda type_: spec
    mapping = {}
    for item in spec.split(","):
        old, sep, new = (part.strip() for part in item.partition("="))
        if not sep or not old or not new or any(c.isspace() or c == "=" for c in old + new):
            raise ValueError(f"{item.strip()!r} is not OLD=NEW (types without spaces)")
        if old in mapping:
            raise ValueError(f"type {old!r} is renamed twice")
        mapping[old] = new
    return lambda type_: mapping.get(type_, type_)


def merge_types(sentences: Sequence[Sentence], rename: Callable[[str], str]) -> Counter:
    """Rename the entity types of tagged ``sentences`` in place. Entities are read as conlleval
    reads them and written back in BIO, so two adjacent entities whose types merge stay two
    (``B-protein I-DNA`` becomes ``B-entity B-entity``). Returns the renamed entities per
    ``(old type, new type)``."""
    renamed: Counter = Counter()
    for sentence in sentences:
        if sentence.tags is None:
            continue
        tags = ["O"] * len(sentence.tags)
        for type_, start, end in get_entities(sentence.tags):
            new = rename(type_)
            if new != type_:
                renamed[(type_, new)] += 1
            tags[start:end] = [f"B-{new}"] + [f"I-{new}"] * (end - start - 1)
        sentence.tags = tags
    return renamed


def write_conll(f, sentences: List[Tuple[List[str], List[str]]]) -> None:
    """Write ``(words, tags)`` pairs as CoNLL to the open text file ``f``."""
    for words, tags in sentences:
        for word, tag in zip(words, tags):
            f.write(f"{word}\t{tag}\n")
        f.write("\n")


# Words as BLURB's NER corpora are tokenised: runs of letters/digits, and every other non-space
# character alone ("ataxia-telangiectasia" -> "ataxia", "-", "telangiectasia"). The units are
# grapheme clusters (\X), not code points, so that a combining mark stays with its base character:
# decomposed "Sjo\u0308gren" is one word, and no span boundary cuts a character in two.
_WORD = regex.compile(r"(?:(?=[\p{L}\p{N}])\X)+|(?!\s)\X")


def words_with_offsets(text: str) -> List[Tuple[str, int, int]]:
    """``(word, start, end)`` character spans of the words of raw ``text``."""
    return [(m.group(), m.start(), m.end()) for m in _WORD.finditer(text)]

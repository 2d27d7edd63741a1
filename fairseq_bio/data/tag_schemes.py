"""Tagging schemes: word tags converted to BIO (IOB2), IO or BIOES (BIOUL) for training, and back to
BIO for scoring.

The chunks of the input are read with ``fairseq_bio.metrics.tagging.get_entities`` (conlleval's
rules), so input in any of BIO, IOB1, IO, BIOES or BIOUL converts, and the conversion of a predicted
sequence is exactly the set of chunks conlleval scores for it. Ill-formed predictions therefore
follow conlleval's reading, whatever scheme the model was trained with:

- ``I-X`` (or ``E-X``) after ``O``, after another type, or after ``E-X``/``S-X`` starts a chunk;
  ``E-X`` without a ``B-X`` is a one-word chunk;
- ``B-X I-X`` without its ``E-X`` (BIOES) runs until something ends it (``O``, ``B``, ``S``, another
  type, or the sentence end), as an ``I`` chunk does in BIO;
- ``B-X B-X`` and ``S-X S-X`` are two chunks; ``I-X I-X`` is one (which is why IO cannot tell
  adjacent same-type entities apart: converting BIO to IO and back merges them, PubMedBERT Table
  11).
"""

from typing import Iterable, List, Optional, Sequence

from ..metrics.tagging import OUTSIDE, get_entities, split_tag

SCHEMES = ("bio", "io", "bioes")
SCHEME_ALIASES = {"iob2": "bio", "bioul": "bioes"}
# The prefixes of each scheme, in the order label_set lists them.
SCHEME_PREFIXES = {"bio": ("B", "I"), "io": ("I",), "bioes": ("B", "I", "E", "S")}


def normalize_scheme(name: str) -> str:
    """The canonical name of a tagging scheme (``iob2`` -> ``bio``, ``bioul`` -> ``bioes``;
    case-insensitive)."""
    key = str(name).strip().lower()
    key = SCHEME_ALIASES.get(key, key)
    if key not in SCHEMES:
        raise ValueError(
            f"unknown tagging scheme {name!r}: expected one of bio (iob2), io, bioes (bioul)"
        )
    return key


def _tag(prefix: str, type_: str) -> str:
    """A tag from prefix and type; an empty type gives the bare prefix (``B``, ``I``)."""
    return f"{prefix}-{type_}" if type_ else prefix


def convert_tags(tags: Sequence[str], scheme: str) -> List[str]:
    """One sentence's tags (any of BIO, IOB1, IO, BIOES, BIOUL) rewritten in ``scheme``; chunks read
    as conlleval."""
    scheme = normalize_scheme(scheme)
    out = [OUTSIDE] * len(tags)
    for type_, start, end in get_entities(tags):
        inside = _tag("I", type_)
        for i in range(start, end):
            out[i] = inside
        if scheme == "bio":
            out[start] = _tag("B", type_)
        elif scheme == "bioes":
            if end - start == 1:
                out[start] = _tag("S", type_)
            else:
                out[start] = _tag("B", type_)
                out[end - 1] = _tag("E", type_)
    return out


def to_bio(tags: Sequence[str], scheme: Optional[str] = None) -> List[str]:
    """One sentence's tags (predicted in ``scheme``, or any scheme if None) in BIO, for scoring and
    output.

    The reading does not depend on the scheme: conlleval's rules already read every scheme (see the
    module docstring for ill-formed sequences); ``scheme`` is checked to be a known name."""
    if scheme is not None:
        normalize_scheme(scheme)
    return convert_tags(tags, "bio")


def label_set(tag_sequences: Iterable[Sequence[str]], scheme: str) -> List[str]:
    """Labels of ``scheme`` for every entity type seen: ``O`` first, then per type (sorted) the
    scheme's prefixes in the order B, I, E, S, all of them whether seen or not (so a converted
    dev/test tag is never missing).
    """
    prefixes = SCHEME_PREFIXES[normalize_scheme(scheme)]
    types = set()
    for i, tags in enumerate(tag_sequences):
        if isinstance(tags, str):
            raise ValueError(f"sentence {i}: expected a list of tags, got the string {tags!r}")
        for j, tag in enumerate(tags):
            try:
                prefix, type_ = split_tag(tag)
            except (ValueError, AttributeError, TypeError):
                raise ValueError(
                    f"sentence {i}, word {j}: tag {tag!r} is not O or a B-/I-/E-/S-/L-/U- tag"
                ) from None
            if prefix not in (OUTSIDE, "."):
                types.add(type_)
    return [OUTSIDE] + [_tag(prefix, type_) for type_ in sorted(types) for prefix in prefixes]


def entity_types(labels: Iterable[str]) -> List[str]:
    """The entity types (sorted) named by a list of labels."""
    types = set()
    for label in labels:
        prefix, type_ = split_tag(label)
        if prefix not in (OUTSIDE, "."):
            types.add(type_)
    return sorted(types)

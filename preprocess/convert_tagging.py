"""Tagging data from other sources -> CoNLL for the ``bio_tagging`` task (``token<TAB>tag``, blank line between
sentences).

``fairseq-bio-convert-tagging`` has two subcommands. Both write ``train.tsv`` / ``devel.tsv`` / ``test.tsv`` (the
task's default names), the document ids of each split (``<split>.pmids``, one per line, usable as ``--dev-pmids`` /
``--<split>-pmids`` input) and ``convert_stats.json``, every file atomically and only after all input has been read
and checked, so a bad input leaves nothing behind.

**ebm-nlp**: BLURB's PICO data (Gu et al. 2020, sec. 4.2) from the EBM-NLP release (Nye et al. 2018,
github.com/bepnye/EBM-NLP, ``ebm_nlp_2_00.tar.gz``, unpacked or not). BLURB "use[s] the original dataset and their
scripts for preprocessing", i.e. that repository's ``models/lstm-crf/build_data.py`` (its group ``p1_all``), which
this reproduces:

- labels are the aggregated phase-1 spans, ``annotations/aggregated/starting_spans/<element>/{train,test/gold}/
  <PMID>.AGGREGATED.ann`` (one 0/1 per line, for each line of ``documents/<PMID>.tokens``); the test set is the
  expert-annotated ``test/gold``, never ``test/crowd``;
- the three element files are read in the order participants, interventions, outcomes and the last non-zero one
  wins, so a word in an Intervention span inside a Participant span is ``I-INT`` and a word in both an Outcome and
  an Intervention span is ``I-OUT`` (about 3 % of PIO words; BLURB keeps these words, unlike SciBERT's release);
- IO tags ``I-PAR`` / ``I-INT`` / ``I-OUT`` / ``O``, BLURB's labels (``--scheme bio`` writes B-/I- instead);
- train = the train documents that are not gold test documents, of which 20 % are held out as dev
  (``int(0.2 * n)`` documents); a sentence ends after every ``.`` token.

Where build_data.py is irreproducible or silently lossy this differs, and says so: its dev documents are the first
20 % of a Python set (an order that changes with the interpreter's string hashing), here a seeded shuffle of the
sorted PMIDs (or the list given with ``--dev-pmids``); it truncates a document whose label file is longer or shorter
than its tokens, here that is an error naming the file; a document without one element's file is an error
(``--allow-missing-elements``: that element labels none of its words, which is what build_data.py does).

**pubtator**: offset annotations, PubTator (``PMID|t|title``, ``PMID|a|abstract``, then
``PMID<TAB>start<TAB>end<TAB>mention<TAB>type[<TAB>id...]`` lines, a blank line between documents; relation lines
such as CDR's ``PMID<TAB>CID<TAB>D1<TAB>D2`` are skipped) or BioC JSON (a collection, a list of documents,
PubTator3's ``{"PubTator3": [...]}`` or one document per line), to word tags the way BLURB's BC5CDR and
NCBI-disease files look: words cut by ``words_with_offsets`` (``Parkinson ' s``), ``B-<type>`` on the first word a
mention overlaps and ``I-<type>`` on the others, one sentence per block. Title and abstract (BioC: each passage)
are split into sentences on their own by the Punkt splitter trained on the input's texts, as
``fairseq-bio-extract`` does; offsets are mapped back exactly. ``--types`` keeps some types (BC5CDR-chem and
-disease are the CDR files with ``--types Chemical`` / ``--types Disease``); ``--rename OLD=NEW`` merges types
first (NCBI-disease's four classes into ``Disease``). Kept whole, and counted: a mention boundary inside a word
tags the whole word; a sentence boundary inside a mention joins the two sentences. Dropped, and counted: a
mention overlapping a word already tagged by an earlier (at the same start: longer) mention, the same mention
twice, discontinuous BioC annotations. A mention whose text differs from the document text at its offsets is an
error naming the file and line.
"""

import argparse
import dataclasses
import json
import random
import re
import tarfile
from bisect import bisect_left, bisect_right
from collections import Counter
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from fairseq_bio.data.conll import words_with_offsets, write_conll
from fairseq_bio.data.tag_schemes import convert_tags
from fairseq_bio.errors import json_error

from .common import PreprocessError, atomic_write, run_cli
from .sentences import DEFAULT_TRAINING_TEXTS, SentenceSplitter

SPLITS = ("train", "devel", "test")
STATS_FILE = "convert_stats.json"
MAX_EXAMPLES = 20  # examples of each counted oddity kept in the stats

Tagged = Tuple[List[str], List[str]]  # one sentence: words, tags


# ---------------------------------------------------------------------------------------------------
# Shared pieces: id lists, outputs


def _id_key(pmid: str):
    """Numeric PMIDs in numeric order, anything else after them in string order."""
    return (0, int(pmid), "") if pmid.isdigit() else (1, 0, pmid)


def read_id_list(path) -> List[Tuple[str, int]]:
    """``(id, line)`` of a list file: one PMID per line; blank lines and ``#`` comments are ignored."""
    path = Path(path)
    text = _decode(_read_bytes(path), str(path), "utf-8")
    ids: List[Tuple[str, int]] = []
    first: Dict[str, int] = {}
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if len(line.split()) != 1:
            raise PreprocessError(f"{path}:{number}: {line!r} is not one PMID (one per line expected)")
        if line in first:
            raise PreprocessError(f"{path}:{number}: PMID {line} listed twice (first at line {first[line]})")
        first[line] = number
        ids.append((line, number))
    if not ids:
        raise PreprocessError(f"{path}: no PMIDs in the list")
    return ids


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise PreprocessError(f"{path}: not found") from None
    except IsADirectoryError:
        raise PreprocessError(f"{path}: is a directory, not a file") from None


def _decode(data: bytes, where: str, encoding: str, hint: str = "") -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise PreprocessError(f"{where}:{line}: not valid {encoding} (byte 0x{data[e.start]:02x}){hint}") from None


def _check_outputs(out_dir: Path, splits: Iterable[str], overwrite: bool) -> List[Path]:
    """The files a conversion writes; refuse to replace any of them without ``overwrite``."""
    targets = [out_dir / f"{s}{ext}" for s in splits for ext in (".tsv", ".pmids")] + [out_dir / STATS_FILE]
    if not overwrite:
        for target in targets:
            if target.exists():
                raise PreprocessError(f"{target}: already exists (pass --overwrite to replace it)")
    return targets


def _write_outputs(out_dir: Path, splits: Dict[str, List[Tuple[str, List[Tagged]]]], stats) -> None:
    """``<split>.tsv`` and ``<split>.pmids`` for each split, then the stats; each file atomically."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for split, documents in splits.items():
        with atomic_write(out_dir / f"{split}.tsv") as f:
            for _, sentences in documents:
                write_conll(f, sentences)
        with atomic_write(out_dir / f"{split}.pmids") as f:
            f.writelines(f"{pmid}\n" for pmid, _ in documents)
    with atomic_write(out_dir / STATS_FILE) as f:
        json.dump(dataclasses.asdict(stats), f, indent=2)
        f.write("\n")


def _summary(stats) -> str:
    """``field: value`` lines of a stats dataclass; lists one item per line."""
    lines = []
    for f in dataclasses.fields(stats):
        value = getattr(stats, f.name)
        if isinstance(value, list):
            lines += [f"{f.name}: {item}" for item in value]
        else:
            lines.append(f"{f.name}: {value}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------
# EBM-NLP PICO


# (element folder, tag type) in build_data.py's reading order: on overlap the later element wins.
PICO_ELEMENTS = (("participants", "PAR"), ("interventions", "INT"), ("outcomes", "OUT"))
SPANS_DIR = "annotations/aggregated/starting_spans"
# Our split name -> the release's folder under each element.
EBM_PARTS = (("train", "train"), ("test", "test/gold"))
_LABEL_SEPARATORS = re.compile(r"[,\s]+")  # 2.00: one label per line; 1.00 used commas


@dataclasses.dataclass
class EbmNlpStats:
    """Summary of one EBM-NLP conversion (also written to ``convert_stats.json``)."""

    documents: Dict[str, int] = dataclasses.field(default_factory=dict)  # per split
    sentences: Dict[str, int] = dataclasses.field(default_factory=dict)
    words: Dict[str, int] = dataclasses.field(default_factory=dict)
    tagged_words: Dict[str, Dict[str, int]] = dataclasses.field(default_factory=dict)  # split -> tag -> words
    overlap_words: int = 0  # words inside spans of two or three elements (tagged with the last)
    train_in_test: int = 0  # release train documents dropped because they are gold test documents
    missing_element_files: int = 0  # with --allow-missing-elements
    dev_selection: str = ""
    scheme: str = "io"
    sentence_split: str = "period"


class _Release:
    """The files of an EBM-NLP release that the conversion reads: a directory, or the .tar.gz read in one pass."""

    def __init__(self, path: Path):
        self.path = path
        self.files: Dict[str, object] = {}  # relative path -> Path (directory) or bytes (archive)
        if path.is_dir():
            self._open_dir(path)
        elif path.is_file():
            self._open_tar(path)
        else:
            raise PreprocessError(f"{path}: not found (expected the EBM-NLP release: ebm_nlp_2_00/ or its .tar.gz)")

    def _open_dir(self, path: Path) -> None:
        root = path
        if not (root / "documents").is_dir():
            inner = [d for d in sorted(path.iterdir()) if (d / "documents").is_dir()]
            if len(inner) != 1:
                raise PreprocessError(
                    f"{path}: no documents/ folder; not an EBM-NLP release (expected ebm_nlp_2_00/ with documents/ "
                    "and annotations/)"
                )
            root = inner[0]
        self.root = f"{root}/"
        for p in (root / "documents").iterdir():
            if p.name.endswith(".tokens"):
                self.files[f"documents/{p.name}"] = p
        spans = root / SPANS_DIR
        if spans.is_dir():
            for p in spans.rglob("*.ann"):
                self.files[p.relative_to(root).as_posix()] = p

    def _open_tar(self, path: Path) -> None:
        prefix = None
        try:
            # Streaming mode: a .tar.gz does not seek, and the release holds tens of thousands of files we skip.
            with tarfile.open(path, mode="r|*") as tar:
                for member in tar:
                    if not member.isfile():
                        continue
                    name = member.name[2:] if member.name.startswith("./") else member.name
                    parts = name.split("/")
                    for anchor in ("documents", "annotations"):
                        if anchor in parts:
                            k = parts.index(anchor)
                            break
                    else:
                        continue
                    rel = "/".join(parts[k:])
                    wanted = (rel.startswith("documents/") and rel.endswith(".tokens")) or (
                        rel.startswith(SPANS_DIR + "/") and rel.endswith(".ann")
                    )
                    if wanted:
                        prefix = "/".join(parts[:k]) if prefix is None else prefix
                        self.files[rel] = tar.extractfile(member).read()
        except (tarfile.TarError, EOFError, OSError) as e:
            raise PreprocessError(f"{path}: not a readable EBM-NLP archive ({type(e).__name__}: {e})") from None
        if not any(rel.startswith("documents/") for rel in self.files):
            raise PreprocessError(f"{path}: no documents/*.tokens in the archive; not an EBM-NLP release")
        self.root = f"{path}:{prefix}/" if prefix else f"{path}:"

    def where(self, rel: str) -> str:
        """How messages name a file of the release (``<dir>/<rel>``, ``<archive>:<top dir>/<rel>``)."""
        return self.root + rel

    def names_in(self, rel_dir: str) -> List[str]:
        """Names of the files directly inside ``rel_dir``, hidden ones (macOS ``._*``) left out."""
        prefix = rel_dir.rstrip("/") + "/"
        names = (rel[len(prefix) :] for rel in self.files if rel.startswith(prefix))
        return sorted(name for name in names if "/" not in name and not name.startswith("."))

    def read(self, rel: str) -> bytes:
        source = self.files.get(rel)
        if source is None:
            raise PreprocessError(f"{self.where(rel)}: missing")
        return source if isinstance(source, bytes) else source.read_bytes()


def _ebm_annotation_files(release: _Release, element: str, part: str) -> Dict[str, str]:
    """PMID -> relative path of the aggregated annotation files of one element and part."""
    rel_dir = f"{SPANS_DIR}/{element}/{part}"
    found: Dict[str, str] = {}
    for name in release.names_in(rel_dir):
        pmid = name.split(".", 1)[0]
        if pmid in found:
            raise PreprocessError(f"{release.where(rel_dir + '/' + name)}: a second annotation file for PMID {pmid}")
        found[pmid] = f"{rel_dir}/{name}"
    if not found:
        raise PreprocessError(
            f"{release.where(rel_dir)}: no <PMID>.AGGREGATED.ann files; not the EBM-NLP 2.00 layout "
            f"({SPANS_DIR}/<element>/{{train,test/gold}}/)"
        )
    return found


def _ebm_tokens(release: _Release, pmid: str, encoding: str) -> List[str]:
    rel = f"documents/{pmid}.tokens"
    where = release.where(rel)
    lines = _decode(release.read(rel), where, encoding, "; pass --encoding if the .tokens files are not UTF-8").split(
        "\n"
    )
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise PreprocessError(f"{where}: no tokens (empty file)")
    tokens = []
    for number, token in enumerate(lines, start=1):
        token = token.rstrip("\r")
        if not token:
            raise PreprocessError(f"{where}:{number}: empty line (one token per line expected)")
        if any(c.isspace() for c in token):
            raise PreprocessError(
                f"{where}:{number}: token {token!r} contains whitespace (one token per line expected)"
            )
        tokens.append(token)
    return tokens


def _ebm_labels(release: _Release, rel: str) -> List[bool]:
    where = release.where(rel)
    labels = []
    for number, line in enumerate(_decode(release.read(rel), where, "utf-8").split("\n"), start=1):
        for value in _LABEL_SEPARATORS.split(line.strip()):
            if not value:
                continue
            if value not in ("0", "1"):
                raise PreprocessError(f"{where}:{number}: label {value!r} is not 0 or 1 (starting_spans labels)")
            labels.append(value == "1")
    return labels


def _ebm_document(
    release: _Release, pmid: str, files: Sequence[Optional[str]], encoding: str, stats: EbmNlpStats
) -> Tuple[List[str], List[str]]:
    """Tokens and one IO tag per token of one document; ``files``: its annotation file per element (or None)."""
    tokens = _ebm_tokens(release, pmid, encoding)
    tags = ["O"] * len(tokens)
    elements_per_word = [0] * len(tokens)
    for (_, type_), rel in zip(PICO_ELEMENTS, files):
        if rel is None:
            continue
        labels = _ebm_labels(release, rel)
        if len(labels) != len(tokens):
            raise PreprocessError(
                f"{release.where(rel)}: {len(labels)} labels for the {len(tokens)} tokens of "
                f"{release.where(f'documents/{pmid}.tokens')}"
            )
        tag = f"I-{type_}"
        for i, on in enumerate(labels):
            if on:
                tags[i] = tag  # later elements overwrite earlier ones, as build_data.py's "final_label"
                elements_per_word[i] += 1
    stats.overlap_words += sum(1 for n in elements_per_word if n > 1)
    return tokens, tags


def _period_sentences(tokens: List[str], tags: List[str]) -> List[Tagged]:
    """A sentence ends after every ``.`` token (build_data.py)."""
    sentences, start = [], 0
    for i, token in enumerate(tokens):
        if token == ".":
            sentences.append((tokens[start : i + 1], tags[start : i + 1]))
            start = i + 1
    if start < len(tokens):
        sentences.append((tokens[start:], tags[start:]))
    return sentences


def convert_ebm_nlp(
    release_path,
    out_dir,
    *,
    dev_fraction: float = 0.2,
    seed: int = 1,
    dev_pmids=None,
    scheme: str = "io",
    sentence_split: str = "period",
    allow_missing_elements: bool = False,
    encoding: str = "utf-8",
    overwrite: bool = False,
) -> EbmNlpStats:
    """EBM-NLP (directory or .tar.gz) -> ``out_dir/{train,devel,test}.tsv`` as BLURB's PICO task (module docstring)."""
    if scheme not in ("io", "bio"):
        raise PreprocessError(f"--scheme {scheme}: expected io (BLURB) or bio")
    if sentence_split not in ("period", "document"):
        raise PreprocessError(f"--sentences {sentence_split}: expected period or document")
    if dev_pmids is None and not 0.0 < dev_fraction < 1.0:
        raise PreprocessError(f"--dev-fraction {dev_fraction}: expected a number in (0, 1)")
    out_dir = Path(out_dir)
    _check_outputs(out_dir, SPLITS, overwrite)
    release = _Release(Path(release_path))
    stats = EbmNlpStats(scheme=scheme, sentence_split=sentence_split)

    # split -> PMID -> annotation file per element (None: missing)
    parts: Dict[str, Dict[str, List[Optional[str]]]] = {}
    for split, part in EBM_PARTS:
        per_element = [_ebm_annotation_files(release, element, part) for element, _ in PICO_ELEMENTS]
        pmids = set().union(*per_element)
        parts[split] = {}
        for pmid in sorted(pmids, key=_id_key):
            files = [found.get(pmid) for found in per_element]
            for (element, _), rel in zip(PICO_ELEMENTS, files):
                if rel is None:
                    expected = f"{SPANS_DIR}/{element}/{part}/{pmid}.AGGREGATED.ann"
                    if not allow_missing_elements:
                        raise PreprocessError(
                            f"{release.where(expected)}: missing, though PMID {pmid} has other elements' labels "
                            "(--allow-missing-elements reads it as unlabelled)"
                        )
                    stats.missing_element_files += 1
            parts[split][pmid] = files

    test_ids = set(parts["test"])
    pool = [pmid for pmid in parts["train"] if pmid not in test_ids]  # sorted
    stats.train_in_test = len(parts["train"]) - len(pool)
    if dev_pmids is not None:
        listed = read_id_list(dev_pmids)
        pool_set = set(pool)
        for pmid, line in listed:
            if pmid not in pool_set:
                why = "a gold test document" if pmid in test_ids else "not an EBM-NLP train document"
                raise PreprocessError(f"{dev_pmids}:{line}: PMID {pmid} is {why}")
        dev = {pmid for pmid, _ in listed}
        stats.dev_selection = f"listed in {dev_pmids}"
    else:
        order = list(pool)
        random.Random(seed).shuffle(order)
        dev = set(order[: int(len(order) * dev_fraction)])
        stats.dev_selection = f"int({dev_fraction} * {len(pool)}) = {len(dev)} train documents, seed {seed}"
    if not dev or len(dev) == len(pool):
        raise PreprocessError(f"{release.path}: {len(pool)} train documents cannot give both a train and a dev split")

    assignment = {
        "train": [p for p in pool if p not in dev],
        "devel": [p for p in pool if p in dev],
        "test": list(parts["test"]),
    }
    outputs: Dict[str, List[Tuple[str, List[Tagged]]]] = {}
    for split, pmids in assignment.items():
        files_of = parts["test" if split == "test" else "train"]
        documents = []
        tag_counts: Counter = Counter()
        for pmid in pmids:
            tokens, tags = _ebm_document(release, pmid, files_of[pmid], encoding, stats)
            if sentence_split == "period":
                sentences = _period_sentences(tokens, tags)
            else:
                sentences = [(tokens, tags)]
            if scheme == "bio":
                sentences = [(words, convert_tags(t, "bio")) for words, t in sentences]
            for _, t in sentences:
                tag_counts.update(t)
            documents.append((pmid, sentences))
        outputs[split] = documents
        stats.documents[split] = len(documents)
        stats.sentences[split] = sum(len(s) for _, s in documents)
        stats.words[split] = sum(tag_counts.values())
        stats.tagged_words[split] = dict(sorted(tag_counts.items()))
    _write_outputs(out_dir, outputs, stats)
    return stats


# ---------------------------------------------------------------------------------------------------
# PubTator / BioC JSON


@dataclasses.dataclass
class Mention:
    """A mention: character offsets into its document's text, the text there, its type, and where it was read."""

    start: int
    end: int
    text: str
    type: str
    where: str


@dataclasses.dataclass
class Document:
    """A document: its id, full text, the spans of text split into sentences on their own, and its mentions."""

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
    mentions: Dict[str, Dict[str, int]] = dataclasses.field(default_factory=dict)  # split -> type -> kept mentions
    mentions_read: int = 0
    types_read: Dict[str, int] = dataclasses.field(default_factory=dict)  # mentions per type (after --rename)
    other_types: Dict[str, int] = dataclasses.field(default_factory=dict)  # dropped by --types
    boundary_inside_word: int = 0  # kept; the whole word is tagged
    overlapping_dropped: int = 0
    duplicates_dropped: int = 0
    discontinuous_dropped: int = 0  # BioC annotations with several locations
    sentence_joins: int = 0  # sentence boundaries removed because a mention crossed them
    relations_skipped: int = 0
    unassigned_documents: int = 0  # in the inputs but in none of the --<split>-pmids lists
    examples: List[str] = dataclasses.field(default_factory=list)


_TEXT_LINE = re.compile(r"^([^|\t]+)\|([ta])\|(.*)$")
_INT = re.compile(r"^-?\d+$")


def read_pubtator(path, stats: Optional[PubtatorStats] = None) -> List[Document]:
    """Documents of a PubTator file; every mention checked against the text (one-line errors with file:line)."""
    path = Path(path)
    text = _decode(_read_bytes(path), str(path), "utf-8")
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
                current = dict(pmid=pmid, title=body, abstract=None, mentions=[], where=f"{path}:{number}")
            elif current is None or current["pmid"] != pmid:
                raise PreprocessError(f"{path}:{number}: abstract of PMID {pmid} without its title line before it")
            elif current["abstract"] is not None or current["mentions"]:
                raise PreprocessError(f"{path}:{number}: a second abstract line, or one after the annotations")
            else:
                current["abstract"] = body
            continue
        columns = line.split("\t")
        if len(columns) < 3:
            raise PreprocessError(
                f"{path}:{number}: not a title (PMID|t|), abstract (PMID|a|), mention or relation line"
            )
        if current is None:
            raise PreprocessError(f"{path}:{number}: an annotation line before any title line (PMID|t|title)")
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
            current["mentions"].append(Mention(start, end, columns[3], columns[4].strip(), f"{path}:{number}"))
        elif stats is not None:
            stats.relations_skipped += 1
    close()
    if not documents:
        raise PreprocessError(f"{path}: no documents (expected PubTator: PMID|t|title, PMID|a|abstract, mentions)")
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
        _check_mention(document, mention)
    return document


def _check_mention(document: Document, mention: Mention) -> None:
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
    """Documents of a BioC JSON file (collection, list of documents, PubTator3 export, or one document per line)."""
    path = Path(path)
    text = _decode(_read_bytes(path), str(path), "utf-8")
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
    raise PreprocessError(f"{where}: not BioC JSON (expected a collection, documents or a document with passages)")


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
                raise PreprocessError(f"{where}, passage {p + 1}: sentence-level BioC is not supported (no text)")
            body = ""
        if not isinstance(offset, int) or not isinstance(body, str):
            raise PreprocessError(f"{where}, passage {p + 1}: offset must be a number and text a string")
        if offset < len(text):
            raise PreprocessError(f"{where}, passage {p + 1}: offset {offset} overlaps the passage before")
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
            mentions.append(Mention(start, start + length, str(annotation.get("text", "")), str(type_), ann_where))
    document = Document(pmid, text, segments, mentions, where)
    for mention in mentions:
        _check_mention(document, mention)
    return document


def read_documents(path, stats: Optional[PubtatorStats] = None) -> List[Document]:
    """Documents of a PubTator or BioC JSON file (told apart by the first character)."""
    path = Path(path)
    head = _read_bytes(path)[:4096].lstrip()
    if head[:1] in (b"{", b"["):
        return read_bioc_json(path, stats)
    return read_pubtator(path, stats)


def _sentence_spans(splitter: SentenceSplitter, text: str, start: int, end: int) -> List[Tuple[int, int]]:
    """Character spans of the sentences of ``text[start:end]``, from the splitter's whitespace-collapsed output."""
    segment = text[start:end]
    # The splitter drops only whitespace, so the k-th non-space character of its output is the k-th of the input.
    visible = [i for i, c in enumerate(segment) if not c.isspace()]
    spans, k = [], 0
    for sentence in splitter.split(segment):
        n = len(sentence) - sentence.count(" ")
        spans.append((start + visible[k], start + visible[k + n - 1] + 1))
        k += n
    if k != len(visible):
        raise PreprocessError(f"sentence splitter lost characters of {segment[:60]!r}")  # a bug, not bad input
    return spans


def _note(stats: PubtatorStats, message: str) -> None:
    if len(stats.examples) < MAX_EXAMPLES:
        stats.examples.append(message)


def tag_document(
    document: Document,
    splitter: SentenceSplitter,
    stats: PubtatorStats,
    types: Optional[Set[str]] = None,
    rename: Optional[Dict[str, str]] = None,
) -> Tuple[List[Tagged], Counter]:
    """BIO-tagged sentences of one document, and its kept mentions per type."""
    rename = rename or {}
    words = words_with_offsets(document.text)
    starts = [w[1] for w in words]
    ends = [w[2] for w in words]
    sentences = [span for a, b in document.segments for span in _sentence_spans(splitter, document.text, a, b)]
    sentence_starts = [a for a, _ in sentences]
    sentence_of = [bisect_right(sentence_starts, s) - 1 for s in starts]

    tags = ["O"] * len(words)
    kept: Counter = Counter()
    seen = set()
    joined = [False] * len(sentences)  # joined[i]: sentence i continues into sentence i + 1
    # Earlier mentions first, the longer one first at the same start: that is the one kept on overlap.
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
            _note(stats, f"{mention.where}: overlaps an earlier mention; dropped: {mention.text!r}")
            continue
        if starts[first] < mention.start or ends[last] > mention.end:
            stats.boundary_inside_word += 1
            whole = document.text[starts[first] : ends[last]]
            _note(stats, f"{mention.where}: boundary inside a word; tagged {whole!r} for {mention.text!r}")
        tags[first] = f"B-{type_}"
        for i in range(first + 1, last + 1):
            tags[i] = f"I-{type_}"
        kept[type_] += 1
        for s in range(sentence_of[first], sentence_of[last]):
            if not joined[s]:
                joined[s] = True
                stats.sentence_joins += 1
                _note(stats, f"{mention.where}: sentence boundary inside {mention.text!r}; sentences joined")

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


def convert_pubtator(
    out_dir,
    *,
    split_files: Optional[Dict[str, Sequence]] = None,
    inputs: Optional[Sequence] = None,
    split_pmids: Optional[Dict[str, object]] = None,
    types: Optional[Sequence[str]] = None,
    rename: Optional[Sequence[str]] = None,
    sentence_training_texts: int = DEFAULT_TRAINING_TEXTS,
    overwrite: bool = False,
) -> PubtatorStats:
    """PubTator/BioC JSON -> ``out_dir/<split>.tsv``; splits from input files per split (``split_files``) or from
    PMID lists over ``inputs`` (``split_pmids``: split -> list file)."""
    split_files = {s: list(f) for s, f in (split_files or {}).items() if f}
    split_pmids = {s: p for s, p in (split_pmids or {}).items() if p}
    if bool(split_files) == bool(split_pmids):
        raise PreprocessError(
            "give the splits either as input files (--train/--devel/--test FILE...) or as PMID lists over the "
            "inputs (INPUT... --train-pmids/--devel-pmids/--test-pmids FILE)"
        )
    if split_pmids and not inputs:
        raise PreprocessError("--<split>-pmids lists need input files to pick the documents from")
    if split_files and inputs:
        raise PreprocessError(
            "positional inputs are only used with --<split>-pmids; with --train/--devel/--test, drop them"
        )
    for split in list(split_files) + list(split_pmids):
        if split not in SPLITS:
            raise PreprocessError(f"unknown split {split!r}: expected one of {', '.join(SPLITS)}")
    rename_map = _parse_rename(rename)
    wanted_types = _parse_types(types)
    if sentence_training_texts < 1:
        raise PreprocessError("--sentence-training-texts must be >= 1")
    out_dir = Path(out_dir)
    splits = [s for s in SPLITS if s in split_files or s in split_pmids]
    _check_outputs(out_dir, splits, overwrite)
    stats = PubtatorStats()

    # Read and check everything first.
    read: Dict[str, Tuple[Document, str]] = {}  # pmid -> (document, split or "")
    ordered: List[Tuple[Document, str]] = []
    for split, paths in (split_files.items() if split_files else [("", inputs)]):
        for path in paths:
            for document in read_documents(path, stats):
                if document.pmid in read:
                    raise PreprocessError(
                        f"{document.where}: document {document.pmid} already read at {read[document.pmid][0].where}"
                    )
                read[document.pmid] = (document, split)
                ordered.append((document, split))
    if split_pmids:
        owner: Dict[str, Tuple[str, object]] = {}
        for split, list_path in split_pmids.items():
            for pmid, line in read_id_list(list_path):
                if pmid in owner:
                    raise PreprocessError(f"{list_path}:{line}: PMID {pmid} is also in {owner[pmid][1]}")
                if pmid not in read:
                    raise PreprocessError(f"{list_path}:{line}: PMID {pmid} is in none of the input files")
                owner[pmid] = (split, list_path)
        ordered = [(d, owner[d.pmid][0]) for d, _ in ordered if d.pmid in owner]
        stats.unassigned_documents = len(read) - len(ordered)

    splitter = SentenceSplitter.train(
        (document.text[a:b] for document, _ in ordered for a, b in document.segments), sentence_training_texts
    )
    outputs: Dict[str, List[Tuple[str, List[Tagged]]]] = {s: [] for s in splits}
    kept_by_split: Dict[str, Counter] = {s: Counter() for s in splits}
    for document, split in ordered:
        sentences, kept = tag_document(document, splitter, stats, wanted_types, rename_map)
        outputs[split].append((document.pmid, sentences))
        kept_by_split[split].update(kept)
    for type_ in sorted(wanted_types or ()):
        if type_ not in stats.types_read:
            seen = ", ".join(sorted(stats.types_read)) or "none"
            raise PreprocessError(f"--types {type_}: no mention has this type (types in the input: {seen})")
    for split in splits:
        if not outputs[split]:
            raise PreprocessError(f"split {split}: no documents")
        stats.documents[split] = len(outputs[split])
        stats.sentences[split] = sum(len(s) for _, s in outputs[split])
        stats.words[split] = sum(len(w) for _, s in outputs[split] for w, _ in s)
        stats.mentions[split] = dict(sorted(kept_by_split[split].items()))
    _write_outputs(out_dir, outputs, stats)
    return stats


# ---------------------------------------------------------------------------------------------------
# Command line


def cli_main(argv=None) -> None:
    """``fairseq-bio-convert-tagging``: EBM-NLP PICO or PubTator/BioC offset annotations -> CoNLL splits."""

    def main(argv):
        parser = argparse.ArgumentParser(
            prog="fairseq-bio-convert-tagging",
            description="Convert tagging data to the CoNLL splits bio_tagging reads (train.tsv, devel.tsv, test.tsv).",
        )
        sub = parser.add_subparsers(dest="command", required=True)

        ebm = sub.add_parser("ebm-nlp", help="EBM-NLP PICO as BLURB uses it (I-PAR/I-INT/I-OUT, gold test set)")
        ebm.add_argument("release", help="ebm_nlp_2_00/ (unpacked) or ebm_nlp_2_00.tar.gz")
        ebm.add_argument("--out", required=True, help="output directory")
        ebm.add_argument("--dev-fraction", type=float, default=0.2, help="train documents held out as dev (BLURB: 0.2)")
        ebm.add_argument("--seed", type=int, default=1, help="seed of the dev selection")
        ebm.add_argument("--dev-pmids", help="file of dev PMIDs, one per line (instead of --dev-fraction/--seed)")
        ebm.add_argument("--scheme", choices=("io", "bio"), default="io", help="tags: io (BLURB's I-PAR...) or bio")
        ebm.add_argument(
            "--sentences",
            choices=("period", "document"),
            default="period",
            help="period: a sentence ends after every '.' token (BLURB/build_data.py); document: one per abstract",
        )
        ebm.add_argument(
            "--allow-missing-elements",
            action="store_true",
            help="a document without one element's annotation file gets no labels from it (instead of an error)",
        )
        ebm.add_argument("--encoding", default="utf-8", help="encoding of the .tokens files")
        ebm.add_argument("--overwrite", action="store_true", help="replace existing output files")

        pt = sub.add_parser("pubtator", help="PubTator or BioC JSON offset annotations -> BIO tags")
        pt.add_argument("inputs", nargs="*", help="input files, split by the --<split>-pmids lists")
        pt.add_argument("--out", required=True, help="output directory")
        for split in SPLITS:
            pt.add_argument(f"--{split}", nargs="+", metavar="FILE", help=f"input files of the {split} split")
        for split in SPLITS:
            pt.add_argument(f"--{split}-pmids", metavar="FILE", help=f"PMIDs of the {split} split, one per line")
        pt.add_argument("--types", nargs="+", help="keep only these mention types (after --rename), e.g. Disease")
        pt.add_argument(
            "--rename", nargs="+", metavar="OLD=NEW", help="rename mention types, e.g. SpecificDisease=Disease"
        )
        pt.add_argument(
            "--sentence-training-texts",
            type=int,
            default=DEFAULT_TRAINING_TEXTS,
            help="titles/abstracts used to train the Punkt sentence splitter",
        )
        pt.add_argument("--overwrite", action="store_true", help="replace existing output files")

        args = parser.parse_args(argv)
        if args.command == "ebm-nlp":
            stats = convert_ebm_nlp(
                args.release,
                args.out,
                dev_fraction=args.dev_fraction,
                seed=args.seed,
                dev_pmids=args.dev_pmids,
                scheme=args.scheme,
                sentence_split=args.sentences,
                allow_missing_elements=args.allow_missing_elements,
                encoding=args.encoding,
                overwrite=args.overwrite,
            )
        else:
            stats = convert_pubtator(
                args.out,
                split_files={s: getattr(args, s) for s in SPLITS},
                inputs=args.inputs,
                split_pmids={s: getattr(args, f"{s}_pmids") for s in SPLITS},
                types=args.types,
                rename=args.rename,
                sentence_training_texts=args.sentence_training_texts,
                overwrite=args.overwrite,
            )
        print(_summary(stats))

    run_cli("fairseq-bio-convert-tagging", main, argv)


if __name__ == "__main__":
    cli_main()

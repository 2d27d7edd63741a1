"""``fairseq-bio-convert-tagging ebm-nlp``: BLURB's PICO data (Gu et al. 2020, sec. 4.2) from the
EBM-NLP release (Nye et al. 2018, github.com/bepnye/EBM-NLP, ``ebm_nlp_2_00.tar.gz``, unpacked or
not). BLURB "use[s] the original dataset and their scripts for preprocessing", i.e. that
repository's ``models/lstm-crf/build_data.py`` (its group ``p1_all``), which this reproduces
(``convert_ebm_nlp`` says how, and where it differs).

Labels are the aggregated phase-1 spans; the test set is the expert ``test/gold``. IO tags
``I-PAR`` / ``I-INT`` / ``I-OUT`` / ``O`` (``--scheme bio``: B-/I-); a word in two elements' spans
takes the last of participants, interventions, outcomes (``--overlap joint``: one joint type,
PubMedBERT sec. 4.2).
"""

import dataclasses
import random
import re
import tarfile
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_bio.data.tag_schemes import convert_tags
from fairseq_bio.metrics.tagging import JOINT

from .common import PreprocessError
from .tagging_outputs import (
    SPLITS,
    Tagged,
    check_outputs,
    decode,
    id_key,
    read_id_list,
    write_outputs,
)


# ---------------------------------------------------------------------------------------------------
# EBM-NLP PICO


# (element folder, tag type) in build_data.py's reading order: on overlap the later element wins.
PICO_ELEMENTS = (("participants", "PAR"), ("interventions", "INT"), ("outcomes", "OUT"))
SPANS_DIR = "annotations/aggregated/starting_spans"
# A word of several elements: the last element's tag (build_data.py, BLURB), or all of them as one
# joint type.
OVERLAP_CHOICES = ("last", "joint")
# Our split name -> the release's folder under each element.
EBM_PARTS = (("train", "train"), ("test", "test/gold"))
_LABEL_SEPARATORS = re.compile(r"[,\s]+")  # 2.00: one label per line; 1.00 used commas


@dataclasses.dataclass
class EbmNlpStats:
    """Summary of one EBM-NLP conversion (also written to ``convert_stats.json``)."""

    documents: Dict[str, int] = dataclasses.field(default_factory=dict)  # per split
    sentences: Dict[str, int] = dataclasses.field(default_factory=dict)
    words: Dict[str, int] = dataclasses.field(default_factory=dict)
    tagged_words: Dict[str, Dict[str, int]] = dataclasses.field(
        default_factory=dict
    )  # split -> tag -> words
    overlap_words: int = 0  # words inside spans of two or three elements (tagged with the last)
    train_in_test: int = 0  # release train documents dropped because they are gold test documents
    missing_element_files: int = 0  # with --allow-missing-elements
    dev_selection: str = ""
    scheme: str = "io"
    sentence_split: str = "period"
    overlap: str = "last"


class _Release:
    """The files of an EBM-NLP release that the conversion reads: a directory, or the .tar.gz read
    in one pass."""

    def __init__(self, path: Path):
        self.path = path
        self.files: Dict[str, object] = {}  # relative path -> Path (directory) or bytes (archive)
        if path.is_dir():
            self._open_dir(path)
        elif path.is_file():
            self._open_tar(path)
        else:
            raise PreprocessError(
                f"{path}: not found (expected the EBM-NLP release: ebm_nlp_2_00/ or its .tar.gz)"
            )

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
            # Streaming mode: a .tar.gz does not seek, and the release holds tens of thousands of
            # files we skip.
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
            raise PreprocessError(
                f"{path}: not a readable EBM-NLP archive ({type(e).__name__}: {e})"
            ) from None
        if not any(rel.startswith("documents/") for rel in self.files):
            raise PreprocessError(
                f"{path}: no documents/*.tokens in the archive; not an EBM-NLP release"
            )
        self.root = f"{path}:{prefix}/" if prefix else f"{path}:"

    def where(self, rel: str) -> str:
        """How messages name a file of the release (``<dir>/<rel>``,
        ``<archive>:<top dir>/<rel>``)."""
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
            raise PreprocessError(
                f"{release.where(rel_dir + '/' + name)}: a second annotation file for PMID {pmid}"
            )
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
    lines = decode(
        release.read(rel), where, encoding, "; pass --encoding if the .tokens files are not UTF-8"
    ).split("\n")
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
    for number, line in enumerate(decode(release.read(rel), where, "utf-8").split("\n"), start=1):
        for value in _LABEL_SEPARATORS.split(line.strip()):
            if not value:
                continue
            if value not in ("0", "1"):
                raise PreprocessError(
                    f"{where}:{number}: label {value!r} is not 0 or 1 (starting_spans labels)"
                )
            labels.append(value == "1")
    return labels


def _ebm_document(
    release: _Release,
    pmid: str,
    files: Sequence[Optional[str]],
    encoding: str,
    overlap: str,
    stats: EbmNlpStats,
) -> Tuple[List[str], List[str]]:
    """Tokens and one IO tag per token of one document; ``files``: its annotation file per element
    (or None). A word of several elements: the last one's tag (``overlap`` last), or their joint
    type (joint)."""
    tokens = _ebm_tokens(release, pmid, encoding)
    elements: List[List[str]] = [[] for _ in tokens]
    for (_, type_), rel in zip(PICO_ELEMENTS, files):
        if rel is None:
            continue
        labels = _ebm_labels(release, rel)
        if len(labels) != len(tokens):
            raise PreprocessError(
                f"{release.where(rel)}: {len(labels)} labels for the {len(tokens)} tokens of "
                f"{release.where(f'documents/{pmid}.tokens')}"
            )
        for i, on in enumerate(labels):
            if on:
                elements[i].append(type_)
    stats.overlap_words += sum(1 for types in elements if len(types) > 1)
    if overlap == "joint":
        return tokens, [f"I-{JOINT.join(types)}" if types else "O" for types in elements]
    # later elements overwrite earlier ones, as build_data.py's "final_label"
    return tokens, [f"I-{types[-1]}" if types else "O" for types in elements]


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


# How build_data.py is reproduced: labels are
# annotations/aggregated/starting_spans/<element>/{train,test/gold}/ <PMID>.AGGREGATED.ann (one 0/1
# per line of documents/<PMID>.tokens), never test/crowd. The element files are read in the order
# participants, interventions, outcomes and the last non-zero one wins (about 3 % of PIO words;
# BLURB keeps these words, unlike SciBERT's release); --overlap joint keeps every element as one
# joint type (I-PAR+INT, ...), which the tagger learns as a class and the word-level PICO score
# counts for each element. Train is the train documents that are not gold test documents, 20 % of
# them held out as dev (int(0.2 * n)); a sentence ends after every "." token. Where build_data.py
# is irreproducible or silently lossy this differs: its dev documents are the first 20 % of a
# Python set (an order that changes with string hashing), here a seeded shuffle of the sorted PMIDs
# (or --dev-pmids); it truncates a document whose label file is longer or shorter than its tokens,
# here an error naming the file; a document without one element's file is an error
# (--allow-missing-elements: that element labels none of its words, as build_data.py does).
def convert_ebm_nlp(
    release_path,
    out_dir,
    *,
    dev_fraction: float = 0.2,
    seed: int = 1,
    dev_pmids=None,
    scheme: str = "io",
    sentence_split: str = "period",
    overlap: str = "last",
    allow_missing_elements: bool = False,
    encoding: str = "utf-8",
    overwrite: bool = False,
) -> EbmNlpStats:
    """EBM-NLP (directory or .tar.gz) -> ``out_dir/{train,devel,test}.tsv`` as BLURB's PICO task
    (module docstring)."""
    if scheme not in ("io", "bio"):
        raise PreprocessError(f"--scheme {scheme}: expected io (BLURB) or bio")
    if sentence_split not in ("period", "document"):
        raise PreprocessError(f"--sentences {sentence_split}: expected period or document")
    if overlap not in OVERLAP_CHOICES:
        raise PreprocessError(f"--overlap {overlap}: expected last (BLURB, build_data.py) or joint")
    if dev_pmids is None and not 0.0 < dev_fraction < 1.0:
        raise PreprocessError(f"--dev-fraction {dev_fraction}: expected a number in (0, 1)")
    out_dir = Path(out_dir)
    check_outputs(out_dir, SPLITS, overwrite)
    release = _Release(Path(release_path))
    stats = EbmNlpStats(scheme=scheme, sentence_split=sentence_split, overlap=overlap)

    # split -> PMID -> annotation file per element (None: missing)
    parts: Dict[str, Dict[str, List[Optional[str]]]] = {}
    for split, part in EBM_PARTS:
        per_element = [
            _ebm_annotation_files(release, element, part) for element, _ in PICO_ELEMENTS
        ]
        pmids = set().union(*per_element)
        parts[split] = {}
        for pmid in sorted(pmids, key=id_key):
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
                why = (
                    "a gold test document" if pmid in test_ids else "not an EBM-NLP train document"
                )
                raise PreprocessError(f"{dev_pmids}:{line}: PMID {pmid} is {why}")
        dev = {pmid for pmid, _ in listed}
        stats.dev_selection = f"listed in {dev_pmids}"
    else:
        order = list(pool)
        random.Random(seed).shuffle(order)
        dev = set(order[: int(len(order) * dev_fraction)])
        stats.dev_selection = (
            f"int({dev_fraction} * {len(pool)}) = {len(dev)} train documents, seed {seed}"
        )
    if not dev or len(dev) == len(pool):
        raise PreprocessError(
            f"{release.path}: {len(pool)} train documents cannot give both a train and a dev split"
        )

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
            tokens, tags = _ebm_document(release, pmid, files_of[pmid], encoding, overlap, stats)
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
    write_outputs(out_dir, outputs, stats)
    return stats

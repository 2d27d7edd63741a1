"""Extract clean pretraining text from MEDLINE/PubMed XML, PMC articles, plain-text folders and
MIMIC-III notes.

Output (``train.txt`` and ``valid.txt`` in the output directory): per document the title line, then
the abstract (then, for PMC, the body paragraphs), one sentence per line, documents separated by
exactly one blank line -- the layout fairseq's ``sample_break_mode=complete_doc`` expects. Inputs
are files or directories (searched for ``*.xml[.gz]``, ``*.nxml``, ``*.txt`` and
``NOTEEVENTS*.csv[.gz]``); ``sources`` reads each kind and ``mimic`` the notes. When an id occurs
more than once, the record that comes last in file-name order wins, as in MEDLINE's update files.
Usage: docs/pretraining.md.
"""

import dataclasses
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, List, NamedTuple, Optional, Sequence, Union

import numpy as np

from fairseq_bio.cli.options import Parser, add_no_progress, add_out, add_overwrite, run_cli
from fairseq_bio.data.sentence_splitter import DEFAULT_TRAINING_TEXTS, SentenceSplitter
from fairseq_bio.files import (
    NoSpaceError,
    atomic_write,
    check_destination,
    make_temp_dir,
    no_space,
    remove_temp_dir,
    replace_dir,
)

from .common import PreprocessError, worker_pool
from .mimic import DEID_MODES, NOTES_SUFFIXES, NoteOptions, NoteStats, note_options
from .sources import (
    Deletion,
    Document,
    InputFile,
    Stripe,
    describe_error,
    find_input_files,
    iter_records,
)

# Per-record status codes kept for the merge pass.
OK, NO_ABSTRACT, TOO_SHORT, DELETED = 0, 1, 2, 3

_PMC_KEY_OFFSET = 1 << 40  # PMIDs and PMCIDs share one int64 key space
_HASH_KEY_FLAG = 1 << 62
_NO_DEDUPE = -1

# the script, and what its output directory is recorded as made by (fairseq_bio.files)
EXTRACT = "fairseq-bio-extract"
# The seed papers' corpora (--preset): the options each sets, and where the paper says so.
PRESETS = {
    # PubMedBERT (seed 001 sec. 6.1): "we filter out any abstracts with less than 128 words to
    # reduce noise" (counted as too_short in extract_stats.json)
    "pubmedbert": dict(min_words=128),
}
OUTPUT_NAMES = ("train.txt", "valid.txt", "extract_stats.json")


@dataclasses.dataclass
class ExtractStats:
    """Summary of one extraction (also written to ``extract_stats.json``)."""

    files: int = 0  # input files read successfully
    documents: int = 0  # article/document records parsed (deletion entries excluded)
    with_abstract: int = 0  # records with abstract/body text
    written: int = 0  # = train_documents + valid_documents
    train_documents: int = 0
    valid_documents: int = 0
    duplicates: int = 0  # records superseded by a later record with the same id
    deleted: int = 0  # records whose id was deleted by a later <DeleteCitation>
    too_short: int = 0  # winning records under --min-words (PubMedBERT's short abstracts dropped)
    no_abstract: int = 0  # winning records without abstract/body text
    skipped: int = 0  # bad files skipped with --skip-bad-files
    sentences: int = 0  # lines written, titles included
    words: int = 0  # whitespace-separated words written, titles included
    skipped_files: List[str] = dataclasses.field(default_factory=list)
    files_without_abstracts: List[str] = dataclasses.field(default_factory=list)
    notes: NoteStats = dataclasses.field(
        default_factory=NoteStats
    )  # MIMIC-III NOTEEVENTS rows (of good files)
    input_mb: float = 0.0  # bytes read from disk (compressed size for .gz)
    xml_mb: float = 0.0  # uncompressed XML/text bytes parsed
    seconds: float = 0.0
    mb_per_s: float = 0.0  # uncompressed MB per second, end to end
    min_words: int = 0
    preset: str = ""  # --preset (PRESETS), when given
    valid_fraction: float = 0.0
    max_docs_per_file: Optional[int] = None
    workers: int = 1
    train_path: str = ""
    valid_path: str = ""

    def summary(self) -> str:
        """Human-readable multi-line summary."""
        skip = {"skipped_files", "files_without_abstracts", "notes"}
        lines = [
            f"{f.name}: {getattr(self, f.name)}"
            for f in dataclasses.fields(self)
            if f.name not in skip
        ]
        if self.notes.read:
            n = self.notes
            lines.append(
                f"notes: {n.read} read, {n.kept} kept, {n.skipped_category} skipped by category, "
                f"{n.skipped_iserror} skipped as ISERROR"
            )
        lines += [f"skipped file: {entry}" for entry in self.skipped_files]
        lines += [f"file without abstracts: {name}" for name in self.files_without_abstracts]
        return "\n".join(lines)


def preset_options(preset: Optional[str], min_words: Optional[int]) -> dict:
    """The options of ``preset`` (none: the defaults) with those given beside it, checked against
    it (one-line error on a contradiction, as fairseq-bio-vocab's presets)."""
    if preset is not None and preset not in PRESETS:
        raise PreprocessError(f"unknown --preset {preset!r} (choose from {', '.join(PRESETS)})")
    options = dict(PRESETS[preset]) if preset else {"min_words": 0}
    if min_words is not None and preset and min_words != options["min_words"]:
        raise PreprocessError(
            f"--preset {preset} sets min_words={options['min_words']}; --min-words {min_words} "
            "contradicts it (give one or the other)"
        )
    return {**options, **({} if min_words is None else {"min_words": min_words})}


# ---------------------------------------------------------------------------------------------------
# Per-file worker


def _in_valid(doc_id: str, valid_fraction: float) -> bool:
    """Deterministic document-level split: a hash of the id, stable across runs and machines."""
    if valid_fraction <= 0:
        return False
    digest = hashlib.blake2b(doc_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64 < valid_fraction


def _dedupe_key(doc_id: str) -> int:
    kind, _, value = doc_id.partition(":")
    if kind == "txt":
        return _NO_DEDUPE
    if kind in ("pmid", "pmc") and value.isdigit() and int(value) < _PMC_KEY_OFFSET:
        return int(value) + (_PMC_KEY_OFFSET if kind == "pmc" else 0)
    digest = hashlib.blake2b(doc_id.encode("utf-8"), digest_size=7).digest()
    return _HASH_KEY_FLAG | int.from_bytes(digest, "big")


class _Task(NamedTuple):
    file_index: int
    source: InputFile
    stripe: Stripe
    shard: Path
    max_docs: Optional[int]
    min_words: int
    valid_fraction: float
    notes: NoteOptions


@dataclasses.dataclass
class _FileResult:
    """What one task found; the arrays hold one entry per record of its stripe, in file order."""

    task: _Task
    error: Optional[str] = None
    xml_bytes: int = 0
    documents: int = 0
    with_abstract: int = 0
    positions: np.ndarray = None  # int32 position of the record in its file
    keys: np.ndarray = None  # int64 de-duplication key
    status: np.ndarray = None  # int8 OK/NO_ABSTRACT/TOO_SHORT/DELETED
    valid: np.ndarray = None  # bool
    sentences: np.ndarray = None  # int32 lines written
    words: np.ndarray = None  # int32 words written
    notes: NoteStats = dataclasses.field(
        default_factory=NoteStats
    )  # rows of this stripe, for NOTEEVENTS files


_SPLITTER: Optional[SentenceSplitter] = None


def _init_worker(splitter: SentenceSplitter) -> None:
    global _SPLITTER
    _SPLITTER = splitter


def _process_file(task: _Task) -> _FileResult:
    """Parse one file (stripe) into its shard; file-level input errors are returned, not raised."""
    result = _FileResult(task)
    rows = []  # (position, key, status, valid, sentences, words) per record
    readers: list = []
    try:
        with open(task.shard, "w", encoding="utf-8", newline="\n") as out:
            records = iter_records(
                task.source, task.max_docs, task.stripe, readers, task.notes, result.notes
            )
            for position, record in records:
                key = _dedupe_key(record.doc_id)
                if isinstance(record, Deletion):
                    rows.append((position, key, DELETED, False, 0, 0))
                    continue
                result.documents += 1
                valid = _in_valid(record.doc_id, task.valid_fraction)
                body_words = sum(len(p.split()) for p in record.paragraphs)
                if body_words == 0:
                    rows.append((position, key, NO_ABSTRACT, valid, 0, 0))
                    continue
                result.with_abstract += 1
                if body_words < task.min_words:
                    rows.append((position, key, TOO_SHORT, valid, 0, 0))
                    continue
                title = " ".join(record.title.split())
                lines = [title] if title else []
                for paragraph in record.paragraphs:
                    lines.extend(_SPLITTER.split(paragraph))
                out.write("\n".join(lines))
                out.write("\n\n")
                # Words counted from the output: Punkt may split inside a token ("p.o.Treatment").
                rows.append(
                    (position, key, OK, valid, len(lines), sum(len(line.split()) for line in lines))
                )
    except Exception as e:
        message = describe_error(e)
        if (
            message is None or no_space(e, task.shard) is not None
        ):  # a full disk is the output's problem
            raise
        result.error = f"{task.source.display}: {message}"
    result.xml_bytes = sum(r.bytes for r in readers)
    columns = list(zip(*rows)) if rows else [()] * 6
    result.positions = np.asarray(columns[0], dtype=np.int32)
    result.keys = np.asarray(columns[1], dtype=np.int64)
    result.status = np.asarray(columns[2], dtype=np.int8)
    result.valid = np.asarray(columns[3], dtype=bool)
    result.sentences = np.asarray(columns[4], dtype=np.int32)
    result.words = np.asarray(columns[5], dtype=np.int32)
    return result


def _training_paragraphs(
    files: Sequence[InputFile], max_docs: Optional[int], notes: NoteOptions
) -> Iterator[str]:
    """Abstract/body paragraphs in file order, for training Punkt; bad files are left to the main
    pass."""
    for source in files:
        try:
            for _, record in iter_records(source, max_docs, notes=notes):
                if isinstance(record, Document):
                    yield from (p for p in record.paragraphs if p.strip())
        except Exception as e:
            if describe_error(e) is None:
                raise


# ---------------------------------------------------------------------------------------------------
# Merge


def _last_occurrence(keys: np.ndarray) -> np.ndarray:
    """Mask of the records that are the last occurrence of their key (records without a key:
    all)."""
    n = len(keys)
    order = np.lexsort((np.arange(n), keys))
    sorted_keys = keys[order]
    last = np.ones(n, dtype=bool)
    last[:-1] = sorted_keys[:-1] != sorted_keys[1:]
    mask = np.zeros(n, dtype=bool)
    mask[order[last]] = True
    mask[keys == _NO_DEDUPE] = True
    return mask


def _read_shard(path: Path) -> Iterator[str]:
    """The documents of a shard, each as its lines joined with newlines (ending in a newline)."""
    with open(path, encoding="utf-8", newline="\n") as f:
        lines: List[str] = []
        for line in f:
            if line == "\n":
                yield "".join(lines)
                lines = []
            else:
                lines.append(line)


class _MergedFile(NamedTuple):
    """The stripes of one input file, interleaved back into file order."""

    results: List[_FileResult]
    stripe: np.ndarray  # which result holds each record
    order: np.ndarray  # record i of the file is entry order[i] of the concatenated stripe arrays


def _interleave(results: List[_FileResult]) -> _MergedFile:
    positions = np.concatenate([r.positions for r in results])
    stripe = np.concatenate(
        [np.full(len(r.positions), j, dtype=np.int32) for j, r in enumerate(results)]
    )
    order = np.argsort(positions, kind="stable")
    return _MergedFile(results, stripe[order], order)


def _concat(files: List[_MergedFile], field: str, dtype) -> np.ndarray:
    arrays = [np.concatenate([getattr(r, field) for r in f.results])[f.order] for f in files]
    return np.concatenate(arrays) if arrays else np.zeros(0, dtype=dtype)


def _merge(files: List[_MergedFile], out_dir: Path, stats: ExtractStats) -> None:
    """De-duplicate across files and write train.txt/valid.txt from the shards, in file order.

    Workers wrote per-file temp shards; this pass applies de-duplication and the train/valid split,
    so memory holds per-record ids and flags, never the corpus text. Files go in name order (by
    base name); within a file the later record wins."""
    keys = _concat(files, "keys", np.int64)
    status = _concat(files, "status", np.int8)
    valid = _concat(files, "valid", bool)
    is_article = status != DELETED

    winner = _last_occurrence(keys)
    deleted_keys = keys[winner & ~is_article]
    article_index = np.flatnonzero(is_article)
    last_article = np.zeros(len(keys), dtype=bool)
    last_article[article_index[_last_occurrence(keys[article_index])]] = True
    deleted = last_article & np.isin(keys, deleted_keys)
    kept = last_article & ~deleted
    write = kept & (status == OK)

    stats.duplicates = int((is_article & ~last_article).sum())
    stats.deleted = int(deleted.sum())
    stats.too_short = int((kept & (status == TOO_SHORT)).sum())
    stats.no_abstract = int((kept & (status == NO_ABSTRACT)).sum())
    stats.train_documents = int((write & ~valid).sum())
    stats.valid_documents = int((write & valid).sum())
    stats.written = stats.train_documents + stats.valid_documents
    stats.sentences = int(_concat(files, "sentences", np.int32)[write].sum(dtype=np.int64))
    stats.words = int(_concat(files, "words", np.int32)[write].sum(dtype=np.int64))

    (out_dir / "extract_stats.json").unlink(missing_ok=True)  # the stats file marks a finished run
    with atomic_write(out_dir / "train.txt") as train, atomic_write(
        out_dir / "valid.txt"
    ) as valid_out:
        started = {id(train): False, id(valid_out): False}
        offset = 0
        for f in files:
            shards = [_read_shard(r.task.shard) for r in f.results]
            file_status = status[offset : offset + len(f.order)]
            for i in np.flatnonzero(file_status == OK):
                text = next(shards[f.stripe[i]])
                if not write[offset + i]:
                    continue
                out = valid_out if valid[offset + i] else train
                if started[id(out)]:
                    out.write("\n")  # exactly one blank line between documents
                out.write(text)
                started[id(out)] = True
            offset += len(f.order)
            for r in f.results:
                r.task.shard.unlink()


# ---------------------------------------------------------------------------------------------------
# Entry points


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _make_tasks(files: List[InputFile], tmp: Path, workers: int, **options) -> List[_Task]:
    """One task per file; files much larger than a fair share are striped across several workers."""
    sizes = [_size(f.path) for f in files]
    share = max(1, sum(sizes) // (4 * workers))
    tasks = []
    for i, (source, size) in enumerate(zip(files, sizes)):
        # MEDLINE files and NOTEEVENTS are large (PMC .nxml are small): every stripe parses the
        # whole file but sentence-splits only its own records.
        large = source.path.name.endswith((".xml", ".xml.gz")) or source.path.name.lower().endswith(
            NOTES_SUFFIXES
        )
        count = min(workers, -(-size // share)) if workers > 1 and large else 1
        for j in range(max(1, count)):
            tasks.append(
                _Task(
                    i,
                    source,
                    Stripe(j, max(1, count)),
                    tmp / f"shard{i:07d}-{j:03d}.txt",
                    **options,
                )
            )
    return tasks


def extract(
    inputs: Sequence[Union[str, os.PathLike]],
    out_dir: Union[str, os.PathLike],
    *,
    preset: Optional[str] = None,
    min_words: Optional[int] = None,
    valid_fraction: float = 0.01,
    max_docs_per_file: Optional[int] = None,
    workers: int = 1,
    skip_bad_files: bool = False,
    sentence_training_texts: int = DEFAULT_TRAINING_TEXTS,
    note_categories: Union[None, str, Sequence[str]] = None,
    deid_placeholders: str = "normalise",
    progress: bool = True,
    overwrite: bool = False,
) -> ExtractStats:
    """Extract ``inputs`` into ``out_dir/train.txt``, ``valid.txt`` and ``extract_stats.json``.

    Everything is written in a temp directory beside ``out_dir`` that replaces it only when
    complete; an existing ``out_dir`` (not an empty one) is refused unless ``overwrite`` and an
    earlier extract made it, unchanged since. Inputs that give no document to train on (no
    abstracts, all under ``min_words``, all in valid) are refused: nothing is written.

    ``note_categories`` (a list, or one comma-separated string; None: all) and ``deid_placeholders``
    (one of ``mimic.DEID_MODES``) apply to MIMIC-III notes only. ``preset`` (``PRESETS``) sets the
    options of a seed paper's corpus (``min_words`` None: the preset's, else 0). Raises
    PreprocessError (one line naming the file) for a bad input file unless ``skip_bad_files``.
    """
    min_words = preset_options(preset, min_words)["min_words"]
    if min_words < 0:
        raise PreprocessError("--min-words must be >= 0")
    if not 0.0 <= valid_fraction < 1.0:
        raise PreprocessError("--valid-fraction must be in [0, 1)")
    if max_docs_per_file is not None and max_docs_per_file < 1:
        raise PreprocessError("--max-docs-per-file must be >= 1")
    if workers < 1:
        raise PreprocessError("--workers must be >= 1")
    try:
        notes = note_options(note_categories, deid_placeholders)
    except ValueError as e:
        raise PreprocessError(str(e)) from None
    start = time.time()
    out_dir = Path(out_dir)
    check_destination(out_dir, overwrite, OUTPUT_NAMES, by=EXTRACT)
    files = find_input_files(inputs, exclude=out_dir)
    if not files:
        raise PreprocessError(f"no input files found in {', '.join(map(str, inputs))}")
    tmp = make_temp_dir(out_dir)
    try:
        stats = _extract(
            files,
            out_dir,
            tmp,
            min_words,
            preset,
            valid_fraction,
            max_docs_per_file,
            workers,
            skip_bad_files,
            sentence_training_texts,
            notes,
            progress,
        )
        _refuse_empty(stats, files)
        stats.seconds = round(time.time() - start, 3)
        stats.mb_per_s = round(stats.xml_mb / stats.seconds, 3) if stats.seconds > 0 else 0.0
        with atomic_write(tmp / "extract_stats.json") as f:
            json.dump(dataclasses.asdict(stats), f, indent=2)
            f.write("\n")
        replace_dir(tmp, out_dir, overwrite, OUTPUT_NAMES, by=EXTRACT)
    except (OSError, NoSpaceError) as e:  # NoSpaceError: met writing a file in the temp directory
        full = no_space(e, out_dir)
        if full is None:
            raise
        raise full from None
    finally:
        remove_temp_dir(tmp)  # nothing left once replace_dir moved it
    for name in stats.files_without_abstracts:
        print(f"{EXTRACT}: warning: {name}: no abstracts", file=sys.stderr)
    _warn_unmatched_categories(stats.notes)
    return stats


def _extract(
    files,
    out_dir: Path,
    tmp: Path,
    min_words,
    preset,
    valid_fraction,
    max_docs_per_file,
    workers,
    skip_bad_files,
    sentence_training_texts,
    notes,
    progress,
) -> ExtractStats:
    """``extract``'s work: the corpus and its statistics written into ``tmp`` (named by their final
    paths)."""
    from tqdm import tqdm

    splitter = SentenceSplitter.train(
        _training_paragraphs(files, max_docs_per_file, notes), sentence_training_texts
    )
    stats = ExtractStats(
        min_words=min_words,
        preset=preset or "",
        valid_fraction=valid_fraction,
        max_docs_per_file=max_docs_per_file,
        workers=workers,
        train_path=str(out_dir / "train.txt"),
        valid_path=str(out_dir / "valid.txt"),
        notes=NoteStats(
            category_filter=list(notes.categories) if notes.categories is not None else None,
            deid_placeholders=notes.deid,
        ),
    )
    with tempfile.TemporaryDirectory(dir=tmp, prefix=".shards-") as shards:
        options = dict(
            max_docs=max_docs_per_file,
            min_words=min_words,
            valid_fraction=valid_fraction,
            notes=notes,
        )
        tasks = _make_tasks(files, Path(shards), workers, **options)
        # Largest pieces first keeps the workers busy; results are put back in file order
        # afterwards.
        queue = sorted(tasks, key=lambda t: -_size(t.source.path) / t.stripe.count)
        results: List[List[_FileResult]] = [[] for _ in files]
        bar = tqdm(
            total=sum(_size(f.path) for f in files),
            unit="B",
            unit_scale=True,
            desc="extract",
            disable=not progress,
        )
        with bar:
            if workers == 1:
                _init_worker(splitter)
                _collect(map(_process_file, queue), results, bar, skip_bad_files)
            else:
                with worker_pool(workers, _init_worker, (splitter,)) as pool:
                    _collect(
                        pool.imap_unordered(_process_file, queue), results, bar, skip_bad_files
                    )
        good = []
        for source, parts in zip(files, results):
            errors = [r.error for r in parts if r.error is not None]
            if errors:
                stats.skipped_files.append(errors[0])
                continue
            parts.sort(key=lambda r: r.task.stripe.index)
            good.append(_interleave(parts))
            stats.documents += sum(r.documents for r in parts)
            stats.with_abstract += sum(r.with_abstract for r in parts)
            for r in parts:
                stats.notes.add(r.notes)
            stats.xml_mb += sum(r.xml_bytes for r in parts) / parts[0].task.stripe.count / 1e6
            stats.input_mb += _size(source.path) / 1e6
            if sum(r.with_abstract for r in parts) == 0:
                stats.files_without_abstracts.append(source.display)
        stats.skipped = len(stats.skipped_files)
        stats.files = len(good)
        stats.input_mb = round(stats.input_mb, 3)
        stats.xml_mb = round(stats.xml_mb, 3)
        _merge(good, tmp, stats)
    return stats


def _refuse_empty(stats: ExtractStats, files: List[InputFile]) -> None:
    """A corpus with nothing to train on is a failure, not a finished corpus (nor one to replace a
    real one with)."""
    names = ", ".join(f.display for f in files[:3])
    if len(files) > 3:
        names += f" and {len(files) - 3} more files"
    if stats.written == 0:
        found = [
            f"{stats.documents:,} records read",
            f"{stats.no_abstract:,} without an abstract or text",
            f"{stats.too_short:,} under --min-words {stats.min_words}",
            f"{stats.deleted:,} deleted",
            f"{stats.duplicates:,} superseded",
        ]
        if stats.skipped:
            found.append(f"{stats.skipped} files skipped")
        raise PreprocessError(
            f"{names}: no document with text to extract ({', '.join(found)}); " "nothing written"
        )
    if stats.train_documents == 0:
        raise PreprocessError(
            f"{names}: all {stats.written:,} documents fell in valid.txt "
            f"(--valid-fraction {stats.valid_fraction}); train.txt would be "
            "empty; nothing written"
        )


def _warn_unmatched_categories(notes: NoteStats) -> None:
    """A --note-categories name no note read has (a typo, or a category spelled otherwise) is worth
    a warning."""
    if not notes.read or notes.category_filter is None:
        return
    seen = {name.casefold() for name in notes.categories}
    for name in notes.category_filter:
        if name.casefold() not in seen:
            known = ", ".join(sorted(notes.categories))
            message = f"{EXTRACT}: warning: --note-categories: no note has category {name!r} (found: {known})"
            print(message, file=sys.stderr)


def _collect(stream, results: List[List[_FileResult]], bar, skip_bad_files: bool) -> None:
    for result in stream:
        if result.error is not None and not skip_bad_files:
            raise PreprocessError(result.error)
        results[result.task.file_index].append(result)
        bar.update(_size(result.task.source.path) / result.task.stripe.count)


def build_parser() -> Parser:
    parser = Parser(
        prog=EXTRACT,
        description="Extract one-sentence-per-line pretraining text from MEDLINE XML, PMC .nxml, .txt and "
        "MIMIC-III NOTEEVENTS.csv.",
    )
    parser.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help="input files or directories (*.xml, *.xml.gz, *.nxml, *.txt, NOTEEVENTS*.csv, NOTEEVENTS*.csv.gz)",
    )
    add_out(
        parser,
        "the corpus directory to write (train.txt, valid.txt, extract_stats.json); new or empty unless "
        "--overwrite",
    )
    parser.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default=None,
        help="a seed paper's corpus: pubmedbert (abstracts under 128 words dropped, sec. 6.1)",
    )
    parser.add_argument(
        "--min-words",
        type=int,
        default=None,
        help="drop documents whose abstract/body has fewer words (default 0, or the --preset's; "
        "PubMedBERT: 128)",
    )
    parser.add_argument(
        "--valid-fraction",
        type=float,
        default=0.01,
        help="fraction of documents for valid.txt, chosen by a hash of the document id",
    )
    parser.add_argument(
        "--max-docs-per-file",
        type=int,
        default=None,
        help="read at most this many documents from each file (quick runs, tests)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="parallel processes (a file each; large files are shared in stripes)",
    )
    parser.add_argument(
        "--skip-bad-files",
        action="store_true",
        help="count and list unreadable/invalid files instead of stopping at the first",
    )
    parser.add_argument(
        "--sentence-training-texts",
        type=int,
        default=DEFAULT_TRAINING_TEXTS,
        help="paragraphs used to train the Punkt sentence splitter",
    )
    parser.add_argument(
        "--note-categories",
        default=None,
        help="MIMIC-III notes: keep these CATEGORY values only, comma-separated, e.g. "
        '"Discharge summary,Radiology" (matched ignoring case and surrounding spaces; default: all)',
    )
    parser.add_argument(
        "--deid-placeholders",
        choices=DEID_MODES,
        default="normalise",
        help="MIMIC-III notes: keep [**...**] placeholders as they are, normalise them to typed tokens "
        "([NAME], [DATE], [HOSPITAL], ...), or drop them",
    )
    add_overwrite(parser, "the corpus")
    add_no_progress(parser)
    return parser


def main(argv=None) -> None:
    """MEDLINE/PMC/plain text -> train.txt/valid.txt, one sentence per line."""
    args = build_parser().parse_args(argv)
    stats = extract(
        args.inputs,
        args.out,
        preset=args.preset,
        min_words=args.min_words,
        valid_fraction=args.valid_fraction,
        max_docs_per_file=args.max_docs_per_file,
        workers=args.workers,
        skip_bad_files=args.skip_bad_files,
        sentence_training_texts=args.sentence_training_texts,
        note_categories=args.note_categories,
        deid_placeholders=args.deid_placeholders,
        progress=not args.no_progress,
        overwrite=args.overwrite,
    )
    print(stats.summary())


def cli_main(argv=None) -> None:
    run_cli(EXTRACT, main, argv)


if __name__ == "__main__":
    cli_main()

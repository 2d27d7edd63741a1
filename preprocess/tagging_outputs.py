"""What the tagging converters share: id lists, strict reading, and the CoNLL splits they write
(atomically, only once all input is read and checked); see ``convert_tagging``."""

import dataclasses
import json
from pathlib import Path
from typing import Dict, Iterable, List, Tuple

from fairseq_bio.data.conll import write_conll
from fairseq_bio.files import atomic_write, check_output

from .common import PreprocessError

SPLITS = ("train", "devel", "test")
STATS_FILE = "convert_stats.json"
# what the converted files are recorded as made by (fairseq_bio.files)
CONVERT = "fairseq-bio-convert-tagging"
MAX_EXAMPLES = 20  # examples of each counted oddity kept in the stats

Tagged = Tuple[List[str], List[str]]  # one sentence: words, tags


# ---------------------------------------------------------------------------------------------------
# Shared pieces: id lists, outputs


def id_key(pmid: str):
    """Numeric PMIDs in numeric order, anything else after them in string order."""
    return (0, int(pmid), "") if pmid.isdigit() else (1, 0, pmid)


def read_id_list(path) -> List[Tuple[str, int]]:
    """``(id, line)`` of a list file: one PMID per line; blank lines and ``#`` comments are
    ignored."""
    path = Path(path)
    text = decode(read_bytes(path), str(path), "utf-8")
    ids: List[Tuple[str, int]] = []
    first: Dict[str, int] = {}
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if len(line.split()) != 1:
            raise PreprocessError(
                f"{path}:{number}: {line!r} is not one PMID (one per line expected)"
            )
        if line in first:
            raise PreprocessError(
                f"{path}:{number}: PMID {line} listed twice (first at line {first[line]})"
            )
        first[line] = number
        ids.append((line, number))
    if not ids:
        raise PreprocessError(f"{path}: no PMIDs in the list")
    return ids


def read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise PreprocessError(f"{path}: not found") from None
    except IsADirectoryError:
        raise PreprocessError(f"{path}: is a directory, not a file") from None


def decode(data: bytes, where: str, encoding: str, hint: str = "") -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise PreprocessError(
            f"{where}:{line}: not valid {encoding} (byte 0x{data[e.start]:02x}){hint}"
        ) from None


def check_outputs(out_dir: Path, splits: Iterable[str], overwrite: bool) -> List[Path]:
    """The files a conversion writes: ``<split>.tsv`` and ``<split>.pmids`` of each split, then the
    stats; each checked by ``fairseq_bio.files.check_output`` (none replaced without ``overwrite``,
    and with it only what an earlier conversion wrote, unchanged since)."""
    targets = [out_dir / f"{s}{ext}" for s in splits for ext in (".tsv", ".pmids")] + [
        out_dir / STATS_FILE
    ]
    for target in targets:
        check_output(target, [], overwrite, option="output folder", by=CONVERT)
    return targets


def write_outputs(out_dir: Path, splits: Dict[str, List[Tuple[str, List[Tagged]]]], stats) -> None:
    """``<split>.tsv`` and ``<split>.pmids`` for each split, then the stats; each file
    atomically."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for split, documents in splits.items():
        with atomic_write(out_dir / f"{split}.tsv", by=CONVERT) as f:
            for _, sentences in documents:
                write_conll(f, sentences)
        with atomic_write(out_dir / f"{split}.pmids", by=CONVERT) as f:
            f.writelines(f"{pmid}\n" for pmid, _ in documents)
    with atomic_write(out_dir / STATS_FILE, by=CONVERT) as f:
        json.dump(dataclasses.asdict(stats), f, indent=2)
        f.write("\n")


def summary(stats) -> str:
    """``field: value`` lines of a stats dataclass; lists one item per line."""
    lines = []
    for f in dataclasses.fields(stats):
        value = getattr(stats, f.name)
        if isinstance(value, list):
            lines += [f"{f.name}: {item}" for item in value]
        else:
            lines.append(f"{f.name}: {value}")
    return "\n".join(lines)

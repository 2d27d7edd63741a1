"""Small text files in the converter tests: written (folders made), read back, and a CoNLL file as
(word, tag) pairs."""

from pathlib import Path

from fairseq_bio.data.conll import read_conll


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def conll(path: Path):
    return [list(zip(s.words, s.tags)) for s in read_conll(path)]

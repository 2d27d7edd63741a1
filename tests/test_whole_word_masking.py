"""Whole-word masking per tokenizer on real PubMed sentences: every masked position's word is masked
entirely, and the words the masker sees are exactly the tokenizer's words (whitespace words for
byte-level BPE and SentencePiece, BERT's pre-tokenized words for WordPiece)."""

import argparse

import pytest
import torch
from fairseq.data import Dictionary, encoders

from fairseq_bio.data.tokenizer_files import load_bpe_json
from fairseq_bio.data.word_boundaries import WordBoundaries
from fairseq_bio.modules.masking import BatchMasker

KINDS = ["bytebpe", "sentencepiece", "wordpiece"]


def real_sentences(corpus, n=120):
    lines = [line.strip() for line in open(corpus / "valid.txt", encoding="utf-8")]
    return [line for line in lines if len(line.split()) >= 5][:n]


def words_of(kind, sentence):
    if kind == "wordpiece":
        from tokenizers.pre_tokenizers import BertPreTokenizer

        return [w for w, _ in BertPreTokenizer().pre_tokenize_str(sentence)]
    return sentence.split()


def encode_by_word(kind, bpe, dictionary, sentence):
    """Token ids and the index of the word each token belongs to, encoding word by word with
    fairseq's BPE."""
    ids, word_of = [], []
    for i, word in enumerate(words_of(kind, sentence)):
        text = word if (i == 0 or kind != "bytebpe") else " " + word
        for symbol in bpe.encode(text).split():
            ids.append(dictionary.index(symbol))
            word_of.append(i)
    whole = [dictionary.index(s) for s in bpe.encode(sentence).split()]
    assert whole == ids, f"word-by-word encoding differs from the sentence's: {sentence}"
    return ids, word_of


@pytest.mark.parametrize("kind", KINDS)
def test_masked_words_are_masked_entirely(kind, learned_vocab, pubmed_corpus):
    vocab = learned_vocab(kind)
    spec = load_bpe_json(vocab / "bpe.json")
    bpe = encoders.build_bpe(argparse.Namespace(bpe=spec.pop("_name"), **spec))
    dictionary = Dictionary.load(str(vocab / "dict.txt"))
    mask_idx = dictionary.add_symbol("<mask>")
    boundaries = WordBoundaries.from_data_dir(dictionary, str(vocab))

    # Pack sentences into rows the way the task's blocks look: <s> s1 </s> s2 </s> ... <pad>
    rows, owners = [], []
    sentences = real_sentences(pubmed_corpus)
    for start in range(0, len(sentences), 3):
        row, owner = [dictionary.bos()], [-1]
        for k, sentence in enumerate(sentences[start : start + 3]):
            ids, word_of = encode_by_word(kind, bpe, dictionary, sentence)
            row += ids + [dictionary.eos()]
            owner += [1000 * (start + k) + w for w in word_of] + [-1]
        rows.append(row)
        owners.append(owner)
    width = max(map(len, rows))
    tokens = torch.full((len(rows), width), dictionary.pad())
    owner = torch.full((len(rows), width), -1)
    for r, (row, own) in enumerate(zip(rows, owners)):
        tokens[r, : len(row)] = torch.tensor(row)
        owner[r, : len(own)] = torch.tensor(own)

    # The masker's words are exactly the tokenizer's words.
    word_ids = boundaries.word_ids(tokens)
    for r in range(len(rows)):
        real = owner[r].ge(0)
        assert torch.equal(word_ids[r].eq(0), ~real)
        _, ours = torch.unique_consecutive(word_ids[r][real], return_inverse=True)
        _, truth = torch.unique_consecutive(owner[r][real], return_inverse=True)
        assert torch.equal(ours, truth)

    masker = BatchMasker(dictionary, mask_idx, word_boundaries=boundaries)
    multi_token_words_masked = 0
    for seed in range(20):
        _, targets = masker(tokens, 0.3, torch.Generator().manual_seed(seed))
        chosen = targets.ne(dictionary.pad())
        for r in range(len(rows)):
            for w in owner[r][chosen[r]].unique().tolist():
                assert w >= 0, "a control symbol was chosen"
                in_word = owner[r].eq(w)
                assert chosen[r][in_word].all(), f"{kind}: word {w} of row {r} only partly masked"
                multi_token_words_masked += int(in_word.sum() > 1)
    assert (
        multi_token_words_masked > 50
    )  # the property was exercised on words split into several tokens


@pytest.mark.parametrize("kind", KINDS)
def test_word_begin_flags_agree_with_fairseqs_own_bpe(kind, learned_vocab):
    """For every ordinary symbol, our flag equals fairseq's ``is_beginning_of_word`` for that
    BPE."""
    vocab = learned_vocab(kind)
    spec = load_bpe_json(vocab / "bpe.json")
    bpe = encoders.build_bpe(argparse.Namespace(bpe=spec.pop("_name"), **spec))
    dictionary = Dictionary.load(str(vocab / "dict.txt"))
    boundaries = WordBoundaries.from_data_dir(dictionary, str(vocab))
    ordinary = range(dictionary.nspecial, len(dictionary))
    theirs = [
        bpe.is_beginning_of_word(dictionary[i])
        for i in ordinary
        if not dictionary[i].startswith("madeupword")
    ]
    ours = [
        bool(boundaries.begins[i]) for i in ordinary if not dictionary[i].startswith("madeupword")
    ]
    assert ours == theirs
    assert 0 < sum(ours) < len(ours)

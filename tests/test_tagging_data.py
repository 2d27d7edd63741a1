"""bio_tagging data: strict CoNLL reading with one-line errors, label alignment round trips for
every vocabulary kind, and windows that give every word exactly one prediction (real NCBI-disease
sentences)."""

import random
import unicodedata

import numpy as np
import pytest
import torch
from conftest import SHARED_DATA

import fairseq_bio  # noqa: F401
from fairseq_bio.data.conll import TaggingDataError, read_conll, words_with_offsets
from fairseq_bio.data.tagging_dataset import (
    IGNORE,
    EncodedWords,
    TaggingDataset,
    WordEncoder,
    collate_windows,
    plan_windows,
    word_predictions,
)
from fairseq_bio.tasks import fine_tuning

NCBI = SHARED_DATA / "ner" / "NCBI-disease"


@pytest.fixture(scope="module")
def ncbi_test():
    return read_conll(NCBI / "test.tsv")


# --- reading ---------------------------------------------------------------------------------------------------


def write(tmp_path, name, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_reads_the_real_files(ncbi_test):
    assert len(ncbi_test) == 940  # the README's count
    assert all(len(s.words) == len(s.tags) == len(s.lines) for s in ncbi_test)
    assert ncbi_test[0].lines[0] == 1


def test_crlf_trailing_spaces_and_extra_blank_lines_are_accepted(tmp_path):
    plain = read_conll(write(tmp_path, "a.tsv", b"Mild\tO\nanemia\tB-Disease\n\nOK\tO\n"))
    messy = read_conll(
        write(
            tmp_path,
            "b.tsv",
            b"-DOCSTART-\tO\r\n\r\nMild\tO  \r\nanemia\tB-Disease \r\n\r\n\r\n\r\nOK\tO\r\n",
        )
    )
    assert [(s.words, s.tags) for s in plain] == [(s.words, s.tags) for s in messy]


@pytest.mark.parametrize(
    "data, line, what",
    [
        (b"Mild\tO\nanemia\tB-Disease\textra\n", 2, "3 column(s)"),
        (b"Mild\tO\nanemia\n", 2, "1 column(s)"),
        (b"anemia\n\nMild\tO\n", 1, "a token without a tag"),
        (b"Mild\tO\n\tB-Disease\n", 2, "empty token"),
        (b"Mild\tO\nan\xe9mia\tB-Disease\n", 2, "not valid UTF-8"),
    ],
)
def test_bad_lines_name_file_and_line(tmp_path, data, line, what):
    path = write(tmp_path, "bad.tsv", data)
    with pytest.raises(TaggingDataError) as e:
        read_conll(path)
    message = str(e.value)
    assert message.startswith(f"{path}:{line}: ") and what in message and "\n" not in message


def test_empty_and_missing_files(tmp_path):
    with pytest.raises(TaggingDataError, match="no sentences"):
        read_conll(write(tmp_path, "empty.tsv", b"\n\n"))
    with pytest.raises(TaggingDataError, match="missing.tsv: not found"):
        read_conll(tmp_path / "missing.tsv")


def test_untagged_input_is_allowed_for_prediction(tmp_path):
    (sentence,) = read_conll(write(tmp_path, "x.tsv", b"Mild\nanemia\n"), require_tags=False)
    assert sentence.words == ["Mild", "anemia"] and sentence.tags is None


def test_raw_text_words_carry_offsets():
    text = "BRCA1-associated breast cancer (n=12)."
    words = words_with_offsets(text)
    assert [w for w, _, _ in words][:4] == ["BRCA1", "-", "associated", "breast"]
    assert all(text[a:b] == w for w, a, b in words)


def test_raw_text_words_keep_combining_marks_with_their_characters():
    """Decomposed text (a base letter and its combining mark, as macOS and some PDF extractors write
    it) is cut into the same words as its composed form: no word, and so no predicted span, ends
    between a letter and its accent.
    """
    composed = "Sjögren syndrome and Ménière's disease in São Paulo (n=12); α-synucleinopathy, naïve cases."
    decomposed = unicodedata.normalize("NFD", composed)
    assert decomposed != composed
    words, reference = words_with_offsets(decomposed), words_with_offsets(composed)
    assert [unicodedata.normalize("NFC", w) for w, _, _ in words] == [w for w, _, _ in reference]
    assert all(decomposed[a:b] == w for w, a, b in words)
    marks = {i for i, c in enumerate(decomposed) if unicodedata.combining(c)}
    assert marks and not {a for _, a, _ in words} & marks and not {b for _, _, b in words} & marks
    assert [w for w, _, _ in words_with_offsets("\u0301x")] == [
        "\u0301",
        "x",
    ]  # a mark with no base: alone


# --- label alignment -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["bytebpe", "sentencepiece", "wordpiece"])
def word_encoder(request, learned_vocab):
    dictionary, spec = fine_tuning.load_vocab(str(learned_vocab(request.param)))
    return WordEncoder(dictionary, spec)


def long_words(n=5, seed=0):
    rng = random.Random(seed)
    return ["".join(rng.choice("qxzjkvwy0123456789") for _ in range(30)) for _ in range(n)]


def test_word_pieces_equal_the_sentence_encoding(word_encoder, ncbi_test):
    """Words encoded one by one give the pieces fairseq's BPE gives the whole sentence (as
    pretraining saw it)."""
    d = word_encoder.dictionary
    for sentence in ncbi_test[:200]:
        joined = word_encoder.bpe.encode(" ".join(sentence.words))
        whole = d.encode_line(joined, append_eos=False, add_if_not_exist=False).tolist()
        assert [p for ids in word_encoder.encode_sentence(sentence.words) for p in ids] == whole


@pytest.mark.parametrize("all_pieces", [False, True])
def test_labels_round_trip_through_pieces(word_encoder, ncbi_test, all_pieces):
    """word tags -> piece labels -> word predictions read from the first pieces recover the tags."""
    labels = ["O", "B-Disease", "I-Disease"]
    index = {t: i for i, t in enumerate(labels)}
    sentences = [s for s in ncbi_test[:60]]
    words = [s.words + (long_words() if k % 7 == 0 else []) for k, s in enumerate(sentences)]
    tags = [
        s.tags + (["B-Disease"] + ["I-Disease"] * 4 if k % 7 == 0 else [])
        for k, s in enumerate(sentences)
    ]
    encoded = EncodedWords.encode(word_encoder, words)
    assert max(np.diff(encoded.word_starts)) >= 10  # words of 10+ pieces are in the test
    ids = [np.array([index[t] for t in ts]) for ts in tags]
    continuation = np.array([0, 2, 2]) if all_pieces else None
    dataset = TaggingDataset(
        encoded, word_encoder.dictionary, 512, labels=ids, continuation_labels=continuation
    )
    batch = dataset.collater([dataset[i] for i in range(len(dataset))])
    target = batch["target"]
    recovered = word_predictions(batch, torch.where(batch["owned"], target, -1))
    assert [[labels[i] for i in r] for r in recovered] == tags
    labelled = target.ne(IGNORE)
    assert torch.equal(labelled, batch["positions"])
    if all_pieces:  # every piece of every word carries a label; later pieces of B-X carry I-X
        tokens = batch["net_input"]["src_tokens"]
        special = (tokens == word_encoder.dictionary.bos()) | (
            tokens == word_encoder.dictionary.eos()
        )
        assert torch.equal(labelled, ~special & tokens.ne(word_encoder.dictionary.pad()))
        assert not (labelled & ~batch["owned"] & target.eq(1)).any()
    else:
        assert torch.equal(labelled, batch["word_index"].ge(0))


def test_batches_keep_every_sentence_whatever_the_batch_multiple(word_encoder, ncbi_test):
    """fairseq's batch_by_size drops a last batch that is not a multiple of
    required_batch_size_multiple (the longest sentences, as batches follow length order); the task's
    datasets keep them."""
    from fairseq.data import data_utils

    words = [s.words for s in ncbi_test[:300]]
    dataset = TaggingDataset(EncodedWords.encode(word_encoder, words), word_encoder.dictionary, 128)
    order = dataset.ordered_indices()
    fairseq_batches = data_utils.batch_by_size(
        order, dataset.num_tokens, max_sentences=16, required_batch_size_multiple=8
    )
    assert sum(map(len, fairseq_batches)) < 300  # the behaviour worked around (300 = 18 x 16 + 12)
    for multiple, max_tokens in ((8, None), (1, None), (8, 1000)):
        batches = dataset.batch_by_size(
            order, max_tokens, 16 if max_tokens is None else None, multiple
        )
        assert sorted(int(i) for b in batches for i in b) == list(range(300))


# --- windows ---------------------------------------------------------------------------------------------------


def test_plan_windows_covers_every_word_once():
    rng = np.random.RandomState(0)
    for _ in range(200):
        counts = rng.randint(1, 8, size=rng.randint(1, 300)).tolist()
        if rng.rand() < 0.1:
            counts[rng.randint(len(counts))] = 40  # a word longer than a window
        capacity = int(rng.randint(10, 60))
        windows, owner = plan_windows(counts, capacity)
        assert windows[0][0] == 0 and windows[-1][1] == len(counts)
        for (a, b), (c, d) in zip(windows, windows[1:]):
            assert c > a and c <= b  # advancing, and no gap
        for w, k in enumerate(owner):
            a, b = windows[k]
            assert a <= w < b
        for a, b in windows:
            assert b - a == 1 or sum(counts[a:b]) <= capacity


def test_windowed_long_sentence_gives_every_word_one_prediction(word_encoder, ncbi_test):
    """A 1,500-word real sentence beside short ones: every word predicted exactly once, from its
    best window."""
    long_sentence = [w for s in ncbi_test for w in s.words][:1500]
    words = [ncbi_test[0].words, long_sentence, ncbi_test[1].words]
    encoded = EncodedWords.encode(word_encoder, words)
    dataset = TaggingDataset(encoded, word_encoder.dictionary, 128)
    batch = dataset.collater([dataset[i] for i in range(3)])
    assert batch["net_input"]["src_tokens"].size(1) <= 128
    assert batch["row_sentence"].tolist().count(1) > 10  # the long one was windowed
    assert int(batch["owned"].sum()) == sum(
        len(w) for w in words
    )  # exactly one owner per word, counted
    marks = torch.where(batch["owned"], batch["word_index"], -1)
    assert [list(p) for p in word_predictions(batch, marks)] == [list(range(len(w))) for w in words]


def test_windowed_and_unwindowed_predictions_agree_where_the_sentence_fits(word_encoder, ncbi_test):
    """Sentences that fit are one row each, exactly <s> pieces </s>; a tagging model's word
    predictions from the padded batch equal those of each sentence run alone."""
    from helpers.small_models import DictionaryTask, model_args

    from fairseq_bio.models.bio_roberta import BioRobertaModel

    d = word_encoder.dictionary
    torch.manual_seed(0)
    args = model_args(
        "bio_roberta_tiny",
        encoder_layers=2,
        encoder_embed_dim=32,
        encoder_ffn_embed_dim=64,
        encoder_attention_heads=4,
        max_positions=512,
    )
    model = BioRobertaModel.build_model(args, DictionaryTask(d))
    model.register_tagging_head("tags", 5)
    model.eval()
    sentences = [s.words for s in ncbi_test[:20]]
    dataset = TaggingDataset(EncodedWords.encode(word_encoder, sentences), d, 512)
    batch = collate_windows([dataset[i] for i in range(20)], d, 510)
    rows = batch["net_input"]["src_tokens"]
    assert batch["row_sentence"].tolist() == list(range(20))
    with torch.no_grad():
        scores = model(rows, features_only=True, classification_head_name="tags")[0]
        windowed = word_predictions(batch, torch.where(batch["owned"], scores.argmax(-1), -1))
        for k, words in enumerate(sentences):
            pieces = word_encoder.encode_sentence(words)
            tokens = torch.tensor([d.bos()] + [p for ids in pieces for p in ids] + [d.eos()])
            assert torch.equal(rows[k, : len(tokens)], tokens)
            alone = model(tokens[None], features_only=True, classification_head_name="tags")[0][0]
            firsts = np.cumsum([1] + [len(ids) for ids in pieces[:-1]])
            assert torch.allclose(alone, scores[k, : len(tokens)], atol=1e-5)
            assert windowed[k] == alone.argmax(-1)[firsts].tolist()

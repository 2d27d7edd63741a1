"""fairseq-bio-binarize: real fairseq-preprocess, single directory and document-aligned shards."""

import pytest

from fairseq_bio_preprocess import fetch
from fairseq_bio_preprocess.binarize import binarize
from fairseq_bio_preprocess.common import PreprocessError
from fairseq_bio_preprocess.encode import encode_file
from fairseq_bio_preprocess.extract import extract
from fairseq_bio_preprocess.vocab import learn_vocab

VOCAB_FILES = {"bpe.json", "encoder.json", "vocab.bpe", "dict.txt"}


@pytest.fixture(scope="module")
def encoded(tmp_path_factory):
    root = tmp_path_factory.mktemp("encoded")
    extract(
        [fetch.pubmed_sample_dir()],
        root / "text",
        max_docs_per_file=120,
        valid_fraction=0.1,
        progress=False,
        sentence_training_texts=300,
    )
    vocab = learn_vocab(root / "text" / "train.txt", root / "vocab", vocab_size=800)
    for split in ("train", "valid"):
        encode_file(vocab, root / "text" / f"{split}.txt", root / f"{split}.bpe", progress=False)
    return root, vocab


def load(data_dir, split):
    from fairseq.data import Dictionary, data_utils

    dictionary = Dictionary.load(str(data_dir / "dict.txt"))
    dataset = data_utils.load_indexed_dataset(str(data_dir / split), dictionary)
    assert dataset is not None, f"{data_dir}/{split} is not a fairseq dataset"
    return dictionary, [dataset[i].tolist() for i in range(len(dataset))]


def expected_ids(dictionary, path):
    lines = path.read_text(encoding="utf-8").split("\n")[:-1]
    return [dictionary.encode_line(line, add_if_not_exist=False).tolist() for line in lines]


def test_single_data_dir_is_readable_by_fairseq(encoded, tmp_path):
    root, vocab = encoded
    data = binarize(vocab, root / "train.bpe", root / "valid.bpe", tmp_path / "bin")
    assert data == str(tmp_path / "bin")
    assert VOCAB_FILES | {"train.bin", "train.idx", "valid.bin", "valid.idx"} <= {
        p.name for p in (tmp_path / "bin").iterdir()
    }
    assert (tmp_path / "bin" / "dict.txt").read_bytes() == (vocab / "dict.txt").read_bytes()
    for split in ("train", "valid"):
        dictionary, items = load(tmp_path / "bin", split)
        assert items == expected_ids(
            dictionary, root / f"{split}.bpe"
        )  # one item per line, blank lines = </s>
    assert not [
        p
        for p in tmp_path.iterdir()
        if p.name.startswith(".") and p.name != ".fairseq_bio-made.json"
    ]


def test_shards_split_at_document_boundaries(encoded, tmp_path):
    root, vocab = encoded
    data = binarize(
        vocab, root / "train.bpe", root / "valid.bpe", tmp_path / "bin", shards=3, workers=2
    )
    shards = [tmp_path / "bin" / f"shard{i}" for i in range(3)]
    assert data == ":".join(map(str, shards))
    pieces = []
    for shard in shards:
        assert VOCAB_FILES <= {p.name for p in shard.iterdir()}  # each shard describes itself
        dictionary, items = load(shard, "train")
        eos = dictionary.eos()
        assert items[0] != [eos] and items[-1] != [eos]  # starts and ends inside a document
        assert load(shard, "valid")[1] == expected_ids(dictionary, root / "valid.bpe")
        pieces.append(items)
    assert all(len(p) > 50 for p in pieces)
    # Re-joined with one blank line (a lone </s>) between shards, the shards are exactly the train
    # file.
    joined = pieces[0] + [[eos]] + pieces[1] + [[eos]] + pieces[2]
    assert joined == expected_ids(dictionary, root / "train.bpe")


def test_fairseq_preprocess_failure_is_one_line_and_leaves_nothing(encoded, tmp_path):
    root, vocab = encoded
    broken = tmp_path / "vocab"
    broken.mkdir()
    for name in ("bpe.json", "encoder.json", "vocab.bpe"):
        (broken / name).write_bytes((vocab / name).read_bytes())
    (broken / "dict.txt").write_text("13 100\nnot-a-count x\n", encoding="utf-8")
    with pytest.raises(PreprocessError) as error:
        binarize(broken, root / "train.bpe", root / "valid.bpe", tmp_path / "bin")
    message = str(error.value)
    assert message.startswith("fairseq-preprocess failed (exit 1): ") and "\n" not in message
    assert "Incorrect dictionary format" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vocab"]  # no bin, no temp directory


def test_existing_destination_needs_overwrite(encoded, tmp_path):
    root, vocab = encoded
    binarize(vocab, root / "train.bpe", root / "valid.bpe", tmp_path / "bin")
    with pytest.raises(PreprocessError, match="already exists"):
        binarize(vocab, root / "train.bpe", root / "valid.bpe", tmp_path / "bin")
    unrelated = tmp_path / "notes"
    unrelated.mkdir()
    (unrelated / "todo.txt").write_text(
        "mine\n"
    )  # an empty folder is filled; one with a file is the user's
    with pytest.raises(PreprocessError, match="not made by this tool"):
        binarize(vocab, root / "train.bpe", root / "valid.bpe", unrelated, overwrite=True)
    binarize(
        vocab, root / "train.bpe", root / "valid.bpe", tmp_path / "bin", shards=2, overwrite=True
    )
    assert sorted(p.name for p in (tmp_path / "bin").iterdir()) == ["shard0", "shard1"]

"""Tag-scheme conversion (BIO, IO, BIOES; IOB1/BIOUL input) and label sets, by hand and on real
NCBI/BC5CDR gold."""

import random
from pathlib import Path

import pytest

from fairseq_bio.data.conll import read_conll
from fairseq_bio.data.tag_schemes import (
    SCHEMES,
    convert_tags,
    entity_types,
    label_set,
    normalize_scheme,
    to_bio,
)
from fairseq_bio.metrics.tagging import get_entities

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def read_conll_tags(path: Path):
    """Tag column of a real CoNLL file, one list per sentence (the task's own reader)."""
    return [sentence.tags for sentence in read_conll(path)]


def test_normalize_scheme():
    assert [normalize_scheme(s) for s in SCHEMES] == list(
        SCHEMES
    )  # every scheme offered is taken as it is
    assert [normalize_scheme(s) for s in ("bio", "IOB2", "io", "bioes", " BIOUL ")] == [
        "bio",
        "bio",
        "io",
        "bioes",
        "bioes",
    ]
    for bad in ("iob1", "bilou", ""):
        with pytest.raises(ValueError, match="unknown tagging scheme"):
            normalize_scheme(bad)
    with pytest.raises(ValueError, match="unknown tagging scheme"):
        convert_tags(["O"], "iobes2")


BIO = ["B-X", "I-X", "I-X", "O", "B-Y", "B-Y", "I-Y", "O", "B-X"]


def test_convert_bio_to_each_scheme():
    assert convert_tags(BIO, "bio") == BIO
    assert convert_tags(BIO, "io") == ["I-X", "I-X", "I-X", "O", "I-Y", "I-Y", "I-Y", "O", "I-X"]
    assert convert_tags(BIO, "bioes") == ["B-X", "I-X", "E-X", "O", "S-Y", "B-Y", "E-Y", "O", "S-X"]
    assert convert_tags(BIO, "bioul") == convert_tags(BIO, "bioes")  # an alias: written with E/S
    assert convert_tags([], "bioes") == []
    assert convert_tags(["O", "O"], "io") == ["O", "O"]
    assert convert_tags(["B", "I", "O", "B"], "bioes") == [
        "B",
        "E",
        "O",
        "S",
    ]  # bare tags stay bare


def test_convert_from_iob1_and_bioul():
    iob1 = ["I-X", "I-X", "B-X", "O", "I-Y", "I-X"]
    assert convert_tags(iob1, "bio") == ["B-X", "I-X", "B-X", "O", "B-Y", "B-X"]
    bioul = ["U-X", "B-X", "I-X", "L-X", "O", "U-Y"]
    assert convert_tags(bioul, "bio") == ["B-X", "B-X", "I-X", "I-X", "O", "B-Y"]
    assert convert_tags(bioul, "bioes") == ["S-X", "B-X", "I-X", "E-X", "O", "S-Y"]


def test_to_bio_ill_formed_bioes_predictions():
    pred = ["E-X", "O", "I-X", "E-X", "S-X", "I-X", "B-X", "I-X", "O", "B-X", "E-Y", "I-X"]
    # E-X alone: a chunk; I-X after O starts one that E-X ends; I-X after S-X starts one; B-X I-X
    # without E-X runs to the O; E-Y after B-X (another type) starts one; so does the final I-X
    assert to_bio(pred, "bioes") == [
        "B-X",
        "O",
        "B-X",
        "I-X",
        "B-X",
        "B-X",
        "B-X",
        "I-X",
        "O",
        "B-X",
        "B-Y",
        "B-X",
    ]


def test_to_bio_io_predictions_merge_consecutive():
    assert to_bio(["I-X", "I-X", "O", "I-X", "I-Y", "I-Y"], "io") == [
        "B-X",
        "I-X",
        "O",
        "B-X",
        "B-Y",
        "I-Y",
    ]


def test_to_bio_keeps_conlleval_chunks_on_random_sequences():
    rng = random.Random(99)
    vocab = ["O", "B-X", "I-X", "E-X", "S-X", "B-Y", "I-Y", "E-Y", "S-Y", "L-X", "U-Y"]
    for _ in range(5000):
        tags = [rng.choice(vocab) for _ in range(rng.randint(0, 9))]
        bio = to_bio(tags)
        assert get_entities(bio) == get_entities(tags), tags
        # well-formed IOB2: every I-T continues a chunk of type T
        for i, t in enumerate(bio):
            if t.startswith("I-"):
                assert i > 0 and bio[i - 1] in ("B" + t[1:], t), bio
        for scheme in SCHEMES:
            converted = convert_tags(tags, scheme)
            assert {t.split("-")[0] for t in converted} <= {
                "O",
                *dict(bio=("B", "I"), io=("I",)).get(scheme, "BIES"),
            }
            if scheme != "io":
                assert get_entities(converted) == get_entities(tags)
            assert to_bio(convert_tags(bio, scheme), scheme) == to_bio(converted, scheme)


def test_label_set_order_and_completeness():
    sentences = [["O", "B-Gene", "I-Gene"], ["B-Chemical", "O"], ["O"]]
    assert label_set(sentences, "bio") == ["O", "B-Chemical", "I-Chemical", "B-Gene", "I-Gene"]
    assert label_set(sentences, "io") == ["O", "I-Chemical", "I-Gene"]
    assert label_set(sentences, "bioul") == [
        "O",
        "B-Chemical",
        "I-Chemical",
        "E-Chemical",
        "S-Chemical",
        "B-Gene",
        "I-Gene",
        "E-Gene",
        "S-Gene",
    ]
    # order does not depend on the order types are seen in; no entity at all leaves only O
    assert label_set(reversed(sentences), "bio") == label_set(sentences, "bio")
    assert label_set([["O", "O"], []], "bioes") == ["O"]
    assert entity_types(label_set(sentences, "bioes")) == ["Chemical", "Gene"]
    assert entity_types(["O", "B", "I"]) == [""]
    with pytest.raises(ValueError, match=r"sentence 1, word 0: tag 'Disease'"):
        label_set([["O"], ["Disease"]], "bio")
    with pytest.raises(ValueError, match="sentence 0: expected a list of tags"):
        label_set(["B-X"], "bio")


def same_type_adjacent(tags):
    """Entities that start right where an entity of the same type ends, counted from the raw BIO
    tags."""
    return sum(
        1
        for prev, tag in zip(tags, tags[1:])
        if tag.startswith("B-") and prev != "O" and prev.split("-", 1)[1] == tag.split("-", 1)[1]
    )


# (corpus, split) -> entities that start right after one of the same type (measured on the shared
# data)
ADJACENT = {
    ("NCBI-disease", "test"): 5,
    ("NCBI-disease", "devel"): 6,
    ("BC5CDR-disease", "test"): 27,
    ("BC5CDR-disease", "devel"): 19,
}


@pytest.mark.parametrize("corpus,split", sorted(ADJACENT))
def test_round_trips_on_real_gold(corpus, split):
    path = DATA / "ner" / corpus / f"{split}.tsv"
    if not path.is_file():
        pytest.skip(f"{path} is missing (shared data)")
    gold = read_conll_tags(path)
    labels = {scheme: set(label_set(gold, scheme)) for scheme in SCHEMES}
    for scheme in ("bio", "bioes"):
        for tags in gold:
            converted = convert_tags(tags, scheme)
            assert set(converted) <= labels[scheme]
            assert to_bio(converted, scheme) == convert_tags(tags, "bio") == tags
    # IO loses exactly the boundary between same-type neighbours: each merges two entities into one
    merged = changed = 0
    for tags in gold:
        back = to_bio(convert_tags(tags, "io"), "io")
        assert set(convert_tags(tags, "io")) <= labels["io"]
        lost = len(get_entities(tags)) - len(get_entities(back))
        assert lost == same_type_adjacent(tags)
        merged += lost
        changed += back != tags
        if back == tags:
            assert lost == 0
    assert merged == ADJACENT[corpus, split]
    assert 0 < changed <= merged

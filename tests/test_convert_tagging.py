"""fairseq-bio-convert-tagging: EBM-NLP PICO and PubTator/BioC JSON to the CoNLL splits bio_tagging
reads."""

import importlib.metadata
import json
import tarfile
from pathlib import Path

import pytest
from helpers.ebm_nlp import (
    EXPECTED_DEVEL_IO,
    EXPECTED_TEST_IO,
    EXPECTED_TRAIN_IO,
    SPANS,
    dev_list,
    write_ebm_release,
)
from helpers.files import read

from fairseq_bio.data.conll import read_conll
from fairseq_bio.data.sentence_splitter import SentenceSplitter
from fairseq_bio.data.tag_schemes import label_set
from fairseq_bio.metrics.tagging import get_entities
from fairseq_bio_preprocess.common import PreprocessError
from fairseq_bio_preprocess.convert_tagging import cli_main
from fairseq_bio_preprocess.ebm_nlp import convert_ebm_nlp
from fairseq_bio_preprocess.pubtator import (
    Document,
    Mention,
    PubtatorStats,
    convert_pubtator,
    tag_document,
)

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

# ---------------------------------------------------------------------------------------------------
# EBM-NLP: a tiny release with the real 2.00 layout (helpers/ebm_nlp.py)


@pytest.fixture
def release(tmp_path):
    return write_ebm_release(tmp_path / "ebm_nlp_2_00")


def test_ebm_nlp_exact_conll_as_blurb(release, tmp_path):
    out = tmp_path / "pico"
    stats = convert_ebm_nlp(release, out, dev_pmids=dev_list(tmp_path, "103"))
    assert read(out / "train.tsv") == EXPECTED_TRAIN_IO
    assert read(out / "devel.tsv") == EXPECTED_DEVEL_IO
    assert (
        read(out / "test.tsv") == EXPECTED_TEST_IO
    )  # gold labels of 201, not its train or crowd labels
    assert read(out / "train.pmids") == "101\n102\n104\n"
    assert read(out / "devel.pmids") == "103\n"
    assert read(out / "test.pmids") == "201\n202\n"
    assert stats.train_in_test == 1
    assert stats.overlap_words == 4
    assert stats.documents == {"train": 3, "devel": 1, "test": 2}
    assert stats.sentences == {"train": 4, "devel": 1, "test": 2}
    assert stats.tagged_words["test"] == {"I-INT": 3, "I-OUT": 1, "I-PAR": 2, "O": 4}
    assert json.loads(read(out / "convert_stats.json"))["overlap_words"] == 4
    # What bio_tagging reads: the same sentences, and BLURB's IO label set.
    sentences = read_conll(out / "train.tsv")
    assert [len(s.words) for s in sentences] == [7, 3, 8, 5]
    assert label_set([s.tags for s in sentences], "io") == ["O", "I-INT", "I-OUT", "I-PAR"]


def test_ebm_nlp_bio_scheme_and_one_sentence_per_abstract(release, tmp_path):
    out = tmp_path / "pico"
    convert_ebm_nlp(
        release, out, dev_pmids=dev_list(tmp_path, "103"), scheme="bio", sentence_split="document"
    )
    sentences = read_conll(out / "train.tsv")
    assert [len(s.words) for s in sentences] == [10, 8, 5]
    assert sentences[0].tags == [
        "B-INT",
        "O",
        "B-OUT",
        "O",
        "B-PAR",
        "I-PAR",
        "O",
        "B-OUT",
        "O",
        "O",
    ]
    assert sentences[1].tags == ["B-INT", "O", "B-PAR", "B-OUT", "B-PAR", "B-INT", "B-OUT", "I-OUT"]


def test_ebm_nlp_seeded_dev_split(tmp_path):
    tokens = {str(300 + i): "Drug helped ." for i in range(10)}
    tokens["900"] = "Drug ."
    train = {pmid: ("000", "100", "000") for pmid in tokens if pmid != "900"}
    release = write_ebm_release(tmp_path / "ebm", tokens, train, {"900": ("00", "10", "00")}, {})
    runs = []
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        convert_ebm_nlp(release, tmp_path / name, seed=seed)
        runs.append(
            {s: read(tmp_path / name / f"{s}.pmids").split() for s in ("train", "devel", "test")}
        )
    assert runs[0] == runs[1]  # reproducible
    for run in runs:
        assert len(run["devel"]) == 2 and len(run["train"]) == 8  # int(0.2 * 10)
        assert sorted(run["train"] + run["devel"]) == sorted(train) and run["test"] == ["900"]
        assert run["train"] == sorted(run["train"], key=int)  # documents in PMID order
    assert runs[0]["devel"] != runs[2]["devel"]


def test_ebm_nlp_reads_the_tar_gz_as_the_directory(release, tmp_path):
    # An AppleDouble file, as tar on macOS adds: not an annotation file.
    (release / SPANS / "outcomes" / "train" / "._101.AGGREGATED.ann").write_bytes(
        b"\x00\x05\x16\x07"
    )
    archive = tmp_path / "ebm_nlp_2_00.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(release, arcname="ebm_nlp_2_00")
    dev = dev_list(tmp_path, "103")
    convert_ebm_nlp(release, tmp_path / "from_dir", dev_pmids=dev)
    convert_ebm_nlp(archive, tmp_path / "from_tar", dev_pmids=dev)
    for name in ("train.tsv", "devel.tsv", "test.tsv", "test.pmids"):
        assert read(tmp_path / "from_tar" / name) == read(tmp_path / "from_dir" / name)
    # Errors inside the archive name the member.
    (release / "documents" / "104.tokens").write_text("No\neffect\n", encoding="utf-8")
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(release, arcname="ebm_nlp_2_00")
    with pytest.raises(
        PreprocessError, match=r"ebm_nlp_2_00\.tar\.gz:ebm_nlp_2_00/annotations/.*/104\.AGGREGATED"
    ):
        convert_ebm_nlp(archive, tmp_path / "bad", dev_pmids=dev)


def _truncate_labels(release):
    (release / SPANS / "outcomes" / "train" / "102.AGGREGATED.ann").write_text(
        "0\n0\n1\n", encoding="utf-8"
    )


def _drop_element(release):
    (release / SPANS / "interventions" / "test" / "gold" / "202.AGGREGATED.ann").unlink()


def _bad_label(release):
    (release / SPANS / "participants" / "train" / "104.AGGREGATED.ann").write_text(
        "0\n0\n2\n0\n0\n", encoding="utf-8"
    )


def _drop_tokens(release):
    (release / "documents" / "202.tokens").unlink()


def _latin1_tokens(release):
    (release / "documents" / "101.tokens").write_bytes("Aspirin\nfor\npa\xefn\n".encode("latin-1"))


def _empty_token_line(release):
    (release / "documents" / "104.tokens").write_text("No\neffect\n\nseen\n.\n", encoding="utf-8")


@pytest.mark.parametrize(
    "damage, message",
    [
        (
            _truncate_labels,
            r"outcomes/train/102\.AGGREGATED\.ann: 3 labels for the 8 tokens of .*documents/102\.tokens$",
        ),
        (
            _drop_element,
            r"interventions/test/gold/202\.AGGREGATED\.ann: missing, though PMID 202 has",
        ),
        (_bad_label, r"participants/train/104\.AGGREGATED\.ann:3: label '2' is not 0 or 1"),
        (_drop_tokens, r"documents/202\.tokens: missing$"),
        (
            _latin1_tokens,
            r"documents/101\.tokens:3: not valid utf-8 \(byte 0xef\); pass --encoding if the \.tokens files",
        ),
        (_empty_token_line, r"documents/104\.tokens:3: empty line"),
    ],
)
def test_ebm_nlp_bad_release_is_one_line_error_and_writes_nothing(
    release, tmp_path, damage, message
):
    damage(release)
    out = tmp_path / "pico"
    with pytest.raises(PreprocessError, match=message) as error:
        convert_ebm_nlp(release, out, dev_pmids=dev_list(tmp_path, "103"))
    assert "\n" not in str(error.value)
    assert not out.exists() or not any(out.iterdir())


def test_ebm_nlp_missing_elements_allowed_and_latin1_on_request(release, tmp_path):
    _drop_element(release)
    _latin1_tokens(release)
    (release / SPANS / "participants" / "train" / "101.AGGREGATED.ann").write_text(
        "0\n0\n0\n", encoding="utf-8"
    )
    (release / SPANS / "interventions" / "train" / "101.AGGREGATED.ann").write_text(
        "1\n0\n0\n", encoding="utf-8"
    )
    (release / SPANS / "outcomes" / "train" / "101.AGGREGATED.ann").write_text(
        "0\n0\n1\n", encoding="utf-8"
    )
    out = tmp_path / "pico"
    stats = convert_ebm_nlp(
        release,
        out,
        dev_pmids=dev_list(tmp_path, "103"),
        allow_missing_elements=True,
        encoding="latin-1",
    )
    assert stats.missing_element_files == 1
    assert read(out / "train.tsv").startswith("Aspirin\tI-INT\nfor\tO\npa\xefn\tI-OUT\n\n")
    assert read_conll(out / "test.tsv")[1].tags == [
        "I-PAR",
        "I-PAR",
        "O",
        "O",
        "O",
        "O",
    ]  # no interventions


def test_ebm_nlp_bad_arguments(release, tmp_path):
    with pytest.raises(PreprocessError, match=r"dev\.pmids:3: PMID 201 is a gold test document"):
        convert_ebm_nlp(release, tmp_path / "a", dev_pmids=dev_list(tmp_path, "103", "201"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        PreprocessError, match=r"empty: no documents/ folder; not an EBM-NLP release"
    ):
        convert_ebm_nlp(tmp_path / "empty", tmp_path / "b")
    with pytest.raises(PreprocessError, match=r"--dev-fraction 1.0"):
        convert_ebm_nlp(release, tmp_path / "c", dev_fraction=1.0)
    convert_ebm_nlp(release, tmp_path / "d", dev_pmids=dev_list(tmp_path, "103"))
    with pytest.raises(
        PreprocessError, match=r"d/train\.tsv: already exists; pass --overwrite to replace it"
    ):
        convert_ebm_nlp(release, tmp_path / "d", dev_pmids=dev_list(tmp_path, "103"))
    convert_ebm_nlp(release, tmp_path / "d", dev_pmids=dev_list(tmp_path, "104"), overwrite=True)
    assert read(tmp_path / "d" / "devel.pmids") == "104\n"


def test_cli_ebm_nlp_and_console_script(release, tmp_path, capsys):
    out = tmp_path / "pico"
    cli_main(
        [
            "ebm-nlp",
            "--input",
            str(release),
            "--out",
            str(out),
            "--dev-pmids",
            str(dev_list(tmp_path, "103")),
        ]
    )
    assert read(out / "train.tsv") == EXPECTED_TRAIN_IO
    assert "train_in_test: 1" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        cli_main(["ebm-nlp", "--input", str(release), "--out", str(out)])
    assert str(exit_.value).startswith("fairseq-bio-convert-tagging: ") and "already exists" in str(
        exit_.value
    )
    scripts = {e.name: e.value for e in importlib.metadata.entry_points(group="console_scripts")}
    assert (
        scripts["fairseq-bio-convert-tagging"] == "fairseq_bio_preprocess.commands:convert_tagging"
    )


# ---------------------------------------------------------------------------------------------------
# PubTator / BioC JSON

# Two documents written in the style of the BioCreative V CDR corpus (text, offsets and ids are made
# up here): a relation line, a composite mention with a 7th column, "Parkinson's" cut as Parkinson '
# s.
CDR_SAMPLE = """\
9990001|t|Haloperidol-induced neuroleptic malignant syndrome in a patient with Parkinson's disease.
9990001|a|A 58-year-old man with Parkinson's disease developed hyperthermia, rigidity and acute renal failure 3 \
days after haloperidol (5 mg/day) was started. Serum creatine kinase rose to 12,400 units per litre. Withdrawal of \
haloperidol and treatment with dantrolene led to recovery. Dopamine antagonists may precipitate neuroleptic \
malignant syndrome in parkinsonian patients.
9990001\t0\t11\tHaloperidol\tChemical\tD006220
9990001\t20\t50\tneuroleptic malignant syndrome\tDisease\tD009459
9990001\t69\t88\tParkinson's disease\tDisease\tD010300
9990001\t113\t132\tParkinson's disease\tDisease\tD010300
9990001\t143\t155\thyperthermia\tDisease\tD005334
9990001\t157\t165\trigidity\tDisease\tD009127
9990001\t170\t189\tacute renal failure\tDisease\tD058186
9990001\t203\t214\thaloperidol\tChemical\tD006220
9990001\t245\t253\tcreatine\tChemical\tD003401
9990001\t307\t318\thaloperidol\tChemical\tD006220
9990001\t338\t348\tdantrolene\tChemical\tD003620
9990001\t366\t374\tDopamine\tChemical\tD004298
9990001\t403\t433\tneuroleptic malignant syndrome\tDisease\tD009459
9990001\t437\t449\tparkinsonian\tDisease\tD010302
9990001\tCID\tD006220\tD009459

9990002|t|Renal and hepatic failure after high-dose methotrexate.
9990002|a|Two children developed renal and hepatic failure after methotrexate. Leucovorin rescue was given.
9990002\t0\t25\tRenal and hepatic failure\tDisease\tD051437|D017093\tRenal failure|hepatic failure
9990002\t42\t54\tmethotrexate\tChemical\tD008727
9990002\t79\t104\trenal and hepatic failure\tDisease\tD051437|D017093\trenal failure|hepatic failure
9990002\t111\t123\tmethotrexate\tChemical\tD008727
9990002\t125\t135\tLeucovorin\tChemical\tD002955
9990002\tCID\tD008727\tD051437
"""

EXPECTED_DISEASE = """\
Haloperidol O - O induced O neuroleptic B-Disease malignant I-Disease syndrome I-Disease in O a O patient O with O
Parkinson B-Disease ' I-Disease s I-Disease disease I-Disease . O
|
A O 58 O - O year O - O old O man O with O Parkinson B-Disease ' I-Disease s I-Disease disease I-Disease developed O
hyperthermia B-Disease , O rigidity B-Disease and O acute B-Disease renal I-Disease failure I-Disease 3 O days O after O
haloperidol O ( O 5 O mg O / O day O ) O was O started O . O
|
Serum O creatine O kinase O rose O to O 12 O , O 400 O units O per O litre O . O
|
Withdrawal O of O haloperidol O and O treatment O with O dantrolene O led O to O recovery O . O
|
Dopamine O antagonists O may O precipitate O neuroleptic B-Disease malignant I-Disease syndrome I-Disease in O
parkinsonian B-Disease patients O . O
|
Renal B-Disease and I-Disease hepatic I-Disease failure I-Disease after O high O - O dose O methotrexate O . O
|
Two O children O developed O renal B-Disease and I-Disease hepatic I-Disease failure I-Disease after O methotrexate O . O
|
Leucovorin O rescue O was O given O . O
"""


def conll_of(compact: str) -> str:
    """CoNLL text from ``word tag word tag ...`` pairs, sentences separated by ``|`` lines."""
    out = []
    for sentence in compact.split("\n|\n"):
        items = sentence.split()
        out.append("".join(f"{w}\t{t}\n" for w, t in zip(items[::2], items[1::2])))
    return "\n".join(out) + "\n"


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def convert(tmp_path, text=CDR_SAMPLE, out="out", **kwargs):
    source = write(tmp_path / "sample.PubTator.txt", text)
    kwargs.setdefault("split_files", {"train": [source]})
    return convert_pubtator(tmp_path / out, **kwargs)


def test_pubtator_cdr_disease_exact_conll(tmp_path):
    stats = convert(tmp_path, types=["Disease"])
    assert read(tmp_path / "out" / "train.tsv") == conll_of(EXPECTED_DISEASE)
    assert read(tmp_path / "out" / "train.pmids") == "9990001\n9990002\n"
    assert stats.mentions == {"train": {"Disease": 10}}
    assert stats.other_types == {"Chemical": 9} and stats.types_read == {
        "Chemical": 9,
        "Disease": 10,
    }
    assert stats.relations_skipped == 2
    assert stats.sentences == {"train": 8}
    assert (stats.boundary_inside_word, stats.overlapping_dropped, stats.sentence_joins) == (
        0,
        0,
        0,
    )


def test_pubtator_every_mention_is_one_entity(tmp_path):
    """Round trip: the entities get_entities reads back are exactly the mentions, with their types
    and words."""
    convert(tmp_path)
    sentences = read_conll(tmp_path / "out" / "train.tsv")
    entities = [(t, "".join(s.words[a:b])) for s in sentences for t, a, b in get_entities(s.tags)]
    mentions = [
        (line.split("\t")[4], line.split("\t")[3].replace(" ", ""))
        for line in CDR_SAMPLE.splitlines()
        if line.count("\t") >= 4
    ]
    assert sorted(entities) == sorted(mentions) and len(entities) == 19


def test_pubtator_boundaries_inside_words_overlaps_and_sentence_joins(tmp_path):
    title = "Cardiotoxicity of doxorubicin."
    abstract = "Late cardiotoxicity was seen. Heart failure was not. Renal failure resolved."
    text = f"{title} {abstract}"

    def line(mention, type_, occurrence=0):
        start = -1
        for _ in range(occurrence + 1):
            start = text.index(mention, start + 1)
        return f"7\t{start}\t{start + len(mention)}\t{mention}\t{type_}\tX\n"

    pubtator = f"7|t|{title}\n7|a|{abstract}\n" + "".join(
        [
            line(
                "toxicity", "Disease"
            ),  # inside the word "Cardiotoxicity": the whole word is tagged
            line("cardiotoxicity", "Disease"),
            line("doxorubicin", "Chemical"),
            line("doxorubicin", "Chemical"),  # the same mention twice
            # Crosses a sentence boundary (a wrong split or annotation): the sentences are joined,
            # the entity whole.
            line("seen. Heart failure", "Disease"),
            line("Renal failure", "Disease"),
            line("failure", "Disease"),  # overlaps the longer mention at an earlier start: dropped
        ]
    )
    stats = convert(tmp_path, pubtator)
    sentences = read_conll(tmp_path / "out" / "train.tsv")
    assert [" ".join(s.words) for s in sentences] == [
        "Cardiotoxicity of doxorubicin .",
        "Late cardiotoxicity was seen . Heart failure was not .",
        "Renal failure resolved .",
    ]
    assert [s.tags for s in sentences] == [
        ["B-Disease", "O", "B-Chemical", "O"],
        ["O", "B-Disease", "O", "B-Disease", "I-Disease", "I-Disease", "I-Disease", "O", "O", "O"],
        ["B-Disease", "I-Disease", "O", "O"],
    ]
    assert (stats.boundary_inside_word, stats.duplicates_dropped, stats.overlapping_dropped) == (
        1,
        1,
        1,
    )
    assert stats.sentence_joins == 1 and stats.sentences == {"train": 3}
    assert any(
        "boundary inside a word; tagged 'Cardiotoxicity' for 'toxicity'" in e
        for e in stats.examples
    )
    assert any(
        e.startswith(f"{tmp_path / 'sample.PubTator.txt'}:9: overlaps") for e in stats.examples
    )


def test_pubtator_splits_by_pmid_lists_and_by_files(tmp_path):
    lists = {
        s: write(tmp_path / f"{s}.list", text)
        for s, text in (("train", "9990002\n"), ("test", "9990001\n"))
    }
    source = write(tmp_path / "all.txt", CDR_SAMPLE + "\n5|t|Unlisted title.\n")
    stats = convert_pubtator(
        tmp_path / "by_list", inputs=[source], split_pmids=lists, types=["Chemical"]
    )
    assert read(tmp_path / "by_list" / "train.pmids") == "9990002\n"
    assert read(tmp_path / "by_list" / "test.pmids") == "9990001\n"
    assert not (tmp_path / "by_list" / "devel.tsv").exists()
    assert stats.unassigned_documents == 1 and stats.mentions == {
        "train": {"Chemical": 3},
        "test": {"Chemical": 6},
    }
    first, second = CDR_SAMPLE.split("\n\n")
    files = {
        "train": [write(tmp_path / "a.txt", second)],
        "test": [write(tmp_path / "b.txt", first)],
    }
    convert_pubtator(tmp_path / "by_file", split_files=files, types=["Chemical"])
    for name in ("train.tsv", "test.tsv"):
        assert read(tmp_path / "by_file" / name) == read(tmp_path / "by_list" / name)


def test_bioc_json_gives_the_same_conll(tmp_path):
    documents = []
    for block in CDR_SAMPLE.strip().split("\n\n"):
        lines = block.split("\n")
        pmid, title = lines[0].split("|t|")
        abstract = lines[1].split("|a|")[1]
        annotations = [
            {
                "id": str(i),
                "infons": {"type": cols[4], "identifier": cols[5]},
                "text": cols[3],
                "locations": [{"offset": int(cols[1]), "length": int(cols[2]) - int(cols[1])}],
            }
            for i, cols in enumerate(line.split("\t") for line in lines[2:])
            if len(cols) >= 5
        ]
        passages = [
            {"offset": 0, "text": title, "infons": {"type": "title"}, "annotations": []},
            {
                "offset": len(title) + 1,
                "text": abstract,
                "infons": {"type": "abstract"},
                "annotations": annotations,
            },
        ]
        documents.append({"id": pmid, "passages": passages})
    documents[1]["passages"][1]["annotations"].append(
        {
            "id": "d",
            "infons": {"type": "Disease"},
            "text": "x",
            "locations": [{"offset": 0, "length": 5}] * 2,
        }
    )
    bioc = write(tmp_path / "sample.json", json.dumps({"source": "test", "documents": documents}))
    stats = convert_pubtator(tmp_path / "bioc", split_files={"train": [bioc]}, types=["Disease"])
    assert read(tmp_path / "bioc" / "train.tsv") == conll_of(EXPECTED_DISEASE)
    assert stats.discontinuous_dropped == 1
    # One document per line (PubTator3's export), and its errors name the line.
    lines = write(tmp_path / "lines.json", "\n".join(json.dumps(d) for d in documents) + "\n")
    convert_pubtator(tmp_path / "lines", split_files={"train": [lines]}, types=["Disease"])
    assert read(tmp_path / "lines" / "train.tsv") == conll_of(EXPECTED_DISEASE)
    documents[1]["passages"][1]["annotations"][0]["text"] = "kidney"
    write(lines, "\n".join(json.dumps(d) for d in documents) + "\n")
    with pytest.raises(
        PreprocessError, match=r"lines\.json:2: document 9990002, annotation 0: mention 'kidney'"
    ):
        convert_pubtator(tmp_path / "bad", split_files={"train": [lines]})


def _sample_with(old: str, new: str) -> str:
    assert old in CDR_SAMPLE
    return CDR_SAMPLE.replace(old, new, 1)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            _sample_with("9990001\t143\t155\thyperthermia", "9990001\t143\t155\thypothermia"),
            r"sample\.PubTator\.txt:7: mention 'hypothermia' does not match the text of document 9990001 at "
            r"143-155 \('hyperthermia'\)",
        ),
        (
            _sample_with("9990002\t125\t135", "9990002\t125\t999"),
            r"sample\.PubTator\.txt:25: offsets 125-999 are outside the text of document 9990002",
        ),
        (
            _sample_with("9990001\t0\t11\tHaloperidol\tChemical\tD006220", "9990001\t0\t11"),
            r"txt:3: 3 columns",
        ),
        (
            _sample_with("9990001\t20\t50", "9990003\t20\t50"),
            r"txt:4: annotation for PMID 9990003 inside document",
        ),
        ("9990001\t0\t3\tHal\tChemical\n", r"txt:1: an annotation line before any title line"),
        (
            _sample_with("9990002|a|", "9990009|a|"),
            r"txt:20: abstract of PMID 9990009 without its title line",
        ),
        ("9990001|t|A title\nnot pubtator\n", r"txt:2: not a title \(PMID\|t\|\), abstract"),
        ("\n\n", r"sample\.PubTator\.txt: no documents"),
    ],
)
def test_pubtator_bad_input_is_one_line_error_naming_file_and_line(tmp_path, text, message):
    with pytest.raises(PreprocessError, match=message) as error:
        convert(tmp_path, text)
    assert "\n" not in str(error.value)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_pubtator_bad_arguments(tmp_path):
    with pytest.raises(
        PreprocessError, match=r"--types Disaese: no mention has this type \(types in the input: "
    ):
        convert(tmp_path, types=["Disaese"])
    source = write(tmp_path / "in.txt", CDR_SAMPLE)
    lists = {
        "train": write(tmp_path / "t.list", "9990001\n"),
        "test": write(tmp_path / "e.list", "1\n9990001\n"),
    }
    with pytest.raises(PreprocessError, match=r"e\.list:1: PMID 1 is in none of the input files"):
        convert_pubtator(tmp_path / "o", inputs=[source], split_pmids=lists)
    write(lists["test"], "9990002\n9990001\n")
    with pytest.raises(PreprocessError, match=r"e\.list:2: PMID 9990001 is also in .*t\.list"):
        convert_pubtator(tmp_path / "o", inputs=[source], split_pmids=lists)
    with pytest.raises(PreprocessError, match=r"either as input files"):
        convert_pubtator(tmp_path / "o", inputs=[source])
    copy = write(tmp_path / "copy.txt", CDR_SAMPLE)
    with pytest.raises(
        PreprocessError, match=r"copy\.txt:1: document 9990001 already read at .*in\.txt:1$"
    ):
        convert_pubtator(tmp_path / "o", split_files={"train": [source], "test": [copy]})
    write(source, CDR_SAMPLE.replace("Leucovorin rescue", "Leucovorin r\xe9scue"))
    source.write_bytes(source.read_text(encoding="utf-8").encode("latin-1"))
    with pytest.raises(PreprocessError, match=r"in\.txt:20: not valid utf-8 \(byte 0xe9\)$"):
        convert_pubtator(tmp_path / "o", split_files={"test": [source]})


def test_pubtator_rename_merges_types(tmp_path):
    text = CDR_SAMPLE.replace("\tDisease\t", "\tSpecificDisease\t", 3)
    stats = convert(tmp_path, text, rename=["SpecificDisease=Disease"], types=["Disease"])
    assert read(tmp_path / "out" / "train.tsv") == conll_of(EXPECTED_DISEASE)
    assert stats.mentions == {"train": {"Disease": 10}}


def test_cli_pubtator(tmp_path, capsys):
    source = write(tmp_path / "cdr.txt", CDR_SAMPLE)
    out = tmp_path / "bc5cdr-disease"
    cli_main(["pubtator", "--train", str(source), "--out", str(out), "--types", "Disease"])
    assert read(out / "train.tsv") == conll_of(EXPECTED_DISEASE)
    assert "relations_skipped: 2" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        cli_main(
            [
                "pubtator",
                "--train",
                str(source),
                "--out",
                str(out),
                "--overwrite",
                "--types",
                "Gene",
            ]
        )
    assert str(exit_.value).startswith(
        "fairseq-bio-convert-tagging: --types Gene: no mention has this type"
    )


def test_real_bc5cdr_disease_words_and_tags_are_reproduced_from_offsets():
    """BLURB's real BC5CDR-disease train file -> text with character-offset mentions ->
    tag_document: the same words and tags (its words are what words_with_offsets cuts, its tags what
    mentions give)."""
    gold = read_conll(DATA / "ner" / "BC5CDR-disease" / "train.tsv")[:400]
    documents = []
    for d in range(0, len(gold), 10):
        text, mentions = "", []
        for sentence in gold[d : d + 10]:
            text += " " if text else ""
            offsets = []
            for word in sentence.words:
                text += " " if offsets else ""
                offsets.append(len(text))
                text += word
            for type_, a, b in get_entities(sentence.tags):
                start, end = offsets[a], offsets[b - 1] + len(sentence.words[b - 1])
                mentions.append(Mention(start, end, text[start:end], type_, f"sentence {d}"))
        title_end = len(" ".join(gold[d].words))
        documents.append(
            Document(str(d), text, [(0, title_end), (title_end + 1, len(text))], mentions, str(d))
        )
    splitter = SentenceSplitter.train(doc.text for doc in documents)
    stats = PubtatorStats()
    words, tags = [], []
    for document in documents:
        sentences, _ = tag_document(document, splitter, stats)
        words += [w for s, _ in sentences for w in s]
        tags += [t for _, s in sentences for t in s]
    assert words == [w for s in gold for w in s.words]
    assert tags == [t for s in gold for t in s.tags]
    assert stats.mentions_read == sum(len(get_entities(s.tags)) for s in gold) > 300
    assert (stats.boundary_inside_word, stats.overlapping_dropped, stats.sentence_joins) == (
        0,
        0,
        0,
    )

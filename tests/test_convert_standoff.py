"""fairseq-bio-convert-tagging brat / linnaeus / s800 / chemdner: stand-off mentions to the CoNLL
splits bio_tagging reads, on small synthetic files in each release's real layout."""

import json
from pathlib import Path

import pytest
from helpers.files import conll, read, write

from fairseq_bio.data.conll import read_conll
from fairseq_bio_preprocess.common import PreprocessError
from fairseq_bio_preprocess.convert_tagging import cli_main
from fairseq_bio_preprocess.standoff import (
    convert_brat,
    convert_chemdner,
    convert_linnaeus,
    convert_s800,
)


def span(text: str, mention: str, occurrence: int = 0):
    """(start, end exclusive) of the ``occurrence``-th ``mention`` in ``text``."""
    start = -1
    for _ in range(occurrence + 1):
        start = text.index(mention, start + 1)
    return start, start + len(mention)


# ---------------------------------------------------------------------------------------------------
# brat

DOC1 = "Aspirin relieved headache in Homo sapiens.\nMice were treated with aspirin-like drugs.\n"


def brat_line(
    kind_id: str, type_: str, text: str, mention: str, occurrence: int = 0, cut: int = 0
) -> str:
    start, end = span(text, mention, occurrence)
    return f"{kind_id}\t{type_} {start} {end - cut}\t{mention[: len(mention) - cut]}\n"


def brat_corpus(root: Path) -> Path:
    ann = "".join(
        [
            brat_line("T1", "Chemical", DOC1, "Aspirin"),
            brat_line("T2", "Species", DOC1, "Homo sapiens"),
            brat_line(
                "T3", "Species", DOC1, "Mice", cut=1
            ),  # "Mic": a boundary inside a word tags the word
            brat_line("T4", "Chemical", DOC1, "aspirin"),
            brat_line("T5", "Disease", DOC1, "headache"),
            brat_line(
                "T6", "Disease", DOC1, "head"
            ),  # overlaps the longer mention at the same start: dropped
            "T7\tChemical 0 7;66 73\tAspirin aspirin\n",  # discontinuous: dropped
            "R1\tTreats Arg1:T1 Arg2:T5\n",
            "A1\tNegated T1\n",
            "#1\tAnnotatorNotes T1\tchecked\n",
            "N1\tReference T2 Taxonomy:9606\tHomo sapiens\n",
        ]
    )
    write(root / "train" / "doc1.txt", DOC1)
    write(root / "train" / "doc1.ann", ann)
    write(root / "train" / "sub" / "doc2.txt", "Nothing is annotated here.\n")
    write(root / "train" / "sub" / "doc2.ann", "")
    text = "Zebrafish embryos grew.\n"
    write(root / "test" / "doc3.txt", text)
    write(root / "test" / "doc3.ann", brat_line("T1", "Species", text, "Zebrafish"))
    return root


def test_brat_tags_counts_and_skips(tmp_path):
    root = brat_corpus(tmp_path / "brat")
    out = tmp_path / "out"
    stats = convert_brat(
        out, split_files={"train": [root / "train"], "test": [root / "test"]}, split_segments=False
    )
    assert conll(out / "train.tsv") == [
        [
            ("Aspirin", "B-Chemical"),
            ("relieved", "O"),
            ("headache", "B-Disease"),
            ("in", "O"),
            ("Homo", "B-Species"),
            ("sapiens", "I-Species"),
            (".", "O"),
        ],
        [
            ("Mice", "B-Species"),
            ("were", "O"),
            ("treated", "O"),
            ("with", "O"),
            ("aspirin", "B-Chemical"),
            ("-", "O"),
            ("like", "O"),
            ("drugs", "O"),
            (".", "O"),
        ],
        [("Nothing", "O"), ("is", "O"), ("annotated", "O"), ("here", "O"), (".", "O")],
    ]
    assert conll(out / "test.tsv") == [
        [("Zebrafish", "B-Species"), ("embryos", "O"), ("grew", "O"), (".", "O")]
    ]
    assert read(out / "train.pmids") == "doc1\ndoc2\n" and read(out / "test.pmids") == "doc3\n"
    assert stats.mentions == {
        "train": {"Chemical": 2, "Disease": 1, "Species": 2},
        "test": {"Species": 1},
    }
    assert (stats.boundary_inside_word, stats.overlapping_dropped, stats.discontinuous_dropped) == (
        1,
        1,
        1,
    )
    assert stats.annotations_skipped == {"R": 1, "A": 1, "#": 1, "N": 1}
    assert stats.documents_without_mentions == 1
    assert json.loads(read(out / "convert_stats.json"))["annotations_skipped"]["R"] == 1
    assert any("boundary inside a word; tagged 'Mice' for 'Mic'" in e for e in stats.examples)


def test_brat_offset_mismatch_is_refused_with_file_and_line(tmp_path):
    root = brat_corpus(tmp_path / "brat")
    ann = root / "train" / "doc1.ann"
    write(ann, read(ann).replace("T2\tSpecies 29 41", "T2\tSpecies 29 40"))  # an inclusive end
    with pytest.raises(PreprocessError) as error:
        convert_brat(tmp_path / "out", split_files={"train": [root / "train"]})
    message = str(error.value)
    assert message.startswith(
        f"{ann}:2: mention 'Homo sapiens' does not match the text of document doc1 at 29-40"
    )
    assert message.endswith("with an inclusive end it would match") and "\n" not in message
    assert not (tmp_path / "out").exists()  # nothing written
    write(ann, "T1\tChemical zero 7\tAspirin\n")
    with pytest.raises(
        PreprocessError, match=r"doc1\.ann:1: offsets 'zero 7' are not two whole numbers"
    ):
        convert_brat(tmp_path / "out", split_files={"train": [root / "train"]})
    write(ann, "T1\tChemical\n")
    with pytest.raises(PreprocessError, match=r"doc1\.ann:1: not a text-bound annotation"):
        convert_brat(tmp_path / "out", split_files={"train": [root / "train"]})
    (root / "test" / "doc3.txt").unlink()
    with pytest.raises(PreprocessError, match=r"test/doc3\.txt: not found"):
        convert_brat(tmp_path / "out", split_files={"test": [root / "test"]})


# ---------------------------------------------------------------------------------------------------
# LINNAEUS: manual-corpus-species-1.0/{txt/, tags.tsv}

LINNAEUS_TEXTS = {
    "pmcA101": "Drosophila melanogaster flies were used. Human cells were not.\n\nMethods\n",
    "pmcA102": "Yeast grew on agar.\n",
    "pmcA103": "No species here.\n",
    "pmcA104": "E. coli was plated.\n",
}


def table_release(
    root: Path, texts_dir: str, table: str, texts, rows, header: str = "", end_shift: int = 0
) -> Path:
    """A directory of ``<doc>.txt`` and one mention table; ``rows``: (doc, mention, line format with
    {doc}, {start}, {end} (exclusive, plus ``end_shift``) and {mention})."""
    lines = [header]
    for doc, mention, line in rows:
        start, end = span(texts[doc], mention)
        lines.append(line.format(doc=doc, start=start, end=end + end_shift, mention=mention))
    for doc, text in texts.items():
        write(root / texts_dir / f"{doc}.txt", text)
    write(root / table, "".join(lines))
    return root


def linnaeus_release(root: Path) -> Path:
    rows = [
        (
            "pmcA101",
            "Drosophila melanogaster",
            "species:ncbi:7227\t{doc}\t{start}\t{end}\t{mention}\t\n",
        ),
        ("pmcA101", "Human", "species:ncbi:9606\t{doc}\t{start}\t{end}\t{mention}\t\n"),
        ("pmcA102", "Yeast", "species:ncbi:4932\t{doc}\t{start}\t{end}\t{mention}\t\n"),
        ("pmcA104", "E. coli", "species:ncbi:562\t{doc}\t{start}\t{end}\t{mention}\t\n"),
    ]
    header = "#species\tdocument\tstart\tend\ttext\tcode\n"
    return table_release(root, "txt", "tags.tsv", LINNAEUS_TEXTS, rows, header)


def test_linnaeus_sentences_by_punkt_and_splits_held_out(tmp_path):
    root = linnaeus_release(tmp_path / "manual-corpus-species-1.0")
    out = tmp_path / "out"
    stats = convert_linnaeus(out, inputs=[root], test_fraction=0.25, dev_fraction=0.34, seed=3)
    ids = {s: read(out / f"{s}.pmids").split() for s in ("train", "devel", "test")}
    assert sorted(sum(ids.values(), [])) == sorted(
        LINNAEUS_TEXTS
    )  # every document in exactly one split
    assert [len(ids[s]) for s in ("train", "devel", "test")] == [2, 1, 1]
    assert stats.held_out == {
        "test": "int(0.25 * 4) = 1 train documents, seed 3",
        "devel": "int(0.34 * 3) = 1 train documents, seed 3",
    }
    assert stats.documents_without_mentions == 1 and stats.types_read == {"species": 4}
    sentences = {}
    for split in ids:
        for s in read_conll(out / f"{split}.tsv"):
            sentences[" ".join(s.words)] = s.tags
    # Punkt splits inside a line; a blank line and a heading line are units of their own.
    assert sentences["Drosophila melanogaster flies were used ."] == [
        "B-species",
        "I-species",
        "O",
        "O",
        "O",
        "O",
    ]
    assert sentences["Human cells were not ."] == ["B-species", "O", "O", "O", "O"]
    assert sentences["Methods"] == ["O"]
    assert sentences["E . coli was plated ."] == [
        "B-species",
        "I-species",
        "I-species",
        "O",
        "O",
        "O",
    ]
    convert_linnaeus(
        tmp_path / "again", inputs=[root], test_fraction=0.25, dev_fraction=0.34, seed=3
    )
    for name in ("train.tsv", "devel.tsv", "test.tsv"):
        assert read(tmp_path / "again" / name) == read(out / name)  # deterministic


def test_linnaeus_bad_rows_name_file_and_line(tmp_path):
    root = linnaeus_release(tmp_path / "manual-corpus-species-1.0")
    tags = root / "tags.tsv"
    write(tags, read(tags) + "species:ncbi:1\tpmcA999\t0\t3\tabc\t\n")
    with pytest.raises(
        PreprocessError, match=r"tags\.tsv:6: document 'pmcA999' has no text file in .*txt$"
    ):
        convert_linnaeus(tmp_path / "out", split_files={"train": [root]})
    write(tags, "species:ncbi:1\tpmcA102\t0\n")
    with pytest.raises(
        PreprocessError, match=r"tags\.tsv:1: 3 columns; expected species-id, document, start"
    ):
        convert_linnaeus(tmp_path / "out", split_files={"train": [root]})
    with pytest.raises(PreprocessError, match=r"either as input files"):
        convert_linnaeus(tmp_path / "out", inputs=[root])  # one release, no split given


# ---------------------------------------------------------------------------------------------------
# Species-800: S800/{abstracts/, S800.tsv}, the end inclusive


def s800_release(root: Path) -> Path:
    texts = {
        "species001": "Mouse liver cells.\nIn rats too.\n",
        "bact002": "Bacillus subtilis spores.\n",
    }
    rows = [
        ("species001", "Mouse", "10090\t{doc}:111\t{start}\t{end}\t{mention}\n"),
        ("species001", "rats", "10116\t{doc}:111\t{start}\t{end}\t{mention}\n"),
        ("bact002", "Bacillus subtilis", "1423\t{doc}:222\t{start}\t{end}\t{mention}\n"),
    ]
    return table_release(
        root, "abstracts", "S800.tsv", texts, rows, end_shift=-1
    )  # S800's ends are inclusive


def test_s800_inclusive_ends_and_cli(tmp_path, capsys):
    root = s800_release(tmp_path / "S800")
    lists = {
        s: write(tmp_path / f"{s}.ids", text)
        for s, text in (("train", "species001\n"), ("test", "bact002\n"))
    }
    out = tmp_path / "out"
    cli_main(
        [
            "s800",
            str(root),
            "--train-ids",
            str(lists["train"]),
            "--test-ids",
            str(lists["test"]),
            "--sentences",
            "lines",
            "--out",
            str(out),
        ]
    )
    assert conll(out / "train.tsv") == [
        [("Mouse", "B-species"), ("liver", "O"), ("cells", "O"), (".", "O")],
        [("In", "O"), ("rats", "B-species"), ("too", "O"), (".", "O")],
    ]
    assert conll(out / "test.tsv") == [
        [("Bacillus", "B-species"), ("subtilis", "I-species"), ("spores", "O"), (".", "O")]
    ]
    printed = capsys.readouterr().out
    assert "documents: {'train': 1, 'test': 1}" in printed and "mentions_read: 3" in printed
    table = root / "S800.tsv"
    write(
        table, read(table).replace("\t0\t4\tMouse", "\t0\t5\tMouse")
    )  # an exclusive end where inclusive is due
    with pytest.raises(
        PreprocessError,
        match=r"S800\.tsv:1: .* at 0-6 \('Mouse '\); with an exclusive end it would",
    ):
        convert_s800(tmp_path / "o2", split_files={"train": [root]})


# ---------------------------------------------------------------------------------------------------
# CHEMDNER (BC4CHEMD): <part>.abstracts.txt + <part>.annotations.txt, offsets per section


def chemdner_part(root: Path, part: str, documents) -> Path:
    abstracts, annotations = [], []
    for pmid, title, abstract, mentions in documents:
        abstracts.append(f"{pmid}\t{title}\t{abstract}\n")
        for section, mention, class_ in mentions:
            start, end = span(title if section == "T" else abstract, mention)
            annotations.append(f"{pmid}\t{section}\t{start}\t{end}\t{mention}\t{class_}\n")
    write(root / f"{part}.annotations.txt", "".join(annotations))
    return write(root / f"{part}.abstracts.txt", "".join(abstracts))


def test_chemdner_sections_and_one_type(tmp_path):
    train = chemdner_part(
        tmp_path / "chemdner_corpus",
        "training",
        [
            (
                "1001",
                "Aspirin and COX-1.",
                "The NSAID aspirin inhibits COX-1.",
                [
                    ("T", "Aspirin", "TRIVIAL"),
                    ("A", "NSAID", "FAMILY"),
                    ("A", "aspirin", "TRIVIAL"),
                ],
            ),
            ("1002", "Proteins only.", "No chemicals here.", []),
        ],
    )
    test = chemdner_part(
        tmp_path / "chemdner_corpus",
        "evaluation",
        [
            (
                "2001",
                "H2O2 release.",
                "Cells released H2O2.",
                [("T", "H2O2", "FORMULA"), ("A", "H2O2", "FORMULA")],
            ),
        ],
    )
    out = tmp_path / "out"
    stats = convert_chemdner(
        out, split_files={"train": [train], "test": [test]}, one_type="Chemical"
    )
    assert conll(out / "train.tsv")[:2] == [
        [("Aspirin", "B-Chemical"), ("and", "O"), ("COX", "O"), ("-", "O"), ("1", "O"), (".", "O")],
        [
            ("The", "O"),
            ("NSAID", "B-Chemical"),
            ("aspirin", "B-Chemical"),
            ("inhibits", "O"),
            ("COX", "O"),
            ("-", "O"),
            ("1", "O"),
            (".", "O"),
        ],
    ]
    assert stats.types_read == {"Chemical": 5} and stats.documents_without_mentions == 1
    assert stats.mentions == {"train": {"Chemical": 3}, "test": {"Chemical": 2}}
    kept = convert_chemdner(tmp_path / "classes", split_files={"train": [train]})
    assert kept.types_read == {"FAMILY": 1, "TRIVIAL": 2}
    annotations = tmp_path / "chemdner_corpus" / "training.annotations.txt"
    write(
        annotations,
        read(annotations).replace("1001\tA\t10\t17\taspirin", "1001\tA\t11\t18\taspirin"),
    )
    with pytest.raises(
        PreprocessError, match=r"training\.annotations\.txt:3: mention 'aspirin' does not match"
    ):
        convert_chemdner(tmp_path / "o3", split_files={"train": [train]})
    with pytest.raises(
        PreprocessError, match=r"--one-type NAME: a non-empty name, and not together with --rename"
    ):
        convert_chemdner(
            tmp_path / "o3", split_files={"train": [train]}, one_type="C", rename=["A=B"]
        )

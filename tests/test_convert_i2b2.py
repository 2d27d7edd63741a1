"""fairseq-bio-convert-tagging i2b2-2010 / i2b2-2012 / i2b2-2014: the i2b2 clinical NER releases to
the CoNLL splits bio_tagging reads, on small synthetic records (invented text, never real clinical
data) in each release's layout."""

from pathlib import Path

import pytest
from helpers.files import conll, read, write

from fairseq_bio_preprocess.common import PreprocessError
from fairseq_bio_preprocess.convert_tagging import cli_main
from fairseq_bio_preprocess.i2b2 import convert_i2b2_2010, convert_i2b2_2012, convert_i2b2_2014


# ---------------------------------------------------------------------------------------------------
# 2010: {beth,partners}/{txt,concept}/, reference_standard_for_test_data/concepts/ + test_data/

# line 2 starts with a space
RECORD_1 = "Admission Date :\n The patient had chest pain .\nHe was given aspirin 81 mg .\n"
CONCEPTS_1 = 'c="chest pain" 2:4 2:5||t="problem"\nc="aspirin" 3:3 3:3||t="treatment"\n'
RECORD_2 = "Blood\npressure was high .\n"
# the first spans two lines
CONCEPTS_2 = 'c="blood pressure" 1:0 2:0||t="test"\nc="high" 2:2 2:2||t="problem"\n'


def release_2010(root: Path) -> Path:
    train = root / "concept_assertion_relation_training_data"
    write(train / "beth" / "txt" / "record-1.txt", RECORD_1)
    write(train / "beth" / "concept" / "record-1.con", CONCEPTS_1)
    write(train / "partners" / "txt" / "record-2.txt", RECORD_2)
    write(train / "partners" / "concept" / "record-2.con", CONCEPTS_2)
    write(root / "test_data" / "record-9.txt", "Cough resolved .\n")
    write(
        root / "reference_standard_for_test_data" / "concepts" / "record-9.con",
        'c="cough" 1:0 1:0||t="problem"\n',
    )
    return root


def test_2010_concepts_by_line_and_token(tmp_path):
    root = release_2010(tmp_path / "i2b2-2010")
    train = root / "concept_assertion_relation_training_data"
    out = tmp_path / "out"
    stats = convert_i2b2_2010(
        out,
        split_files={
            "train": [train / "beth", train / "partners"],
            "test": [root / "reference_standard_for_test_data"],
        },
        texts=[root / "test_data"],
    )
    assert conll(out / "train.tsv") == [
        [("Admission", "O"), ("Date", "O"), (":", "O")],
        [
            ("The", "O"),
            ("patient", "O"),
            ("had", "O"),
            ("chest", "B-problem"),
            ("pain", "I-problem"),
            (".", "O"),
        ],
        [
            ("He", "O"),
            ("was", "O"),
            ("given", "O"),
            ("aspirin", "B-treatment"),
            ("81", "O"),
            ("mg", "O"),
            (".", "O"),
        ],
        # a concept across lines joins them (counted)
        [
            ("Blood", "B-test"),
            ("pressure", "I-test"),
            ("was", "O"),
            ("high", "B-problem"),
            (".", "O"),
        ],
    ]
    assert conll(out / "test.tsv") == [[("Cough", "B-problem"), ("resolved", "O"), (".", "O")]]
    assert stats.sentence_joins == 1 and stats.mentions["train"] == {
        "problem": 2,
        "test": 1,
        "treatment": 1,
    }
    assert read(out / "train.pmids") == "record-1\nrecord-2\n"


def test_2010_bad_concepts_name_file_and_line(tmp_path):
    root = release_2010(tmp_path / "i2b2-2010")
    beth = root / "concept_assertion_relation_training_data" / "beth"
    con = beth / "concept" / "record-1.con"
    write(
        con, CONCEPTS_1.replace("2:4 2:5", "2:3 2:4")
    )  # counted without the empty token of the leading space
    with pytest.raises(PreprocessError) as error:
        convert_i2b2_2010(tmp_path / "out", split_files={"train": [beth]})
    assert str(error.value) == (
        f"{con}:1: annotated text 'chest pain' is not the record's text at 30-39 ('had chest'); "
        "--allow-text-mismatch keeps the offsets"
    )
    assert not (tmp_path / "out").exists()
    write(con, 'c="pain" 2:9 2:9||t="problem"\n')
    with pytest.raises(
        PreprocessError, match=r"record-1\.con:1: token 2:9 is not in .*record-1\.txt$"
    ):
        convert_i2b2_2010(tmp_path / "out", split_files={"train": [beth]})
    write(con, 'c="pain" 2:5||t="problem"\n')
    with pytest.raises(
        PreprocessError, match=r'record-1\.con:1: not a concept line \(c="text" LINE:TOKEN'
    ):
        convert_i2b2_2010(tmp_path / "out", split_files={"train": [beth]})
    test = root / "reference_standard_for_test_data"
    with pytest.raises(
        PreprocessError,
        match=r"record-9\.con: no record text record-9\.txt \(looked in .*--texts DIR",
    ):
        convert_i2b2_2010(tmp_path / "out", split_files={"test": [test]})


# ---------------------------------------------------------------------------------------------------
# 2012 and 2014: XML records, the text as CDATA, offset tags


def xml_record(root_tag: str, text: str, tags) -> str:
    """An i2b2 XML record; ``tags``: (name, mention or None, occurrence, attributes as written)."""
    lines = []
    for name, mention, occurrence, attributes in tags:
        if mention is not None:
            start = -1
            for _ in range(occurrence + 1):
                start = text.index(mention, start + 1)
            attributes = (
                f'start="{start}" end="{start + len(mention)}" text="{mention}" {attributes}'
            )
        lines.append(f"<{name} {attributes} />\n")
    return (
        f'<?xml version="1.0" encoding="UTF-8" ?>\n<{root_tag}>\n<TEXT><![CDATA[{text}]]></TEXT>\n<TAGS>\n'
        + "".join(lines)
        + f"</TAGS>\n</{root_tag}>\n"
    )


TEXT_2012 = "\nAdmission Date :\n09/29/1993\nThe patient &apos;s pain & swelling improved .\n"


def record_2012(path: Path, text: str = TEXT_2012, first_text: str = "Admission") -> Path:
    tags = [
        ("EVENT", "Admission", 0, 'modality="FACTUAL" polarity="POS" type="OCCURRENCE"'),
        ("TIMEX3", "09/29/1993", 0, 'type="DATE" val="1993-09-29" mod="NA"'),
        (
            "EVENT",
            "pain & swelling",
            0,
            'modality="FACTUAL" polarity="POS" type="PROBLEM"',
        ),  # a bare '&', as released
        (
            "EVENT",
            "patient &apos;s",
            0,
            'modality="FACTUAL" polarity="POS" type=""',
        ),  # no type: skipped, counted
        (
            "TLINK",
            None,
            0,
            'id="TL0" fromID="E0" fromText="Admission" toID="T0" toText="09/29/1993" type="OVERLAP"',
        ),
        ("SECTIME", "09/29/1993", 0, 'type="ADMISSION" dvalue="1993-09-29"'),
    ]
    xml = xml_record("ClinicalNarrativeTemporalAnnotation", text, tags)
    return write(path, xml.replace('text="Admission"', f'text="{first_text}"', 1))


def test_2012_events_and_time_expressions(tmp_path):
    train = tmp_path / "2012-07-15.original-annotation.release"
    record_2012(train / "1.xml")
    record_2012(train / "2.xml")
    out = tmp_path / "out"
    stats = convert_i2b2_2012(
        out, split_files={"train": [train / "1.xml"], "test": [train / "2.xml"]}
    )
    assert conll(out / "train.tsv") == [
        [("Admission", "B-OCCURRENCE"), ("Date", "O"), (":", "O")],
        [("09", "O"), ("/", "O"), ("29", "O"), ("/", "O"), ("1993", "O")],
        [
            ("The", "O"),
            ("patient", "O"),
            ("&", "O"),
            ("apos", "O"),
            (";", "O"),
            ("s", "O"),
            ("pain", "B-PROBLEM"),
            ("&", "I-PROBLEM"),
            ("swelling", "I-PROBLEM"),
            ("improved", "O"),
            (".", "O"),
        ],
    ]
    assert stats.tags_skipped == {"TIMEX3": 2, "TLINK": 2, "SECTIME": 2, "EVENT without type": 2}
    both = convert_i2b2_2012(
        tmp_path / "both", split_files={"train": [train]}, tags=["EVENT", "TIMEX3"]
    )
    assert conll(tmp_path / "both" / "train.tsv")[1][0] == ("09", "B-DATE")
    assert both.types_read == {"DATE": 2, "OCCURRENCE": 2, "PROBLEM": 2}


def test_2012_mismatches_are_errors_or_counted(tmp_path):
    record = record_2012(tmp_path / "xml" / "7.xml", first_text="Discharge")
    with pytest.raises(PreprocessError) as error:
        convert_i2b2_2012(tmp_path / "out", split_files={"train": [record]})
    assert str(error.value) == (
        f"{record}:9: annotated text 'Discharge' is not the record's text at 1-10 ('Admission'); "
        "--allow-text-mismatch keeps the offsets"
    )
    stats = convert_i2b2_2012(
        tmp_path / "out", split_files={"train": [record]}, allow_text_mismatch=True
    )
    assert stats.text_mismatches_kept == 1 and conll(tmp_path / "out" / "train.tsv")[0][0] == (
        "Admission",
        "B-OCCURRENCE",
    )
    assert any(
        "kept offsets 1-10 ('Admission') for annotated text 'Discharge'" in e
        for e in stats.examples
    )
    write(record, read(record).replace("<TAGS>", "<TAGS><BROKEN"))
    with pytest.raises(PreprocessError, match=r"7\.xml:9: XML not well-formed \(invalid token\)$"):
        convert_i2b2_2012(tmp_path / "o2", split_files={"train": [record]})
    write(
        record,
        "<ClinicalNarrativeTemporalAnnotation><TAGS /></ClinicalNarrativeTemporalAnnotation>\n",
    )
    with pytest.raises(
        PreprocessError,
        match=r"7\.xml: no <TEXT><!\[CDATA\[\.\.\.\]\]></TEXT>; not an i2b2 XML record",
    ):
        convert_i2b2_2012(tmp_path / "o2", split_files={"train": [record]})


PHI_TEXT = "\nRecord date: 2067-05-03\nDr. Ann Example saw Mr. Testperson at Mercy Hospital.\n"
PHI_TAGS = [
    ("DATE", "2067-05-03", 0, 'TYPE="DATE" comment=""'),
    ("NAME", "Ann Example", 0, 'TYPE="DOCTOR" comment=""'),
    ("NAME", "Testperson", 0, 'TYPE="PATIENT" comment=""'),
    ("LOCATION", "Mercy Hospital", 0, 'TYPE="HOSPITAL" comment=""'),
]


def test_2014_phi_types_and_patients_held_out_whole(tmp_path):
    root = tmp_path / "i2b2-2014"
    for record in ("100-01", "100-02", "100-03", "101-01", "102-01", "103-01"):
        write(
            root / "training-PHI-Gold-Set1" / f"{record}.xml",
            xml_record("deIdi2b2", PHI_TEXT, PHI_TAGS),
        )
    write(
        root / "testing-PHI-Gold-fixed" / "200-01.xml", xml_record("deIdi2b2", PHI_TEXT, PHI_TAGS)
    )
    out = tmp_path / "out"
    cli_main(
        [
            "i2b2-2014",
            "--train",
            str(root / "training-PHI-Gold-Set1"),
            "--test",
            str(root / "testing-PHI-Gold-fixed"),
            "--dev-fraction",
            "0.5",
            "--seed",
            "2",
            "--out",
            str(out),
        ]
    )
    train, devel = read(out / "train.pmids").split(), read(out / "devel.pmids").split()
    patients = {
        s: {r.split("-")[0] for r in ids} for s, ids in (("train", train), ("devel", devel))
    }
    assert (
        not patients["train"] & patients["devel"] and len(patients["devel"]) == 2
    )  # int(0.5 * 4) patients
    assert sorted(train + devel) == ["100-01", "100-02", "100-03", "101-01", "102-01", "103-01"]
    sentences = conll(out / "test.tsv")
    assert sentences[0] == [
        ("Record", "O"),
        ("date", "O"),
        (":", "O"),
        ("2067", "B-DATE"),
        ("-", "I-DATE"),
        ("05", "I-DATE"),
        ("-", "I-DATE"),
        ("03", "I-DATE"),
    ]
    assert [t for w, t in sentences[1] if t != "O"] == [
        "B-DOCTOR",
        "I-DOCTOR",
        "B-PATIENT",
        "B-HOSPITAL",
        "I-HOSPITAL",
    ]
    category = convert_i2b2_2014(
        tmp_path / "cat",
        split_files={"test": [root / "testing-PHI-Gold-fixed"]},
        phi_level="category",
    )
    assert category.types_read == {"DATE": 1, "LOCATION": 1, "NAME": 2}


def test_2014_offsets_outside_the_record_are_refused(tmp_path):
    record = write(
        tmp_path / "x" / "300-01.xml",
        xml_record("deIdi2b2", PHI_TEXT, PHI_TAGS).replace(
            'start="14" end="24"', 'start="14" end="240"'
        ),
    )
    with pytest.raises(
        PreprocessError,
        match=r"300-01\.xml:8: offsets 14-240 are outside the text of document 300-01",
    ):
        convert_i2b2_2014(
            tmp_path / "out", split_files={"test": [record]}, allow_text_mismatch=True
        )

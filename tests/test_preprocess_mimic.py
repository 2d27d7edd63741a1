"""fairseq-bio-extract on MIMIC-III NOTEEVENTS.csv: synthetic rows in the real column layout (MIMIC
is credentialed data; no real note text belongs in the repository)."""

import gzip
import json
from pathlib import Path

import pytest
from conftest import run_cli

from fairseq_bio_preprocess.common import PreprocessError
from fairseq_bio_preprocess.extract import extract
from fairseq_bio_preprocess.mimic import placeholder_type

HEADER = (
    '"ROW_ID","SUBJECT_ID","HADM_ID","CHARTDATE","CHARTTIME","STORETIME","CATEGORY","DESCRIPTION","CGID","ISERROR",'
    '"TEXT"'
)
PUNKT_TEXTS = "50"

DISCHARGE = """Admission Date:  [**2151-7-16**]       Discharge Date:   [**2151-8-4**]

Service: MEDICINE


HISTORY OF PRESENT ILLNESS:  Mr. [**Known lastname 1234**] is a 67 year old man
admitted to [**Hospital1 18**] with "crushing" chest pain.
He was seen by Dr. [**First Name (STitle) 2345**] on [**2151-7-16**].
"""
RADIOLOGY = """[**2151-7-17**] 9:12 AM
 CHEST (PORTABLE AP)                                             Clip # [**Clip Number (Radiology) 4567**]

 FINAL REPORT
 No acute cardiopulmonary process.  Lines and tubes unchanged.
"""
PHYSICIAN = (
    "Patient from [**Location (un) 86**], age [**Age over 90 **].\nPlan: continue aspirin.\n"
)
NURSING_ERROR = "This note was entered on the wrong patient.\n"
NURSING = (
    "Pt resting comfortably overnight.\n\nFamily called [**Telephone/Fax (1) 1111**] at 8pm.\n"
)

# (ROW_ID, CATEGORY, DESCRIPTION, ISERROR, TEXT); "Physician " ends in a space, as real MIMIC
# categories do.
ROWS = [
    ("101", "Discharge summary", "Report", "", DISCHARGE),
    ("102", "Radiology", "CHEST (PORTABLE AP)", "", RADIOLOGY),
    ("103", "Physician ", "Physician Resident Progress Note", "", PHYSICIAN),
    ("104", "Nursing/other", "Report", "1", NURSING_ERROR),
    ("105", "Nursing", "Nursing Progress Note", "", NURSING),
]


def quote(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


def csv_row(row_id, category, description, iserror, text, subject="22532", hadm="167853") -> str:
    """One row as MIMIC-III writes it: numbers bare, strings quoted, empty fields empty."""
    dates = ["2151-08-04", "", ""]  # CHARTDATE, CHARTTIME, STORETIME
    fields = [
        row_id,
        subject,
        hadm,
        *dates,
        quote(category),
        quote(description),
        "",
        iserror,
        quote(text),
    ]
    return ",".join(fields) + "\n"


def notes_csv(rows=ROWS) -> str:
    return HEADER + "\n" + "".join(csv_row(*row) for row in rows)


def line_of(content: str, fragment: str) -> int:
    """The line number on which ``fragment`` starts in ``content``."""
    return content[: content.index(fragment)].count("\n") + 1


def cli(inputs, out, *options, check=True):
    args = ["fairseq-bio-extract", *inputs, "--out", out, "--no-progress", "--valid-fraction", "0"]
    return run_cli(
        [*args, "--sentence-training-texts", PUNKT_TEXTS, *options],
        cwd=Path(out).parent,
        check=check,
    )


def docs_of(out: Path):
    text = (out / "train.txt").read_text(encoding="utf-8")
    return [doc.split("\n") for doc in text[:-1].split("\n\n")] if text else []


def joined(doc) -> str:
    return " ".join(doc)


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def mimic_dir(tmp_path_factory):
    """A MIMIC-III folder: the notes table beside another table that a directory search must leave
    alone."""
    root = tmp_path_factory.mktemp("mimic")
    (root / "NOTEEVENTS.csv").write_text(notes_csv(), encoding="utf-8")
    (root / "ADMISSIONS.csv").write_text(
        '"ROW_ID","SUBJECT_ID","HADM_ID"\n1,2,3\n', encoding="utf-8"
    )
    return root


@pytest.fixture(scope="module")
def default_run(mimic_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("default") / "out"
    result = cli([mimic_dir], out)
    return out, result


def test_notes_become_documents_with_typed_placeholders(default_run):
    out, result = default_run
    docs = docs_of(out)
    assert len(docs) == 4  # the ISERROR row is skipped
    assert joined(docs[0]) == (
        "Admission Date: [DATE] Discharge Date: [DATE] Service: MEDICINE HISTORY OF PRESENT ILLNESS: Mr. [NAME] is "
        'a 67 year old man admitted to [HOSPITAL] with "crushing" chest pain. He was seen by Dr. [NAME] on [DATE].'
    )
    # Paragraphs are blank-line separated blocks: the header block is a line of its own, wrapped
    # lines are joined.
    assert docs[0][:2] == ["Admission Date: [DATE] Discharge Date: [DATE]", "Service: MEDICINE"]
    assert any("67 year old man admitted to [HOSPITAL]" in line for line in docs[0])
    assert joined(docs[1]).startswith(
        "[DATE] 9:12 AM CHEST (PORTABLE AP) Clip # [NUMBER] FINAL REPORT No acute"
    )
    assert joined(docs[2]) == "Patient from [LOCATION], age [AGE]. Plan: continue aspirin."
    assert joined(docs[3]) == "Pt resting comfortably overnight. Family called [CONTACT] at 8pm."
    assert "[**" not in (out / "train.txt").read_text() and not (out / "valid.txt").read_text()

    stats = json.loads((out / "extract_stats.json").read_text())
    assert (
        stats["files"] == 1 and stats["written"] == stats["documents"] == 4
    )  # ADMISSIONS.csv was not read
    assert stats["notes"] == {
        "read": 5,
        "kept": 4,
        "skipped_iserror": 1,
        "skipped_category": 0,
        "categories": {
            "Discharge summary": 1,
            "Radiology": 1,
            "Physician": 1,
            "Nursing/other": 1,
            "Nursing": 1,
        },
        "category_filter": None,
        "deid_placeholders": "normalise",
    }
    assert "notes: 5 read, 4 kept, 0 skipped by category, 1 skipped as ISERROR" in result.stdout


def test_category_filter_ignores_case_and_trailing_spaces(mimic_dir, tmp_path):
    categories = "discharge SUMMARY, Physician,Echo"
    result = cli([mimic_dir / "NOTEEVENTS.csv"], tmp_path / "out", "--note-categories", categories)
    assert [doc[0].split()[0] for doc in docs_of(tmp_path / "out")] == ["Admission", "Patient"]
    notes = json.loads((tmp_path / "out" / "extract_stats.json").read_text())["notes"]
    assert (notes["read"], notes["kept"], notes["skipped_category"], notes["skipped_iserror"]) == (
        5,
        2,
        2,
        1,
    )
    assert notes["category_filter"] == ["discharge SUMMARY", "Physician", "Echo"]
    assert "warning: --note-categories: no note has category 'Echo'" in result.stderr


@pytest.mark.parametrize(
    "mode,expected",
    [
        (
            "keep",
            "Patient from [**Location (un) 86**], age [**Age over 90 **]. Plan: continue aspirin.",
        ),
        ("drop", "Patient from , age . Plan: continue aspirin."),
    ],
)
def test_placeholder_modes(mimic_dir, tmp_path, mode, expected):
    cli([mimic_dir], tmp_path / "out", "--deid-placeholders", mode)
    docs = docs_of(tmp_path / "out")
    assert joined(docs[2]) == expected
    text = (tmp_path / "out" / "train.txt").read_text()
    assert ("[**Known lastname 1234**]" in text) == (mode == "keep")
    assert "[NAME]" not in text and ("[" in text) == (mode == "keep")


def test_placeholder_types():
    expected = {
        "2151-7-16": "[DATE]",
        "7-16": "[DATE]",
        "2151": "[DATE]",
        "Month (only) 51": "[DATE]",
        "Year (4 digits) 12": "[DATE]",
        "Known lastname 1234": "[NAME]",
        "First Name8 (NamePattern2) 123": "[NAME]",
        "Doctor Last Name": "[NAME]",
        "Initials (NamePattern4) 7": "[NAME]",
        "Hospital1 18": "[HOSPITAL]",
        "Hospital Ward Name 12": "[HOSPITAL]",
        "Location (un) 86": "[LOCATION]",
        "Street Address(1) 22": "[LOCATION]",
        "State 3": "[LOCATION]",
        "Age over 90 ": "[AGE]",
        "Telephone/Fax (1) 1111": "[CONTACT]",
        "Pager number 512": "[CONTACT]",
        "E-mail address 9": "[CONTACT]",
        "Medical Record Number 77": "[NUMBER]",
        "MD Number(1) 4": "[NUMBER]",
        "Clip Number (Radiology) 4567": "[NUMBER]",
        "Numeric Identifier 5": "[NUMBER]",
        "Company": "[DEID]",
        "": "[DEID]",
    }
    assert {text: placeholder_type(text) for text in expected} == expected


def test_gzip_header_detection_and_workers_give_the_same_corpus(mimic_dir, default_run, tmp_path):
    # One note larger than csv's default 128 KiB field limit.
    long_text = "\n\n".join(
        f"Day {i}: patient stable on the ward, plan unchanged." for i in range(4000)
    )
    rows = ROWS + [("106", "Nursing", "Report", "", long_text)]
    content = notes_csv(rows).encode("utf-8")
    named = tmp_path / "in" / "NOTEEVENTS.csv.gz"
    named.parent.mkdir()
    named.write_bytes(gzip.compress(content))
    export = tmp_path / "export" / "notes_2151.csv.gz"  # another name: found by its header
    export.parent.mkdir()
    export.write_bytes(gzip.compress(content))

    cli([named], tmp_path / "gz")
    # The same notes as the plain file (Punkt, trained on other paragraphs here, may split sentences
    # elsewhere).
    assert [joined(d) for d in docs_of(tmp_path / "gz")[:4]] == [
        joined(d) for d in docs_of(default_run[0])
    ]
    long_doc = docs_of(tmp_path / "gz")[4]
    assert (
        len(long_doc) == 4000
        and long_doc[-1] == "Day 3999: patient stable on the ward, plan unchanged."
    )

    one = extract(
        [export.parent],
        tmp_path / "one",
        valid_fraction=0.3,
        sentence_training_texts=50,
        progress=False,
    )
    two = extract(
        [export.parent],
        tmp_path / "two",
        valid_fraction=0.3,
        sentence_training_texts=50,
        progress=False,
        workers=2,
    )
    for name in ("train.txt", "valid.txt"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    assert one.written == two.written == 5 and one.notes == two.notes and one.notes.read == 6


# --------------------------------------------------------------------------------------------------
# Bad input: one line naming the file, the line and the column; no outputs


def _bad(kind: str) -> str:
    good = notes_csv(ROWS[:2])
    if kind == "short-row":
        return good + '107,1,2,"2151-08-04",,,"Echo","Report",,\n'
    if kind == "bad-row-id":
        return good + csv_row("x7", "Echo", "Report", "", "Normal echo.\n")
    if kind == "stray-quote":
        return good + csv_row("107", "Echo", "Report", "", "").replace('"Report"', '"Rep"ort"')
    if kind == "unclosed-at-end":
        return good + csv_row("107", "Echo", "Report", "", "Normal echo.\nLV normal.\n")[:-2]
    if kind == "unclosed-mid-file":
        return (
            notes_csv(ROWS[:1])
            + csv_row("107", "Echo", "Report", "", "Normal echo.\n")[:-2]
            + csv_row(*ROWS[1])
        )
    raise ValueError(kind)


STOP = "the parser stopped on line {stop}"  # where the row after a never-closed quote begins


@pytest.mark.parametrize(
    "kind,row_start,message",
    [
        ("short-row", "107,", "TEXT: missing (10 fields, the header has 11)"),
        ("bad-row-id", "x7,", "ROW_ID: not a number ('x7')"),
        ("stray-quote", "107,", "DESCRIPTION: malformed CSV: ',' expected after '\"'"),
        (
            "unclosed-at-end",
            "107,",
            "TEXT: malformed CSV: quoted field not closed before the end of the file",
        ),
        ("unclosed-mid-file", "107,", f"TEXT: malformed CSV: ',' expected after '\"' ({STOP})"),
    ],
)
def test_bad_row_is_one_line_naming_file_line_and_field(tmp_path, kind, row_start, message):
    content = _bad(kind)
    path = tmp_path / "NOTEEVENTS.csv"
    path.write_text(content, encoding="utf-8")
    line = line_of(content, "\n" + row_start) + 1
    message = message.format(stop=line_of(content, "\n102,") + 1 if "\n102," in content else None)
    with pytest.raises(PreprocessError) as error:
        extract([path], tmp_path / "out", sentence_training_texts=50, progress=False)
    assert str(error.value) == f"{path}: line {line}: {message}"
    assert not (tmp_path / "out").exists()  # nothing written, no temp directory either
    assert sorted(p.name for p in tmp_path.iterdir()) == ["NOTEEVENTS.csv"]


def test_cli_bad_row_is_one_line_without_traceback(tmp_path):
    content = _bad("unclosed-mid-file")
    (tmp_path / "NOTEEVENTS.csv").write_text(content, encoding="utf-8")
    result = cli(["NOTEEVENTS.csv"], tmp_path / "out", check=False)
    line, stop = line_of(content, "\n107,") + 1, line_of(content, "\n102,") + 1
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr == (
        f"fairseq-bio-extract: NOTEEVENTS.csv: line {line}: TEXT: malformed CSV: ',' expected after '\"' "
        f"(the parser stopped on line {stop})\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "NOTEEVENTS.csv"
    ]  # no out, no temp directory


def test_csv_that_is_not_notes_is_refused_when_named(tmp_path):
    (tmp_path / "ADMISSIONS.csv").write_text('"ROW_ID","SUBJECT_ID"\n1,2\n', encoding="utf-8")
    result = cli(["ADMISSIONS.csv"], tmp_path / "out", check=False)
    assert result.returncode == 1
    message = "line 1: not a MIMIC-III NOTEEVENTS header (no CATEGORY, TEXT column)"
    assert result.stderr == f"fairseq-bio-extract: ADMISSIONS.csv: {message}\n"


def test_skip_bad_files_lists_a_file_with_a_bad_row(mimic_dir, tmp_path):
    bad = tmp_path / "bad" / "NOTEEVENTS_2.csv"
    bad.parent.mkdir()
    bad.write_text(_bad("bad-row-id"), encoding="utf-8")
    result = cli([mimic_dir / "NOTEEVENTS.csv", bad], tmp_path / "out", "--skip-bad-files")
    stats = json.loads((tmp_path / "out" / "extract_stats.json").read_text())
    assert (
        stats["skipped"] == 1 and stats["written"] == 4 and stats["notes"]["read"] == 5
    )  # good file's rows only
    line = line_of(_bad("bad-row-id"), "\nx7,") + 1
    assert stats["skipped_files"] == [f"{bad}: line {line}: ROW_ID: not a number ('x7')"]
    assert "Traceback" not in result.stderr

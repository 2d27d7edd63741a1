"""fairseq-bio-extract on the real PubMed sample (MEDLINE baseline/update files and PMC
articles)."""

import copy
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from lxml import etree

from fairseq_bio_preprocess import fetch
from fairseq_bio_preprocess.common import PreprocessError
from fairseq_bio_preprocess.extract import extract

BASELINE = "pubmed20n0014.xml.gz"
UPDATE = "pubmed21n1298.xml.gz"
PUNKT_TEXTS = (
    300  # enough for layout tests; the splitter itself is tested in test_preprocess_sentences
)


@pytest.fixture(scope="module")
def sample():
    return fetch.pubmed_sample_dir()


def run(inputs, out, **kwargs):
    kwargs.setdefault("sentence_training_texts", PUNKT_TEXTS)
    return extract(inputs, out, progress=False, **kwargs)


def read_docs(path: Path):
    """Documents of an extract output file, checking the complete_doc layout on the way."""
    text = path.read_text(encoding="utf-8")
    if not text:
        return []
    assert text.endswith("\n") and not text.endswith("\n\n"), "no trailing blank line"
    assert not text.startswith("\n"), "no leading blank line"
    assert "\n\n\n" not in text, "documents are separated by exactly one blank line"
    docs = [doc.split("\n") for doc in text[:-1].split("\n\n")]
    for doc in docs:
        for line in doc:
            assert line and line == " ".join(line.split()), f"unnormalised or empty line {line!r}"
    return docs


def all_docs(out: Path):
    return read_docs(out / "train.txt") + read_docs(out / "valid.txt")


def medline_records(path: Path, limit: int):
    """The first ``limit`` <PubmedArticle> elements of a real MEDLINE file (lxml elements)."""
    records = []
    with gzip.open(path) as f:
        for _, element in etree.iterparse(f, tag="PubmedArticle"):
            records.append(copy.deepcopy(element))
            element.clear()
            if len(records) == limit:
                break
    return records


def write_medline(path: Path, articles, deleted_pmids=()) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    root = etree.Element("PubmedArticleSet")
    root.extend(articles)
    if deleted_pmids:
        deletion = etree.SubElement(root, "DeleteCitation")
        for pmid in deleted_pmids:
            etree.SubElement(deletion, "PMID", Version="1").text = pmid
    with gzip.open(path, "wb") as f:
        f.write(etree.tostring(root, xml_declaration=True, encoding="utf-8"))
    return path


def title_of(article) -> str:
    return "".join(article.find("MedlineCitation/Article/ArticleTitle").itertext()).strip()


def has_abstract(article) -> bool:
    return article.find("MedlineCitation/Article/Abstract") is not None


# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample_run(sample, tmp_path_factory):
    out = tmp_path_factory.mktemp("sample")
    stats = run([sample], out, max_docs_per_file=150, valid_fraction=0.1)
    return out, stats


def test_layout_stats_and_pubmed_parser_agreement(sample_run, sample):
    import pubmed_parser

    out, stats = sample_run
    docs = all_docs(out)
    assert len(docs) == stats.written == stats.train_documents + stats.valid_documents > 200
    assert stats.files == 10 and stats.skipped == 0
    assert (
        stats.documents
        == stats.written + stats.duplicates + stats.deleted + stats.too_short + stats.no_abstract
    )
    assert stats.sentences == sum(len(d) for d in docs)
    assert stats.words == sum(len(line.split()) for d in docs for line in d)
    assert json.loads((out / "extract_stats.json").read_text())["written"] == stats.written

    # Same records as pubmed_parser's own generator: every citation with an abstract, title line
    # first.
    titles = {d[0] for d in docs}
    expected = 0
    for i, record in enumerate(pubmed_parser.parse_medline_xml(str(sample / BASELINE))):
        if i == 150:
            break
        if record["abstract"].strip():
            expected += 1
            assert " ".join(record["title"].split()) in titles
    written_baseline = [d for d in docs if d[0] in titles]
    assert expected > 50 and len(written_baseline) >= expected

    first = next(d for d in docs if d[0].startswith("Monitoring of bacteriological contamination"))
    assert (
        first[1]
        == "Two hundred and sixty nine beef, 230 sheep and 165 pig carcase surface were examined "
        "bacteriologically."
    )


def test_pmc_article_has_title_abstract_and_body(sample_run):
    out, _ = sample_run
    doc = next(
        d
        for d in all_docs(out)
        if d[0] == "Factors influencing lysis time stochasticity in bacteriophage λ"
    )
    assert any(
        line.startswith("Using the SD as a measure of lysis time stochasticity") for line in doc
    )  # abstract
    assert (
        "Endolysin then digests the peptidoglycan, causing host cell lysis." in doc
    )  # body paragraph
    assert len(doc) > 100


def test_structured_abstract_labels_are_dropped(tmp_path, sample):
    stats = run([sample / UPDATE], tmp_path, max_docs_per_file=3, valid_fraction=0.0)
    doc = next(
        d
        for d in all_docs(tmp_path)
        if d[0].startswith("Dopamine modulates acute responses to cocaine")
    )
    assert not {"BACKGROUND", "RESULTS", "CONCLUSIONS"} & set(doc)
    assert doc[1].startswith("Drugs of abuse have a common property in mammals")
    assert stats.valid_documents == 0


def test_real_revision_within_update_file_is_written_once(tmp_path, sample):
    # PMID 30271887 occurs at records 67, 73 and 1143 of pubmed21n1298 (revisions of one citation).
    stats = run([sample / UPDATE], tmp_path, max_docs_per_file=1200)
    title = (
        "Stage 2 Registered Report: Variation in neurodevelopmental outcomes in children with sex chromosome "
        "trisomies: testing the double hit hypothesis."
    )
    assert [d[0] for d in all_docs(tmp_path)].count(title) == 1
    assert stats.duplicates == 2


@pytest.mark.parametrize(
    "update_name,update_wins", [("pubmed20n9999.xml.gz", True), ("pubmed19n0001.xml.gz", False)]
)
def test_file_that_sorts_last_wins_and_deletions_apply(tmp_path, sample, update_name, update_wins):
    articles = [a for a in medline_records(sample / BASELINE, 60) if has_abstract(a)]
    revised, same, deleted = copy.deepcopy(articles[0]), copy.deepcopy(articles[1]), articles[2]
    section = revised.find("MedlineCitation/Article/Abstract/AbstractText")
    section.text = (section.text or "") + " This sentence was added by the revision."
    updates = tmp_path / "updates"
    updates.mkdir()
    write_medline(
        updates / update_name, [revised, same], [deleted.findtext("MedlineCitation/PMID")]
    )

    out = tmp_path / "out"
    stats = run(
        [updates, sample / BASELINE], out, max_docs_per_file=60
    )  # argument order does not matter
    docs = all_docs(out)
    by_title = {}
    for doc in docs:
        by_title.setdefault(doc[0], []).append(doc)
    assert len(by_title[title_of(revised)]) == 1 and len(by_title[title_of(same)]) == 1
    revised_doc = by_title[title_of(revised)][0]
    assert ("This sentence was added by the revision." in revised_doc) == update_wins
    assert stats.duplicates == 2
    if update_wins:
        assert title_of(deleted) not in by_title and stats.deleted == 1
    else:  # the deletion is older than the baseline record, so the record stands
        assert len(by_title[title_of(deleted)]) == 1 and stats.deleted == 0


def test_min_words_drops_short_abstracts(tmp_path, sample):
    everything = run([sample / BASELINE], tmp_path / "all", max_docs_per_file=300)
    long_only = run([sample / BASELINE], tmp_path / "long", max_docs_per_file=300, min_words=128)
    assert long_only.too_short > 0 and everything.too_short == 0
    assert long_only.written + long_only.too_short == everything.written
    for doc in all_docs(tmp_path / "long"):
        assert sum(len(line.split()) for line in doc[1:]) >= 128  # abstract words, title excluded


def test_pubmedbert_preset_drops_abstracts_under_128_words_and_counts_them(tmp_path, sample):
    """--preset pubmedbert (seed 001 sec. 6.1: abstracts with less than 128 words filtered out) on
    real MEDLINE: extract_stats.json records the preset, its 128 and how many abstracts it dropped,
    which are the documents a run without it writes more; --min-words beside it must agree."""
    everything = run([sample / BASELINE], tmp_path / "all", max_docs_per_file=300)

    def cli(out, *extra):
        return subprocess.run(
            [sys.executable, "-m", "fairseq_bio_preprocess.extract", str(sample / BASELINE)]
            + ["--out", str(out), "--no-progress", "--max-docs-per-file", "300"]
            + ["--sentence-training-texts", str(PUNKT_TEXTS), "--preset", "pubmedbert", *extra],
            capture_output=True,
            text=True,
        )

    proc = cli(tmp_path / "pubmedbert")
    assert proc.returncode == 0, proc.stderr
    stats = json.loads((tmp_path / "pubmedbert" / "extract_stats.json").read_text())
    assert (stats["preset"], stats["min_words"]) == ("pubmedbert", 128)
    assert stats["too_short"] > 0 and stats["written"] + stats["too_short"] == everything.written
    assert f"too_short: {stats['too_short']}" in proc.stdout
    for doc in all_docs(tmp_path / "pubmedbert"):
        assert sum(len(line.split()) for line in doc[1:]) >= 128  # abstract words, title excluded
    assert cli(tmp_path / "same", "--min-words", "128").returncode == 0
    bad = cli(tmp_path / "bad", "--min-words", "64")
    assert bad.returncode == 1 and bad.stderr == (
        "fairseq-bio-extract: --preset pubmedbert sets min_words=128; --min-words 64 contradicts it "
        "(give one or the other)\n"
    )
    _assert_no_outputs(tmp_path / "bad")


def test_split_is_deterministic_document_level_and_worker_independent(tmp_path, sample):
    one = run([sample], tmp_path / "one", max_docs_per_file=200, valid_fraction=0.2)
    two = run([sample], tmp_path / "two", max_docs_per_file=200, valid_fraction=0.2, workers=2)
    for name in ("train.txt", "valid.txt"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    assert 0.1 < one.valid_documents / one.written < 0.3 and one.written == two.written
    # A document's side depends on its id only: a run over one file puts its documents on the same
    # side.
    run([sample / BASELINE], tmp_path / "subset", max_docs_per_file=200, valid_fraction=0.2)
    subset_valid = {d[0] for d in read_docs(tmp_path / "subset" / "valid.txt")}
    full_valid = {d[0] for d in read_docs(tmp_path / "one" / "valid.txt")}
    assert subset_valid and subset_valid <= full_valid


def test_plain_text_folder(tmp_path, sample):
    # Real abstract text, laid out as a notes folder: two documents in one file, CRLF and a BOM in
    # another.
    abstracts = [
        " ".join(a.find("MedlineCitation/Article/Abstract/AbstractText").itertext())
        for a in medline_records(sample / BASELINE, 40)
        if has_abstract(a)
    ][:3]
    notes = tmp_path / "notes"
    (notes / "ward").mkdir(parents=True)
    (notes / "a.txt").write_text(f"{abstracts[0]}\n\n\n{abstracts[1]}\n", encoding="utf-8")
    (notes / "ward" / "b.txt").write_bytes(("\ufeff" + abstracts[2] + "\r\n").encode("utf-8"))
    stats = run([notes], tmp_path / "out", valid_fraction=0.0)
    docs = read_docs(tmp_path / "out" / "train.txt")
    assert stats.written == 3 and len(docs) == 3
    assert (
        docs[0][0] == abstracts[0].split(". ")[0] + "."
    )  # no title: the first sentence comes first
    assert all(" ".join(doc) == " ".join(text.split()) for doc, text in zip(docs, abstracts))
    assert all(len(doc) > 1 for doc in docs)


# --------------------------------------------------------------------------------------------------
# Bad input


@pytest.fixture(scope="module")
def truncated_gz(sample, tmp_path_factory):
    data = (sample / BASELINE).read_bytes()
    path = tmp_path_factory.mktemp("bad") / "pubmed20n0014.xml.gz"
    path.write_bytes(data[: len(data) // 2])
    return path


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _bad_utf8(path: Path) -> Path:
    return _write(path, b"A first note.\n\nA second note\nwith a bad \xff byte.\n")


def _no_abstracts(sample, path: Path) -> Path:
    return write_medline(
        path, [a for a in medline_records(sample / BASELINE, 30) if not has_abstract(a)]
    )


def _assert_no_outputs(out: Path):
    leftovers = sorted(p.name for p in out.iterdir()) if out.exists() else []
    assert leftovers == [], leftovers


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda d: d / "absent.xml.gz", "absent.xml.gz: no such file"),
        (lambda d: _write(d / "empty.xml", b""), "empty.xml: empty file"),
        (
            lambda d: _write(d / "page.xml", b"<html><body>not MEDLINE</body></html>"),
            "page.xml: not a MEDLINE/PubMed or PMC article file (root element <html>",
        ),
        (
            lambda d: _write(d / "broken.nxml", b"<article><front>"),
            "broken.nxml: line 1: not well-formed XML",
        ),
        (
            lambda d: _bad_utf8(d / "notes" / "bad.txt"),
            "bad.txt: line 4: not valid UTF-8 (byte 0xff at byte offset 40)",
        ),
    ],
    ids=["missing", "empty", "not-medline", "malformed", "not-utf8"],
)
def test_bad_file_is_a_one_line_error_naming_it(tmp_path, make, message):
    bad = make(tmp_path)
    out = tmp_path / "out"
    with pytest.raises(PreprocessError) as error:
        run([bad], out)
    assert message in str(error.value) and "\n" not in str(error.value)
    _assert_no_outputs(out)


def test_cli_truncated_gzip_one_line_no_traceback(tmp_path, truncated_gz):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fairseq_bio_preprocess.extract",
            str(truncated_gz),
            "--out",
            str(tmp_path / "out"),
            "--no-progress",
            "--sentence-training-texts",
            str(PUNKT_TEXTS),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"fairseq-bio-extract: {truncated_gz}: truncated gzip file (the compressed data ends before its "
        "end-of-stream marker)"
    ]
    _assert_no_outputs(tmp_path / "out")


def test_cli_bad_utf8_message_uses_the_given_path(tmp_path):
    _bad_utf8(tmp_path / "notes" / "a.txt")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fairseq_bio_preprocess.extract",
            "notes",
            "--out",
            "out",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert (
        proc.stderr
        == "fairseq-bio-extract: notes/a.txt: line 4: not valid UTF-8 (byte 0xff at byte offset 40)\n"
    )


def test_xml_without_abstracts_is_a_warning(tmp_path, sample, capsys):
    empty = _no_abstracts(sample, tmp_path / "in" / "pubmed20n0001.xml.gz")
    stats = run([empty, sample / BASELINE], tmp_path / "out", max_docs_per_file=40)
    assert stats.files_without_abstracts == [str(empty)] and stats.skipped == 0
    assert stats.no_abstract >= 1 and stats.written > 0
    assert f"warning: {empty}: no abstracts" in capsys.readouterr().err


def test_skip_bad_files_counts_and_lists_them(tmp_path, sample, truncated_gz):
    bad_txt = _bad_utf8(tmp_path / "in" / "bad.txt")
    good = sample / "pone.0046493.nxml"
    stats = run([truncated_gz, bad_txt, good], tmp_path / "out", skip_bad_files=True, workers=2)
    assert stats.skipped == 2 and stats.files == 1 and stats.written == 1
    assert any(s.startswith(f"{truncated_gz}: truncated gzip") for s in stats.skipped_files)
    assert any(s.startswith(f"{bad_txt}: line 4: not valid UTF-8") for s in stats.skipped_files)
    assert {p.name for p in (tmp_path / "out").iterdir()} == {
        "train.txt",
        "valid.txt",
        "extract_stats.json",
    }


def test_failed_run_keeps_previous_outputs_intact(tmp_path, sample):
    out = tmp_path / "out"
    run([sample / BASELINE], out, max_docs_per_file=30)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(PreprocessError):
        run(
            [sample / BASELINE, _bad_utf8(tmp_path / "bad.txt")],
            out,
            max_docs_per_file=30,
            overwrite=True,
        )
    assert {
        p.name: p.read_bytes() for p in out.iterdir()
    } == before  # no temp files, no half-written outputs
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".fairseq_bio-made.json",
        "bad.txt",
        "out",
    ]

"""Sentence-level task data: the readers on the real shared files (GAD TSV without and with a
header, DDI and HoC JSON lines, BIOSSES TSV with CSV quoting, PubMedQA with BLURB's split), one-line
errors naming file and line for bad input, and the window plan / pooling that keeps long texts
whole."""

import json
import re
import shutil

import numpy as np
import pytest
import torch
from conftest import SHARED_DATA

from fairseq_bio.data.pair_format import PairFormat
from fairseq_bio.data.sentence_files import (
    SentenceDataError,
    check_examples,
    read_jsonl,
    read_pubmedqa,
    read_tsv,
)
from fairseq_bio.data.sentence_windows import collate_rows, plan_rows, pool_windows
from fairseq_bio.data.tagging_dataset import EncodedWords

GAD = SHARED_DATA / "re" / "GAD"
DDI = SHARED_DATA / "re" / "DDI"
HOC = SHARED_DATA / "hoc"
BIOSSES = SHARED_DATA / "biosses"
PUBMEDQA = SHARED_DATA / "pubmedqa"


def test_gad_tsv_without_and_with_header():
    train = read_tsv(str(GAD / "train.tsv"), ["sentence"], "label")
    test = read_tsv(str(GAD / "test.tsv"), ["sentence"], "label")
    assert (len(train), len(test)) == (4796, 534)
    assert {ex.label for ex in train} == {"0", "1"} == {ex.label for ex in test}
    assert train[0].line == 1 and test[0].line == 2  # the header is line 1
    first = (GAD / "train.tsv").read_text(encoding="utf-8").splitlines()[0].split("\t")[0]
    assert train[0].texts == (first,)
    # a quote inside a field is text (BLUE's files are read as pandas reads them)
    assert any('"S" promoter' in ex.texts[0] for ex in train)
    # read without labels (prediction on a labelled file): the last column is still the label, not
    # the text
    unlabelled = read_tsv(str(GAD / "train.tsv"), ["sentence"], None)
    assert [ex.texts for ex in unlabelled] == [ex.texts for ex in train] and unlabelled[
        0
    ].label is None
    check_examples(
        train + test,
        "gad",
        "classification",
        ["sentence"],
        ["0", "1"],
        entity_markers=["@GENE$", "@DISEASE$"],
    )


def test_biosses_header_with_unnamed_index_and_a_quoted_tab():
    dev = read_tsv(str(BIOSSES / "dev.tsv"), ["sentence1", "sentence2"], "score")
    train = read_tsv(str(BIOSSES / "train.tsv"), ["sentence1", "sentence2"], "score")
    assert (len(train), len(dev)) == (70, 16)
    assert "\t" in dev[0].texts[1] and dev[0].texts[1].startswith(
        "GATA2lox"
    )  # one CSV-quoted field
    check_examples(
        train + dev, "biosses", "regression", ["sentence1", "sentence2"], score_range=(0.0, 4.0)
    )
    assert dev[0].label == 1.4 and all(0.0 <= ex.label <= 4.0 for ex in train)


def test_ddi_and_hoc_json_lines():
    dev = read_jsonl(str(DDI / "dev.json"), ["sentence"], "label", "id")
    assert len(dev) == 2496 and dev[0].id.startswith("DDI-")
    labels = ["0", "DDI-advise", "DDI-effect", "DDI-int", "DDI-mechanism"]
    check_examples(
        dev, "ddi", "classification", ["sentence"], labels, entity_markers=["@DRUG$", "@DRUG-DRUG$"]
    )
    train = read_jsonl(str(DDI / "train.json"), ["sentence"], "label", "id")
    with pytest.raises(
        SentenceDataError, match=r"train.json:\d+: label 'DDI-None' is not one of 0, DDI-advise"
    ):
        check_examples(train, str(DDI / "train.json"), "classification", ["sentence"], labels)
    hoc = read_jsonl(str(HOC / "dev.json"), ["sentence"], "label", "id")
    check_examples(hoc, "hoc", "multilabel", ["sentence"], width=10)
    assert len(hoc) == 186 and all(len(ex.label) == 10 and set(ex.label) <= {0, 1} for ex in hoc)


def test_pubmedqa_blurb_split():
    pqal = json.loads((PUBMEDQA / "ori_pqal.json").read_text(encoding="utf-8"))
    split = json.loads((PUBMEDQA / "blurb_split.json").read_text(encoding="utf-8"))
    sizes = {}
    for key in ("train", "dev", "test"):
        examples = read_pubmedqa(
            str(PUBMEDQA / "ori_pqal.json"), str(PUBMEDQA / "blurb_split.json"), key
        )
        sizes[key] = len(examples)
        assert [ex.id for ex in examples] == split[key]
        assert {ex.label for ex in examples} <= {"yes", "no", "maybe"}
    assert sizes == {"train": 450, "dev": 50, "test": 500}
    ex = examples[0]
    entry = pqal[ex.id]
    assert ex.texts == (entry["QUESTION"], " ".join(entry["CONTEXTS"]))
    text = (PUBMEDQA / "ori_pqal.json").read_text(encoding="utf-8").splitlines()
    assert f'"{ex.id}"' in text[ex.line - 1]  # the line of its entry


def _one_line(excinfo, path, line=None):
    message = str(excinfo.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:{line}:" if line else f"{path}")
    return message


def _lines(path):
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def test_bad_tsv_rows_fail_in_one_line(tmp_path):
    header = tmp_path / "header.tsv"
    header.write_text("index\tsentence\tlabel_x\n0\tsome @GENE$ text\t1\n", encoding="utf-8")
    with pytest.raises(SentenceDataError) as e:
        read_tsv(str(header), ["sentence"], "label")
    assert "no column 'label'" in _one_line(e, header, 1)

    lines = _lines(GAD / "train.tsv")[:20]
    lines[7] = "\t1\n"  # empty sentence
    empty = tmp_path / "empty.tsv"
    empty.write_text("".join(lines), encoding="utf-8")
    examples = read_tsv(str(empty), ["sentence"], "label")
    with pytest.raises(SentenceDataError) as e:
        check_examples(examples, str(empty), "classification", ["sentence"], ["0", "1"])
    assert "empty text in field 'sentence'" in _one_line(e, empty, 8)

    lines = _lines(GAD / "train.tsv")[:20]
    lines[11] = lines[11].replace("\t1\n", "\t2\n").replace("\t0\n", "\t2\n")
    outside = tmp_path / "outside.tsv"
    outside.write_text("".join(lines), encoding="utf-8")
    examples = read_tsv(str(outside), ["sentence"], "label")
    with pytest.raises(SentenceDataError) as e:
        check_examples(examples, str(outside), "classification", ["sentence"], ["0", "1"])
    assert "label '2' is not one of 0, 1" in _one_line(e, outside, 12)

    lines = _lines(GAD / "train.tsv")[:20]
    lines[4] = lines[4].replace("@GENE$", "BRCA1").replace("@DISEASE$", "cancer")
    unmarked = tmp_path / "unmarked.tsv"
    unmarked.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(SentenceDataError) as e:
        check_examples(
            read_tsv(str(unmarked), ["sentence"], "label"),
            str(unmarked),
            "classification",
            ["sentence"],
            ["0", "1"],
            entity_markers=["@GENE$", "@DISEASE$"],
        )
    assert (
        "entity placeholders none; a relation's row holds @GENE$ and @DISEASE$ once each"
        in _one_line(e, unmarked, 5)
    )

    short = tmp_path / "short.tsv"
    short.write_text("only one field\n", encoding="utf-8")
    with pytest.raises(SentenceDataError) as e:
        read_tsv(str(short), ["sentence"], "label")
    assert "1 field(s), expected sentence <TAB> label" in _one_line(e, short, 1)


def test_bad_scores_fail_in_one_line(tmp_path):
    lines = _lines(BIOSSES / "train.tsv")
    fields = lines[3].rstrip("\n").split("\t")
    for bad, expected in (
        ("4.5", "score 4.5 is outside 0-4"),
        ("-1", "score -1 is outside 0-4"),
        ("high", "not a number"),
    ):
        path = tmp_path / f"bad{bad}.tsv"
        path.write_text(
            "".join(lines[:3] + ["\t".join(fields[:-1] + [bad]) + "\n"] + lines[4:]),
            encoding="utf-8",
        )
        examples = read_tsv(str(path), ["sentence1", "sentence2"], "score")
        with pytest.raises(SentenceDataError) as e:
            check_examples(
                examples,
                str(path),
                "regression",
                ["sentence1", "sentence2"],
                score_range=(0.0, 4.0),
            )
        assert expected in _one_line(e, path, 4)


def test_bad_json_lines_fail_in_one_line(tmp_path):
    lines = _lines(HOC / "dev.json")[:10]
    row = json.loads(lines[5])
    del row["label"]
    lines[5] = json.dumps(row) + "\n"
    lines[2] = lines[2][:40] + "\n"
    path = tmp_path / "dev.json"
    path.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(SentenceDataError) as e:
        read_jsonl(str(path), ["sentence"], "label")
    assert re.match(
        rf"{re.escape(str(path))}:3:4[01]: not valid JSON \(", _one_line(e, path, 3)
    )  # the column
    path.write_text("".join(lines[:2] + lines[3:]), encoding="utf-8")
    with pytest.raises(SentenceDataError) as e:
        read_jsonl(str(path), ["sentence"], "label")
    assert "no field 'label'" in _one_line(e, path, 5)

    lines = _lines(HOC / "dev.json")[:10]
    row = json.loads(lines[6])
    row["label"] = row["label"][:9]
    lines[6] = json.dumps(row) + "\n"
    path.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(SentenceDataError) as e:
        check_examples(
            read_jsonl(str(path), ["sentence"], "label"),
            str(path),
            "multilabel",
            ["sentence"],
            width=10,
        )
    assert "9 labels, expected 10" in _one_line(e, path, 7)


def test_pubmedqa_entry_without_contexts_fails_in_one_line(tmp_path):
    shutil.copy(PUBMEDQA / "blurb_split.json", tmp_path / "blurb_split.json")
    pqal = json.loads((PUBMEDQA / "ori_pqal.json").read_text(encoding="utf-8"))
    split = json.loads((PUBMEDQA / "blurb_split.json").read_text(encoding="utf-8"))
    victim = split["dev"][3]
    pqal[victim]["CONTEXTS"] = []
    path = tmp_path / "ori_pqal.json"
    path.write_text(json.dumps(pqal, indent=4), encoding="utf-8")
    line = next(
        i for i, text in enumerate(_lines(path), 1) if text.strip().startswith(f'"{victim}"')
    )
    with pytest.raises(SentenceDataError) as e:
        read_pubmedqa(str(path), str(tmp_path / "blurb_split.json"), "dev")
    assert f"entry {victim} has no CONTEXTS" in _one_line(e, path, line)
    del pqal[victim]
    path.write_text(json.dumps(pqal, indent=4), encoding="utf-8")
    with pytest.raises(SentenceDataError) as e:
        read_pubmedqa(str(path), str(tmp_path / "blurb_split.json"), "dev")
    assert f"PMID {victim} of split 'dev' is not in" in _one_line(e, tmp_path / "blurb_split.json")


def _encoded(texts):
    """EncodedWords of texts whose i-th word has ``len(word)`` pieces (ids 10, 11, ...)."""
    pieces, word_starts, sentence_starts = [], [0], [0]
    for words in texts:
        for w in words:
            pieces.extend(range(10, 10 + len(w)))
            word_starts.append(len(pieces))
        sentence_starts.append(len(word_starts) - 1)
    return EncodedWords(
        np.asarray(pieces, np.int32), np.asarray(word_starts), np.asarray(sentence_starts)
    )


def test_windows_cover_every_word_and_pairs_keep_the_first_text():
    counts = [3, 1, 2, 5, 1, 1, 4, 2, 2, 3, 1, 1, 2, 6, 1] * 10
    keep, windows, room = plan_rows(counts, None, 32)
    assert keep is None and room == 30 and len(windows) > 1
    covered = sorted({w for a, b in windows for w in range(a, b)})
    assert covered == list(range(len(counts)))
    assert all(sum(counts[a:b]) <= room for a, b in windows)
    # a short first text is whole in every window of the second
    keep, windows, room = plan_rows([2, 2], counts, 32)
    assert (
        keep == 4
        and room == 24
        and sorted({w for a, b in windows for w in range(a, b)}) == list(range(len(counts)))
    )
    # a first text longer than half the room keeps half when the second needs more, all of itself
    # otherwise
    assert plan_rows([1] * 40, [1] * 40, 36)[0] == 16
    assert plan_rows([1] * 25, [1] * 5, 36)[0] == 25
    assert plan_rows([1] * 40, [1] * 5, 36)[0] == 27


def test_pair_rows_are_roberta_pairs_and_pooling_is_the_mean():
    class Dictionary:
        def bos(self):
            return 0

        def pad(self):
            return 1

        def eos(self):
            return 2

    samples = [
        {"id": 0, "rows": [([5, 6], [7]), ([5, 6], [8, 9])], "target": 1},
        {"id": 1, "rows": [([5], [7, 7, 7])], "target": 0},
    ]
    batch = collate_rows(samples, Dictionary(), pair=PairFormat())
    assert batch["net_input"]["src_tokens"].tolist() == [
        [0, 5, 6, 2, 2, 7, 2, 1],
        [0, 5, 6, 2, 2, 8, 9, 2],
        [0, 5, 2, 2, 7, 7, 7, 2],
    ]
    assert batch["row_example"].tolist() == [0, 0, 1] and batch["target"].tolist() == [1, 0]
    rows = torch.tensor([[1.0, 4.0], [3.0, 0.0], [5.0, 5.0]])
    assert pool_windows(rows, batch["row_example"], 2).tolist() == [[2.0, 2.0], [5.0, 5.0]]

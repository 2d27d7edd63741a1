"""K-fold cross-validation in fairseq-bio-blurb (``--folds K``; bio-lm's GAD and EU-ADR): on real
train files (GAD's TSV with and without a header, DDI's JSON lines, NCBI-disease's CoNLL) every row
lands in exactly one fold's test split, each fold's dev rows come out of its train part, the folds
are the same on every call and files already written are left alone; a tiny real run over three
folds of a GAD slice reports the median and mean over folds, validates every N updates as the recipe
says, keeps only checkpoint_best, and a second invocation reuses every fold run."""

import collections
import json

import pytest
from conftest import SHARED_DATA, conll_slice, logged

from fairseq_bio.runner.folds import fold_parts, fold_rows, read_rows, write_folds
from fairseq_bio.cli.blurb import build_parser, main
from fairseq_bio.data import sentence_files as sd
from fairseq_bio.data.conll import read_conll
from fairseq_bio.errors import BioConfigError

GAD_TASK = {"format": "auto", "text_fields": "sentence", "label_field": "label", "id_field": "id"}
DDI_TASK = {"format": "auto", "text_fields": "sentence", "label_field": "label", "id_field": "id"}


def _source_rows(path, tagging, task):
    """What the task reads from a file: (sentence words, tags) or (texts, label) per row, in file
    order."""
    if tagging:
        return [(tuple(s.words), tuple(s.tags)) for s in read_conll(path)]
    fields = task["text_fields"].split(",")
    read = sd.read_tsv if sd.file_format(str(path)) == "tsv" else sd.read_jsonl
    return [
        (ex.texts, ex.label)
        for ex in read(str(path), fields, task["label_field"], task["id_field"])
    ]


def _check_partition(source, tagging, task, folds):
    rows = _source_rows(source, tagging, task)
    tested = collections.Counter()
    for fold in folds:
        split = {
            name: _source_rows(fold.dir / getattr(fold, f"{name}_file"), tagging, task)
            for name in ("train", "valid", "test")
        }
        # the fold's three files hold every row of the source once
        assert collections.Counter(
            split["train"] + split["valid"] + split["test"]
        ) == collections.Counter(rows)
        assert split["valid"] and split["train"] and split["test"]
        tested.update(split["test"])
        # its dev is the next fold's test: taken out of its own train part, never out of its test
        following = folds[fold.index % len(folds)]
        assert split["valid"] == _source_rows(following.dir / following.test_file, tagging, task)
    assert tested == collections.Counter(rows)  # every row in exactly one fold's test split
    sizes = [len(_source_rows(f.dir / f.test_file, tagging, task)) for f in folds]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == len(rows)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """Real files in each layout: GAD's headerless train TSV (4,796 rows), GAD's test TSV with a
    header, a slice of DDI's JSON lines and of NCBI-disease's CoNLL."""
    root = tmp_path_factory.mktemp("fold-sources")
    ddi = (
        (SHARED_DATA / "re" / "DDI" / "train.json")
        .read_text(encoding="utf-8")
        .splitlines(keepends=True)
    )
    (root / "ddi.json").write_text("".join(ddi[:300]), encoding="utf-8")
    conll_slice(SHARED_DATA / "ner" / "NCBI-disease" / "train.tsv", root / "ncbi.tsv", 200)
    return {
        "gad-train": (SHARED_DATA / "re" / "GAD" / "train.tsv", False, GAD_TASK),
        "gad-test-with-header": (
            SHARED_DATA / "re" / "GAD" / "test.tsv",
            False,
            {**GAD_TASK, "id_field": "index"},
        ),
        "ddi-jsonl": (root / "ddi.json", False, DDI_TASK),
        "ncbi-conll": (root / "ncbi.tsv", True, {}),
    }


@pytest.mark.parametrize(
    "name, k",
    [("gad-train", 10), ("gad-test-with-header", 10), ("ddi-jsonl", 5), ("ncbi-conll", 3)],
)
def test_every_row_is_in_exactly_one_folds_test(sources, tmp_path, name, k):
    source, tagging, task = sources[name]
    folds = write_folds(str(source), tagging, task, k, tmp_path / "folds")
    assert [f.name for f in folds] == [f"fold{i}-of-{k}" for i in range(1, k + 1)]
    _check_partition(source, tagging, task, folds)
    header, _ = read_rows(str(source), tagging, task)
    if (
        name == "gad-test-with-header"
    ):  # BLUE's header is kept in every fold file, so columns are found by name
        assert header == "index\tsentence\tlabel\n"
        assert all(
            (f.dir / f.test_file).read_text(encoding="utf-8").startswith(header) for f in folds
        )


def test_folds_are_deterministic(sources, tmp_path):
    """The same file gives the same folds (bytes and digests) on every call, independent of anything
    else; a second write leaves the files untouched; another K gives other folds."""
    source, tagging, task = sources["gad-train"]
    first = write_folds(str(source), tagging, task, 10, tmp_path / "a")
    mtimes = {p: p.stat().st_mtime_ns for p in (tmp_path / "a").rglob("*.tsv")}
    again = write_folds(str(source), tagging, task, 10, tmp_path / "a")
    other_dir = write_folds(str(source), tagging, task, 10, tmp_path / "b")
    assert [f.digest for f in first] == [f.digest for f in again] == [f.digest for f in other_dir]
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes
    for f, g in zip(first, other_dir):
        assert (f.dir / f.test_file).read_bytes() == (g.dir / g.test_file).read_bytes()
    assert fold_parts(4796, 10) == fold_parts(4796, 10) and fold_parts(4796, 10) != fold_parts(
        4796, 9
    )
    assert sorted(collections.Counter(fold_parts(4796, 10)).values()) == [479] * 4 + [480] * 6
    assert fold_rows([0, 1, 2, 0, 1, 2], 3, 3) == (
        [1, 4],
        [0, 3],
        [2, 5],
    )  # fold 3 tests part 3, validates part 1
    assert [f.digest for f in write_folds(str(source), tagging, task, 5, tmp_path / "c")][
        0
    ] != first[0].digest


def test_what_cannot_be_cross_validated_fails_in_one_line(tmp_path):
    tiny = tmp_path / "train.tsv"
    tiny.write_text("a @GENE$ b @DISEASE$\t1\nc @GENE$ d @DISEASE$\t0\n", encoding="utf-8")
    with pytest.raises(BioConfigError, match=rf"^{tiny}: 2 rows, fewer than the 3 folds$"):
        write_folds(str(tiny), False, GAD_TASK, 3, tmp_path / "out")
    too_few = rf"^{tiny}: 2 folds; cross-validation needs at least 3 \(test, dev, train\)$"
    with pytest.raises(BioConfigError, match=too_few):
        write_folds(str(tiny), False, GAD_TASK, 2, tmp_path / "out")
    pubmedqa = {"format": "pubmedqa", "text_fields": "question", "label_field": "final_decision"}
    with pytest.raises(BioConfigError, match="PubMedQA's file is split by its split file"):
        write_folds(
            str(SHARED_DATA / "pubmedqa" / "ori_pqal.json"), False, pubmedqa, 10, tmp_path / "out"
        )
    bad = tmp_path / "bad.tsv"
    bad.write_text("one\ttag\n\nragged\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"^{bad}:3: "):  # the CoNLL reader's file:line error
        write_folds(str(bad), True, {}, 3, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--checkpoint", "c", "--data", "d", "--folds", "2"])
    assert (
        build_parser().parse_args(["--checkpoint", "c", "--data", "d", "--folds", "1"]).folds == 1
    )


def test_cross_validated_runs_report_folds_and_are_reused(tiny_encoder, tmp_path, monkeypatch):
    """--preset biolm --tasks gad --folds 3 on a real GAD slice: three fold runs (one seed each)
    through fairseq-hydra-train and fairseq-bio-predict, each tested on its own held-out third and
    validated every 3 updates (the recipe's dataset.validate_interval_updates, overridden to fit 12
    updates; an epoch is 8) with only checkpoint_best.pt left behind; results give per-fold scores,
    their median and mean; a second invocation starts no training and rewrites nothing."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    gad = tmp_path / "data" / "re" / "GAD"
    gad.mkdir(parents=True)
    rows = (
        (SHARED_DATA / "re" / "GAD" / "train.tsv")
        .read_text(encoding="utf-8")
        .splitlines(keepends=True)
    )
    (gad / "train.tsv").write_text(
        "".join(rows[::50]), encoding="utf-8"
    )  # 96 rows of both labels, no test file
    out = tmp_path / "out"
    argv = [
        "--checkpoint",
        str(tiny_encoder),
        "--data",
        str(tmp_path / "data"),
        "--out",
        str(out),
        "--preset",
        "biolm",
        "--tasks",
        "gad",
        "--folds",
        "3",
        "--max-update",
        "12",
        "--lr-grid",
        "1e-3",
        "--",
        "dataset.batch_size=4",
        "dataset.validate_interval_updates=3",
        "common.log_interval=4",
    ]
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["counts"] == {"ran": 3, "redone": 0, "stale": 0, "reused": 0, "failed": 0}
    runs = sorted(results["runs"], key=lambda r: r["fold"])
    assert [(r["fold"], r["folds"], r["seed"]) for r in runs] == [(1, 3, 1), (2, 3, 1), (3, 3, 1)]
    assert (
        sum(r["test_examples"] for r in runs) == 96
    )  # every row tested once, by the fold that held it out
    for r in runs:
        run_dir = out / "gad" / "lr0.001" / f"fold{r['fold']}-of-3" / "seed1"
        assert r["run_dir"] == str(run_dir)
        predicted = [json.loads(line) for line in (run_dir / "predictions.jsonl").open()]
        test = (out / "gad" / "folds" / f"fold{r['fold']}-of-3" / "test.tsv").read_text(
            encoding="utf-8"
        )
        assert len(predicted) == r["test_examples"] == len(test.splitlines())
        valid = logged(run_dir / "train.log", "valid")
        assert {3, 6, 9, 12} <= set(
            valid
        )  # mid-epoch validations every 3 updates (and at the epoch's end, 8)
        assert r["dev_metric"] == max(float(v["f1"]) for v in valid.values())
        left = sorted(p.name for p in run_dir.glob("*.pt"))
        assert left == [
            "checkpoint_best.pt"
        ]  # fairseq's checkpoint_<epoch>_<updates>.pt deleted after training
    d = results["datasets"]["gad"]
    values = [r["test_metric"] for r in runs]
    assert (
        d["folds"] == 3
        and d["n"] == 3
        and d["per_fold"] == {"1": values[0], "2": values[1], "3": values[2]}
    )
    assert d["median"] == pytest.approx(sorted(values)[1]) and d["mean"] == pytest.approx(
        sum(values) / 3
    )
    assert results["score"]["datasets"]["gad"] == pytest.approx(
        d["median"]
    )  # bio-lm counts the median
    assert d["trivial_baseline"] == pytest.approx(
        sum(r["trivial_baseline"] for r in runs) / 3
    )  # each fold's own
    assert results["folds"] == {"gad": 3}
    md = (out / "results.md").read_text()
    assert f"- GAD: 3-fold, 3 folds done; median {d['median']:.2f}, mean {d['mean']:.2f}" in md
    assert "| gad lr=0.001 fold=2/3 seed=1 | ran |" in md

    mtimes = {
        p: p.stat().st_mtime_ns
        for p in out.rglob("*")
        if p.is_file() and "fold" in str(p.relative_to(out))
    }
    assert sum(p.name == "result.json" for p in mtimes) == 3
    assert sum(p.parent.parent.name == "folds" for p in mtimes) == 9  # the three files of each fold
    assert main(argv) == 0
    again = json.loads((out / "results.json").read_text())
    assert again["counts"] == {"ran": 0, "redone": 0, "stale": 0, "reused": 3, "failed": 0}
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes  # fold files and fold runs untouched
    assert again["datasets"]["gad"] == d

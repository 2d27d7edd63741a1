"""Bad input as a new user gives it: one line naming file and line, a non-zero exit, no traceback (unless asked
for), and the user's files byte-identical afterwards. Through the installed console scripts and fairseq-hydra-train
on real NCBI-disease / GAD data."""

import hashlib
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import BIN, FINE_TUNE, REPO, SHARED_DATA, run_cli

NCBI = SHARED_DATA / "ner" / "NCBI-disease"
GAD = SHARED_DATA / "re" / "GAD"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def one_line(result) -> str:
    """The refusal: exit status 1, no traceback, and the last line on stderr (returned)."""
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result.stderr.strip().splitlines()[-1]


def predict(checkpoint, source, output, *extra, cwd):
    return run_cli(["fairseq-bio-predict", "--checkpoint", checkpoint, "--input", source, "--output", output,
                    "--quiet", *extra], cwd=cwd, check=False)  # fmt: skip


def ncbi_sentences(path: Path, n: int) -> Path:
    blocks = [b for b in (NCBI / "test.tsv").read_text(encoding="utf-8").split("\n\n") if b.strip()][:n]
    path.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    return path


# ----------------------------------------------------------------------------------------- outputs never inputs


def test_predict_never_writes_over_its_input(ner_model, tmp_path):
    checkpoint = ner_model[0] / "checkpoint_best.pt"
    notes = tmp_path / "notes.txt"
    notes.write_text("Familial adenomatous polyposis is a colon cancer syndrome .\n", encoding="utf-8")
    conll = ncbi_sentences(tmp_path / "test.tsv", 5)
    (tmp_path / "link.txt").symlink_to(notes)
    os.link(conll, tmp_path / "hard.tsv")
    before = {p: digest(p) for p in (notes, conll)}
    cases = [
        (notes, notes, f"{notes}: is the input {notes}; --output must name another file"),
        (conll, conll, f"{conll}: is the input {conll}; --output must name another file"),
        (notes, tmp_path / "link.txt", f"{tmp_path / 'link.txt'}: is the input {notes} (through a link)"),
        (conll, tmp_path / "hard.tsv", f"{tmp_path / 'hard.tsv'}: is the input {conll} (through a link)"),
    ]
    for source, output, message in cases:
        for extra in ([], ["--overwrite"]):  # --overwrite never makes the input replaceable
            last = one_line(predict(checkpoint, source, output, *extra, cwd=tmp_path))
            assert last.startswith(f"fairseq-bio-predict: {message}"), last
    assert {p: digest(p) for p in before} == before
    assert (tmp_path / "link.txt").is_symlink()


def test_predict_replaces_an_existing_file_only_when_told(ner_model, tmp_path):
    checkpoint = ner_model[0] / "checkpoint_best.pt"
    conll = ncbi_sentences(tmp_path / "test.tsv", 5)
    mine = tmp_path / "results.tsv"
    mine.write_text("my own results\n", encoding="utf-8")
    last = one_line(predict(checkpoint, conll, mine, cwd=tmp_path))
    assert last == f"fairseq-bio-predict: {mine}: exists; pass --overwrite to replace it"
    assert mine.read_text(encoding="utf-8") == "my own results\n"
    done = predict(checkpoint, conll, mine, "--overwrite", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert mine.read_text(encoding="utf-8").splitlines()[0].count("\t") == 2  # token, gold, prediction


def test_extract_and_init_student_never_write_over_their_checkpoint(tiny_encoder, tmp_path):
    from fairseq_bio.cli.extract_encoder import extract_encoder
    from fairseq_bio.cli.init_student import init_student
    from fairseq_bio.outputs import OutputError

    checkpoint = tmp_path / "model.pt"
    shutil.copy(tiny_encoder, checkpoint)
    (tmp_path / "alias.pt").symlink_to(checkpoint)
    before = digest(checkpoint)
    with pytest.raises(OutputError, match=rf"^{checkpoint}: is the input {checkpoint}; out must name another file"):
        extract_encoder(checkpoint, checkpoint, overwrite=True)
    with pytest.raises(OutputError, match=r"alias.pt: is the input .*model.pt \(through a link\); --out must"):
        init_student(checkpoint, tmp_path / "alias.pt", overwrite=True)
    assert digest(checkpoint) == before


def test_encode_never_writes_over_its_corpus(learned_vocab, tmp_path):
    corpus = tmp_path / "train.txt"
    corpus.write_text("Familial adenomatous polyposis is a colon cancer syndrome .\n", encoding="utf-8")
    (tmp_path / "train.bpe").symlink_to(corpus)
    before = digest(corpus)
    for output, how in ((corpus, ""), (tmp_path / "train.bpe", " (through a link)")):
        result = run_cli(["fairseq-bio-encode", "--vocab", learned_vocab("bytebpe"), "--inputs", corpus, "--outputs",
                          output, "--no-progress"], cwd=tmp_path, check=False)  # fmt: skip
        assert one_line(result) == f"encode: {output}: is the input {corpus}{how}; --outputs must name another file"
    assert digest(corpus) == before
    mine = tmp_path / "mine.bpe"
    mine.write_text("my own encoding\n", encoding="utf-8")
    command = ["fairseq-bio-encode", "--vocab", learned_vocab("bytebpe"), "--inputs", corpus, "--outputs", mine,
               "--no-progress"]  # fmt: skip
    assert (
        one_line(run_cli(command, cwd=tmp_path, check=False))
        == f"encode: {mine}: exists; pass --overwrite to replace it"
    )
    assert mine.read_text(encoding="utf-8") == "my own encoding\n"
    assert run_cli([*command, "--overwrite"], cwd=tmp_path).returncode == 0 and mine.read_text() != "my own encoding\n"


# ------------------------------------------------------------------------------------------- format by content


def test_conll_named_txt_is_read_as_conll(ner_model, ncbi_slice, tmp_path):
    """A test file called test.txt holding token<TAB>tag lines is CoNLL (tags are not tagged as prose)."""
    checkpoint = ner_model[0] / "checkpoint_best.pt"
    as_txt = tmp_path / "test.txt"
    shutil.copy(ncbi_slice / "test.tsv", as_txt)
    before = digest(as_txt)
    done = predict(checkpoint, as_txt, tmp_path / "pred.txt", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "entity precision" in done.stdout and " F1 " in done.stdout
    same = predict(checkpoint, ncbi_slice / "test.tsv", tmp_path / "pred.tsv", cwd=tmp_path)
    assert done.stdout.splitlines()[-1] == same.stdout.splitlines()[-1]  # the F1 of the same file named .tsv
    assert (tmp_path / "pred.txt").read_bytes() == (tmp_path / "pred.tsv").read_bytes()
    assert digest(as_txt) == before


def test_half_conll_half_text_is_refused_naming_format(ner_model, tmp_path):
    checkpoint = ner_model[0] / "checkpoint_best.pt"
    mixed = tmp_path / "notes.txt"
    mixed.write_text("Mild\tO\nanemia\tB-Disease\n\nThe patient had mild anemia .\n", encoding="utf-8")
    before = digest(mixed)
    last = one_line(predict(checkpoint, mixed, tmp_path / "out.jsonl", cwd=tmp_path))
    assert last == (f"fairseq-bio-predict: {mixed}: line 1 reads as CoNLL (token<TAB>tag) but line 4 does not; pass "
                    "--format conll (the bad lines are then named) or --format text")  # fmt: skip
    assert digest(mixed) == before and not (tmp_path / "out.jsonl").exists()
    # told: --format conll names the bad line
    last = one_line(predict(checkpoint, mixed, tmp_path / "out.tsv", "--format", "conll", cwd=tmp_path))
    assert last.startswith(f"fairseq-bio-predict: {mixed}:4: 6 column(s); expected token<TAB>tag")


def test_sniff_format_on_hand_made_files(tmp_path):
    from fairseq_bio.data.conll import TaggingDataError, sniff_format

    cases = {
        "a.txt": ("-DOCSTART-\tO\n\nBRCA1\tB-Gene\nis\tO\n", "conll"),
        "b.txt": ("BRCA1 B-Gene\nis O\n", "conll"),  # space-separated with BIO tags
        "c.txt": ("Hello world\nAll is well .\n", "text"),
        "d.tsv": ("BRCA1\nis\n\nmutated\n", "conll"),  # bare tokens, named as CoNLL
        "e.txt": ("Table 1\tResults of the trial\nNo tags here .\n", "text"),  # a tab in prose is not a column
        "f.tsv": ("BRCA1\tB-Gene\nis mutated\n", "conll"),  # the reader then names line 2
    }
    for name, (text, expected) in cases.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        assert sniff_format(tmp_path / name) == expected, name
    (tmp_path / "g.txt").write_text("BRCA1\tB-Gene\nis mutated in cancer\n", encoding="utf-8")
    with pytest.raises(TaggingDataError, match=r"g.txt: line 1 reads as CoNLL .* line 2 does not; pass --format"):
        sniff_format(tmp_path / "g.txt")


# --------------------------------------------------------------------------------------- relation placeholders


def _gad_rows(tmp_path, replace, name="rows.tsv"):
    lines = (GAD / "test.tsv").read_text(encoding="utf-8").splitlines(keepends=True)[:12]
    lines[6] = replace(lines[6])
    path = tmp_path / name
    path.write_text("".join(lines), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "replace, found",
    [
        (lambda line: line.replace("@GENE$", "APOE"), "@DISEASE$ x1"),
        (lambda line: line.replace("@DISEASE$", "@GENE$"), "@GENE$ x2"),
        (lambda line: line.replace("@GENE$", "@GENE$ and @GENE$"), "@GENE$ x2, @DISEASE$ x1"),
    ],
)
def test_relation_row_without_its_two_placeholders(gad_model, tmp_path, replace, found):
    checkpoint = gad_model[0] / "checkpoint_best.pt"
    rows = _gad_rows(tmp_path, replace)
    before = digest(rows)
    last = one_line(predict(checkpoint, rows, tmp_path / "out.jsonl", cwd=tmp_path))
    assert last == (f"fairseq-bio-predict: {rows}:7: entity placeholders {found}; a relation's row holds @GENE$ "
                    "and @DISEASE$ once each (task.entity_placeholders=any accepts other counts)")  # fmt: skip
    assert digest(rows) == before and not (tmp_path / "out.jsonl").exists()


def test_json_errors_name_the_column(gad_model, tmp_path):
    checkpoint = gad_model[0] / "checkpoint_best.pt"
    rows = tmp_path / "rows.json"
    rows.write_text('{"id": "1", "sentence": "@GENE$ in @DISEASE$ .", "label": "1"}\n'
                    '{"id": "2", "sentence": "@GENE$ in @DISEASE$ .", "label": 1,}\n', encoding="utf-8")  # fmt: skip
    last = one_line(predict(checkpoint, rows, tmp_path / "out.jsonl", cwd=tmp_path))
    assert (
        last == f"fairseq-bio-predict: {rows}:2:61: not valid JSON (Expecting property name enclosed in double quotes)"
    )


# ------------------------------------------------------------------------ errors inside fairseq's entry points


def _hydra_tagging(tmp_path, data, tiny_encoder, *extra, env=None):
    return subprocess.run(
        [str(BIN / "fairseq-hydra-train"), "--config-dir", str(REPO / "hydra_configs"), "--config-name",
         "bio_tagging_ner", f"task.data={data}", f"checkpoint.restore_file={tiny_encoder}",
         f"checkpoint.save_dir={tmp_path / 'run'}", f"common.user_dir={REPO / 'fairseq_bio'}", *FINE_TUNE, *extra],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
    )  # fmt: skip


def test_hydra_train_reports_a_ragged_conll_line_in_one_line(tiny_encoder, tmp_path):
    """The error adds exactly one line to what every fairseq-hydra-train start prints on stderr (hydra's and
    fairseq's start-up warnings, measured on a good run of the same command): the message, naming file:line."""
    good, bad = tmp_path / "good", tmp_path / "bad"
    for data in (good, bad):
        data.mkdir()
        for split, n in (("train", 40), ("devel", 10), ("test", 10)):
            ncbi_sentences(data / f"{split}.tsv", n)
    lines = (bad / "train.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
    lines[4] = lines[4].rstrip("\n") + "\tNN\n"  # a third column on line 5
    (bad / "train.tsv").write_text("".join(lines), encoding="utf-8")
    before = digest(bad / "train.tsv")

    failed = _hydra_tagging(tmp_path, bad, tiny_encoder)
    message = f"{bad}/train.tsv:5: 3 column(s); expected token<TAB>tag"
    assert one_line(failed) == message
    baseline = _hydra_tagging(tmp_path, good, tiny_encoder, "optimization.max_update=1", "checkpoint.no_save=true",
                              "dataset.disable_validation=true")  # fmt: skip
    assert baseline.returncode == 0, baseline.stderr[-3000:]
    start_up = {line for line in baseline.stderr.splitlines() if line.strip()}
    added = [line for line in failed.stderr.splitlines() if line.strip() and line not in start_up]
    assert added == [message]  # no traceback, no "Error executing job", no HYDRA_FULL_ERROR hint
    assert digest(bad / "train.tsv") == before

    asked = _hydra_tagging(tmp_path, bad, tiny_encoder, env={"FAIRSEQ_BIO_TRACEBACK": "1"})
    assert asked.returncode != 0 and "Traceback (most recent call last)" in asked.stderr
    assert f"TaggingDataError: {message}" in asked.stderr


def test_uncaught_plugin_error_outside_hydra_is_one_line(tmp_path):
    """fairseq-train and the other argparse entry points: the plugin's excepthook prints a BioError alone; other
    errors keep their tracebacks."""
    script = ("import fairseq_bio\nfrom fairseq_bio.data.conll import read_conll\n"
              f"read_conll({str(tmp_path / 'missing.tsv')!r})\n")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("FAIRSEQ_BIO_TRACEBACK", "HYDRA_FULL_ERROR")}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert one_line(result) == f"{tmp_path / 'missing.tsv'}: not found"
    env["FAIRSEQ_BIO_TRACEBACK"] = "1"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 1 and "Traceback (most recent call last)" in result.stderr
    other = subprocess.run([sys.executable, "-c", "import fairseq_bio\nraise ValueError('not ours')"],
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert other.returncode == 1 and "Traceback (most recent call last)" in other.stderr


# ----------------------------------------------------------------------------------- benchmarks read their data


def test_benchmark_slicing_never_writes_into_its_input(tmp_path):
    """benchmarks/tagging.py's ner_data (also hf_parity.py's and distillation.py's) on a read-only copy of a
    dataset given by absolute path: the slice is a new directory elsewhere; the dataset is unchanged."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from tagging import ner_data
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    dataset = tmp_path / "MyNER"
    dataset.mkdir()
    for split in ("train", "devel", "test"):
        ncbi_sentences(dataset / f"{split}.tsv", 30)
    before = {p.name: (digest(p), p.stat().st_mtime_ns) for p in dataset.iterdir()}
    for p in dataset.iterdir():
        p.chmod(stat.S_IRUSR | stat.S_IRGRP)
    dataset.chmod(stat.S_IRUSR | stat.S_IXUSR)
    work = tmp_path / "work"
    work.mkdir()
    try:
        for train_n, dev_n in ((10, None), (10, 5), (None, None)):
            data = ner_data(str(dataset), train_n, dev_n, work)
            if train_n is None:
                assert data == dataset  # read in place
                continue
            assert data.parent == work and len(read_blocks(data / "train.tsv")) == 10
            assert len(read_blocks(data / "test.tsv")) == 30
        after = {p.name: (digest(p), p.stat().st_mtime_ns) for p in dataset.iterdir()}
        assert after == before
    finally:
        dataset.chmod(0o755)


def read_blocks(path: Path):
    return [b for b in path.read_text(encoding="utf-8").split("\n\n") if b.strip()]


def test_preprocess_commands_print_plugin_errors_in_one_line(monkeypatch):
    """A plugin error raised inside a preprocess/HF command (all run through fairseq_bio.errors.run_cli)
    ends it as ``<prog>: <message>``; other errors keep their tracebacks, and FAIRSEQ_BIO_TRACEBACK=1 shows it."""
    from fairseq_bio.data.conll import TaggingDataError
    from fairseq_bio.errors import run_cli as preprocess_run_cli

    def bad(argv):
        raise TaggingDataError("data/train.tsv:5: 3 column(s); expected token<TAB>tag")

    monkeypatch.delenv("FAIRSEQ_BIO_TRACEBACK", raising=False)
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    with pytest.raises(SystemExit) as ended:
        preprocess_run_cli("fairseq-bio-export-hf", bad)
    assert ended.value.code == "fairseq-bio-export-hf: data/train.tsv:5: 3 column(s); expected token<TAB>tag"
    with pytest.raises(ZeroDivisionError):
        preprocess_run_cli("fairseq-bio-export-hf", lambda argv: 1 / 0)
    monkeypatch.setenv("FAIRSEQ_BIO_TRACEBACK", "1")
    with pytest.raises(TaggingDataError):
        preprocess_run_cli("fairseq-bio-export-hf", bad)

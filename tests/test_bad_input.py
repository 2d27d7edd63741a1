"""Bad input as a new user gives it: one line naming file and line, a non-zero exit, no traceback
(unless asked for), and the user's files byte-identical afterwards. Through the installed console
scripts and fairseq-hydra-train on real NCBI-disease / GAD data."""

import hashlib
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from unicodedata import combining, normalize

import pytest
from conftest import BIN, FINE_TUNE, REPO, SHARED_DATA, run_cli

from fairseq_bio import runs
from fairseq_bio.data.conll import read_conll

TINY = [
    "model.encoder_layers=1",
    "model.encoder_embed_dim=32",
    "model.encoder_ffn_embed_dim=64",
    "model.encoder_attention_heads=2",
]  # a pretraining run that only has to start
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
    return run_cli(
        [
            "fairseq-bio-predict",
            "--checkpoint",
            checkpoint,
            "--input",
            source,
            "--out",
            output,
            "--no-progress",
            *extra,
        ],
        cwd=cwd,
        check=False,
    )


def ncbi_sentences(path: Path, n: int) -> Path:
    blocks = [
        b for b in (NCBI / "test.tsv").read_text(encoding="utf-8").split("\n\n") if b.strip()
    ][:n]
    path.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    return path


# ----------------------------------------------------------------------------------------- outputs never inputs


def test_predict_never_writes_over_its_input(ner_model, tmp_path):
    checkpoint = ner_model[0] / "checkpoint_best.pt"
    notes = tmp_path / "notes.txt"
    notes.write_text(
        "Familial adenomatous polyposis is a colon cancer syndrome .\n", encoding="utf-8"
    )
    conll = ncbi_sentences(tmp_path / "test.tsv", 5)
    (tmp_path / "link.txt").symlink_to(notes)
    os.link(conll, tmp_path / "hard.tsv")
    before = {p: digest(p) for p in (notes, conll)}
    cases = [
        (notes, notes, f"{notes}: is the input {notes}; --out must name another file"),
        (conll, conll, f"{conll}: is the input {conll}; --out must name another file"),
        (
            notes,
            tmp_path / "link.txt",
            f"{tmp_path / 'link.txt'}: is the input {notes} (through a link)",
        ),
        (
            conll,
            tmp_path / "hard.tsv",
            f"{tmp_path / 'hard.tsv'}: is the input {conll} (through a link)",
        ),
    ]
    for source, output, message in cases:
        for extra in ([], ["--overwrite"]):  # --overwrite never makes the input replaceable
            last = one_line(predict(checkpoint, source, output, *extra, cwd=tmp_path))
            assert last.startswith(f"fairseq-bio-predict: {message}"), last
    assert {p: digest(p) for p in before} == before
    assert (tmp_path / "link.txt").is_symlink()


def test_predict_replaces_only_a_file_predict_wrote(ner_model, tmp_path):
    """One rule: an existing output is refused without --overwrite; with it, only what predict
    itself wrote (and has not been changed since) is replaced; a user's file, or the vocabulary
    beside the checkpoint, never is.
    """
    checkpoint = ner_model[0] / "checkpoint_best.pt"
    conll = ncbi_sentences(tmp_path / "test.tsv", 5)
    mine = tmp_path / "results.tsv"
    mine.write_text("my own results\n", encoding="utf-8")
    last = one_line(predict(checkpoint, conll, mine, cwd=tmp_path))
    assert last == f"fairseq-bio-predict: {mine}: already exists; pass --overwrite to replace it"
    last = one_line(predict(checkpoint, conll, mine, "--overwrite", cwd=tmp_path))
    assert last == (
        f"fairseq-bio-predict: {mine}: exists and was not made by fairseq-bio-predict; not replacing it, "
        "--overwrite or not (move it away or choose another --out)"
    )
    assert mine.read_text(encoding="utf-8") == "my own results\n"

    ours = tmp_path / "pred.tsv"
    assert predict(checkpoint, conll, ours, cwd=tmp_path).returncode == 0
    done = predict(checkpoint, conll, ours, "--overwrite", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (
        ours.read_text(encoding="utf-8").splitlines()[0].count("\t") == 2
    )  # token, gold, prediction
    with open(ours, "a", encoding="utf-8") as f:
        f.write("my note\n")  # changed since predict wrote it: the user's now
    last = one_line(predict(checkpoint, conll, ours, "--overwrite", cwd=tmp_path))
    assert f"{ours}: exists and was changed since fairseq-bio-predict wrote it" in last
    assert ours.read_text(encoding="utf-8").endswith("my note\n")


def test_raw_text_spans_never_cut_a_character(ner_model, tmp_path):
    """Decomposed text (letters and combining accents as separate code points): predict cuts it into
    the composed text's words and tags them as the composed text, each span a whole number of
    characters of the line.
    """
    checkpoint = ner_model[0] / "checkpoint_best.pt"
    sentences = [" ".join(s.words) for s in read_conll(ncbi_sentences(tmp_path / "test.tsv", 40))]
    composed = [f"Ménière and Sjögren cases : {line}" for line in sentences]
    decomposed = [normalize("NFD", line) for line in composed]
    assert all(len(d) >= len(c) + 3 for d, c in zip(decomposed, composed))
    spans = {}
    for name, lines in (("composed", composed), ("decomposed", decomposed)):
        (tmp_path / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        result = predict(
            checkpoint, tmp_path / f"{name}.txt", tmp_path / f"{name}.jsonl", cwd=tmp_path
        )
        assert result.returncode == 0, result.stderr[-2000:]
        records = [
            json.loads(x)
            for x in (tmp_path / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
        ]
        for line, record in zip(lines, records):
            for span in record["spans"]:
                assert span["text"] == line[span["start"] : span["end"]]
                assert not combining(line[span["start"]]) and not combining(
                    line[span["end"] : span["end"] + 1] or "x"
                )
        spans[name] = [
            [(normalize("NFC", s["text"]), s["type"]) for s in r["spans"]] for r in records
        ]
    assert spans["decomposed"] == spans["composed"] and any(spans["composed"])


def test_predict_never_writes_over_the_vocabulary_beside_its_checkpoint(ner_model, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(ner_model[0], run)
    checkpoint = run / "checkpoint_best.pt"
    conll = ncbi_sentences(tmp_path / "test.tsv", 5)
    before = {p.name: digest(p) for p in run.iterdir() if p.is_file()}
    assert {"dict.txt", "bpe.json"} <= set(before)
    for name in ("dict.txt", "bpe.json"):
        last = one_line(predict(checkpoint, conll, run / name, "--overwrite", cwd=tmp_path))
        assert last.startswith(
            f"fairseq-bio-predict: {run / name}: is the input {run / name}"
        ), last
    assert {p.name: digest(p) for p in run.iterdir() if p.is_file()} == before
    assert (
        predict(checkpoint, conll, tmp_path / "again.tsv", cwd=tmp_path).returncode == 0
    )  # still loads


def test_extract_and_init_student_never_write_over_their_checkpoint(tiny_encoder, tmp_path):
    from fairseq_bio.cli.extract_encoder import extract_encoder
    from fairseq_bio.cli.init_student import init_student
    from fairseq_bio.files import InputError

    checkpoint = tmp_path / "model.pt"
    shutil.copy(tiny_encoder, checkpoint)
    (tmp_path / "alias.pt").symlink_to(checkpoint)
    before = digest(checkpoint)
    with pytest.raises(
        InputError, match=rf"^{checkpoint}: is the input {checkpoint}; --out must name another file"
    ):
        extract_encoder(checkpoint, checkpoint, overwrite=True)
    with pytest.raises(
        InputError, match=r"alias.pt: is the input .*model.pt \(through a link\); --out must"
    ):
        init_student(checkpoint, tmp_path / "alias.pt", overwrite=True)
    assert digest(checkpoint) == before


def test_encode_never_writes_over_its_corpus(learned_vocab, tmp_path):
    corpus = tmp_path / "train.txt"
    corpus.write_text(
        "Familial adenomatous polyposis is a colon cancer syndrome .\n", encoding="utf-8"
    )
    (tmp_path / "train.bpe").symlink_to(corpus)
    before = digest(corpus)
    for output, how in ((corpus, ""), (tmp_path / "train.bpe", " (through a link)")):
        result = run_cli(
            [
                "fairseq-bio-encode",
                "--vocab",
                learned_vocab("bytebpe"),
                corpus,
                "--out",
                output,
                "--no-progress",
            ],
            cwd=tmp_path,
            check=False,
        )
        assert one_line(result) == (
            f"fairseq-bio-encode: {output}: is the input {corpus}{how}; --out must name "
            "another file"
        )
    assert digest(corpus) == before
    mine = tmp_path / "mine.bpe"
    mine.write_text("my own encoding\n", encoding="utf-8")
    command = [
        "fairseq-bio-encode",
        "--vocab",
        learned_vocab("bytebpe"),
        corpus,
        "--out",
        mine,
        "--no-progress",
    ]
    assert (
        one_line(run_cli(command, cwd=tmp_path, check=False))
        == f"fairseq-bio-encode: {mine}: already exists; pass --overwrite to replace it"
    )
    assert mine.read_text(encoding="utf-8") == "my own encoding\n"
    last = one_line(run_cli([*command, "--overwrite"], cwd=tmp_path, check=False))
    assert last.startswith(
        f"fairseq-bio-encode: {mine}: exists and was not made by fairseq-bio-encode; not replacing"
    )
    assert mine.read_text(encoding="utf-8") == "my own encoding\n"


# ------------------------------------------------------------------------------------------- format by content


def test_conll_named_txt_is_read_as_conll(ner_model, ncbi_slice, tmp_path):
    """A test file called test.txt holding token<TAB>tag lines is CoNLL (tags are not tagged as
    prose)."""
    checkpoint = ner_model[0] / "checkpoint_best.pt"
    as_txt = tmp_path / "test.txt"
    shutil.copy(ncbi_slice / "test.tsv", as_txt)
    before = digest(as_txt)
    done = predict(checkpoint, as_txt, tmp_path / "pred.txt", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "entity precision" in done.stdout and " F1 " in done.stdout
    same = predict(checkpoint, ncbi_slice / "test.tsv", tmp_path / "pred.tsv", cwd=tmp_path)
    assert (
        done.stdout.splitlines()[-1] == same.stdout.splitlines()[-1]
    )  # the F1 of the same file named .tsv
    assert (tmp_path / "pred.txt").read_bytes() == (tmp_path / "pred.tsv").read_bytes()
    assert digest(as_txt) == before


def test_half_conll_half_text_is_refused_naming_format(ner_model, tmp_path):
    checkpoint = ner_model[0] / "checkpoint_best.pt"
    mixed = tmp_path / "notes.txt"
    mixed.write_text(
        "Mild\tO\nanemia\tB-Disease\n\nThe patient had mild anemia .\n", encoding="utf-8"
    )
    before = digest(mixed)
    last = one_line(predict(checkpoint, mixed, tmp_path / "out.jsonl", cwd=tmp_path))
    assert last == (
        f"fairseq-bio-predict: {mixed}: line 1 reads as CoNLL (token<TAB>tag) but line 4 does not; pass "
        "--format conll (the bad lines are then named) or --format text"
    )
    assert digest(mixed) == before and not (tmp_path / "out.jsonl").exists()
    # told: --format conll names the bad line
    last = one_line(
        predict(checkpoint, mixed, tmp_path / "out.tsv", "--format", "conll", cwd=tmp_path)
    )
    assert last.startswith(f"fairseq-bio-predict: {mixed}:4: 6 column(s); expected token<TAB>tag")


def test_sniff_format_on_hand_made_files(tmp_path):
    from fairseq_bio.data.conll import TaggingDataError, sniff_format

    cases = {
        "a.txt": ("-DOCSTART-\tO\n\nBRCA1\tB-Gene\nis\tO\n", "conll"),
        "b.txt": ("BRCA1 B-Gene\nis O\n", "conll"),  # space-separated with BIO tags
        "c.txt": ("Hello world\nAll is well .\n", "text"),
        "d.tsv": ("BRCA1\nis\n\nmutated\n", "conll"),  # bare tokens, named as CoNLL
        "e.txt": (
            "Table 1\tResults of the trial\nNo tags here .\n",
            "text",
        ),  # a tab in prose is not a column
        "f.tsv": ("BRCA1\tB-Gene\nis mutated\n", "conll"),  # the reader then names line 2
    }
    for name, (text, expected) in cases.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        assert sniff_format(tmp_path / name) == expected, name
    (tmp_path / "g.txt").write_text("BRCA1\tB-Gene\nis mutated in cancer\n", encoding="utf-8")
    with pytest.raises(
        TaggingDataError, match=r"g.txt: line 1 reads as CoNLL .* line 2 does not; pass --format"
    ):
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
    assert last == (
        f"fairseq-bio-predict: {rows}:7: entity placeholders {found}; a relation's row holds @GENE$ "
        "and @DISEASE$ once each (task.entity_placeholders=any accepts other counts)"
    )
    assert digest(rows) == before and not (tmp_path / "out.jsonl").exists()


def test_json_errors_name_the_column(gad_model, tmp_path):
    checkpoint = gad_model[0] / "checkpoint_best.pt"
    rows = tmp_path / "rows.json"
    rows.write_text(
        '{"id": "1", "sentence": "@GENE$ in @DISEASE$ .", "label": "1"}\n'
        '{"id": "2", "sentence": "@GENE$ in @DISEASE$ .", "label": 1,}\n',
        encoding="utf-8",
    )
    last = one_line(predict(checkpoint, rows, tmp_path / "out.jsonl", cwd=tmp_path))
    assert (
        last
        == f"fairseq-bio-predict: {rows}:2:61: not valid JSON (Expecting property name enclosed in double quotes)"
    )


# ------------------------------------------------------------------------ errors inside fairseq's entry points


def _hydra_tagging(tmp_path, data, tiny_encoder, *extra, env=None):
    return runs.capture(
        runs.hydra_train(
            "bio_tagging_ner",
            f"task.data={data}",
            f"checkpoint.restore_file={tiny_encoder}",
            *FINE_TUNE,
            *extra,
            save_dir=tmp_path / "run",
        ),
        cwd=tmp_path,
        timeout=600,
        env={"OMP_NUM_THREADS": "1", **(env or {})},
    )


MISTYPED = {  # override: the line fairseq-hydra-train ends with
    "optimization.max_update=abc": "optimization.max_update=abc: Value 'abc' of type 'str' could "
    "not be converted to Integer",
    "model.encoder_layer=3": "model.encoder_layer=3: no such key in the config; did you mean "
    "model.encoder_layers or model.encoder_embed_dim? (+model.encoder_layer=3 adds it)",
    "optimization.lr=[abc": "optimization.lr=[abc: hydra cannot parse it (no viable alternative at "
    "input '[abc')",
    "precision=fp8": "precision=fp8: no such config (the options: bf16, fp16, fp32, "
    "memory_efficient_bf16, memory_efficient_fp16, recipe)",
}


@pytest.mark.parametrize("override", MISTYPED)
def test_hydra_train_names_a_mistyped_override_in_one_line(override, tmp_path):
    """hydra's own report of an override it cannot compose (a block ending in "Set the environment
    variable HYDRA_FULL_ERROR=1") becomes one line naming the override, through the plugin's hydra
    plugin (plugins/hydra_plugins); FAIRSEQ_BIO_TRACEBACK=1 gives hydra's block back."""
    argv = runs.hydra_train("bio_roberta_tiny", f"task.data={tmp_path}", override)
    failed = runs.capture(argv, cwd=tmp_path, timeout=120)
    assert one_line(failed) == MISTYPED[override]
    assert "HYDRA_FULL_ERROR" not in failed.stderr
    assert sum(override in line for line in failed.stderr.splitlines()) == 1  # hydra's block, again
    if override == next(iter(MISTYPED)):  # once: hydra's own report when asked for
        asked = runs.capture(argv, cwd=tmp_path, timeout=120, env={"FAIRSEQ_BIO_TRACEBACK": "1"})
        assert asked.returncode == 1 and MISTYPED[override] not in asked.stderr
        assert f"Error merging override {override}" in asked.stderr, asked.stderr[-3000:]


def test_other_hydra_programs_keep_hydra_s_report(tmp_path):
    """The hydra plugin acts in fairseq-hydra-train only: another hydra program in the same
    environment reports a mistyped value as hydra does."""
    (tmp_path / "app.py").write_text(
        "from dataclasses import dataclass\n"
        "import hydra\n"
        "from hydra.core.config_store import ConfigStore\n"
        "@dataclass\n"
        "class Config:\n"
        "    steps: int = 1\n"
        "ConfigStore.instance().store(name='app', node=Config)\n"
        "@hydra.main(config_name='app', version_base=None)\n"
        "def main(cfg):\n"
        "    print(cfg.steps)\n"
        "main()\n"
    )
    result = subprocess.run(
        [sys.executable, "app.py", "steps=abc"], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 1
    assert "Error merging override steps=abc" in result.stderr, result.stderr
    assert "HYDRA_FULL_ERROR" in result.stderr


def test_hydra_train_reports_a_ragged_conll_line_in_one_line(tiny_encoder, tmp_path):
    """The error adds exactly one line to what every fairseq-hydra-train start prints on stderr
    (hydra's and fairseq's start-up warnings, measured on a good run of the same command): the
    message, naming file:line.
    """
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
    baseline = _hydra_tagging(
        tmp_path,
        good,
        tiny_encoder,
        "optimization.max_update=1",
        "checkpoint.no_save=true",
        "dataset.disable_validation=true",
    )
    assert baseline.returncode == 0, baseline.stderr[-3000:]
    start_up = {line for line in baseline.stderr.splitlines() if line.strip()}
    added = [line for line in failed.stderr.splitlines() if line.strip() and line not in start_up]
    assert added == [message]  # no traceback, no "Error executing job", no HYDRA_FULL_ERROR hint
    assert digest(bad / "train.tsv") == before

    asked = _hydra_tagging(tmp_path, bad, tiny_encoder, env={"FAIRSEQ_BIO_TRACEBACK": "1"})
    assert asked.returncode != 0 and "Traceback (most recent call last)" in asked.stderr
    assert f"TaggingDataError: {message}" in asked.stderr


def test_uncaught_plugin_error_outside_hydra_is_one_line(tmp_path):
    """fairseq-train and the other argparse entry points: the plugin's excepthook prints a BioError
    alone; other errors keep their tracebacks."""
    script = (
        "import fairseq_bio\nfrom fairseq_bio.data.conll import read_conll\n"
        f"read_conll({str(tmp_path / 'missing.tsv')!r})\n"
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("FAIRSEQ_BIO_TRACEBACK", "HYDRA_FULL_ERROR")
    }
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert one_line(result) == f"{tmp_path / 'missing.tsv'}: not found"
    env["FAIRSEQ_BIO_TRACEBACK"] = "1"
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 1 and "Traceback (most recent call last)" in result.stderr
    other = subprocess.run(
        [sys.executable, "-c", "import fairseq_bio\nraise ValueError('not ours')"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert other.returncode == 1 and "Traceback (most recent call last)" in other.stderr


# ----------------------------------------------------------------------------------- benchmarks read their data


def test_benchmark_slicing_never_writes_into_its_input(tmp_path):
    """benchmarks/harness.py's ner_data (tagging.py's, hf_parity.py's, distillation.py's) on a
    read-only copy of a dataset given by absolute path: the slice is a new directory elsewhere; the
    dataset is unchanged.
    """
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from harness import ner_data
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
    """A plugin error raised inside a preprocess/HF command (all run through
    fairseq_bio.cli.options.run_cli) ends it as ``<prog>: <message>``; other errors keep their
    tracebacks, and FAIRSEQ_BIO_TRACEBACK=1 shows it.
    """
    from fairseq_bio.data.conll import TaggingDataError
    from fairseq_bio.cli.options import run_cli as script_run_cli

    def bad(argv):
        raise TaggingDataError("data/train.tsv:5: 3 column(s); expected token<TAB>tag")

    monkeypatch.delenv("FAIRSEQ_BIO_TRACEBACK", raising=False)
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    with pytest.raises(SystemExit) as ended:
        script_run_cli("fairseq-bio-export-hf", bad)
    assert (
        ended.value.code
        == "fairseq-bio-export-hf: data/train.tsv:5: 3 column(s); expected token<TAB>tag"
    )
    with pytest.raises(ZeroDivisionError):
        script_run_cli("fairseq-bio-export-hf", lambda argv: 1 / 0)
    monkeypatch.setenv("FAIRSEQ_BIO_TRACEBACK", "1")
    with pytest.raises(TaggingDataError):
        script_run_cli("fairseq-bio-export-hf", bad)


# ------------------------------------------------------------------ outputs: only what the command made is replaced


def _extract(pubmed_sample, out, *extra, cwd):
    return run_cli(
        [
            "fairseq-bio-extract",
            pubmed_sample / "pubmed20n0014.xml.gz",
            "--out",
            out,
            "--max-docs-per-file",
            "60",
            "--no-progress",
            *extra,
        ],
        cwd=cwd,
        check=False,
    )


def _dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(done.stdout)


def test_extract_refuses_a_corpus_it_did_not_make_and_keeps_what_it_did_not_write(
    pubmed_sample, tmp_path
):
    import socket

    corpus = tmp_path / "corp"
    assert _extract(pubmed_sample, corpus, cwd=tmp_path).returncode == 0
    before = {p.name: digest(p) for p in corpus.iterdir()}
    assert {"train.txt", "valid.txt", "extract_stats.json"} <= set(before)
    last = one_line(_extract(pubmed_sample, corpus, cwd=tmp_path))
    assert last == f"fairseq-bio-extract: {corpus}: already exists; pass --overwrite to replace it"
    assert {p.name: digest(p) for p in corpus.iterdir()} == before

    # a folder holding a corpus extract did not make: refused, --overwrite or not, left
    # byte-identical
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "train.txt").write_text("my corpus\n", encoding="utf-8")
    last = one_line(_extract(pubmed_sample, theirs, cwd=tmp_path))
    assert last == f"fairseq-bio-extract: {theirs}: already exists; pass --overwrite to replace it"
    last = one_line(_extract(pubmed_sample, theirs, "--overwrite", cwd=tmp_path))
    assert last.startswith(
        f"fairseq-bio-extract: {theirs}: has no record that fairseq-bio-extract made it"
    ), last
    assert "not made by this tool; not replacing it" in last
    assert [p.name for p in theirs.iterdir()] == ["train.txt"]
    assert (theirs / "train.txt").read_text(encoding="utf-8") == "my corpus\n"
    # an existing file as --out: one line
    last = one_line(_extract(pubmed_sample, theirs / "train.txt", cwd=tmp_path))
    assert last == (
        f"fairseq-bio-extract: {theirs / 'train.txt'}: exists and is not a directory; name a directory "
        "to create"
    )

    # --overwrite replaces extract's own corpus, keeps the user's notes, and removes what a killed
    # run left
    (corpus / "notes.md").write_text("my notes\n", encoding="utf-8")
    host = socket.gethostname()
    stale, live = (
        tmp_path / f".corp.tmp-{host}-{_dead_pid()}.x1",
        tmp_path / f".corp.tmp-{host}-{os.getpid()}.x2",
    )
    for leftover in (stale, live):
        leftover.mkdir()
        (leftover / "shard0000000-000.txt").write_text("half a shard\n", encoding="utf-8")
    again = _extract(pubmed_sample, corpus, "--overwrite", "--min-words", "5", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (corpus / "notes.md").read_text(encoding="utf-8") == "my notes\n"
    assert json.loads((corpus / "extract_stats.json").read_text())["min_words"] == 5
    assert not stale.exists() and live.exists()  # a live process's temp directory is not touched
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".corp")) == [live.name]

    # a failed extract (no input files) leaves no --out behind
    empty = tmp_path / "no-xml"
    empty.mkdir()
    last = one_line(
        run_cli(
            ["fairseq-bio-extract", empty, "--out", tmp_path / "new"], cwd=tmp_path, check=False
        )
    )
    assert (
        last.startswith("fairseq-bio-extract: no input files found")
        and not (tmp_path / "new").exists()
    )


def test_export_hf_overwrite_never_deletes_a_folder_it_did_not_make(tiny_encoder, tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "config.json").write_text('{"model_type": "bert"}\n', encoding="utf-8")
    (foreign / "notes.md").write_text("my notes\n", encoding="utf-8")
    export = ["fairseq-bio-export-hf", "--checkpoint", tiny_encoder, "--out"]
    last = one_line(run_cli([*export, foreign, "--overwrite"], cwd=tmp_path, check=False))
    assert (
        last.startswith(f"fairseq-bio-export-hf: {foreign}: has no record")
        and "not replacing it" in last
    )
    assert sorted(p.name for p in foreign.iterdir()) == ["config.json", "notes.md"]

    ours = tmp_path / "hf"
    assert run_cli([*export, ours], cwd=tmp_path, check=False).returncode == 0
    (ours / "notes.md").write_text("my notes\n", encoding="utf-8")
    again = run_cli([*export, ours, "--overwrite"], cwd=tmp_path, check=False)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (ours / "notes.md").read_text(encoding="utf-8") == "my notes\n"
    assert (ours / "model.safetensors").is_file() and (ours / "config.json").is_file()


def test_every_writing_command_refuses_an_output_it_did_not_make(
    learned_vocab, pubmed_corpus, tmp_path
):
    """encode, vocab, binarize and vocab-report: --overwrite replaces only their own earlier
    output."""
    vocab = learned_vocab("bytebpe")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    user_file = theirs / "train.bpe"
    user_file.write_text("my own file\n", encoding="utf-8")
    (theirs / "bpe.json").write_text("{}\n", encoding="utf-8")
    (theirs / "vocab_report.md").write_text("my report\n", encoding="utf-8")
    before = {p.name: digest(p) for p in theirs.iterdir()}
    corpus = pubmed_corpus / "valid.txt"
    cases = [
        (
            ["fairseq-bio-encode", "--vocab", vocab, corpus, "--out", user_file, "--no-progress"],
            f"fairseq-bio-encode: {user_file}: exists and was not made by fairseq-bio-encode",
        ),
        (
            ["fairseq-bio-vocab", "--input", corpus, "--out", theirs, "--vocab-size", "300"],
            f"fairseq-bio-vocab: {theirs}: has no record that fairseq-bio-vocab made it",
        ),
        (
            [
                "fairseq-bio-binarize",
                "--vocab",
                vocab,
                "--train",
                corpus,
                "--valid",
                corpus,
                "--out",
                theirs,
            ],
            f"fairseq-bio-binarize: {theirs}: has no record that fairseq-bio-binarize made it",
        ),
        (
            [
                "fairseq-bio-vocab-report",
                "--vocab",
                vocab,
                "--data",
                NCBI,
                "--out",
                theirs,
                "--no-plot",
            ],
            f"fairseq-bio-vocab-report: {theirs / 'vocab_report.md'}: exists and was not made by "
            "fairseq-bio-vocab-report",
        ),
    ]
    for command, message in cases:
        last = one_line(run_cli([*command, "--overwrite"], cwd=tmp_path, check=False))
        assert last.startswith(message), last
    assert {p.name: digest(p) for p in theirs.iterdir()} == before
    # their own earlier output is replaced
    encoded = tmp_path / "valid.bpe"
    command = ["fairseq-bio-encode", "--vocab", vocab, corpus, "--out", encoded, "--no-progress"]
    assert run_cli(command, cwd=tmp_path).returncode == 0
    assert run_cli([*command, "--overwrite"], cwd=tmp_path).returncode == 0
    # the vocabulary it reads is never an output
    last = one_line(
        run_cli(
            [*command[:6], vocab / "dict.txt", "--no-progress", "--overwrite"],
            cwd=tmp_path,
            check=False,
        )
    )
    assert last.startswith(
        f"fairseq-bio-encode: {vocab / 'dict.txt'}: is the input {vocab / 'dict.txt'}"
    )


def test_a_killed_write_leaves_nothing_the_next_one_keeps(learned_vocab, pubmed_corpus, tmp_path):
    """What a SIGKILLed encode leaves (its temp file beside the output) the next write there
    removes."""
    import socket

    out = tmp_path / "valid.bpe"
    stale = tmp_path / f".valid.bpe.{socket.gethostname()}-{_dead_pid()}.abc.tmp.bpe"
    stale.write_text("half an encoding\n", encoding="utf-8")
    command = [
        "fairseq-bio-encode",
        "--vocab",
        learned_vocab("bytebpe"),
        pubmed_corpus / "valid.txt",
        "--out",
        out,
        "--no-progress",
    ]
    assert run_cli(command, cwd=tmp_path).returncode == 0
    assert not stale.exists() and out.is_file()


# ------------------------------------------------------------------------------ explicit beats a silent default


def test_pretraining_from_a_named_checkpoint_that_does_not_exist_is_refused(data_bin, tmp_path):
    missing = tmp_path / "general" / "checkpoint_best.pt"
    result = runs.capture(
        runs.hydra_train(
            "bio_roberta_tiny",
            f"task.data={data_bin('bytebpe')}",
            *TINY,
            "optimization.max_update=2",
            f"checkpoint.restore_file={missing}",
            save_dir=tmp_path / "run",
        ),
        cwd=tmp_path,
        timeout=600,
        env={"OMP_NUM_THREADS": "1"},
    )
    assert one_line(result) == (
        f"checkpoint.restore_file={missing}: no such checkpoint (fairseq would start from "
        "random initialisation; leave restore_file unset to start from scratch)"
    )
    assert not list((tmp_path / "run").glob("checkpoint*.pt"))


def test_binarising_text_that_was_never_encoded_is_refused(learned_vocab, pubmed_corpus, tmp_path):
    vocab = learned_vocab("bytebpe")
    raw = pubmed_corpus / "valid.txt"
    result = run_cli(
        [
            "fairseq-bio-binarize",
            "--vocab",
            vocab,
            "--train",
            raw,
            "--valid",
            raw,
            "--out",
            tmp_path / "bin",
        ],
        cwd=tmp_path,
        check=False,
    )
    last = one_line(result)
    assert (
        last.startswith(f"fairseq-bio-binarize: {raw}: ")
        and "% of its " in last
        and "never encoded?" in last
    ), last
    assert f"fairseq-bio-encode --vocab {vocab} {raw} --out" in last
    rate = float(last.split(": ")[2].split("%")[0])
    assert rate > 50  # plain text read against a byte-level BPE dictionary
    assert not (tmp_path / "bin").exists()
    accepted = run_cli(
        [
            "fairseq-bio-binarize",
            "--vocab",
            vocab,
            "--train",
            raw,
            "--valid",
            raw,
            "--out",
            tmp_path / "bin",
            "--max-unknown",
            "1",
        ],
        cwd=tmp_path,
        check=False,
    )
    assert accepted.returncode == 0 and "fairseq-bio-binarize: warning:" in accepted.stderr


def test_impossible_vocabulary_sizes_are_refused_and_unreachable_ones_warned(
    pubmed_corpus, tmp_path
):
    train = pubmed_corpus / "valid.txt"
    for kind, size, least in (("bytebpe", "0", 256), ("bytebpe", "-5", 256), ("wordpiece", "3", 6)):
        last = one_line(
            run_cli(
                [
                    "fairseq-bio-vocab",
                    "--input",
                    train,
                    "--out",
                    tmp_path / "v",
                    "--kind",
                    kind,
                    "--vocab-size",
                    size,
                ],
                cwd=tmp_path,
                check=False,
            )
        )
        assert last.startswith(
            f"fairseq-bio-vocab: --vocab-size {size}: impossible for {kind} (at least {least}"
        ), last
        assert not (tmp_path / "v").exists()
    done = run_cli(
        ["fairseq-bio-vocab", "--input", train, "--out", tmp_path / "v", "--vocab-size", "500000"],
        cwd=tmp_path,
    )
    info = json.loads((tmp_path / "v" / "vocab_info.json").read_text())
    assert info["vocab_size_reached"] < 500000
    assert (
        f"fairseq-bio-vocab: warning: --vocab-size 500000: {train} supports only "
        f"{info['vocab_size_reached']} bytebpe entries"
    ) in done.stderr


# ----------------------------------------------------------------------------- byte-order marks and columns


def test_byte_order_marks_are_not_read_as_text(learned_vocab, tmp_path):
    from fairseq_bio.data.conll import read_conll, sniff_format
    from fairseq_bio.data.sentence_files import read_tsv

    bom = "\ufeff"
    conll = tmp_path / "train.txt"
    conll.write_text(f"{bom}Familial\tO\nadenomatous\tB-Disease\n", encoding="utf-8")
    assert sniff_format(conll) == "conll"
    assert read_conll(conll)[0].words == ["Familial", "adenomatous"]
    rows = tmp_path / "rows.tsv"
    rows.write_text(f"{bom}index\tsentence\tlabel\n1\t@GENE$ in @DISEASE$ .\t1\n", encoding="utf-8")
    assert [list(e.texts) for e in read_tsv(str(rows), ["sentence"], "label")] == [
        ["@GENE$ in @DISEASE$ ."]
    ]
    text = tmp_path / "notes.txt"
    text.write_text(f"{bom}Familial adenomatous polyposis .\n", encoding="utf-8")
    plain = tmp_path / "plain.txt"
    plain.write_text("Familial adenomatous polyposis .\n", encoding="utf-8")
    command = [
        "fairseq-bio-encode",
        "--vocab",
        learned_vocab("bytebpe"),
        text,
        plain,
        "--out",
        tmp_path / "a.bpe",
        tmp_path / "b.bpe",
        "--no-progress",
    ]
    run_cli(command, cwd=tmp_path)
    assert (tmp_path / "a.bpe").read_bytes() == (tmp_path / "b.bpe").read_bytes()


def test_predict_output_given_back_is_conll_not_prose(ner_model, tmp_path):
    """predict's own output (token, gold, prediction) named .txt: read as CoNLL, refused naming the
    line and what to keep, never tagged as prose."""
    checkpoint = ner_model[0] / "checkpoint_best.pt"
    first = predict(
        checkpoint, ncbi_sentences(tmp_path / "test.tsv", 5), tmp_path / "pred.txt", cwd=tmp_path
    )
    assert first.returncode == 0
    last = one_line(
        predict(checkpoint, tmp_path / "pred.txt", tmp_path / "again.jsonl", cwd=tmp_path)
    )
    assert last.startswith(
        f"fairseq-bio-predict: {tmp_path / 'pred.txt'}:1: 3 columns; expected token<TAB>tag"
    )
    assert "cut -f1,2" in last and not (tmp_path / "again.jsonl").exists()


# ------------------------------------------------------------------------------------- a full disk: one line


def _on_small_disk(tmp_path, size: str, script: str):
    """``script`` (sh) with ``tmp_path/disk`` a tmpfs of ``size`` in a private mount namespace
    (nothing mounted outside the test's process); skipped where user namespaces are unavailable."""
    if (
        shutil.which("unshare") is None
        or subprocess.run(["unshare", "-rm", "true"]).returncode != 0
    ):
        pytest.skip("no user namespaces here (unshare -rm) to mount a small disk")
    disk = tmp_path / "disk"
    disk.mkdir(exist_ok=True)
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size={size} tmpfs {disk} && {script}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def test_a_full_disk_is_one_line_naming_the_output(pubmed_sample, data_bin, tmp_path):
    out = tmp_path / "disk" / "corp"
    result = _on_small_disk(
        tmp_path,
        "64k",
        f"{BIN / 'fairseq-bio-extract'} "
        f"{pubmed_sample / 'pubmed20n0014.xml.gz'} --out {out} --max-docs-per-file 400 "
        f"--no-progress; rc=$?; ls -A {tmp_path / 'disk'}; exit $rc",
    )
    assert one_line(result) == (
        f"fairseq-bio-extract: {out}: no space left on the device (nothing was written "
        "under that name)"
    )
    assert result.stdout.strip() == ""  # no half-written corpus, no temp directory

    save = tmp_path / "disk" / "run"
    train = shlex.join(
        runs.hydra_train(
            "bio_roberta_tiny",
            f"task.data={data_bin('bytebpe')}",
            *TINY,
            "optimization.max_update=2",
            "common.tensorboard_logdir=null",
            save_dir=save,
        )
    )
    result = _on_small_disk(
        tmp_path, "300k", f"{train}; rc=$?; echo LISTING; ls -A {save}; exit $rc"
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "RuntimeError" not in result.stderr, result.stderr[
        -3000:
    ]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{save}/checkpoint") and last.endswith(
        ".pt: no space left on the device (nothing was " "written under that name)"
    ), last
    left = result.stdout.split("LISTING")[-1].split()
    assert left and not [
        name for name in left if name.endswith((".pt", ".tmp"))
    ], left  # no partial checkpoint


# ---------------------------------------------------------------------------------------- hints that apply


def test_hints_fit_the_command(ner_model, tmp_path):
    from fairseq_bio.data.sentence_files import read_jsonl
    from fairseq_bio.errors import BioError

    checkpoint = ner_model[0] / "checkpoint_best.pt"
    unseen = ncbi_sentences(tmp_path / "test.tsv", 5)
    text = unseen.read_text(encoding="utf-8")
    unseen.write_text(text.replace("B-Disease", "B-Chemical", 1), encoding="utf-8")
    last = one_line(predict(checkpoint, unseen, tmp_path / "out.tsv", cwd=tmp_path))
    assert "type 'Chemical' never occurs in the train file" in last
    assert (
        "task.unknown_tags" not in last and "make them O in the file" in last
    )  # not a training option

    rows = tmp_path / "rows.json"
    row = {"id": "1", "sentence": "@GENE$ in @DISEASE$ .", "label": "1"}
    for text in (json.dumps([row, row], indent=1), json.dumps([row, row])):  # over lines, or on one
        rows.write_text(text + "\n", encoding="utf-8")
        with pytest.raises(
            BioError, match=r"rows.json: valid JSON, but an array of 2 items, where JSON lines are"
        ):
            read_jsonl(str(rows), ["sentence"], "label")


def test_a_damaged_vocabulary_beside_a_checkpoint_is_one_line(ner_model, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(ner_model[0], run)
    lines = (run / "dict.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    lines[2] = lines[2].split(" ")[0] + " many\n"  # a count that is not a number
    (run / "dict.txt").write_text("".join(lines), encoding="utf-8")
    last = one_line(
        predict(
            run / "checkpoint_best.pt",
            ncbi_sentences(tmp_path / "t.tsv", 3),
            tmp_path / "o.tsv",
            cwd=tmp_path,
        )
    )
    assert (
        last.startswith(f"fairseq-bio-predict: {run / 'dict.txt'}:3: ")
        and "is not '<token> <count>'" in last
    )


def test_a_split_left_empty_is_one_line(tmp_path):
    """Files our readers accept but that leave nothing to train on or score: one line, before
    fairseq batches nothing."""
    from fairseq_bio.data.sentence_files import SentenceDataError, read_tsv

    header_only = tmp_path / "train.tsv"
    header_only.write_text("index\tsentence\tlabel\n", encoding="utf-8")
    with pytest.raises(SentenceDataError, match=r"train.tsv: a header and no rows$"):
        read_tsv(str(header_only), ["sentence"], "label")

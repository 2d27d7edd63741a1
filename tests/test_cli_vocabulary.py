"""Every console script speaks one vocabulary (STYLE habit 15, ``fairseq_bio.cli.options``): ``--out`` for what it
writes, ``--checkpoint`` for the model it reads, ``--data`` for task data only, ``--overwrite``, ``--no-progress``,
errors as ``<full script name>: <message>``; an old spelling still works and warns in one line.

Each script runs in this process through its setup.py entry point (``sys.argv`` set, ``--help`` or a user error
that stops it before any work), so the whole file takes seconds."""

import ast
import importlib
import sys
from pathlib import Path

import pytest
from conftest import REPO
from test_installed_package import entry_points

SCRIPTS = entry_points()
READS_MODEL = {"predict", "import-hf", "export-hf", "extract-encoder", "init-student", "blurb"}
TASK_DATA = {"demo", "vocab-report", "blurb"}  # the scripts whose --data is task data (no other has one)
PROGRESS = {"extract", "encode", "predict", "demo"}
WRITES_NOTHING = {"config-dir"}
# fairseq-bio-blurb reuses the finished runs in --out and has no --overwrite (redoing them is not implemented)
NO_OVERWRITE = WRITES_NOTHING | {"blurb"}
SUBCOMMANDS = {"convert-tagging": ("ebm-nlp", "pubtator", "brat", "i2b2-2014")}  # each has its own --out


def short(script: str) -> str:
    return script[len("fairseq-bio-") :]


def run_script(script, argv, monkeypatch, capsys):
    """``script`` run in-process through its entry point: (exit code or None, stdout, stderr)."""
    module, function = SCRIPTS[script].split(":")
    monkeypatch.setattr(sys, "argv", [script, *map(str, argv)])
    code = None
    try:
        getattr(importlib.import_module(module), function)()
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def helps(script, monkeypatch, capsys) -> str:
    texts = []
    for argv in [["--help"]] + [[sub, "--help"] for sub in SUBCOMMANDS.get(short(script), ())]:
        code, out, err = run_script(script, argv, monkeypatch, capsys)
        assert code == 0 and out.startswith(f"usage: {script} "), (script, argv, out[:200], err[-500:])
        texts.append(out)
    return "\n".join(texts)


def options(help_text: str) -> set:
    """The options --help lists (the first word of each entry in its options sections)."""
    return {line.split()[0].rstrip(",") for line in help_text.splitlines() if line.startswith("  --")}


def test_every_script_is_covered():
    names = {short(s) for s in SCRIPTS}
    assert len(names) >= 14 and set(ERRORS) == names  # a new console script needs its row here
    assert READS_MODEL | TASK_DATA | PROGRESS | NO_OVERWRITE | set(SUBCOMMANDS) <= names


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_help_speaks_the_vocabulary(script, monkeypatch, capsys):
    name = short(script)
    listed = options(helps(script, monkeypatch, capsys))
    assert ("--out" in listed) == (name not in WRITES_NOTHING), listed
    assert ("--overwrite" in listed) == (name not in NO_OVERWRITE), listed
    assert ("--checkpoint" in listed) == (name in READS_MODEL), listed
    assert ("--no-progress" in listed) == (name in PROGRESS), listed
    assert ("--data" in listed) == (name in TASK_DATA), listed
    old = {"--outputs", "--output", "--destdir", "--workdir", "--teacher", "--quiet"}
    assert not listed & old  # old spellings work but are not offered


# One user error each, found before any work: (argv, what the message names).
ERRORS = {
    "extract": lambda t: ([t / "nothing", "--out", t / "o"], "nothing"),
    "vocab": lambda t: (["--train", t / "nothing.txt", "--out", t / "v"], "nothing.txt"),
    "encode": lambda t: (["--vocab", t, "--inputs", t / "nothing.txt", "--out", t / "o.bpe"], "nothing.txt"),
    "binarize": lambda t: (["--vocab", t, "--train", t / "a", "--valid", t / "b", "--out", t / "bin"], "dict.txt"),
    "demo": lambda t: (["--out", t / "file"], "file: exists and is not a directory"),
    "predict": lambda t: (["--checkpoint", t / "none.pt", "--input", t / "nothing", "--out", t / "p"], "nothing"),
    "convert-tagging": lambda t: (["pubtator", "--train", t / "nothing", "--out", t / "c"], "nothing"),
    "import-hf": lambda t: (["--checkpoint", t / "nothing", "--out", t / "o"], "nothing"),
    "export-hf": lambda t: (["--checkpoint", t / "none.pt", "--out", t / "o"], "none.pt"),
    "extract-encoder": lambda t: (["--checkpoint", t / "none.pt", "--out", t / "o.pt"], "none.pt"),
    "init-student": lambda t: (["--checkpoint", t / "none.pt", "--out", t / "o.pt"], "none.pt"),
    "vocab-report": lambda t: (["--vocab", t, "--data", t / "nothing", "--out", t / "o"], "neither bpe.json"),
    "blurb": lambda t: (["--checkpoint", t / "none.pt", "--data", t, "--out", t / "runs"], "none.pt"),
    "config-dir": lambda t: ([], "no hydra_configs/"),
}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_errors_name_the_script_in_full(script, tmp_path, monkeypatch, capsys):
    (tmp_path / "file").write_text("a file\n", encoding="utf-8")
    if script == "fairseq-bio-config-dir":
        monkeypatch.setattr("fairseq_bio.runs.PLUGIN_DIR", tmp_path)
    argv, named = ERRORS[short(script)](tmp_path)
    code, _, err = run_script(script, argv, monkeypatch, capsys)
    assert isinstance(code, str) and code.startswith(f"{script}: ") and named in code, (code, err[-1000:])
    assert "\n" not in code and "deprecated" not in err


# An old spelling: (script, argv, the deprecation lines, what the error names: the value reached the command).
ALIASES = [
    ("predict", ["--checkpoint", "{t}/none.pt", "--input", "{t}/file", "--output", "{t}/file", "--quiet"],
     ["--output is deprecated; use --out", "--quiet is deprecated; use --no-progress"], "is the input"),
    ("encode", ["--vocab", "{t}", "--inputs", "{t}/file", "--outputs", "{t}/file"],
     ["--outputs is deprecated; use --out"], "--out must name another file"),
    ("binarize", ["--vocab", "{t}/vocab", "--train", "{t}/file", "--valid", "{t}/file", "--destdir", "{t}/taken"],
     ["--destdir is deprecated; use --out"], "taken: already exists"),
    ("demo", ["--workdir", "{t}/file"], ["--workdir is deprecated; use --out"], "file: exists and is not a directory"),
    ("init-student", ["--teacher", "{t}/none.pt", "--out", "{t}/s.pt"],
     ["--teacher is deprecated; use --checkpoint"], "none.pt"),
    ("export-hf", ["{t}/none.pt", "{t}/hf", "--data", "{t}"],
     ["the positional checkpoint is deprecated; use --checkpoint", "the positional out_dir is deprecated; use --out",
      "--data is deprecated; use --vocab"], "none.pt"),
    ("import-hf", ["{t}/nothing", "{t}/o"], ["the positional hf_model_dir is deprecated; use --checkpoint",
                                             "the positional out_dir is deprecated; use --out"], "nothing"),
    ("extract-encoder", ["{t}/none.pt", "{t}/o.pt"], ["the positional checkpoint is deprecated; use --checkpoint",
                                                      "the positional out is deprecated; use --out"], "none.pt"),
]  # fmt: skip


@pytest.mark.parametrize("name, argv, warnings, named", ALIASES, ids=[a[0] for a in ALIASES])
def test_old_spellings_work_and_warn_in_one_line(name, argv, warnings, named, tmp_path, monkeypatch, capsys):
    (tmp_path / "file").write_text("a file\n", encoding="utf-8")
    (tmp_path / "vocab").mkdir()
    for vocab_file in ("dict.txt", "bpe.json"):
        (tmp_path / "vocab" / vocab_file).write_text("{}\n", encoding="utf-8")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.md").write_text("mine\n", encoding="utf-8")
    script = f"fairseq-bio-{name}"
    code, _, err = run_script(script, [a.format(t=tmp_path) for a in argv], monkeypatch, capsys)
    assert [line for line in err.splitlines() if "deprecated" in line] == [f"{script}: {w}" for w in warnings]
    assert isinstance(code, str) and code.startswith(f"{script}: ") and named in code, (code, err[-1000:])


def test_export_hf_data_is_the_vocabulary_under_its_own_name(monkeypatch, capsys):
    from fairseq_bio.cli.export_hf import build_parser

    args = build_parser().parse_args(["--checkpoint", "m.pt", "--out", "hf", "--data", "vocab"])
    assert args.vocab == "vocab" and not hasattr(args, "data")
    assert capsys.readouterr().err == "fairseq-bio-export-hf: --data is deprecated; use --vocab\n"


def test_the_fetch_module_names_itself_as_it_is_run(capsys):
    from fairseq_bio_preprocess.fetch import build_parser

    assert build_parser().format_usage().startswith("usage: python -m fairseq_bio_preprocess.fetch ")


# ----------------------------------------------------------------------------------------- the parser itself


def parser():
    from fairseq_bio.cli.options import Parser, add_checkpoint, add_no_progress, add_out, add_overwrite

    p = Parser(prog="fairseq-bio-x")
    add_checkpoint(p, "the model", positional="checkpoint")
    add_out(p, "what it writes", old=("--outputs",), positional="out_dir")
    add_overwrite(p, "its output")
    add_no_progress(p, old=("--quiet",))
    return p


def test_parser_folds_old_spellings_into_the_new_name(capsys):
    new = vars(parser().parse_args(["--checkpoint", "m.pt", "--out", "o"]))
    assert new == {"checkpoint": "m.pt", "out": "o", "overwrite": False, "no_progress": False}
    assert capsys.readouterr().err == ""
    for argv in (["m.pt", "o", "--quiet"], ["--checkpoint", "m.pt", "--outputs=o", "--quiet"], ["m.pt", "--out", "o",
                 "--no-progress"]):  # fmt: skip
        assert vars(parser().parse_args(argv)) == {**new, "no_progress": True}
    err = capsys.readouterr().err.splitlines()
    assert err[:3] == ["fairseq-bio-x: the positional checkpoint is deprecated; use --checkpoint",
                       "fairseq-bio-x: the positional out_dir is deprecated; use --out",
                       "fairseq-bio-x: --quiet is deprecated; use --no-progress"]  # fmt: skip
    assert len(err) == 6 and all(" is deprecated; use --" in line for line in err)


def test_parser_refuses_a_value_given_twice_and_names_what_is_missing(capsys):
    for argv, message in (
        (["--checkpoint", "m.pt", "n.pt", "--out", "o"], "--checkpoint given twice (--checkpoint and the positional "
                                                          "checkpoint); give it once"),
        (["--checkpoint", "m.pt", "--out", "o", "--outputs", "p"], "--out given twice (--out and --outputs)"),
        ([], "the following arguments are required: --checkpoint, --out"),
        (["m.pt"], "the following arguments are required: --out"),
    ):  # fmt: skip
        with pytest.raises(SystemExit) as exit_info:
            parser().parse_args(argv)
        assert exit_info.value.code == 2 and f"fairseq-bio-x: error: {message}" in capsys.readouterr().err


def test_parser_help_shows_the_new_names_only():
    text = parser().format_help()
    assert text.startswith("usage: fairseq-bio-x [-h] --checkpoint CHECKPOINT --out OUT [--overwrite]")
    assert "--outputs" not in text and "--quiet" not in text and "out_dir" not in text
    assert "replace its output an earlier fairseq-bio-x wrote" in text


def test_run_cli_is_the_one_handler(monkeypatch):
    from fairseq_bio.cli.options import run_cli
    from fairseq_bio.errors import BioError

    monkeypatch.delenv("FAIRSEQ_BIO_TRACEBACK", raising=False)
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)

    def fails(argv):
        raise BioError("data/x.tsv:3: bad")

    with pytest.raises(SystemExit) as ended:
        run_cli("fairseq-bio-x", fails)
    assert ended.value.code == "fairseq-bio-x: data/x.tsv:3: bad"
    with pytest.raises(SystemExit) as ended:
        run_cli("fairseq-bio-x", lambda argv: 3)
    assert ended.value.code == 3
    assert run_cli("fairseq-bio-x", lambda argv: 0) is None and run_cli("fairseq-bio-x", lambda argv: None) is None

    def interrupted(argv):
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as ended:
        run_cli("fairseq-bio-x", interrupted, interrupted="interrupted (kept)")
    assert ended.value.code == "fairseq-bio-x: interrupted (kept)"


def test_options_module_needs_neither_torch_nor_fairseq():
    """Corpus commands answer --help without torch or fairseq: the vocabulary imports the standard library and
    fairseq_bio.errors only."""
    path = REPO / "fairseq_bio" / "cli" / "options.py"
    imported = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or ""))
    assert imported <= set(sys.stdlib_module_names) | {"..errors"}, imported


def test_every_user_error_class_is_a_bio_error():
    """The exception classes the plugin and the corpus code define are BioErrors (one handler prints them), except
    the ones named here with why."""
    from fairseq_bio.errors import BioError

    internal = {
        "fairseq_bio.runner.execute.RunFailed": "one run's failure, caught and recorded by the runner",
        "fairseq_bio.runs.RunError": "a fairseq run's failure, reported by the command that started it",
    }
    wrong = []
    for directory, package in (("fairseq_bio", "fairseq_bio"), ("preprocess", "fairseq_bio_preprocess")):
        for path in sorted((REPO / directory).rglob("*.py")):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(node, ast.ClassDef) and node.name.endswith(("Error", "Exception", "Failed")):
                    parts = path.relative_to(REPO / directory).with_suffix("").parts
                    module = ".".join((package, *parts))
                    cls = getattr(importlib.import_module(module), node.name)
                    if not issubclass(cls, BioError) and f"{module}.{node.name}" not in internal:
                        wrong.append(f"{module}.{node.name}")
    assert wrong == [], wrong

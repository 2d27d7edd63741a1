"""Every console script speaks one vocabulary (STYLE habit 15, ``fairseq_bio.cli.options``):
``--out`` for what it writes, ``--checkpoint`` for the model it reads, ``--data`` for task data
only, ``--overwrite``, ``--no-progress``, errors as ``<full script name>: <message>``; the old
spellings are gone.

What a script reads follows one rule: ``--input`` for a command that reads one input, positional
``INPUT...`` for one that reads many. A flag that names a role rather than "the input" is allowed
where ``ROLES`` says why.

Each script runs in this process through its setup.py entry point (``sys.argv`` set, ``--help`` or a
user error that stops it before any work), so the whole file takes seconds."""

import argparse
import ast
import importlib
import sys
from pathlib import Path

import pytest
from conftest import REPO
from helpers.console_scripts import entry_points

SCRIPTS = entry_points()
READS_MODEL = {"predict", "import-hf", "export-hf", "extract-encoder", "init-student", "blurb"}
TASK_DATA = {
    "demo",
    "vocab-report",
    "blurb",
}  # the scripts whose --data is task data (no other has one)
PROGRESS = {"extract", "encode", "predict", "demo"}
WRITES_NOTHING = {"config-dir"}
# fairseq-bio-blurb reuses the finished runs in --out and has no --overwrite (redoing them is not
# implemented)
NO_OVERWRITE = WRITES_NOTHING | {"blurb"}
SUBCOMMANDS = {
    "convert-tagging": ("ebm-nlp", "pubtator", "brat", "i2b2-2014")
}  # each has its own --out

# How each (sub)command takes what it reads: --input (one input) or positional INPUT... (many); the
# others read no "input" (a --checkpoint, --data, --vocab, or only inputs that ROLES names).
ONE_INPUT = {"vocab", "predict", "convert-tagging ebm-nlp"}
MANY_INPUTS = {"extract", "encode"} | {
    f"convert-tagging {name}"
    for name in (
        "pubtator",
        "brat",
        "linnaeus",
        "s800",
        "chemdner",
        "i2b2-2010",
        "i2b2-2012",
        "i2b2-2014",
    )
}
# Flags that name a role rather than "the input", with why they stay.
ROLES = {
    "binarize": (
        {"--train", "--valid"},
        "needs both splits; each flag says which split its text becomes",
    ),
    "convert-tagging": (
        {"--train", "--devel", "--test"},
        "each says the split its files go to (unsplit inputs are "
        "the positional INPUT..., split by --<split>-pmids or held out)",
    ),
}
NOT_INPUTS = {
    ("demo", "overrides")
}  # positional arguments that are not inputs: the demo's hydra overrides
SPLIT_FLAGS = {
    "--train",
    "--valid",
    "--dev",
    "--devel",
    "--test",
}  # spell an input by its split: a role, or wrong
OTHER_INPUT_FLAGS = {
    "--inputs",
    "--in",
    "--infile",
    "--input-file",
    "--input-files",
    "--files",
    "--source",
}


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
        assert code == 0 and out.startswith(f"usage: {script} "), (
            script,
            argv,
            out[:200],
            err[-500:],
        )
        texts.append(out)
    return "\n".join(texts)


def options(help_text: str) -> set:
    """The options --help lists (the first word of each entry in its options sections)."""
    return {
        line.split()[0].rstrip(",") for line in help_text.splitlines() if line.startswith("  --")
    }


def test_every_script_is_covered():
    names = {short(s) for s in SCRIPTS}
    assert len(names) >= 14 and set(ERRORS) == names  # a new console script needs its row here
    assert (
        READS_MODEL | TASK_DATA | PROGRESS | NO_OVERWRITE | set(SUBCOMMANDS) | set(ROLES) <= names
    )
    assert {name.split()[0] for name in ONE_INPUT | MANY_INPUTS} <= names


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
    assert not listed & old


# One user error each, found before any work: (argv, what the message names).
ERRORS = {
    "extract": lambda t: ([t / "nothing", "--out", t / "o"], "nothing"),
    "vocab": lambda t: (["--input", t / "nothing.txt", "--out", t / "v"], "nothing.txt"),
    "encode": lambda t: (["--vocab", t, t / "nothing.txt", "--out", t / "o.bpe"], "nothing.txt"),
    "binarize": lambda t: (
        ["--vocab", t, "--train", t / "a", "--valid", t / "b", "--out", t / "bin"],
        "dict.txt",
    ),
    "demo": lambda t: (["--out", t / "file"], "file: exists and is not a directory"),
    "predict": lambda t: (
        ["--checkpoint", t / "none.pt", "--input", t / "nothing", "--out", t / "p"],
        "nothing",
    ),
    "convert-tagging": lambda t: (
        ["pubtator", "--train", t / "nothing", "--out", t / "c"],
        "nothing",
    ),
    "import-hf": lambda t: (["--checkpoint", t / "nothing", "--out", t / "o"], "nothing"),
    "export-hf": lambda t: (["--checkpoint", t / "none.pt", "--out", t / "o"], "none.pt"),
    "extract-encoder": lambda t: (["--checkpoint", t / "none.pt", "--out", t / "o.pt"], "none.pt"),
    "init-student": lambda t: (["--checkpoint", t / "none.pt", "--out", t / "o.pt"], "none.pt"),
    "vocab-report": lambda t: (
        ["--vocab", t, "--data", t / "nothing", "--out", t / "o"],
        "neither bpe.json",
    ),
    "blurb": lambda t: (
        ["--checkpoint", t / "none.pt", "--data", t, "--out", t / "runs"],
        "none.pt",
    ),
    "config-dir": lambda t: ([], "no hydra_configs/"),
}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_errors_name_the_script_in_full(script, tmp_path, monkeypatch, capsys):
    (tmp_path / "file").write_text("a file\n", encoding="utf-8")
    if script == "fairseq-bio-config-dir":
        monkeypatch.setattr("fairseq_bio.runs.PLUGIN_DIR", tmp_path)
    argv, named = ERRORS[short(script)](tmp_path)
    code, _, err = run_script(script, argv, monkeypatch, capsys)
    assert isinstance(code, str) and code.startswith(f"{script}: ") and named in code, (
        code,
        err[-1000:],
    )
    assert "\n" not in code


# A removed spelling, the rest of the command line right: argparse refuses it before any work.
REMOVED = [
    (
        "predict",
        ["--checkpoint", "none.pt", "--input", "file", "--out", "p", "--output", "p"],
        "--output p",
    ),
    ("predict", ["--checkpoint", "none.pt", "--input", "file", "--out", "p", "--quiet"], "--quiet"),
    ("encode", ["--vocab", "v", "file", "--out", "o", "--outputs", "o"], "--outputs o"),
    ("encode", ["--vocab", "v", "--inputs", "file", "--out", "o"], "--inputs"),
    ("vocab", ["--input", "file", "--out", "v", "--train", "file"], "--train file"),
    (
        "binarize",
        ["--vocab", "v", "--train", "a", "--valid", "b", "--out", "o", "--destdir", "o"],
        "--destdir o",
    ),
    ("demo", ["--workdir=w"], "--workdir=w"),  # a bare value would be a hydra override
    (
        "init-student",
        ["--checkpoint", "t.pt", "--out", "s.pt", "--teacher", "t.pt"],
        "--teacher t.pt",
    ),
    ("export-hf", ["--checkpoint", "m.pt", "--out", "hf", "--data", "vocab"], "--data vocab"),
    ("export-hf", ["--checkpoint", "m.pt", "--out", "hf", "m.pt", "hf"], "m.pt hf"),
    ("import-hf", ["--checkpoint", "hf", "--out", "o", "hf", "o"], "hf o"),
    ("extract-encoder", ["--checkpoint", "e.pt", "--out", "o.pt", "e.pt", "o.pt"], "e.pt o.pt"),
    ("convert-tagging", ["ebm-nlp", "--input", "release", "--out", "o", "release"], "release"),
]


@pytest.mark.parametrize("name, argv, refused", REMOVED, ids=[f"{r[0]} {r[2]}" for r in REMOVED])
def test_removed_spellings_are_refused(name, argv, refused, monkeypatch, capsys):
    script = f"fairseq-bio-{name}"
    code, _, err = run_script(script, argv, monkeypatch, capsys)
    assert code == 2 and err.splitlines()[-1].endswith(
        f"error: unrecognized arguments: {refused}"
    ), (code, err)


def test_the_fetch_module_names_itself_as_it_is_run(capsys):
    from fairseq_bio_preprocess.fetch import build_parser

    assert (
        build_parser().format_usage().startswith("usage: python -m fairseq_bio_preprocess.fetch ")
    )


# ----------------------------------------------------------------------------------------- the parser itself


def parser():
    from fairseq_bio.cli.options import (
        Parser,
        add_checkpoint,
        add_no_progress,
        add_out,
        add_overwrite,
    )

    p = Parser(prog="fairseq-bio-x")
    add_checkpoint(p, "the model")
    add_out(p, "what it writes")
    add_overwrite(p, "its output")
    add_no_progress(p)
    p.add_argument("--lr", type=float, help="a number")
    return p


def test_parser_is_plain_argparse_with_the_vocabulary(capsys):
    args = vars(parser().parse_args(["--checkpoint", "m.pt", "--out", "o"]))
    assert args == {
        "checkpoint": "m.pt",
        "out": "o",
        "overwrite": False,
        "no_progress": False,
        "lr": None,
    }
    assert capsys.readouterr().err == ""
    for argv, message in (
        ([], "fairseq-bio-x: error: the following arguments are required: --checkpoint, --out"),
        (
            ["--checkpoint", "m.pt", "--out", "o", "--outputs", "p"],
            "fairseq-bio-x: error: unrecognized arguments: " "--outputs p",
        ),
    ):
        with pytest.raises(SystemExit) as exit_info:
            parser().parse_args(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_parser_names_a_bad_value_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parser().parse_args(["--checkpoint", "m.pt", "--out", "o", "--lr", "fast"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == "fairseq-bio-x: --lr: invalid float value: 'fast'\n"


def test_parser_help_shows_the_vocabulary():
    text = parser().format_help()
    assert text.startswith(
        "usage: fairseq-bio-x [-h] --checkpoint CHECKPOINT --out OUT [--overwrite]"
    )
    assert "replace its output an earlier fairseq-bio-x wrote" in text


# ----------------------------------------------------------------------------------------- the input rule


def build_parser_of(script: str) -> argparse.ArgumentParser:
    """The script's parser, from the module its entry point (``...commands:extract``) starts."""
    module, function = SCRIPTS[script].split(":")
    return importlib.import_module(
        getattr(importlib.import_module(module), function).module
    ).build_parser()


def parsers(name: str, parser: argparse.ArgumentParser):
    """``(name, parser)`` of a command and of each of its subcommands
    (``convert-tagging ebm-nlp``)."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, subparser in action.choices.items():
                yield from parsers(f"{name} {sub}", subparser)


def input_spelling(name: str, parser: argparse.ArgumentParser, roles=frozenset()):
    """How ``parser`` takes its input (``"--input"``, ``"INPUT..."`` or None) and how it breaks the
    rule: ``--input`` for one input, positional for many; no other flag for "the input" (a split's
    flag only as one of ``roles``).
    """
    spellings, breaks = set(), []
    for action in parser._actions:
        if isinstance(action, (argparse._SubParsersAction, argparse._HelpAction)):
            continue
        many = action.nargs in ("+", "*") or isinstance(
            action, (argparse._AppendAction, argparse._ExtendAction)
        )
        if not action.option_strings:
            if (name.split()[0], action.dest) in NOT_INPUTS:
                continue
            if not many:
                breaks.append(f"positional {action.dest}: a single input is --input")
            elif action.dest != "inputs":
                breaks.append(f"positional {action.dest}: the inputs are called inputs (INPUT...)")
            spellings.add("INPUT...")
            continue
        for option in action.option_strings:
            if option == "--input":
                spellings.add("--input")
                if many or action.nargs not in (None, "?"):
                    breaks.append("--input takes one input; many are positional INPUT...")
            elif option in OTHER_INPUT_FLAGS:
                breaks.append(f"{option}: one input is --input, many are positional INPUT...")
            elif option in SPLIT_FLAGS and option not in roles:
                breaks.append(
                    f"{option}: names the input by its split; --input, or a role listed in ROLES"
                )
    if len(spellings) > 1:
        breaks.append(f"both {' and '.join(sorted(spellings))}")
    return (spellings.pop() if len(spellings) == 1 else None), breaks


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_inputs_follow_the_rule(script):
    """``--input`` for a command that reads one input, positional ``INPUT...`` for one that reads
    many."""
    roles = ROLES.get(short(script), (set(),))[0]
    for name, parser in parsers(short(script), build_parser_of(script)):
        spelling, breaks = input_spelling(name, parser, roles)
        assert breaks == [], (name, breaks)
        expected = "--input" if name in ONE_INPUT else "INPUT..." if name in MANY_INPUTS else None
        assert spelling == expected, (name, spelling)


def test_the_input_rule_catches_each_other_spelling():
    from fairseq_bio.cli.options import Parser

    bad = Parser(prog="fairseq-bio-x")
    bad.add_argument("release")
    bad.add_argument("--inputs", nargs="+")
    bad.add_argument("--train")
    many = Parser(prog="fairseq-bio-y")
    many.add_argument("--input", nargs="+")
    many.add_argument("files", nargs="+")
    assert input_spelling("x", bad)[1] == [
        "positional release: a single input is --input",
        "--inputs: one input is --input, many are positional INPUT...",
        "--train: names the input by its split; --input, or a role listed in ROLES",
    ]
    assert input_spelling("x", bad, roles={"--train"})[1][2:] == []
    assert input_spelling("y", many)[1] == [
        "--input takes one input; many are positional INPUT...",
        "positional files: the inputs are called inputs (INPUT...)",
        "both --input and INPUT...",
    ]


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
    assert (
        run_cli("fairseq-bio-x", lambda argv: 0) is None
        and run_cli("fairseq-bio-x", lambda argv: None) is None
    )

    def interrupted(argv):
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as ended:
        run_cli("fairseq-bio-x", interrupted, interrupted="interrupted (kept)")
    assert ended.value.code == "fairseq-bio-x: interrupted (kept)"


def test_options_module_needs_neither_torch_nor_fairseq():
    """Corpus commands answer --help without torch or fairseq: the vocabulary imports the standard
    library and fairseq_bio.errors only."""
    path = REPO / "fairseq_bio" / "cli" / "options.py"
    imported = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or ""))
    assert imported <= set(sys.stdlib_module_names) | {"..errors"}, imported


def test_every_user_error_class_is_a_bio_error():
    """The exception classes the plugin and the corpus code define are BioErrors (one handler prints
    them), except the ones named here with why."""
    from fairseq_bio.errors import BioError

    internal = {
        "fairseq_bio.runner.execute.RunFailed": "one run's failure, caught and recorded by the runner",
        "fairseq_bio.runs.RunError": "a fairseq run's failure, reported by the command that started it",
    }
    wrong = []
    for directory, package in (
        ("fairseq_bio", "fairseq_bio"),
        ("preprocess", "fairseq_bio_preprocess"),
    ):
        for path in sorted((REPO / directory).rglob("*.py")):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(node, ast.ClassDef) and node.name.endswith(
                    ("Error", "Exception", "Failed")
                ):
                    parts = path.relative_to(REPO / directory).with_suffix("").parts
                    module = ".".join((package, *parts))
                    cls = getattr(importlib.import_module(module), node.name)
                    if not issubclass(cls, BioError) and f"{module}.{node.name}" not in internal:
                        wrong.append(f"{module}.{node.name}")
    assert wrong == [], wrong

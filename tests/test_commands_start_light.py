"""Every console script reads its command line before the plugin registers with fairseq
(``fairseq_bio_preprocess.commands``): ``--help`` and a bad option answer without torch or fairseq;
a command that needs the plugin has it registered when it runs; the corpus commands do their work
without either; and every other import of ``fairseq_bio`` registers at once."""

import json
import subprocess
import sys

import pytest
from conftest import REPO
from helpers.console_scripts import entry_points

from fairseq_bio_preprocess import commands

SCRIPTS = sorted(entry_points())

# Runs one command's console-script function with the given arguments and prints, at exit (also
# after a SystemExit), which of the heavy packages the process imported and whether fairseq knows
# the plugin's tasks.
PROBE = """
import atexit, json, sys
def report():
    registered = "fairseq.tasks" in sys.modules and "bio_masked_lm" in sys.modules["fairseq.tasks"].TASK_REGISTRY
    loaded = sorted(m for m in ("torch", "fairseq") if m in sys.modules)
    print("LOADED " + json.dumps({"loaded": loaded, "registered": registered}))
atexit.register(report)
name, args = sys.argv[1], sys.argv[2:]
sys.argv = ["fairseq-bio-" + name.replace("_", "-"), *args]
from fairseq_bio_preprocess import commands
getattr(commands, name)()
"""


def started(function: str, *args, cwd=None) -> dict:
    """{"loaded": the heavy packages imported, "registered": ..., "returncode", "stderr"} of one
    command's run."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE, function, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        timeout=300,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("LOADED ")]
    assert lines, out.stderr[-2000:]
    return {
        **json.loads(lines[-1][len("LOADED ") :]),
        "returncode": out.returncode,
        "stderr": out.stderr,
    }


def test_every_console_script_starts_in_commands():
    for script, target in entry_points().items():
        function = script[len("fairseq-bio-") :].replace("-", "_")
        assert target == f"fairseq_bio_preprocess.commands:{function}", script
        assert callable(getattr(commands, function)), script


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_imports_neither_torch_nor_fairseq(script):
    run = started(script[len("fairseq-bio-") :].replace("-", "_"), "--help")
    assert run["returncode"] == 0, run["stderr"][-2000:]
    assert run["loaded"] == [] and not run["registered"]


def test_a_bad_option_is_refused_before_registration():
    run = started(
        "predict",
        "--checkpoint",
        "x.pt",
        "--input",
        "in.txt",
        "--out",
        "o.jsonl",
        "--no-such-option",
    )
    assert run["returncode"] == 2 and run["loaded"] == []
    assert "unrecognized arguments: --no-such-option" in run["stderr"]


def test_a_command_that_needs_the_plugin_runs_with_it_registered(tmp_path):
    """Once its command line is read, predict registers the plugin, then refuses the missing input
    in one line."""
    missing = tmp_path / "missing.conll"
    run = started(
        "predict",
        "--checkpoint",
        tmp_path / "x.pt",
        "--input",
        missing,
        "--out",
        tmp_path / "o.conll",
    )
    assert run["returncode"] == 1 and run["registered"]
    assert run["stderr"].strip() == f"fairseq-bio-predict: {missing}: not found"


def test_extract_vocab_encode_run_without_torch(tmp_path, pubmed_sample):
    """The corpus steps on real PMC articles: a corpus, a byte-level BPE vocabulary, the encoded
    text, and neither torch nor fairseq imported by any of them."""
    articles = sorted(pubmed_sample.glob("*.nxml"))[:2]
    assert (
        started("extract", *articles, "--out", tmp_path / "corpus", "--no-progress")["loaded"] == []
    )
    train = tmp_path / "corpus" / "train.txt"
    assert train.stat().st_size > 10_000
    assert (
        started("vocab", "--input", train, "--out", tmp_path / "vocab", "--vocab-size", 500)[
            "loaded"
        ]
        == []
    )
    assert (tmp_path / "vocab" / "dict.txt").is_file()
    encoded = tmp_path / "train.bpe"
    assert started("encode", "--vocab", tmp_path / "vocab", train, "--out", encoded)["loaded"] == []
    lines, text = (path.read_text(encoding="utf-8").splitlines() for path in (encoded, train))
    assert len(lines) == len(text) and [bool(line) for line in lines] == [
        bool(line.strip()) for line in text
    ]
    assert all(
        token.isdigit() for line in lines for token in line.split()
    )  # byte-level BPE: GPT-2 token ids


def test_config_dir_prints_its_path_without_torch():
    run = started("config_dir")
    assert run["returncode"] == 0 and run["loaded"] == []


def test_any_other_import_of_the_plugin_registers_it():
    """Outside a script reading its command line, importing any module of the package registers the
    plugin."""
    code = (
        "import fairseq_bio.metrics\n"
        "from fairseq.tasks import TASK_REGISTRY\n"
        "print('REGISTERED', 'bio_masked_lm' in TASK_REGISTRY)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert "REGISTERED True" in out.stdout, out.stderr[-2000:]


def test_the_same_functions_in_a_process_that_imported_the_plugin_keep_it_registered():
    """In a process where fairseq_bio is already imported (tests, notebooks), the entry points leave
    it alone."""
    code = (
        "import sys, fairseq_bio\n"
        "from fairseq.tasks import TASK_REGISTRY\n"
        "from fairseq_bio_preprocess import commands\n"
        "sys.argv = ['fairseq-bio-vocab', '--help']\n"
        "try:\n    commands.vocab()\nexcept SystemExit:\n    pass\n"
        "print('REGISTERED', 'bio_masked_lm' in TASK_REGISTRY)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert "REGISTERED True" in out.stdout, out.stderr[-2000:]

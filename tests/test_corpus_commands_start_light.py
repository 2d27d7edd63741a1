"""The corpus commands that do not train start, print their help and do their work without importing torch or
fairseq (``fairseq_bio_preprocess.commands``), through the console scripts setup.py installs."""

import json
import subprocess
import sys

import pytest
from conftest import REPO
from helpers.console_scripts import console_scripts

LIGHT = {"extract": "extract", "vocab": "vocab", "encode": "encode", "convert-tagging": "convert_tagging",
         "vocab-report": "vocab_report"}  # fmt: skip

# Runs one command's console-script function with the given arguments and prints, at exit (also after a
# SystemExit), which of the heavy packages the process imported.
PROBE = """
import atexit, json, sys
atexit.register(lambda: print("LOADED " + json.dumps(sorted(m for m in ("torch", "fairseq") if m in sys.modules))))
name, args = sys.argv[1], sys.argv[2:]
sys.argv = ["fairseq-bio-" + name.replace("_", "-"), *args]
from fairseq_bio_preprocess import commands
getattr(commands, name)()
"""


def heavy_imports(function: str, *args, cwd=None) -> list:
    out = subprocess.run([sys.executable, "-c", PROBE, function, *map(str, args)], capture_output=True, text=True,
                         cwd=cwd or REPO, timeout=300)  # fmt: skip
    lines = [line for line in out.stdout.splitlines() if line.startswith("LOADED ")]
    assert out.returncode == 0 and lines, out.stderr[-2000:]
    return json.loads(lines[-1][len("LOADED ") :])


def test_setup_routes_the_corpus_commands_through_the_light_entry_points():
    import ast

    scripts = {}
    for node in ast.walk(ast.parse((REPO / "setup.py").read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("fairseq-bio-"):
            name, target = (part.strip() for part in node.value.split("="))
            scripts[name] = target
    assert set(console_scripts()) >= {f"fairseq-bio-{c}" for c in LIGHT}
    for command, function in LIGHT.items():
        assert scripts[f"fairseq-bio-{command}"] == f"fairseq_bio_preprocess.commands:{function}"


@pytest.mark.parametrize("function", sorted(LIGHT.values()))
def test_help_imports_neither_torch_nor_fairseq(function):
    assert heavy_imports(function, "--help") == []


def test_extract_vocab_encode_run_without_torch(tmp_path, pubmed_sample):
    """The corpus steps on real PMC articles: a corpus, a byte-level BPE vocabulary, the encoded text, and neither
    torch nor fairseq imported by any of them."""
    articles = sorted(pubmed_sample.glob("*.nxml"))[:2]
    assert heavy_imports("extract", *articles, "--out", tmp_path / "corpus", "--no-progress") == []
    train = tmp_path / "corpus" / "train.txt"
    assert train.stat().st_size > 10_000
    assert heavy_imports("vocab", "--input", train, "--out", tmp_path / "vocab", "--vocab-size", 500) == []
    assert (tmp_path / "vocab" / "dict.txt").is_file()
    encoded = tmp_path / "train.bpe"
    assert heavy_imports("encode", "--vocab", tmp_path / "vocab", train, "--out", encoded) == []
    lines, text = (path.read_text(encoding="utf-8").splitlines() for path in (encoded, train))
    assert len(lines) == len(text) and [bool(line) for line in lines] == [bool(line.strip()) for line in text]
    assert all(token.isdigit() for line in lines for token in line.split())  # byte-level BPE: GPT-2 token ids


def test_the_same_functions_in_a_process_that_imported_the_plugin_keep_it_registered():
    """In a process where fairseq_bio is already imported (tests, notebooks), the entry points leave it alone."""
    code = (
        "import sys, fairseq_bio\n"
        "from fairseq.tasks import TASK_REGISTRY\n"
        "from fairseq_bio_preprocess import commands\n"
        "sys.argv = ['fairseq-bio-vocab', '--help']\n"
        "try:\n    commands.vocab()\nexcept SystemExit:\n    pass\n"
        "print('REGISTERED', 'bio_masked_lm' in TASK_REGISTRY)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert "REGISTERED True" in out.stdout, out.stderr[-2000:]

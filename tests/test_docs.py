"""The documentation: docs/ builds with mkdocs in strict mode, strict mode does refuse a broken
link, every page is in the nav, and README.md stays a short entry point that names the two set-up
commands."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
MKDOCS_YML = REPO / "mkdocs.yml"
README = REPO / "README.md"


def build(config: Path, site_dir: Path) -> subprocess.CompletedProcess:
    """``python -m mkdocs build --strict`` of ``config``, run from the config's directory."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(config),
            "--site-dir",
            str(site_dir),
        ],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )


def nav_pages(nav) -> list:
    """Every page path in an mkdocs nav (lists of strings or one-key dicts, nested)."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    raise TypeError(f"unexpected nav entry {nav!r}")


def test_docs_build_strict(tmp_path):
    result = build(MKDOCS_YML, tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    for page in DOCS.glob("*.md"):
        name = "index.html" if page.stem == "index" else f"{page.stem}/index.html"
        assert (tmp_path / "site" / name).is_file(), name


def test_strict_build_refuses_a_broken_link(tmp_path):
    """The same config and pages, plus one link to a page that does not exist: the strict build must
    fail on it."""
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copyfile(MKDOCS_YML, tmp_path / "mkdocs.yml")
    assert (
        build(tmp_path / "mkdocs.yml", tmp_path / "site-ok").returncode == 0
    )  # the copy builds as it is
    page = tmp_path / "docs" / "stack.md"
    page.write_text(
        page.read_text(encoding="utf-8") + "\nSee [the missing page](no-such-page.md).\n",
        encoding="utf-8",
    )
    result = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-page.md" in result.stdout + result.stderr


def test_strict_build_refuses_a_broken_anchor(tmp_path):
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copyfile(MKDOCS_YML, tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "stack.md"
    page.write_text(
        page.read_text(encoding="utf-8") + "\nSee [a section](index.md#no-such-section).\n",
        encoding="utf-8",
    )
    result = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-section" in result.stdout + result.stderr


def test_nav_lists_every_page():
    config = yaml.safe_load(MKDOCS_YML.read_text(encoding="utf-8"))
    assert config.get("docs_dir", "docs") == "docs"
    assert config.get("strict") is True
    listed = nav_pages(config["nav"])
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(set(listed)) == pages
    assert len(listed) == len(set(listed)), "a page is listed twice"


def test_readme_is_short_and_names_the_setup_commands():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 220
    assert "make demo" in text
    assert (
        "make test" in text
    )  # CI's .ci/run calls `make test`: the README must keep naming it as the test command
    for target in re.findall(r"\]\((docs/[^)#\s]+)", text):
        assert (REPO / target).is_file(), f"README.md links to {target}, which does not exist"

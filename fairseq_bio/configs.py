"""Where the shipped hydra configs are: ``fairseq-bio-config-dir`` prints it, for ``fairseq-hydra-train --config-dir``.

A ``pip install .`` puts ``hydra_configs/`` inside the package (``fairseq_bio/hydra_configs``, see setup.py); in a
checkout (and an editable install) they are the repository's top-level ``hydra_configs/``, so the README's
``--config-dir hydra_configs`` keeps working there.
"""

from pathlib import Path
from typing import Optional, Sequence

NAME = "hydra_configs"
PACKAGE_DIR = Path(__file__).resolve().parent
PROG = "fairseq-bio-config-dir"


def config_dir() -> Path:
    """The directory of the shipped hydra configs (the installed copy first, else the checkout's)."""
    for candidate in (PACKAGE_DIR / NAME, PACKAGE_DIR.parent / NAME):
        if (candidate / "bio_roberta_tiny.yaml").is_file():
            return candidate
    from .errors import BioError

    raise BioError(f"{PACKAGE_DIR}: no {NAME}/ beside or inside the package; reinstall fairseq_bio")


def build_parser():
    from .cli.options import Parser

    return Parser(
        prog=PROG,
        description="Print the directory of fairseq_bio's hydra configs, e.g. "
        'fairseq-hydra-train --config-dir "$(fairseq-bio-config-dir)" --config-name bio_roberta_base ...',
    )


def main(argv: Optional[Sequence[str]] = None) -> None:
    build_parser().parse_args(argv)
    print(config_dir())


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    from .cli.options import run_cli

    run_cli(PROG, main, argv)


if __name__ == "__main__":
    cli_main()

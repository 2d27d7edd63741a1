"""fairseq-bio-config-dir: print where the shipped hydra configs are, for
``fairseq-hydra-train --config-dir``.

Where they are (the installed copy, else the checkout's ``hydra_configs/``):
``fairseq_bio.runs.shipped_config_dir``.
"""

from typing import Optional, Sequence

from ..runs import shipped_config_dir
from .options import Parser, run_cli

PROG = "fairseq-bio-config-dir"


def build_parser() -> Parser:
    return Parser(
        prog=PROG,
        description="Print the directory of fairseq_bio's hydra configs, e.g. "
        'fairseq-hydra-train --config-dir "$(fairseq-bio-config-dir)" --config-name bio_roberta_base ...',
    )


def main(argv: Optional[Sequence[str]] = None) -> None:
    build_parser().parse_args(argv)
    print(shipped_config_dir())


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    run_cli(PROG, main, argv)


if __name__ == "__main__":
    cli_main()

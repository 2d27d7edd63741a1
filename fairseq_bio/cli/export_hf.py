"""``fairseq-bio-export-hf --checkpoint CKPT --out DIR``: a ``bio_roberta`` checkpoint (masked LM,
or fine-tuned with a token- or sentence-classification head) as an HF transformers model directory,
or a ``bio_electra`` checkpoint as an HF ELECTRA pair (``DIR/discriminator``: ElectraForPreTraining,
``DIR/generator``: ElectraForMaskedLM).

What the directory holds, what each checkpoint becomes and how the export checks itself:
``fairseq_bio.hf.export``.
"""

import sys
from pathlib import Path
from typing import Optional, Sequence

from ..hf.common import DEFAULT_TOLERANCE
from .options import Parser, add_checkpoint, add_out, add_overwrite, run_cli

PROG = "fairseq-bio-export-hf"


def build_parser() -> Parser:
    parser = Parser(prog=PROG, description=__doc__.split("\n\n")[0].replace("``", ""))
    add_checkpoint(
        parser,
        "fairseq checkpoint (model.pt of an import, checkpoint_best.pt of pretraining or of a bio_tagging / "
        "bio_sentence_prediction fine-tuning run, checkpoint_last.pt of ELECTRA pretraining, ...)",
    )
    add_out(parser, "the HF model directory to write (must not exist unless --overwrite)")
    parser.add_argument(
        "--vocab",
        metavar="DIR",
        help="vocabulary directory (dict.txt, bpe.json); default: beside "
        "the checkpoint, else the checkpoint's task.vocab or task.data",
    )
    parser.add_argument(
        "--head",
        help="the classification head to export when the checkpoint has several (the others are left out)",
    )
    add_overwrite(parser, "an HF directory")
    parser.add_argument(
        "--tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        help="largest |logit difference| the check accepts",
    )
    return parser


def main(argv: Optional[Sequence[str]] = None) -> None:
    """bio_roberta checkpoint -> HF transformers directory, bio_electra checkpoint -> HF ELECTRA
    pair, checked."""
    args = build_parser().parse_args(argv)
    from ..hf.export import (
        export_hf,
    )  # torch and fairseq: once the command line is read (preprocess/commands.py)

    result = export_hf(
        args.checkpoint,
        args.out,
        data=args.vocab,
        overwrite=args.overwrite,
        tolerance=args.tolerance,
        head=args.head,
        log=lambda line: print(f"{PROG}: warning: {line}", file=sys.stderr),
    )
    pairs = f" ({result['pairs']} pairs)" if result["pairs"] else ""
    print(
        f"wrote {Path(args.out).absolute()} ({result['architecture']}, {result['tokenizer']}); checked on "
        f"{result['sentences']} real sentences{pairs}: token ids equal fairseq's, logits max |diff| "
        f"{result['logits_max_abs_diff']:.2e}"
    )


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    run_cli(PROG, main, argv)


if __name__ == "__main__":
    cli_main()

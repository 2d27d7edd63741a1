"""``fairseq-bio-export-hf <checkpoint> <out_dir>``: a ``bio_roberta`` checkpoint (masked LM, or fine-tuned with a
token- or sentence-classification head) as an HF transformers model directory, or a ``bio_electra`` checkpoint as an
HF ELECTRA pair (``out_dir/discriminator``: ElectraForPreTraining, ``out_dir/generator``: ElectraForMaskedLM).

What the directory holds, what each checkpoint becomes and how the export checks itself: ``fairseq_bio.hf.export``.
"""

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

from ..errors import run_cli
from ..hf import DEFAULT_TOLERANCE, export_hf


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    """``fairseq-bio-export-hf``: bio_roberta checkpoint -> HF transformers directory, bio_electra checkpoint -> HF
    ELECTRA pair, checked."""

    def main(argv):
        parser = argparse.ArgumentParser(
            prog="fairseq-bio-export-hf", description=__doc__.split("\n\n")[0].replace("``", "")
        )
        parser.add_argument(
            "checkpoint", help="fairseq checkpoint (model.pt of an import, checkpoint_best.pt of pretraining or "
            "of a bio_tagging / bio_sentence_prediction fine-tuning run, checkpoint_last.pt of ELECTRA pretraining, "
            "...)"
        )  # fmt: skip
        parser.add_argument("out_dir", help="output directory (must not exist unless --overwrite)")
        parser.add_argument(
            "--data", help="vocabulary dir (dict.txt, bpe.json); default: beside the checkpoint, else task.vocab or "
            "task.data"
        )  # fmt: skip
        parser.add_argument(
            "--head", help="the classification head to export when the checkpoint has several (the others are left out)"
        )
        parser.add_argument("--overwrite", action="store_true", help="replace an earlier export in out_dir")
        parser.add_argument(
            "--tolerance", type=float, default=DEFAULT_TOLERANCE, help="largest |logit difference| the check accepts"
        )
        args = parser.parse_args(argv)
        result = export_hf(args.checkpoint, args.out_dir, data=args.data, overwrite=args.overwrite,
                           tolerance=args.tolerance, head=args.head,
                           log=lambda line: print(f"fairseq-bio-export-hf: warning: {line}", file=sys.stderr))  # fmt: skip
        pairs = f" ({result['pairs']} pairs)" if result["pairs"] else ""
        print(
            f"wrote {Path(args.out_dir).absolute()} ({result['architecture']}, {result['tokenizer']}); checked on "
            f"{result['sentences']} real sentences{pairs}: token ids equal fairseq's, logits max |diff| "
            f"{result['logits_max_abs_diff']:.2e}"
        )

    run_cli("fairseq-bio-export-hf", main, argv)


if __name__ == "__main__":
    cli_main()

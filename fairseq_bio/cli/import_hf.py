"""``fairseq-bio-import-hf <hf_model_dir> <out_dir>``: an HF BERT, RoBERTa or ELECTRA checkpoint directory as a
``bio_roberta`` encoder checkpoint.

What the output directory holds and how the import checks itself: ``fairseq_bio.hf.importing``.
"""

import argparse
from pathlib import Path
from typing import Optional, Sequence

from ..errors import run_cli
from ..hf import CHECKPOINT_FILE, DEFAULT_TOLERANCE, import_hf


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    """``fairseq-bio-import-hf``: HF BERT/RoBERTa/ELECTRA directory -> bio_roberta encoder checkpoint."""

    def main(argv):
        parser = argparse.ArgumentParser(
            prog="fairseq-bio-import-hf", description=__doc__.split("\n\n")[0].replace("``", "")
        )
        parser.add_argument("hf_model_dir", help="HF directory: config.json, model.safetensors or "
                            "pytorch_model.bin, tokenizer.json or vocab.txt or vocab.json + merges.txt")  # fmt: skip
        parser.add_argument("out_dir", help="output directory (must not exist unless --overwrite)")
        parser.add_argument("--overwrite", action="store_true", help="replace an earlier import in out_dir")
        parser.add_argument(
            "--no-verify", action="store_true", help="skip the check against HF transformers on real sentences"
        )
        parser.add_argument(
            "--tolerance", type=float, default=DEFAULT_TOLERANCE, help="largest |difference| the check accepts"
        )
        parser.add_argument("--seed", type=int, default=1, help="seed of a newly initialised MLM head")
        args = parser.parse_args(argv)
        info = import_hf(
            args.hf_model_dir,
            args.out_dir,
            overwrite=args.overwrite,
            verify=not args.no_verify,
            tolerance=args.tolerance,
            seed=args.seed,
        )
        out = Path(args.out_dir).absolute()
        print(f"wrote {out}/{CHECKPOINT_FILE} ({info['model_type']}, {info['vocabulary']['kind']} vocabulary of "
              f"{info['vocabulary']['size']}, MLM head {info['mlm_head']})")  # fmt: skip
        print(
            "continue pretraining with: fairseq-hydra-train --config-dir <repo>/hydra_configs --config-name "
            f"bio_roberta_base task.data=<data-bin encoded with --vocab {out}> "
            f"checkpoint.restore_file={out}/{CHECKPOINT_FILE} checkpoint.reset_optimizer=true "
            "checkpoint.reset_dataloader=true checkpoint.reset_meters=true checkpoint.reset_lr_scheduler=true "
            + " ".join(info["hydra_overrides"])
        )

    run_cli("fairseq-bio-import-hf", main, argv)


if __name__ == "__main__":
    cli_main()

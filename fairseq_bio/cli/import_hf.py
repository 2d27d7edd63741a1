"""``fairseq-bio-import-hf <hf_model_dir> <out_dir>``: an HF BERT, RoBERTa, ELECTRA, DistilBERT or MegatronBERT
checkpoint directory as a ``bio_roberta`` encoder checkpoint; with ``--generator <dir>``, an HF ELECTRA pair
(``hf_model_dir`` its discriminator) as a ``bio_electra`` checkpoint that ELECTRA pretraining continues from.

What the output directory holds and how the import checks itself: ``fairseq_bio.hf.importing``.
"""

import argparse
from pathlib import Path
from typing import Optional, Sequence

from ..errors import run_cli
from ..hf import CHECKPOINT_FILE, DEFAULT_TOLERANCE, import_electra_pair, import_hf

RESETS = ("checkpoint.reset_optimizer=true checkpoint.reset_dataloader=true checkpoint.reset_meters=true "
          "checkpoint.reset_lr_scheduler=true")  # fmt: skip


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    """``fairseq-bio-import-hf``: HF BERT/RoBERTa/ELECTRA/DistilBERT/MegatronBERT directory -> bio_roberta encoder
    checkpoint, or HF ELECTRA discriminator + generator directories -> bio_electra checkpoint."""

    def main(argv):
        parser = argparse.ArgumentParser(
            prog="fairseq-bio-import-hf", description=__doc__.split("\n\n")[0].replace("``", "")
        )
        parser.add_argument("hf_model_dir", help="HF directory: config.json, model.safetensors or "
                            "pytorch_model.bin, tokenizer.json or vocab.txt or vocab.json + merges.txt; with "
                            "--generator, the ElectraForPreTraining discriminator")  # fmt: skip
        parser.add_argument("out_dir", help="output directory (must not exist unless --overwrite)")
        parser.add_argument(
            "--generator", metavar="DIR", help="the pair's ElectraForMaskedLM generator directory: import both as "
            "one bio_electra checkpoint (shared embeddings, both heads)"
        )  # fmt: skip
        parser.add_argument("--overwrite", action="store_true", help="replace an earlier import in out_dir")
        parser.add_argument(
            "--no-verify", action="store_true", help="skip the check against HF transformers on real sentences"
        )
        parser.add_argument(
            "--tolerance", type=float, default=DEFAULT_TOLERANCE, help="largest |difference| the check accepts"
        )
        parser.add_argument("--seed", type=int, help="seed of a newly initialised MLM head (default 1)")
        args = parser.parse_args(argv)
        out = Path(args.out_dir).absolute()
        if args.generator is not None:
            if args.seed is not None:
                parser.error("--seed: an ELECTRA pair import initialises nothing (both heads are imported)")
            info = import_electra_pair(args.hf_model_dir, args.generator, args.out_dir, overwrite=args.overwrite,
                                       verify=not args.no_verify, tolerance=args.tolerance)  # fmt: skip
            model = info["model"]
            print(f"wrote {out}/{CHECKPOINT_FILE} (ELECTRA pair as bio_electra: discriminator "
                  f"{model['encoder_layers']} x {model['encoder_embed_dim']}, generator {model['generator_layers']} x "
                  f"{model['generator_embed_dim']}, embeddings {model['embedding_dim']}; {info['vocabulary']['kind']} "
                  f"vocabulary of {info['vocabulary']['size']})")  # fmt: skip
            config = "bio_electra_base"
        else:
            info = import_hf(args.hf_model_dir, args.out_dir, overwrite=args.overwrite, verify=not args.no_verify,
                             tolerance=args.tolerance, seed=1 if args.seed is None else args.seed)  # fmt: skip
            print(f"wrote {out}/{CHECKPOINT_FILE} ({info['model_type']}, {info['vocabulary']['kind']} vocabulary of "
                  f"{info['vocabulary']['size']}, MLM head {info['mlm_head']})")  # fmt: skip
            config = "bio_roberta_base"
        print(
            f"continue pretraining with: fairseq-hydra-train --config-dir <repo>/hydra_configs --config-name {config} "
            f"task.data=<data-bin encoded with --vocab {out}> checkpoint.restore_file={out}/{CHECKPOINT_FILE} "
            f"{RESETS} " + " ".join(info["hydra_overrides"])
        )

    run_cli("fairseq-bio-import-hf", main, argv)


if __name__ == "__main__":
    cli_main()

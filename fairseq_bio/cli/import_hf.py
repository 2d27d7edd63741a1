"""``fairseq-bio-import-hf --checkpoint HF_DIR --out DIR``: an HF BERT, RoBERTa, ELECTRA, DistilBERT
or MegatronBERT checkpoint directory as a ``bio_roberta`` encoder checkpoint; with
``--generator GEN_DIR``, an HF ELECTRA pair (``HF_DIR`` its discriminator) as a ``bio_electra``
checkpoint that ELECTRA pretraining continues from.

What the output directory holds and how the import checks itself: ``fairseq_bio.hf.importing``.
"""

from pathlib import Path
from typing import Optional, Sequence

from ..hf.common import CHECKPOINT_FILE, DEFAULT_TOLERANCE
from .options import Parser, add_checkpoint, add_out, add_overwrite, run_cli

PROG = "fairseq-bio-import-hf"

RESETS = (
    "checkpoint.reset_optimizer=true checkpoint.reset_dataloader=true checkpoint.reset_meters=true "
    "checkpoint.reset_lr_scheduler=true"
)


def build_parser() -> Parser:
    parser = Parser(prog=PROG, description=__doc__.split("\n\n")[0].replace("``", ""))
    add_checkpoint(
        parser,
        "the HF model directory to import: config.json, model.safetensors or pytorch_model.bin, "
        "tokenizer.json or vocab.txt or vocab.json + merges.txt; with --generator, the ElectraForPreTraining "
        "discriminator",
        metavar="HF_DIR",
    )
    add_out(
        parser,
        f"the directory to write ({CHECKPOINT_FILE} and its vocabulary; must not exist unless --overwrite)",
        metavar="DIR",
    )
    parser.add_argument(
        "--generator",
        metavar="GEN_DIR",
        help="the pair's ElectraForMaskedLM generator directory: import both as "
        "one bio_electra checkpoint (shared embeddings, both heads; the discriminator is --checkpoint)",
    )
    add_overwrite(parser, "an import")
    parser.add_argument(
        "--no-verify",
        action="store_true",
        help="skip the check against HF transformers on real sentences",
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        help="largest |difference| the check accepts",
    )
    parser.add_argument("--seed", type=int, help="seed of a newly initialised MLM head (default 1)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> None:
    """HF BERT/RoBERTa/ELECTRA/DistilBERT/MegatronBERT directory -> bio_roberta encoder checkpoint,
    or HF ELECTRA discriminator + generator directories -> bio_electra checkpoint."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # torch and fairseq: once the command line is read (preprocess/commands.py)
    from ..hf.importing import import_electra_pair, import_hf

    out = Path(args.out).absolute()
    if args.generator is not None:
        if args.seed is not None:
            parser.error(
                "--seed: an ELECTRA pair import initialises nothing (both heads are imported)"
            )
        info = import_electra_pair(
            args.checkpoint,
            args.generator,
            args.out,
            overwrite=args.overwrite,
            verify=not args.no_verify,
            tolerance=args.tolerance,
        )
        model = info["model"]
        print(
            f"wrote {out}/{CHECKPOINT_FILE} (ELECTRA pair as bio_electra: discriminator "
            f"{model['encoder_layers']} x {model['encoder_embed_dim']}, generator {model['generator_layers']} x "
            f"{model['generator_embed_dim']}, embeddings {model['embedding_dim']}; {info['vocabulary']['kind']} "
            f"vocabulary of {info['vocabulary']['size']})"
        )
        config = "bio_electra_base"
    else:
        info = import_hf(
            args.checkpoint,
            args.out,
            overwrite=args.overwrite,
            verify=not args.no_verify,
            tolerance=args.tolerance,
            seed=1 if args.seed is None else args.seed,
        )
        print(
            f"wrote {out}/{CHECKPOINT_FILE} ({info['model_type']}, {info['vocabulary']['kind']} vocabulary of "
            f"{info['vocabulary']['size']}, MLM head {info['mlm_head']})"
        )
        config = "bio_roberta_base"
    print(
        f"continue pretraining with: fairseq-hydra-train --config-dir <repo>/hydra_configs --config-name {config} "
        f"task.data=<data-bin encoded with --vocab {out}> checkpoint.restore_file={out}/{CHECKPOINT_FILE} "
        f"{RESETS} " + " ".join(info["hydra_overrides"])
    )


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    run_cli(PROG, main, argv)


if __name__ == "__main__":
    cli_main()

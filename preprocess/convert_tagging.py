"""Tagging data from other sources -> CoNLL for the ``bio_tagging`` task (``token<TAB>tag``, blank line between
sentences).

``fairseq-bio-convert-tagging`` has two subcommands. Both write ``train.tsv`` / ``devel.tsv`` / ``test.tsv`` (the
task's default names), the document ids of each split (``<split>.pmids``, one per line, usable as ``--dev-pmids`` /
``--<split>-pmids`` input) and ``convert_stats.json``, every file atomically and only after all input has been read
and checked, so a bad input leaves nothing behind.

The converters: ``ebm_nlp`` (BLURB's PICO from EBM-NLP) and ``pubtator`` (PubTator / BioC JSON offset annotations);
what they share: ``tagging_outputs``.
"""

import argparse

from fairseq_bio.data.sentences import DEFAULT_TRAINING_TEXTS
from fairseq_bio.errors import run_cli

from .ebm_nlp import convert_ebm_nlp
from .pubtator import convert_pubtator
from .tagging_outputs import SPLITS, summary

# ---------------------------------------------------------------------------------------------------
# Command line


def cli_main(argv=None) -> None:
    """``fairseq-bio-convert-tagging``: EBM-NLP PICO or PubTator/BioC offset annotations -> CoNLL splits."""

    def main(argv):
        parser = argparse.ArgumentParser(
            prog="fairseq-bio-convert-tagging",
            description="Convert tagging data to the CoNLL splits bio_tagging reads (train.tsv, devel.tsv, test.tsv).",
        )
        sub = parser.add_subparsers(dest="command", required=True)

        ebm = sub.add_parser("ebm-nlp", help="EBM-NLP PICO as BLURB uses it (I-PAR/I-INT/I-OUT, gold test set)")
        ebm.add_argument("release", help="ebm_nlp_2_00/ (unpacked) or ebm_nlp_2_00.tar.gz")
        ebm.add_argument("--out", required=True, help="output directory")
        ebm.add_argument("--dev-fraction", type=float, default=0.2, help="train documents held out as dev (BLURB: 0.2)")
        ebm.add_argument("--seed", type=int, default=1, help="seed of the dev selection")
        ebm.add_argument("--dev-pmids", help="file of dev PMIDs, one per line (instead of --dev-fraction/--seed)")
        ebm.add_argument("--scheme", choices=("io", "bio"), default="io", help="tags: io (BLURB's I-PAR...) or bio")
        ebm.add_argument(
            "--sentences",
            choices=("period", "document"),
            default="period",
            help="period: a sentence ends after every '.' token (BLURB/build_data.py); document: one per abstract",
        )
        ebm.add_argument(
            "--allow-missing-elements",
            action="store_true",
            help="a document without one element's annotation file gets no labels from it (instead of an error)",
        )
        ebm.add_argument("--encoding", default="utf-8", help="encoding of the .tokens files")
        ebm.add_argument("--overwrite", action="store_true", help="replace existing output files")

        pt = sub.add_parser("pubtator", help="PubTator or BioC JSON offset annotations -> BIO tags")
        pt.add_argument("inputs", nargs="*", help="input files, split by the --<split>-pmids lists")
        pt.add_argument("--out", required=True, help="output directory")
        for split in SPLITS:
            pt.add_argument(f"--{split}", nargs="+", metavar="FILE", help=f"input files of the {split} split")
        for split in SPLITS:
            pt.add_argument(f"--{split}-pmids", metavar="FILE", help=f"PMIDs of the {split} split, one per line")
        pt.add_argument("--types", nargs="+", help="keep only these mention types (after --rename), e.g. Disease")
        pt.add_argument(
            "--rename", nargs="+", metavar="OLD=NEW", help="rename mention types, e.g. SpecificDisease=Disease"
        )
        pt.add_argument(
            "--sentence-training-texts",
            type=int,
            default=DEFAULT_TRAINING_TEXTS,
            help="titles/abstracts used to train the Punkt sentence splitter",
        )
        pt.add_argument("--overwrite", action="store_true", help="replace existing output files")

        args = parser.parse_args(argv)
        if args.command == "ebm-nlp":
            stats = convert_ebm_nlp(
                args.release,
                args.out,
                dev_fraction=args.dev_fraction,
                seed=args.seed,
                dev_pmids=args.dev_pmids,
                scheme=args.scheme,
                sentence_split=args.sentences,
                allow_missing_elements=args.allow_missing_elements,
                encoding=args.encoding,
                overwrite=args.overwrite,
            )
        else:
            stats = convert_pubtator(
                args.out,
                split_files={s: getattr(args, s) for s in SPLITS},
                inputs=args.inputs,
                split_pmids={s: getattr(args, f"{s}_pmids") for s in SPLITS},
                types=args.types,
                rename=args.rename,
                sentence_training_texts=args.sentence_training_texts,
                overwrite=args.overwrite,
            )
        print(summary(stats))

    run_cli("fairseq-bio-convert-tagging", main, argv)


if __name__ == "__main__":
    cli_main()

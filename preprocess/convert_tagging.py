"""Tagging data from other sources -> CoNLL for the ``bio_tagging`` task (``token<TAB>tag``, blank
line between sentences).

Every subcommand of ``fairseq-bio-convert-tagging`` writes ``train.tsv`` / ``devel.tsv`` /
``test.tsv`` (the task's default names), the document ids of each split (``<split>.pmids``, one per
line, usable as ``--dev-pmids`` / ``--<split>-pmids`` input) and ``convert_stats.json``, every file
atomically and only after all input has been read and checked, so a bad input leaves nothing behind.

The converters: ``ebm_nlp`` (BLURB's PICO from EBM-NLP); ``pubtator`` (PubTator / BioC JSON offset
annotations), whose tagging and splits the other offset formats share: ``standoff`` (brat, LINNAEUS,
Species-800, CHEMDNER / BC4CHEMD) and ``i2b2`` (2010 concepts, 2012 temporal, 2014
de-identification); the outputs: ``tagging_outputs``.
"""

import argparse

from fairseq_bio.cli.options import Parser, add_out, add_overwrite, run_cli
from fairseq_bio.data.sentence_splitter import DEFAULT_TRAINING_TEXTS

from .ebm_nlp import OVERLAP_CHOICES, convert_ebm_nlp
from .i2b2 import convert_i2b2_2010, convert_i2b2_2012, convert_i2b2_2014
from .pubtator import convert_pubtator
from .standoff import convert_brat, convert_chemdner, convert_linnaeus, convert_s800
from .tagging_outputs import CONVERT, SPLITS, summary

# ---------------------------------------------------------------------------------------------------
# Offset-annotation subcommands: what they share (splits, types, sentences), what each adds

STANDOFF_FORMATS = {
    "brat": "brat stand-off (X.txt + X.ann) -> BIO tags",
    "linnaeus": "LINNAEUS manual corpus (txt/ + tags.tsv) -> BIO tags",
    "s800": "Species-800 (abstracts/ + S800.tsv) -> BIO tags",
    "chemdner": "CHEMDNER / BC4CHEMD (<part>.abstracts.txt + <part>.annotations.txt) -> BIO tags",
}
I2B2_FORMATS = {
    "i2b2-2010": "i2b2 2010 concepts (.txt + .con) -> BIO tags",
    "i2b2-2012": "i2b2 2012 temporal XML (EVENT/TIMEX3) -> BIO tags",
    "i2b2-2014": "i2b2 2014 de-identification XML (PHI) -> BIO tags",
}
CONVERTERS = {
    "pubtator": convert_pubtator,
    "brat": convert_brat,
    "linnaeus": convert_linnaeus,
    "s800": convert_s800,
    "chemdner": convert_chemdner,
    "i2b2-2010": convert_i2b2_2010,
    "i2b2-2012": convert_i2b2_2012,
    "i2b2-2014": convert_i2b2_2014,
}
# Options of one subcommand only, passed on by name when present.
_FORMAT_OPTIONS = ("encoding", "annotations", "texts", "tags", "phi_level", "allow_text_mismatch")
OUT_HELP = (
    "the directory to write (train.tsv, devel.tsv, test.tsv, <split>.pmids, convert_stats.json)"
)
OVERWRITE_WHAT = "the files"


def _offset_arguments(p: Parser, ids: str) -> None:
    p.add_argument(
        "inputs",
        nargs="*",
        metavar="INPUT",
        help="input files or directories, split by the --<split>-pmids lists",
    )
    add_out(p, OUT_HELP)
    for split in SPLITS:
        p.add_argument(f"--{split}", nargs="+", metavar="PATH", help=f"inputs of the {split} split")
    for split in SPLITS:
        p.add_argument(
            f"--{split}-pmids",
            f"--{split}-ids",
            metavar="FILE",
            help=f"{ids} of the {split} split, one per line",
        )
    p.add_argument(
        "--test-fraction", type=float, help="hold this fraction of the train documents out as test"
    )
    p.add_argument(
        "--dev-fraction",
        type=float,
        help="hold this fraction of the train documents (after --test-fraction) out as dev",
    )
    p.add_argument("--seed", type=int, default=1, help="seed of the held-out documents")
    p.add_argument(
        "--types", nargs="+", help="keep only these mention types (after --rename), e.g. Disease"
    )
    p.add_argument(
        "--rename",
        nargs="+",
        metavar="OLD=NEW",
        help="rename mention types, e.g. SpecificDisease=Disease",
    )
    p.add_argument(
        "--one-type",
        metavar="NAME",
        help="every mention type becomes NAME (e.g. Chemical for BC4CHEMD)",
    )
    p.add_argument(
        "--sentence-training-texts",
        type=int,
        default=DEFAULT_TRAINING_TEXTS,
        help="titles/abstracts/lines used to train the Punkt sentence splitter",
    )
    add_overwrite(p, OVERWRITE_WHAT)


def _sentence_argument(p: Parser, default: str) -> None:
    p.add_argument(
        "--sentences",
        choices=("punkt", "lines"),
        default=default,
        help="punkt: Punkt splits each line of a text into sentences; lines: each line is one sentence",
    )


def _offset_options(args: argparse.Namespace) -> dict:
    """The keyword arguments of ``CONVERTERS[args.command]``."""
    options = dict(
        split_files={s: getattr(args, s) for s in SPLITS},
        inputs=args.inputs,
        split_pmids={s: getattr(args, f"{s}_pmids") for s in SPLITS},
        types=args.types,
        rename=args.rename,
        one_type=args.one_type,
        sentence_training_texts=args.sentence_training_texts,
        dev_fraction=args.dev_fraction,
        test_fraction=args.test_fraction,
        seed=args.seed,
        overwrite=args.overwrite,
    )
    if hasattr(args, "sentences"):
        options["split_segments"] = args.sentences == "punkt"
    options.update({name: getattr(args, name) for name in _FORMAT_OPTIONS if hasattr(args, name)})
    return options


# ---------------------------------------------------------------------------------------------------
# Command line


def build_parser() -> Parser:
    parser = Parser(
        prog=CONVERT,
        description="Convert tagging data to the CoNLL splits bio_tagging reads (train.tsv, devel.tsv, test.tsv).",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    ebm = sub.add_parser(
        "ebm-nlp", help="EBM-NLP PICO as BLURB uses it (I-PAR/I-INT/I-OUT, gold test set)"
    )
    ebm.add_argument(
        "--input", required=True, help="ebm_nlp_2_00/ (unpacked) or ebm_nlp_2_00.tar.gz"
    )
    add_out(ebm, OUT_HELP)
    ebm.add_argument(
        "--dev-fraction",
        type=float,
        default=0.2,
        help="train documents held out as dev (BLURB: 0.2)",
    )
    ebm.add_argument("--seed", type=int, default=1, help="seed of the dev selection")
    ebm.add_argument(
        "--dev-pmids", help="file of dev PMIDs, one per line (instead of --dev-fraction/--seed)"
    )
    ebm.add_argument(
        "--scheme", choices=("io", "bio"), default="io", help="tags: io (BLURB's I-PAR...) or bio"
    )
    ebm.add_argument(
        "--sentences",
        choices=("period", "document"),
        default="period",
        help="period: a sentence ends after every '.' token (BLURB/build_data.py); document: one per abstract",
    )
    ebm.add_argument(
        "--overlap",
        choices=OVERLAP_CHOICES,
        default="last",
        help="a word in two elements' spans: last (its last element's tag: BLURB, build_data.py) or joint "
        "(I-PAR+INT: every element, PubMedBERT sec. 4.2)",
    )
    ebm.add_argument(
        "--allow-missing-elements",
        action="store_true",
        help="a document without one element's annotation file gets no labels from it (instead of an error)",
    )
    ebm.add_argument("--encoding", default="utf-8", help="encoding of the .tokens files")
    add_overwrite(ebm, OVERWRITE_WHAT)

    pt = sub.add_parser("pubtator", help="PubTator or BioC JSON offset annotations -> BIO tags")
    _offset_arguments(pt, "PMIDs")

    for name, help_ in STANDOFF_FORMATS.items():
        p = sub.add_parser(name, help=help_)
        _offset_arguments(
            p, "document ids (file names without .txt)" if name != "chemdner" else "PMIDs"
        )
        if name != "chemdner":
            _sentence_argument(p, "punkt")
    sub.choices["brat"].add_argument(
        "--encoding", default="utf-8", help="encoding of the .txt and .ann files"
    )
    sub.choices["linnaeus"].add_argument(
        "--annotations",
        default="tags.tsv",
        help="the mention table in the release: tags.tsv or filtered_tags.tsv",
    )

    for name, help_ in I2B2_FORMATS.items():
        p = sub.add_parser(name, help=help_)
        _offset_arguments(p, "record names (file names without .con/.xml)")
        _sentence_argument(p, "lines")
        p.add_argument(
            "--allow-text-mismatch",
            action="store_true",
            help="keep the offsets of an annotation whose text is not the record's there (counted), not an error",
        )
    sub.choices["i2b2-2010"].add_argument(
        "--texts",
        nargs="+",
        default=[],
        metavar="DIR",
        help="directories with the records' .txt (test_data/)",
    )
    sub.choices["i2b2-2012"].add_argument(
        "--tags",
        nargs="+",
        default=["EVENT"],
        choices=("EVENT", "TIMEX3"),
        help="tags to convert (bio-lm: EVENT)",
    )
    sub.choices["i2b2-2014"].add_argument(
        "--phi-level",
        choices=("type", "category"),
        default="type",
        help="label: the TYPE attribute (DOCTOR, DATE, ...; bio-lm) or the tag name (NAME, DATE, ...)",
    )
    return parser


def main(argv=None) -> None:
    """EBM-NLP PICO or offset annotations (PubTator/BioC, stand-off, i2b2) -> CoNLL splits."""
    args = build_parser().parse_args(argv)
    if args.command == "ebm-nlp":
        stats = convert_ebm_nlp(
            args.input,
            args.out,
            dev_fraction=args.dev_fraction,
            seed=args.seed,
            dev_pmids=args.dev_pmids,
            scheme=args.scheme,
            sentence_split=args.sentences,
            overlap=args.overlap,
            allow_missing_elements=args.allow_missing_elements,
            encoding=args.encoding,
            overwrite=args.overwrite,
        )
    else:
        stats = CONVERTERS[args.command](args.out, **_offset_options(args))
    print(summary(stats))


def cli_main(argv=None) -> None:
    run_cli(CONVERT, main, argv)


if __name__ == "__main__":
    cli_main()

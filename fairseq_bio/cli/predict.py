"""fairseq-bio-predict: a fine-tuned tagging or sentence-level checkpoint applied to new files.

Tagging: CoNLL in, CoNLL out (conlleval's columns when the input has gold tags), or raw text in,
JSON lines of entity spans out. Sentence level (relation extraction, HoC, BIOSSES, PubMedQA, NLI):
the trained format in, JSON lines out in input order (``id``, ``line``, ``pred``,
``probabilities``, ``gold``). Extractive QA: SQuAD JSON in, the top 5 answers per question out.
Long inputs are windowed as in training; metrics are printed when the input carries gold labels
(``fairseq_bio.metrics.benchmark_scores.prediction_scores``, what fairseq-bio-blurb scores with).
The formats: docs/fine-tuning.md. The library behind this command is ``fairseq_bio.inference``.
"""

import logging
import os
import time

from ..files import InputError, check_output
from ..inference.predictions import PREDICT
from .options import Parser, add_checkpoint, add_no_progress, add_out, add_overwrite, run_cli


def build_parser() -> Parser:
    parser = Parser(prog=PREDICT, description=__doc__.split("\n\n")[0])
    add_checkpoint(
        parser,
        "fine-tuned bio_tagging, bio_sentence_prediction or bio_extractive_qa checkpoint (.pt)",
    )
    parser.add_argument(
        "--input",
        required=True,
        help="tagging: CoNLL file (token[<TAB>tag]) or raw text (one per line); sentence level: a TSV / JSON lines "
        "file in the task's format, or PubMedQA's ori_pqal.json (or its directory); extractive QA: a SQuAD JSON file",
    )
    add_out(
        parser,
        "the predictions to write: CoNLL, or JSON lines (spans for text input; one row per example); never "
        "the input, and not an existing file unless --overwrite",
    )
    add_overwrite(parser, "a predictions file")
    parser.add_argument(
        "--format",
        choices=["auto", "conll", "text"],
        default="auto",
        help="tagging input format (auto: by content: token<TAB>tag lines are CoNLL, whatever the file's name)",
    )
    parser.add_argument(
        "--sentences",
        action="store_true",
        help="text input: each line is one sentence (default: documents, split)",
    )
    parser.add_argument(
        "--split", default="test", help="PubMedQA: the split of task.split_file to predict"
    )
    parser.add_argument(
        "--group-snippets",
        action="store_true",
        help="extractive QA: one answer list per BioASQ question from its snippet entries <id>_<nnn> (BioBERT's merge)",
    )
    parser.add_argument(
        "--null-score-diff-threshold",
        type=float,
        default=None,
        help='extractive QA, SQuAD v2.0: answer "" when the null score beats the best span by more than this '
        "(default: the checkpoint's task.null_score_diff_threshold; a file with answers prints the best ones)",
    )
    parser.add_argument(
        "--vocab",
        metavar="DIR",
        help="vocabulary directory, dict.txt + bpe.json (default: beside the checkpoint)",
    )
    parser.add_argument(
        "--max-tokens", type=int, default=4096, help="tokens per batch (padding included)"
    )
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch")
    parser.add_argument(
        "--cpu", action="store_true", help="run on the CPU even when a GPU is present"
    )
    parser.add_argument("--fp16", action="store_true", help="half precision (GPU)")
    add_no_progress(parser)
    return parser


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # Imported once the command line is read: these import torch and fairseq
    # (preprocess/commands.py).
    from ..data.conll import sniff_format
    from ..inference.loading import QA, load_fine_tuned
    from ..inference.qa import predict_qa_file
    from ..inference.sentence_level import predict_sentence_file
    from ..inference.tagging import predict_conll, predict_text

    if not os.path.exists(args.input):
        raise InputError(f"{args.input}: not found")
    # Never onto what predict reads (the vocabulary beside the checkpoint included), nor onto a file
    # it did not write.
    vocab = args.vocab or os.path.dirname(os.path.abspath(args.checkpoint))
    read = [
        args.input,
        args.checkpoint,
        *(os.path.join(vocab, name) for name in ("dict.txt", "bpe.json")),
    ]
    check_output(args.out, read, args.overwrite, option="--out", by=PREDICT)
    task, model = load_fine_tuned(args.checkpoint, args.vocab, args.cpu, args.fp16)
    _ = (
        task.word_encoder
    )  # the tokenizer is set up with the model (its import alone can take 2 s), not per input
    options = dict(
        max_tokens=args.max_tokens, max_sentences=args.batch_size, progress=not args.no_progress
    )
    start = time.perf_counter()

    def wrote(
        what: str = "",
    ) -> None:  # the time of reading, encoding, the forward passes and writing
        print(f"wrote {args.out}{what} in {time.perf_counter() - start:.2f} s")

    try:
        if task.task_name == QA:
            scores = predict_qa_file(
                task,
                model,
                args.input,
                args.out,
                args.group_snippets,
                args.null_score_diff_threshold,
                **options,
            )
            wrote()
            if scores is not None:  # thresholds are logit differences: more digits
                print(
                    " ".join(
                        f"{k} {v:.4f}" if k.endswith("_thresh") else f"{k} {v:.2f}"
                        for k, v in scores.items()
                    )
                )
        elif hasattr(task, "kind"):  # bio_sentence_prediction
            scores = predict_sentence_file(
                task, model, args.input, args.out, split=args.split, **options
            )
            wrote()
            if scores is not None:
                print(" ".join(f"{name} {value:.2f}" for name, value in scores.items()))
        elif (args.format if args.format != "auto" else sniff_format(args.input)) == "conll":
            scores = predict_conll(task, model, args.input, args.out, **options)
            wrote()
            if scores is not None:
                p, r, f1 = (100 * scores[k] for k in ("precision", "recall", "f1"))
                print(f"entity precision {p:.2f} recall {r:.2f} F1 {f1:.2f}")
        else:
            count = predict_text(
                task, model, args.input, args.out, documents=not args.sentences, **options
            )
            wrote(f": {count} entity spans")
    except FileNotFoundError as e:
        raise InputError(str(e)) from None


def cli_main(argv=None) -> None:
    run_cli(PREDICT, main, argv)

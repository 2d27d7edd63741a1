"""Learn a subword vocabulary from train.txt and write it in the formats fairseq reads.

``--kind`` bytebpe (default; GPT-2 files for ``--bpe gpt2``), sentencepiece, wordpiece (BERT
``vocab.txt``) or fastbpe (subword-nmt codes; ``make fastbpe``), each written into one directory
with ``dict.txt`` and ``bpe.json``. ``dict.txt`` is fairseq's ``<symbol> <count>`` dictionary of
every entry, counted on the training text, without the tokenizer's special tokens (fairseq's
Dictionary and the task add their own). ``bpe.json`` names the fairseq BPE and its files with
fairseq's option names, paths relative to it, e.g. ``{"_name": "gpt2", "gpt2_encoder_json":
"encoder.json", "gpt2_vocab_bpe": "vocab.bpe"}``. What each kind writes: ``learn_vocab``.
"""

import json
import os
import sys
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Union

import numpy as np

from fairseq_bio.cli.options import Parser, add_out, add_overwrite, run_cli
from fairseq_bio.data.tokenizer_files import require_fastbpe
from fairseq_bio.files import (
    atomic_write,
    check_destination,
    make_temp_dir,
    remove_temp_dir,
    replace_dir,
)

from .bpe import Encoder, read_chunks
from .common import PreprocessError, normalize_space

KINDS = ("bytebpe", "sentencepiece", "wordpiece", "fastbpe")
DEFAULT_VOCAB_SIZE = {
    "bytebpe": 50000,
    "sentencepiece": 32000,
    "wordpiece": 30000,
    "fastbpe": 30000,
}
BERT_SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
GPT2_MERGES_HEADER = "#version: 0.2"
VOCAB_MARKERS = ("bpe.json",)
# the script, and what a vocabulary directory is recorded as made by (fairseq_bio.files)
VOCAB = "fairseq-bio-vocab"
# The smallest size each kind can have: byte-level BPE starts from the 256 bytes, WordPiece from its
# special tokens.
MIN_VOCAB_SIZE = {
    "bytebpe": 256,
    "sentencepiece": 1,
    "wordpiece": len(BERT_SPECIAL_TOKENS) + 1,
    "fastbpe": 1,
}
FASTBPE_CODES = "codes"
END_OF_WORD = "</w>"  # subword-nmt's and fastBPE's end-of-word marker in codes
FAIRSEQ_SYMBOLS = {"<s>", "<pad>", "</s>", "<unk>", "<mask>"}
# The seed papers' vocabularies (--preset): what each learned, and where the paper says so.
PRESETS = {
    # PubMedBERT (seed 001 sec. 6.1): uncased WordPiece from PubMed; 30,522 entries as BERT's and
    # the released model's
    "pubmedbert": dict(kind="wordpiece", vocab_size=30522, cased=False),
    # bio-lm (seed 000 sec. 4.1): byte-level BPE learned on the pretraining corpus, 50k units as
    # RoBERTa's
    "biolm": dict(kind="bytebpe", vocab_size=50000, cased=False),
    # BioMegatron (seed 002 sec. 3, Table 3): SentencePiece on PubMed, 30k or 50k pieces, cased
    # (SentencePiece keeps case; `cased` is WordPiece's option)
    "biomegatron-30k": dict(kind="sentencepiece", vocab_size=30000, cased=False),
    "biomegatron-50k": dict(kind="sentencepiece", vocab_size=50000, cased=False),
}


def preset_options(
    preset: str, kind: Optional[str], vocab_size: Optional[int], cased: bool
) -> Dict:
    """``PRESETS[preset]`` with the options given beside it checked against it (one-line error on a
    conflict)."""
    if preset not in PRESETS:
        raise PreprocessError(f"unknown --preset {preset!r} (choose from {', '.join(PRESETS)})")
    options = PRESETS[preset]
    given = {"kind": kind, "vocab_size": vocab_size, "cased": cased or None}
    for key, value in given.items():
        if value is not None and value != options[key]:
            raise PreprocessError(
                f"--preset {preset} sets {key}={options[key]}; --{key.replace('_', '-')} {value} "
                "contradicts it (give one or the other)"
            )
    return dict(options)


def _training_lines(train_file: Path, sample_lines: Optional[int]) -> Iterator[str]:
    """Non-blank lines of ``train_file``; with ``sample_lines``, an evenly spaced (deterministic)
    sample."""
    stride = 1
    if sample_lines is not None:
        with open(train_file, encoding="utf-8-sig") as f:
            total = sum(1 for line in f if line.strip())
        stride = max(1, -(-total // sample_lines))
    with open(train_file, encoding="utf-8-sig") as f:
        kept = 0
        for i, line in enumerate(line for line in f if line.strip()):
            if i % stride == 0:
                if sample_lines is not None and kept >= sample_lines:
                    break
                kept += 1
                yield line.rstrip("\n")


def _train_bytebpe(lines, out: Path, vocab_size: int, min_frequency: int) -> int:
    from tokenizers import ByteLevelBPETokenizer

    tokenizer = ByteLevelBPETokenizer(add_prefix_space=False)
    tokenizer.train_from_iterator(
        lines, vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False
    )
    model = json.loads(tokenizer._tokenizer.to_str())["model"]
    vocab = sorted(model["vocab"].items(), key=lambda item: item[1])
    if [i for _, i in vocab] != list(range(len(vocab))):
        raise PreprocessError("byte-level BPE vocabulary ids are not contiguous")
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    with open(out / "encoder.json", "w", encoding="utf-8") as f:
        json.dump(dict(vocab), f, ensure_ascii=True)  # ASCII: fairseq opens it without an encoding
    # fairseq's reader drops the first line (header) and the last (empty after the final newline).
    with open(out / "vocab.bpe", "w", encoding="utf-8", newline="\n") as f:
        f.write(GPT2_MERGES_HEADER + "\n")
        f.writelines(merge + "\n" for merge in merges)
    _write_bpe_json(
        out, {"_name": "gpt2", "gpt2_encoder_json": "encoder.json", "gpt2_vocab_bpe": "vocab.bpe"}
    )
    return len(vocab)


def _train_sentencepiece(lines, out: Path, vocab_size: int, spm_type: str) -> None:
    import sentencepiece as spm

    sample = out / "spm-training-sample.txt"
    with open(sample, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(line + "\n" for line in lines)
    spm.set_random_generator_seed(1)
    try:
        spm.SentencePieceTrainer.train(
            input=str(sample),
            model_prefix=str(out / "spm"),
            model_type=spm_type,
            vocab_size=vocab_size,
            character_coverage=0.9999,
            num_threads=os.cpu_count() or 1,
            input_sentence_size=0,  # we pass the (already sampled) lines; use them all
            minloglevel=2,
        )
    except RuntimeError as e:
        raise PreprocessError(f"sentencepiece training failed: {str(e).strip().splitlines()[-1]}")
    finally:
        sample.unlink()
    _write_bpe_json(out, {"_name": "sentencepiece", "sentencepiece_model": "spm.model"})


def _train_wordpiece(lines, out: Path, vocab_size: int, min_frequency: int, cased: bool) -> int:
    from tokenizers import BertWordPieceTokenizer

    # The same normalisation as transformers' BertTokenizer(do_lower_case=not cased), which fairseq
    # uses.
    tokenizer = BertWordPieceTokenizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=not cased
    )
    tokenizer.train_from_iterator(
        lines,
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=BERT_SPECIAL_TOKENS,
        show_progress=False,
    )
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    if [i for _, i in vocab] != list(range(len(vocab))):
        raise PreprocessError("wordpiece vocabulary ids are not contiguous")
    with open(out / "vocab.txt", "w", encoding="utf-8", newline="\n") as f:
        f.writelines(token + "\n" for token, _ in vocab)
    _write_bpe_json(out, {"_name": "bert", "bpe_vocab_file": "vocab.txt", "bpe_cased": cased})
    return len(vocab)


def _train_fastbpe(lines, out: Path, vocab_size: int, min_frequency: int) -> List[str]:
    """subword-nmt codes written for fastBPE; returns the vocabulary (characters, then merged
    subwords)."""
    import collections
    import contextlib
    import io
    import re

    from subword_nmt.learn_bpe import learn_bpe

    words = collections.Counter(w for line in lines for w in normalize_space(line).split(" ") if w)
    if not words:
        raise PreprocessError("fastbpe: the training text has no words")
    codes, log = io.StringIO(), io.StringIO()
    # verbose=True is the only way subword-nmt tells each merge's frequency, which fastBPE's format
    # carries.
    with contextlib.redirect_stderr(log):
        learn_bpe(
            (f"{w} {c}" for w, c in words.items()),
            codes,
            vocab_size,
            min_frequency=min_frequency,
            verbose=True,
            is_dict=True,
            total_symbols=True,
        )
    merges = [
        tuple(line.split(" ")) for line in codes.getvalue().splitlines()[1:]
    ]  # after "#version: 0.2"
    # (tqdm's progress bar shares that stream, so a line may start with it)
    counts = [
        int(c)
        for c in re.findall(r"pair \d+: \S+ \S+ -> \S+ \(frequency (\d+)\)\n", log.getvalue())
    ]
    if len(counts) != len(merges) or any(len(m) != 2 for m in merges):
        raise PreprocessError("fastbpe: could not read subword-nmt's merges (subword-nmt version?)")
    # fastBPE reads "left right count" lines, no header; "</w>" marks the end of a word in both
    # tools.
    with open(out / FASTBPE_CODES, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(f"{a} {b} {c}\n" for (a, b), c in zip(merges, counts))
    _write_bpe_json(out, {"_name": "fastbpe", "bpe_codes": FASTBPE_CODES})

    # Every symbol the applier can emit: each character (word-internal as "c@@", final as "c") and
    # each merge.
    def symbol(unit: str) -> str:
        return unit[: -len(END_OF_WORD)] if unit.endswith(END_OF_WORD) else unit + "@@"

    chars = {c + "@@" for w in words for c in w[:-1]} | {w[-1] for w in words}
    symbols = dict.fromkeys(sorted(chars))
    symbols.update(dict.fromkeys(symbol(a + b) for a, b in merges))
    # A text word "<unk>" or "</s>" must not duplicate fairseq's own symbols (Dictionary.load
    # refuses that).
    return [s for s in symbols if s not in FAIRSEQ_SYMBOLS]


def _write_bpe_json(out: Path, options: Dict) -> None:
    with open(out / "bpe.json", "w", encoding="utf-8") as f:
        json.dump(options, f, indent=2)
        f.write("\n")


def _write_fastbpe_dict(vocab_dir: Path, train_file: Path, symbols: List[str]) -> int:
    """dict.txt of a fastbpe vocabulary: every symbol with its count in the encoded training
    text."""
    import collections

    encoder = Encoder(vocab_dir)
    counts = collections.Counter()
    with open(train_file, encoding="utf-8-sig") as f:
        for chunk in read_chunks(f, 10000):
            counts.update(s for line in encoder.encode(chunk) for s in line.split(" ") if s)
    rank = {s: i for i, s in enumerate(symbols)}
    # A character first seen outside a sampled training text is not in the vocabulary: fairseq reads
    # it as <unk>.
    with atomic_write(vocab_dir / "dict.txt") as f:
        f.writelines(
            f"{s} {counts[s]}\n" for s in sorted(symbols, key=lambda s: (-counts[s], rank[s]))
        )
    return len(symbols)


def _write_dict(vocab_dir: Path, train_file: Path) -> int:
    """Count the symbols of the encoded training text; write dict.txt; return the number of
    entries."""
    encoder = Encoder(vocab_dir)
    counts = np.zeros(encoder.vocab_size, dtype=np.int64)
    with open(train_file, encoding="utf-8-sig") as f:
        for chunk in read_chunks(f, 10000):
            ids = [i for seq in encoder.encode_ids(chunk) for i in seq]
            counts += np.bincount(np.asarray(ids, dtype=np.int64), minlength=encoder.vocab_size)
    entries = [i for i in range(encoder.vocab_size) if encoder.symbols[i] is not None]
    entries.sort(key=lambda i: (-counts[i], i))
    with atomic_write(vocab_dir / "dict.txt") as f:
        f.writelines(f"{encoder.symbols[i]} {counts[i]}\n" for i in entries)
    return len(entries)


# dict.txt's symbol is what encoded text contains: byte BPE the token id in decimal (as fairseq's
# GPT2BPE.encode emits), sentencepiece the piece, wordpiece the wordpiece, fastbpe the subword with
# ``@@`` ending a word's non-final pieces; sorted by count (descending), then id. Word starts, for
# whole-word masking: gpt2 token text starts with "Ġ", sentencepiece with "▁", wordpiece does not
# start with "##", fastbpe ends a word unless it ends with "@@". fastbpe learns subword-nmt codes
# on whitespace words (--vocab-size counts characters + merges, like its --total-symbols), written
# as ``codes`` in fastBPE's format (``left right count``, no header); encoding uses fastBPE's C++
# applier.
def learn_vocab(
    train_file: Union[str, os.PathLike],
    out_dir: Union[str, os.PathLike],
    *,
    kind: str = "bytebpe",
    vocab_size: Optional[int] = None,
    min_frequency: Optional[int] = None,
    spm_type: str = "unigram",
    cased: bool = False,
    sample_lines: Optional[int] = None,
    overwrite: bool = False,
) -> Path:
    """Learn a ``kind`` vocabulary from ``train_file`` into ``out_dir`` (built in a temp dir, then
    renamed).

    ``min_frequency`` applies to bytebpe/wordpiece/fastbpe (default 2); ``spm_type`` to
    sentencepiece; ``cased`` to wordpiece. ``sample_lines`` trains on an evenly spaced sample of
    that many lines (dict.txt counts still come from the whole file). Returns ``out_dir``.
    """
    train_file, out_dir = Path(train_file), Path(out_dir)
    if kind not in KINDS:
        raise PreprocessError(f"unknown vocabulary kind {kind!r} (choose from {', '.join(KINDS)})")
    if min_frequency is not None and kind == "sentencepiece":
        raise PreprocessError("--min-frequency does not apply to sentencepiece")
    if spm_type not in ("unigram", "bpe"):
        raise PreprocessError(f"unknown --spm-type {spm_type!r} (unigram or bpe)")
    if spm_type != "unigram" and kind != "sentencepiece":
        raise PreprocessError("--spm-type applies only to --kind sentencepiece")
    if cased and kind != "wordpiece":
        raise PreprocessError(
            "--cased applies only to --kind wordpiece (bytebpe and sentencepiece are cased)"
        )
    if sample_lines is not None and sample_lines < 1:
        raise PreprocessError("--sample-lines must be >= 1")
    if not train_file.is_file() or train_file.stat().st_size == 0:
        raise PreprocessError(f"{train_file}: missing or empty training text")
    vocab_size = vocab_size if vocab_size is not None else DEFAULT_VOCAB_SIZE[kind]
    if vocab_size < MIN_VOCAB_SIZE[kind]:
        why = {
            "bytebpe": "byte-level BPE starts from the 256 bytes",
            "wordpiece": "WordPiece needs its "
            f"{len(BERT_SPECIAL_TOKENS)} special tokens and at least one piece",
        }.get(kind, "a size is positive")
        raise PreprocessError(
            f"--vocab-size {vocab_size}: impossible for {kind} (at least {MIN_VOCAB_SIZE[kind]}: "
            f"{why})"
        )
    min_frequency = min_frequency if min_frequency is not None else 2
    check_destination(out_dir, overwrite, VOCAB_MARKERS, by=VOCAB)

    start = time.time()
    tmp = make_temp_dir(out_dir)
    try:
        lines = _training_lines(train_file, sample_lines)
        reached = vocab_size  # sentencepiece reaches it or fails, saying so
        if kind == "bytebpe":
            reached = _train_bytebpe(lines, tmp, vocab_size, min_frequency)
        elif kind == "sentencepiece":
            _train_sentencepiece(lines, tmp, vocab_size, spm_type)
        elif kind == "wordpiece":
            reached = _train_wordpiece(lines, tmp, vocab_size, min_frequency, cased)
        else:
            require_fastbpe()  # before learning: counting the symbols needs fastBPE's applier
            symbols = _train_fastbpe(lines, tmp, vocab_size, min_frequency)
            reached = len(symbols)
        if reached < vocab_size:
            print(
                f"{VOCAB}: warning: --vocab-size {vocab_size}: {train_file} supports only {reached} {kind} entries "
                f"(min frequency {min_frequency}); the vocabulary has {reached}",
                file=sys.stderr,
            )
        trained = time.time()
        if kind == "fastbpe":
            entries = _write_fastbpe_dict(tmp, train_file, symbols)
        else:
            entries = _write_dict(tmp, train_file)
        info = {
            "kind": kind,
            "vocab_size": vocab_size,
            "vocab_size_reached": reached,
            "dict_entries": entries,
            "min_frequency": None if kind == "sentencepiece" else min_frequency,
            "spm_type": spm_type if kind == "sentencepiece" else None,
            "cased": cased if kind == "wordpiece" else True,
            "sample_lines": sample_lines,
            "train_file": str(train_file),
            "train_seconds": round(trained - start, 3),
            "count_seconds": round(time.time() - trained, 3),
        }
        with open(tmp / "vocab_info.json", "w", encoding="utf-8") as f:
            json.dump(info, f, indent=2)
            f.write("\n")
        replace_dir(tmp, out_dir, overwrite, VOCAB_MARKERS, by=VOCAB)
    except BaseException:
        remove_temp_dir(tmp)
        raise
    return out_dir


def build_parser() -> Parser:
    parser = Parser(prog=VOCAB, description="Learn a vocabulary for fairseq.")
    parser.add_argument(
        "--input", required=True, help="the training text (train.txt from fairseq-bio-extract)"
    )
    add_out(parser, "the vocabulary directory to write (new or empty unless --overwrite)")
    parser.add_argument(
        "--kind", choices=KINDS, default=None, help="tokenizer kind (default bytebpe)"
    )
    parser.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default=None,
        help="a seed paper's vocabulary: pubmedbert (uncased WordPiece 30,522), biolm (byte BPE "
        "50k), biomegatron-30k / -50k (cased SentencePiece)",
    )
    parser.add_argument(
        "--vocab-size",
        type=int,
        default=None,
        help="vocabulary size (default: bytebpe 50000, sentencepiece 32000, wordpiece 30000, fastbpe 30000: "
        "characters + merges)",
    )
    parser.add_argument(
        "--min-frequency",
        type=int,
        default=None,
        help="bytebpe/wordpiece/fastbpe: minimum pair/word frequency (default 2)",
    )
    parser.add_argument(
        "--spm-type", choices=("unigram", "bpe"), default="unigram", help="sentencepiece model type"
    )
    parser.add_argument(
        "--cased", action="store_true", help="wordpiece: keep case (PubMedBERT is uncased)"
    )
    parser.add_argument(
        "--sample-lines",
        type=int,
        default=None,
        help="train on an evenly spaced sample of this many lines (sentencepiece keeps its training lines "
        "in memory: use e.g. 5000000 on full PubMed)",
    )
    add_overwrite(parser, "a vocabulary")
    return parser


def main(argv=None) -> None:
    """Learn bytebpe/sentencepiece/wordpiece/fastbpe from train.txt for fairseq."""
    args = build_parser().parse_args(argv)
    options = dict(kind=args.kind or "bytebpe", vocab_size=args.vocab_size, cased=args.cased)
    if args.preset:
        options = preset_options(args.preset, args.kind, args.vocab_size, args.cased)
    out = learn_vocab(
        args.input,
        args.out,
        **options,
        min_frequency=args.min_frequency,
        spm_type=args.spm_type,
        sample_lines=args.sample_lines,
        overwrite=args.overwrite,
    )
    with open(out / "vocab_info.json", encoding="utf-8") as f:
        print(f.read().strip())


def cli_main(argv=None) -> None:
    run_cli(VOCAB, main, argv)


if __name__ == "__main__":
    cli_main()

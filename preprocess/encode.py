"""Encode text files with a vocabulary directory (its ``bpe.json``) into fairseq's input symbols.

One output line per input line: the space-separated symbols of ``dict.txt`` (byte BPE: token ids;
sentencepiece: pieces; wordpiece: wordpieces; fastbpe: subwords, ``@@`` ending non-final pieces). Blank lines stay blank, so document boundaries survive.
A symbol that is not in ``dict.txt`` (an unknown piece, ``[UNK]``) is written as fairseq's ``<unk>``.
The result is what fairseq's own BPE (``fairseq.data.encoders.build_bpe`` with the bpe.json options)
produces for the stripped line, with unknowns already mapped -- tested for each kind -- but it runs on
the Rust/C++ tokenizers in parallel worker processes. fastbpe lines have their whitespace runs made one space
first (fastBPE splits words at " " only; fairseq's dictionary at any whitespace).
"""

import argparse
import json
import multiprocessing
import os
import time
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Union

from fairseq_bio.outputs import check_output

from .common import (
    PreprocessError,
    atomic_write,
    default_workers,
    normalize_space,
    ordered_map,
    require_fastbpe,
    run_cli,
)
from .vocab import bpe_options

UNK = "<unk>"
CHUNK_LINES = 4000


def read_chunks(f, size: int) -> Iterator[List[str]]:
    """Lists of up to ``size`` lines (newlines kept) from an open text file."""
    chunk = []
    for line in f:
        chunk.append(line)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _gpt2_merges(path: str) -> List[tuple]:
    # Exactly fairseq's reading of vocab.bpe (gpt2_bpe_utils.get_encoder): first and last line dropped.
    with open(path, encoding="utf-8") as f:
        return [tuple(merge.split()) for merge in f.read().split("\n")[1:-1]]


class Encoder:
    """A vocabulary directory's tokenizer. ``symbols[id]`` is the dict.txt symbol, None for specials."""

    def __init__(self, vocab_dir: Union[str, os.PathLike], threads: bool = True):
        if not threads:
            os.environ["TOKENIZERS_PARALLELISM"] = "false"
        options = bpe_options(vocab_dir)
        self.kind = options.get("_name")
        if self.kind == "gpt2":
            self._init_gpt2(options)
        elif self.kind == "sentencepiece":
            self._init_sentencepiece(options, threads)
        elif self.kind == "bert":
            self._init_bert(options)
        elif self.kind == "fastbpe":
            self._init_fastbpe(options, Path(vocab_dir) / "dict.txt")
            return
        else:
            raise PreprocessError(
                f"{vocab_dir}/bpe.json: unsupported bpe {self.kind!r} (gpt2, sentencepiece, bert, fastbpe)"
            )
        self.vocab_size = len(self.symbols)
        self.output_symbols = [UNK if s is None else s for s in self.symbols]

    def _init_gpt2(self, options: Dict) -> None:
        from tokenizers import Tokenizer, models, pre_tokenizers

        with open(options["gpt2_encoder_json"], encoding="utf-8") as f:
            vocab = json.load(f)
        merges = _gpt2_merges(options["gpt2_vocab_bpe"])
        # ignore_merges=False: every word goes through the merges, as in GPT-2's (and fairseq's) bpe().
        tokenizer = Tokenizer(models.BPE(vocab, merges, ignore_merges=False))
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        self._hf = tokenizer
        self._hf_kwargs = {}
        size = max(vocab.values()) + 1
        self.symbols = [str(i) for i in range(size)]

    def _init_sentencepiece(self, options: Dict, threads: bool) -> None:
        import sentencepiece as spm

        self._sp = spm.SentencePieceProcessor(model_file=options["sentencepiece_model"])
        self._sp_threads = -1 if threads else 1
        sp = self._sp
        self.symbols = [
            None if sp.is_control(i) or sp.is_unknown(i) else sp.id_to_piece(i) for i in range(sp.get_piece_size())
        ]

    def _init_bert(self, options: Dict) -> None:
        from tokenizers import BertWordPieceTokenizer

        vocab_file = options["bpe_vocab_file"]
        tokenizer = BertWordPieceTokenizer(
            vocab_file,
            clean_text=True,
            handle_chinese_chars=True,
            strip_accents=None,
            lowercase=not options.get("bpe_cased", False),
        )
        self._hf = tokenizer
        self._hf_kwargs = {"add_special_tokens": False}
        with open(vocab_file, encoding="utf-8") as f:
            tokens = [line.rstrip("\n") for line in f]
        special = set(_added_tokens(tokenizer))
        self.symbols = [None if t in special else t for t in tokens]

    def _init_fastbpe(self, options: Dict, dict_file: Path) -> None:
        # fastBPE emits subword strings, not ids: the vocabulary is dict.txt (absent while it is being learned).
        self._fastbpe = require_fastbpe().fastBPE(options["bpe_codes"])
        self.known = None
        if dict_file.is_file():
            with open(dict_file, encoding="utf-8") as f:
                self.known = {line.rsplit(" ", 1)[0] for line in f}

    def encode_ids(self, lines: Sequence[str]) -> List[List[int]]:
        """Token ids of each (stripped) line (not for fastbpe, whose symbols are strings: use ``encode``)."""
        if self.kind == "fastbpe":
            raise PreprocessError("fastbpe encodes to subword strings, not ids")
        lines = [line.strip() for line in lines]
        if self.kind == "sentencepiece":
            return self._sp.encode(lines, out_type=int, num_threads=self._sp_threads)
        return [e.ids for e in self._hf.encode_batch(lines, **self._hf_kwargs)]

    def encode(self, lines: Sequence[str]) -> List[str]:
        """Each line as space-separated dict.txt symbols (``<unk>`` for anything not in dict.txt)."""
        if self.kind == "fastbpe":
            encoded = self._fastbpe.apply([normalize_space(line) for line in lines])
            if self.known is None:
                return encoded
            known = self.known
            return [" ".join(s if s in known else UNK for s in line.split(" ")) if line else "" for line in encoded]
        symbols = self.output_symbols
        return [" ".join(symbols[i] for i in ids) for ids in self.encode_ids(lines)]


def _added_tokens(tokenizer) -> List[str]:
    """The special tokens of an HF tokenizer ([PAD], [UNK], [CLS], [SEP], [MASK] for BERT)."""
    return [t.content for t in tokenizer._tokenizer.get_added_tokens_decoder().values() if t.special]


_ENCODER: Optional[Encoder] = None


def _init_worker(vocab_dir: str) -> None:
    global _ENCODER
    _ENCODER = Encoder(vocab_dir, threads=False)


def _encode_chunk(lines: List[str]) -> List[str]:
    return _ENCODER.encode(lines)


def encode_file(
    vocab_dir: Union[str, os.PathLike],
    input_path: Union[str, os.PathLike],
    output_path: Union[str, os.PathLike],
    *,
    workers: int = 1,
    chunk_lines: int = CHUNK_LINES,
    progress: bool = True,
) -> Dict:
    """Encode one text file (atomically written); returns ``{"lines", "tokens", "unk", "seconds"}``."""
    return encode_files(
        vocab_dir, [input_path], [output_path], workers=workers, chunk_lines=chunk_lines, progress=progress
    )[0]


def encode_files(
    vocab_dir: Union[str, os.PathLike],
    inputs: Sequence[Union[str, os.PathLike]],
    outputs: Sequence[Union[str, os.PathLike]],
    *,
    workers: int = 1,
    chunk_lines: int = CHUNK_LINES,
    progress: bool = True,
) -> List[Dict]:
    """Encode ``inputs[i]`` into ``outputs[i]``; with ``workers > 1``, chunks run in worker processes.

    With one worker the tokenizers' own threads still parallelise each chunk.
    """
    from tqdm import tqdm

    if len(inputs) != len(outputs):
        raise PreprocessError("give as many outputs as inputs")
    if workers < 1:
        raise PreprocessError("--workers must be >= 1")
    for path in inputs:
        if not Path(path).is_file():
            raise PreprocessError(f"{path}: no such file")
    for output_path in outputs:  # an encoded file written over a corpus would destroy it
        check_output(output_path, inputs, overwrite=True, option="--outputs")
    vocab_dir = str(vocab_dir)
    pool = None
    if workers > 1:
        pool = multiprocessing.Pool(workers, initializer=_init_worker, initargs=(vocab_dir,))
        encode_chunks = lambda chunks: ordered_map(pool, _encode_chunk, chunks, max_in_flight=2 * workers)  # noqa
    else:
        encoder = Encoder(vocab_dir)
        encode_chunks = lambda chunks: map(encoder.encode, chunks)  # noqa
    results = []
    try:
        for input_path, output_path in zip(inputs, outputs):
            start = time.time()
            stats = {"input": str(input_path), "output": str(output_path), "lines": 0, "tokens": 0, "unk": 0}
            size = Path(input_path).stat().st_size
            with open(input_path, encoding="utf-8") as f, atomic_write(output_path) as out, tqdm(
                total=size, unit="B", unit_scale=True, desc=f"encode {Path(input_path).name}", disable=not progress
            ) as bar:
                for encoded in encode_chunks(_tracked_chunks(f, chunk_lines, bar)):
                    for line in encoded:
                        out.write(line)
                        out.write("\n")
                        tokens = line.split()
                        stats["tokens"] += len(tokens)
                        stats["unk"] += tokens.count(UNK)
                    stats["lines"] += len(encoded)
            stats["seconds"] = round(time.time() - start, 3)
            results.append(stats)
    except UnicodeDecodeError as e:
        raise PreprocessError(f"{input_path}: not valid UTF-8 (byte 0x{e.object[e.start]:02x})") from None
    finally:
        if pool is not None:
            pool.terminate()
    return results


def _tracked_chunks(f, chunk_lines: int, bar) -> Iterable[List[str]]:
    for chunk in read_chunks(f, chunk_lines):
        bar.update(sum(len(line.encode("utf-8")) for line in chunk))
        yield chunk


def cli_main(argv=None) -> None:
    """``fairseq-bio-encode``: text -> space-separated dict.txt symbols, one line per line."""

    def main(argv):
        parser = argparse.ArgumentParser(prog="fairseq-bio-encode", description=__doc__.splitlines()[0])
        parser.add_argument("--vocab", required=True, help="vocabulary directory (bpe.json, dict.txt, ...)")
        parser.add_argument("--inputs", nargs="+", required=True, help="text files (one sentence per line)")
        parser.add_argument("--outputs", nargs="+", required=True, help="encoded files, one per input (never an input)")
        parser.add_argument("--overwrite", action="store_true", help="replace existing output files")
        parser.add_argument(
            "--workers", type=int, default=1, help=f"worker processes (this machine: {default_workers()})"
        )
        parser.add_argument("--chunk-lines", type=int, default=CHUNK_LINES, help="lines per work item")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")
        args = parser.parse_args(argv)
        for path in args.outputs:
            check_output(path, args.inputs, args.overwrite, option="--outputs")
        for stats in encode_files(
            args.vocab,
            args.inputs,
            args.outputs,
            workers=args.workers,
            chunk_lines=args.chunk_lines,
            progress=not args.no_progress,
        ):
            print(json.dumps(stats))

    run_cli("encode", main, argv)


if __name__ == "__main__":
    cli_main()

"""Encode text files with a vocabulary directory (its ``bpe.json``) into fairseq's input symbols.

One output line per input line: the space-separated symbols of ``dict.txt`` (byte BPE: token ids;
sentencepiece: pieces; wordpiece: wordpieces; fastbpe: subwords, ``@@`` ending non-final pieces).
Blank lines stay blank, so document boundaries survive. A symbol that is not in ``dict.txt`` (an
unknown piece, ``[UNK]``) is written as fairseq's ``<unk>``. The result is what fairseq's own BPE
(``fairseq.data.encoders.build_bpe`` with the bpe.json options) produces for the stripped line, with
unknowns already mapped -- tested for each kind -- but it runs on the Rust/C++ tokenizers in
parallel worker processes. fastbpe lines have their whitespace runs made one space first (fastBPE
splits words at " " only; fairseq's dictionary at any whitespace).
"""

import json
import os
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Union

from fairseq_bio.cli.options import Parser, add_no_progress, add_out, add_overwrite, run_cli
from fairseq_bio.files import atomic_write, check_output

from .bpe import UNK, Encoder, read_chunks
from .common import PreprocessError, default_workers, has_text, ordered_map, worker_pool

CHUNK_LINES = 4000
# the script, and what the encoded files are recorded as made by (fairseq_bio.files)
ENCODE = "fairseq-bio-encode"


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
    """Encode one text file (atomically written); returns
    ``{"lines", "tokens", "unk", "seconds"}``."""
    return encode_files(
        vocab_dir,
        [input_path],
        [output_path],
        workers=workers,
        chunk_lines=chunk_lines,
        progress=progress,
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
    """Encode ``inputs[i]`` into ``outputs[i]``; with ``workers > 1``, chunks run in worker
    processes.

    With one worker the tokenizers' own threads still parallelise each chunk.
    """
    from tqdm import tqdm

    if len(inputs) != len(outputs):
        raise PreprocessError(
            f"--out: {len(outputs)} files for {len(inputs)} inputs; give one per input"
        )
    if workers < 1:
        raise PreprocessError("--workers must be >= 1")
    for path in inputs:
        if not Path(path).is_file():
            raise PreprocessError(f"{path}: no such file")
        if not has_text(path):  # carried on, an empty split fails in training ("cannot mmap ...")
            message = "empty (no line with text); nothing to encode, nothing written"
            raise PreprocessError(f"{path}: {message}")
    for (
        output_path
    ) in outputs:  # an encoded file written over a corpus (or the vocabulary) would destroy it
        check_output(output_path, [*inputs, vocab_dir], overwrite=True, option="--out")
    vocab_dir = str(vocab_dir)
    pool = None
    if workers > 1:
        pool = worker_pool(workers, _init_worker, (vocab_dir,))
        encode_chunks = lambda chunks: ordered_map(
            pool, _encode_chunk, chunks, max_in_flight=2 * workers
        )  # noqa
    else:
        encoder = Encoder(vocab_dir)
        encode_chunks = lambda chunks: map(encoder.encode, chunks)  # noqa
    results = []
    try:
        for input_path, output_path in zip(inputs, outputs):
            start = time.time()
            stats = {
                "input": str(input_path),
                "output": str(output_path),
                "lines": 0,
                "tokens": 0,
                "unk": 0,
            }
            size = Path(input_path).stat().st_size
            with open(input_path, encoding="utf-8-sig") as f, atomic_write(
                output_path, by=ENCODE
            ) as out, tqdm(
                total=size,
                unit="B",
                unit_scale=True,
                desc=f"encode {Path(input_path).name}",
                disable=not progress,
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
        raise PreprocessError(
            f"{input_path}: not valid UTF-8 (byte 0x{e.object[e.start]:02x})"
        ) from None
    finally:
        if pool is not None:
            pool.terminate()
    return results


def _tracked_chunks(f, chunk_lines: int, bar) -> Iterable[List[str]]:
    for chunk in read_chunks(f, chunk_lines):
        bar.update(sum(len(line.encode("utf-8")) for line in chunk))
        yield chunk


def build_parser() -> Parser:
    parser = Parser(prog=ENCODE, description=__doc__.splitlines()[0])
    parser.add_argument(
        "--vocab", required=True, help="vocabulary directory (bpe.json, dict.txt, ...)"
    )
    parser.add_argument(
        "inputs", nargs="+", metavar="INPUT", help="text files (one sentence per line)"
    )
    add_out(parser, "the encoded files to write, one per input (never an input)", nargs="+")
    add_overwrite(parser, "encoded files")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help=f"worker processes (this machine: {default_workers()})",
    )
    parser.add_argument("--chunk-lines", type=int, default=CHUNK_LINES, help="lines per work item")
    add_no_progress(parser)
    return parser


def main(argv=None) -> None:
    """Text -> space-separated dict.txt symbols, one line per line."""
    args = build_parser().parse_args(argv)
    for path in args.out:
        check_output(path, [*args.inputs, args.vocab], args.overwrite, option="--out", by=ENCODE)
    for stats in encode_files(
        args.vocab,
        args.inputs,
        args.out,
        workers=args.workers,
        chunk_lines=args.chunk_lines,
        progress=not args.no_progress,
    ):
        print(json.dumps(stats))


def cli_main(argv=None) -> None:
    run_cli(ENCODE, main, argv)


if __name__ == "__main__":
    cli_main()

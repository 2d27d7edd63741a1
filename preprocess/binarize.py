"""Binarise encoded text with fairseq-preprocess into self-describing fairseq data directories.

``fairseq-preprocess --only-source --srcdict <vocab>/dict.txt`` turns the encoded
``train``/``valid`` files into ``train.bin/.idx``, ``valid.bin/.idx`` and ``dict.txt``; ``bpe.json``
and the tokenizer files it names are copied beside them. With ``shards=N`` the encoded train file is
cut at document boundaries (blank lines) into N contiguous parts of similar size, giving
``<dest>/shard0 .. shard{N-1}``, each a complete data directory (the same valid set in each), for
``task.data=<dest>/shard0:<dest>/shard1:...``. Everything is built in a temp directory beside
``dest`` and renamed into place when complete.
"""

import array
import bisect
import collections
import json
import re
import os
import shutil
import sys
from pathlib import Path
from typing import Dict, List, Union

from fairseq_bio import runs
from fairseq_bio.cli.options import Parser, add_out, add_overwrite, run_cli
from fairseq_bio.data.tokenizer_files import bpe_file_options
from fairseq_bio.files import check_destination, make_temp_dir, remove_temp_dir, replace_dir

from .common import PreprocessError, default_workers, has_text

BINARIZED_MARKERS = ("bpe.json", "shard0/bpe.json")
# the script, and what a data directory is recorded as made by (fairseq_bio.files)
BINARIZE = "fairseq-bio-binarize"
# Encoded text has (nearly) no <unk>: byte-level BPE none, WordPiece/SentencePiece a character now
# and then. Plain text binarised with a subword dictionary is mostly <unk> (94.5 % on the demo's
# corpus).
MAX_UNKNOWN = 0.10
WARN_UNKNOWN = 0.01
_REPLACED = re.compile(r"\] (.+): (\d+) sents, (\d+) tokens, ([\d.]+)% replaced")


def fairseq_preprocess_command() -> List[str]:
    """The ``fairseq-preprocess`` of this environment (the bin directory next to
    ``sys.executable``)."""
    exe = Path(sys.executable).parent / "fairseq-preprocess"
    if not exe.exists():
        raise PreprocessError(f"{exe}: not found (is fairseq installed in this environment?)")
    return [str(exe)]


def _run_preprocess(
    dict_txt: Path, train: Path, valids: List[Path], dest: Path, workers: int
) -> Dict[str, tuple]:
    """fairseq-preprocess into ``dest``: ``train`` -> train.bin/idx, ``valids`` -> valid, valid1,
    valid2, ...; returns {input path: (tokens, fraction replaced by <unk>)} from its log."""
    paths = [dict_txt, train, *valids, dest]
    if any("," in str(path) for path in paths):
        raise PreprocessError(
            f"fairseq-preprocess splits paths at commas; rename: {', '.join(map(str, paths))}"
        )
    cmd = fairseq_preprocess_command() + [
        "--only-source",
        "--srcdict",
        str(dict_txt),
        "--trainpref",
        str(train),
        "--validpref",
        ",".join(map(str, valids)),
        "--destdir",
        str(dest),
        "--workers",
        str(workers),
        "--dataset-impl",
        "mmap",
    ]
    proc = runs.capture(cmd)
    if proc.returncode != 0:
        lines = [line.strip() for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
        raise PreprocessError(
            f"fairseq-preprocess failed (exit {proc.returncode}): {lines[-1] if lines else 'no output'}"
        )
    names = ["train"] + [_valid_name(i) for i in range(len(valids))]
    for name in names:
        for ext in ("bin", "idx"):
            if not (dest / f"{name}.{ext}").is_file():
                raise PreprocessError(f"fairseq-preprocess did not write {name}.{ext}")
    return {
        m[1]: (int(m[3]), float(m[4]) / 100) for m in _REPLACED.finditer(proc.stdout + proc.stderr)
    }


def _check_unknown(
    replaced: Dict[str, tuple], names: Dict[str, Path], vocab_dir: Path, max_unknown: float
) -> None:
    """Refuse text whose <unk> share shows it was never encoded (above ``max_unknown``); warn above
    1 %."""
    tokens, unknown = collections.Counter(), collections.Counter()
    for path, (count, rate) in replaced.items():
        user = names.get(path, Path(path))
        tokens[user] += count
        unknown[user] += count * rate
    for user in tokens:
        rate = unknown[user] / max(tokens[user], 1)
        what = f"{user}: {100 * rate:.1f}% of its {tokens[user]:,} tokens are not in {vocab_dir / 'dict.txt'} (<unk>)"
        if rate > max_unknown:
            raise PreprocessError(
                f"{what}: text that was never encoded? encode it first (fairseq-bio-encode --vocab {vocab_dir} "
                f"{user} --out {user.with_suffix('.bpe')}); --max-unknown {rate:.2f} accepts it"
            )
        if rate > WARN_UNKNOWN:
            print(f"{BINARIZE}: warning: {what}", file=sys.stderr)


def _valid_name(i: int) -> str:
    """fairseq-preprocess's name for the i-th --validpref file."""
    return "valid" if i == 0 else f"valid{i}"


def _copy_vocab_files(vocab_dir: Path, dest: Path) -> None:
    shutil.copy2(vocab_dir / "bpe.json", dest / "bpe.json")
    with open(vocab_dir / "bpe.json", encoding="utf-8") as f:
        options = json.load(f)
    for key in bpe_file_options(options):
        shutil.copy2(vocab_dir / options[key], dest / options[key])


def _document_offsets(path: Path) -> array.array:
    """Byte offsets where documents start (the first line, and each line after a blank line)."""
    starts, offset, after_blank = array.array("q"), 0, True
    with open(path, "rb") as f:
        for line in f:
            blank = not line.strip()
            if after_blank and not blank:
                starts.append(offset)
            after_blank = blank
            offset += len(line)
    return starts


def split_documents(path: Path, out_paths: List[Path]) -> None:
    """Cut ``path`` at document boundaries into ``len(out_paths)`` contiguous parts of similar
    size."""
    parts = len(out_paths)
    starts = _document_offsets(path)
    if len(starts) < parts:
        raise PreprocessError(f"{path}: {len(starts)} documents cannot fill {parts} shards")
    size = path.stat().st_size
    first_docs = [0]
    for i in range(1, parts):
        j = bisect.bisect_left(starts, size * i // parts)
        first_docs.append(min(max(j, first_docs[-1] + 1), len(starts) - (parts - i)))
    ends = [starts[j] for j in first_docs[1:]] + [size]
    with open(path, "rb") as src:
        for out_path, end in zip(out_paths, ends):
            with open(out_path, "wb") as out:
                blanks = 0
                started = False
                while src.tell() < end:
                    line = src.readline()
                    if not line.strip():
                        blanks += 1
                        continue
                    if started and blanks:
                        out.write(b"\n")  # one blank line between documents, none at either end
                    out.write(line if line.endswith(b"\n") else line + b"\n")
                    started, blanks = True, 0


def binarize(
    vocab_dir: Union[str, os.PathLike],
    train: Union[str, os.PathLike],
    valid: Union[str, os.PathLike],
    dest: Union[str, os.PathLike],
    *,
    shards: int = 1,
    workers: int = 1,
    overwrite: bool = False,
    max_unknown: float = MAX_UNKNOWN,
) -> str:
    """Binarise encoded ``train``/``valid`` into ``dest``; returns the (absolute) value for
    ``task.data``. Text with more than ``max_unknown`` of its tokens unknown to the dictionary
    (never encoded) is refused.

    ``shards=1``: ``dest`` itself is the data directory. ``shards=N``: ``dest/shard0..N-1`` and the
    returned path is ``dest/shard0:dest/shard1:...``.
    """
    vocab_dir, train, valid, dest = Path(vocab_dir), Path(train), Path(valid), Path(dest)
    if shards < 1:
        raise PreprocessError("--shards must be >= 1")
    if workers < 1:
        raise PreprocessError("--workers must be >= 1")
    for path in (vocab_dir / "dict.txt", vocab_dir / "bpe.json", train, valid):
        if not path.is_file():
            raise PreprocessError(f"{path}: no such file")
    for path, option in ((train, "--train"), (valid, "--valid")):
        if not has_text(path):  # fairseq-preprocess writes an empty .bin that training cannot mmap
            message = f"empty (no line with text); {option} needs encoded text, nothing written"
            raise PreprocessError(f"{path}: {message}")
    if not 0 <= max_unknown <= 1:
        raise PreprocessError(f"--max-unknown {max_unknown}: a fraction in [0, 1]")
    check_destination(dest, overwrite, BINARIZED_MARKERS, by=BINARIZE)
    tmp = make_temp_dir(dest)
    try:
        dict_txt = vocab_dir / "dict.txt"
        if shards == 1:
            replaced = _run_preprocess(dict_txt, train, [valid], tmp, workers)
            _check_unknown(replaced, {str(train): train, str(valid): valid}, vocab_dir, max_unknown)
            _copy_vocab_files(vocab_dir, tmp)
        else:
            parts = [tmp / f"train-part{i}.txt" for i in range(shards)]
            split_documents(train, parts)
            # One fairseq-preprocess run for all shards (its start-up costs seconds): part 0 as
            # train, valid and parts 1.. as extra valid sets (valid1, valid2, ...), then moved into
            # shard directories.
            work = tmp / "all"
            work.mkdir()
            replaced = _run_preprocess(dict_txt, parts[0], [valid] + parts[1:], work, workers)
            _check_unknown(
                replaced,
                {**{str(p): train for p in parts}, str(valid): valid},
                vocab_dir,
                max_unknown,
            )
            for i in range(shards):
                shard = tmp / f"shard{i}"
                shard.mkdir()
                source = "train" if i == 0 else _valid_name(i)
                for ext in ("bin", "idx"):
                    os.replace(work / f"{source}.{ext}", shard / f"train.{ext}")
                    shutil.copy2(work / f"valid.{ext}", shard / f"valid.{ext}")
                shutil.copy2(work / "dict.txt", shard / "dict.txt")
                _copy_vocab_files(vocab_dir, shard)
                parts[i].unlink()
            for leftover in work.iterdir():  # valid.bin/idx, dict.txt, preprocess.log
                leftover.unlink()
            work.rmdir()
        replace_dir(tmp, dest, overwrite, BINARIZED_MARKERS, by=BINARIZE)
    except BaseException:
        remove_temp_dir(tmp)
        raise
    # Absolute: fairseq-hydra-train changes the working directory before it reads task.data.
    dest = Path(os.path.abspath(dest))
    if shards == 1:
        return str(dest)
    return ":".join(str(dest / f"shard{i}") for i in range(shards))


def build_parser() -> Parser:
    parser = Parser(prog=BINARIZE, description=__doc__.splitlines()[0])
    parser.add_argument(
        "--vocab", required=True, help="vocabulary directory (dict.txt, bpe.json, ...)"
    )
    parser.add_argument(
        "--train", required=True, help="encoded training text (fairseq-bio-encode output)"
    )
    parser.add_argument("--valid", required=True, help="encoded validation text")
    add_out(parser, "the data directory to write (with --shards, its shard0, shard1, ...)")
    parser.add_argument(
        "--shards", type=int, default=1, help="split train into this many shard directories"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help=f"fairseq-preprocess workers (this machine: {default_workers()})",
    )
    add_overwrite(parser, "a data directory")
    parser.add_argument(
        "--max-unknown",
        type=float,
        default=MAX_UNKNOWN,
        help=f"refuse text with more than this fraction of tokens not in dict.txt (default {MAX_UNKNOWN}: "
        "text that was never encoded); a share above 1 %% is warned about",
    )
    return parser


def main(argv=None) -> None:
    """Encoded train/valid -> fairseq data directory (or shards); prints task.data."""
    args = build_parser().parse_args(argv)
    print(
        binarize(
            args.vocab,
            args.train,
            args.valid,
            args.out,
            shards=args.shards,
            workers=args.workers,
            overwrite=args.overwrite,
            max_unknown=args.max_unknown,
        )
    )


def cli_main(argv=None) -> None:
    run_cli(BINARIZE, main, argv)


if __name__ == "__main__":
    cli_main()

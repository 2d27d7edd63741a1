"""A vocabulary directory's tokenizer (its ``bpe.json``), shared by vocabulary learning and
encoding."""

import json
import os
from pathlib import Path
from typing import Dict, Iterator, List, Sequence, Union

from fairseq_bio.data.tokenizer_files import (
    BPE_JSON,
    WordBoundaryError,
    load_bpe_json,
    require_fastbpe,
)

from .common import PreprocessError, normalize_space

UNK = "<unk>"


def bpe_options(vocab_dir: Union[str, os.PathLike]) -> Dict:
    """``bpe.json`` of ``vocab_dir`` with its file options made absolute (ready for fairseq's
    build_bpe)."""
    try:
        return load_bpe_json(str(Path(vocab_dir) / BPE_JSON))
    except WordBoundaryError as e:
        raise PreprocessError(str(e)) from None


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
    # Exactly fairseq's reading of vocab.bpe (gpt2_bpe_utils.get_encoder): first and last line
    # dropped.
    with open(path, encoding="utf-8") as f:
        return [tuple(merge.split()) for merge in f.read().split("\n")[1:-1]]


class Encoder:
    """A vocabulary directory's tokenizer. ``symbols[id]`` is the dict.txt symbol, None for
    specials."""

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
        # ignore_merges=False: every word goes through the merges, as in GPT-2's (and fairseq's)
        # bpe().
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
            None if sp.is_control(i) or sp.is_unknown(i) else sp.id_to_piece(i)
            for i in range(sp.get_piece_size())
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
        # fastBPE emits subword strings, not ids: the vocabulary is dict.txt (absent while it is
        # being learned).
        self._fastbpe = require_fastbpe().fastBPE(options["bpe_codes"])
        self.known = None
        if dict_file.is_file():
            with open(dict_file, encoding="utf-8") as f:
                self.known = {line.rsplit(" ", 1)[0] for line in f}

    def encode_ids(self, lines: Sequence[str]) -> List[List[int]]:
        """Token ids of each (stripped) line (not for fastbpe, whose symbols are strings: use
        ``encode``)."""
        if self.kind == "fastbpe":
            raise PreprocessError("fastbpe encodes to subword strings, not ids")
        lines = [line.strip() for line in lines]
        if self.kind == "sentencepiece":
            return self._sp.encode(lines, out_type=int, num_threads=self._sp_threads)
        return [e.ids for e in self._hf.encode_batch(lines, **self._hf_kwargs)]

    def encode(self, lines: Sequence[str]) -> List[str]:
        """Each line as space-separated dict.txt symbols (``<unk>`` for anything not in
        dict.txt)."""
        if self.kind == "fastbpe":
            encoded = self._fastbpe.apply([normalize_space(line) for line in lines])
            if self.known is None:
                return encoded
            known = self.known
            return [
                " ".join(s if s in known else UNK for s in line.split(" ")) if line else ""
                for line in encoded
            ]
        symbols = self.output_symbols
        return [" ".join(symbols[i] for i in ids) for ids in self.encode_ids(lines)]


def _added_tokens(tokenizer) -> List[str]:
    """The special tokens of an HF tokenizer ([PAD], [UNK], [CLS], [SEP], [MASK] for BERT)."""
    return [
        t.content for t in tokenizer._tokenizer.get_added_tokens_decoder().values() if t.special
    ]

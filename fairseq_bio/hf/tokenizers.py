"""fairseq vocabulary -> HF tokenizer: the files of an HF tokenizer whose ids are the fairseq
dictionary's, for each fairseq BPE (gpt2 byte-level BPE, bert WordPiece, sentencepiece, fastbpe),
and the HF forms of fairseq's special symbols and of fastBPE that the import (``vocab``) reads
back."""

import json
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ..data.pair_format import PairFormat
from ..files import write_json
from .common import HFConvertError

# fairseq's Dictionary holds these at ids 0-3 and the masked-LM task appends <mask>.
FAIRSEQ_ROLES = ("<s>", "<pad>", "</s>", "<unk>")
MASK = "<mask>"
BERT_SPECIALS = {
    "<s>": "[CLS]",
    "<pad>": "[PAD]",
    "</s>": "[SEP]",
    "<unk>": "[UNK]",
    MASK: "[MASK]",
}
GPT2_MERGES_HEADER = "#version: 0.2"
# fastBPE codes end a word's last unit with "</w>"; fairseq's fastbpe symbols end every other unit
# with "@@".
END_OF_WORD, CONTINUATION = "</w>", "@@"
# A run of what Python's str.split() splits at: fairseq_bio encodes fastbpe text with each such run
# made one space.
PYTHON_WHITESPACE_RUN = (
    "[\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+"
)


def fastbpe_symbol(token: str) -> str:
    """The dict.txt symbol of a fastBPE-style HF BPE token: ``ab</w>`` (ends a word) -> ``ab``,
    ``ab`` -> ``ab@@``."""
    return token[: -len(END_OF_WORD)] if token.endswith(END_OF_WORD) else token + CONTINUATION


def fastbpe_pipeline():
    """(normaliser, pre-tokenizer) of a fastBPE-style HF tokenizer: words split as fairseq_bio's
    fastbpe encoding splits them (fastBPE splits at " ", the text's whitespace runs having been made
    one space first).
    """
    from tokenizers import Regex, normalizers, pre_tokenizers

    # After the normaliser no character Rust counts as whitespace is left but " ".
    return normalizers.Replace(Regex(PYTHON_WHITESPACE_RUN), " "), pre_tokenizers.WhitespaceSplit()


def write_hf_tokenizer(
    out: Path, dictionary, bpe: Dict, max_length: int, pair: PairFormat = PairFormat()
) -> Dict:
    """HF tokenizer files whose ids are ``dictionary``'s, for the fairseq BPE ``bpe`` (a loaded
    bpe.json), pairs in the model's ``pair`` format (BERT's ``<s> a </s> b </s>``, b of token type
    1 with segments; RoBERTa's ``<s> a </s></s> b </s>``); returns the tokenizer's class and a
    description (and a note where HF may differ from fairseq)."""
    writers = {
        "gpt2": _write_byte_bpe_tokenizer,
        "bert": _write_wordpiece_tokenizer,
        "sentencepiece": _write_sentencepiece_tokenizer,
        "fastbpe": _write_fastbpe_tokenizer,
    }
    if bpe["_name"] not in writers:
        raise HFConvertError(
            f'bpe "{bpe["_name"]}": HF tokenizers are written for gpt2 (byte-level BPE), bert (WordPiece), '
            "sentencepiece and fastbpe vocabularies"
        )
    return writers[bpe["_name"]](out, dictionary, bpe, max_length, pair)


def _specials(dictionary) -> Dict[str, int]:
    return {
        "<s>": dictionary.bos(),
        "<pad>": dictionary.pad(),
        "</s>": dictionary.eos(),
        "<unk>": dictionary.unk(),
        MASK: dictionary.index(MASK),
    }


def _word_symbols(dictionary):
    """Dictionary entries that stand for tokens (not control symbols or fairseq's padding words)."""
    from ..data.word_boundaries import special_symbols

    special = special_symbols(dictionary)
    return {
        dictionary[i]: i for i in range(len(dictionary)) if not special[i] and i != dictionary.unk()
    }


def _write_byte_bpe_tokenizer(
    out: Path, dictionary, bpe: Dict, max_length: int, pair: PairFormat
) -> Dict:
    import transformers
    from tokenizers import AddedToken

    if pair.one_separator:
        raise HFConvertError(
            "a model reading BERT's pairs over a byte-level BPE (gpt2) vocabulary: transformers' "
            "RobertaTokenizer has RoBERTa's pair template only, so HF would read its pairs otherwise"
        )

    with open(bpe["gpt2_encoder_json"], encoding="utf-8") as f:
        encoder = json.load(f)
    with open(bpe["gpt2_vocab_bpe"], encoding="utf-8") as f:
        merges = f.read().split("\n")[
            1:-1
        ]  # exactly fairseq's reading: header and final empty line dropped
    symbols = _word_symbols(dictionary)
    vocab = _specials(dictionary)
    for token, gpt2_id in encoder.items():
        if str(gpt2_id) not in symbols:
            raise HFConvertError(
                f"{bpe['gpt2_encoder_json']}: token {token!r} (id {gpt2_id}) is not in dict.txt; fairseq would map it "
                "to <unk> where an HF tokenizer cannot"
            )
        if token in vocab:
            raise HFConvertError(
                f"{bpe['gpt2_encoder_json']}: token {token!r} clashes with a special token"
            )
        vocab[token] = symbols[str(gpt2_id)]
    # transformers' own RoBERTa tokenizer over the GPT-2 merges, its ids remapped to fairseq's:
    # byte-level BPE without a prefix space and <s> a </s></s> b </s>, as fairseq's gpt2 BPE and hub
    # encode do.
    tokenizer = transformers.RobertaTokenizer(
        vocab=vocab,
        merges=[tuple(m.split()) for m in merges],
        add_prefix_space=False,
        trim_offsets=True,
        mask_token=AddedToken(MASK, special=True, lstrip=True, normalized=False),
        model_max_length=max_length,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.save_pretrained(str(out))
    # The classic files too, for tokenizers that read them (transformers 4's slow RobertaTokenizer).
    with open(out / "vocab.json", "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(out / "merges.txt", "w", encoding="utf-8", newline="\n") as f:
        f.write(GPT2_MERGES_HEADER + "\n")
        f.writelines(m + "\n" for m in merges)
    return {"class": "RobertaTokenizer", "description": "RoBERTa byte-level BPE (GPT-2 format)"}


def _write_wordpiece_tokenizer(
    out: Path, dictionary, bpe: Dict, max_length: int, pair: PairFormat
) -> Dict:
    import transformers

    with open(bpe["bpe_vocab_file"], encoding="utf-8") as f:
        bpe_tokens = {line.rstrip("\n") for line in f} - set(BERT_SPECIALS.values())
    symbols = _word_symbols(dictionary)
    if set(symbols) != bpe_tokens:
        extra = sorted(set(symbols) ^ bpe_tokens)[0]
        raise HFConvertError(
            f"{bpe['bpe_vocab_file']}: its tokens and dict.txt's symbols differ (e.g. {extra!r}); an HF WordPiece "
            "tokenizer over the dictionary would split words differently from fairseq's bert BPE"
        )
    cased = bool(bpe.get("bpe_cased", False))
    vocab = {BERT_SPECIALS[role]: i for role, i in _specials(dictionary).items()}
    vocab.update(symbols)
    by_id = sorted(vocab.items(), key=lambda item: item[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise HFConvertError("dict.txt: the dictionary has entries that are no WordPiece token")
    with open(out / "vocab.txt", "w", encoding="utf-8", newline="\n") as f:
        f.writelines(token + "\n" for token, _ in by_id)
    # fairseq's bert BPE runs transformers' BertTokenizer(do_lower_case=not cased): its WordPiece
    # model, BERT normaliser and pre-tokenizer, over the dictionary's ids. Saved as
    # PreTrainedTokenizerFast, not BertTokenizer: that class rebuilds BERT's own pair template
    # ([CLS] a [SEP] b [SEP], token type 1 for b) on loading, where a model without token types
    # reads <s> a </s></s> b </s>; one with them gets BERT's template from _save_fast_tokenizer.
    tokenizer = transformers.BertTokenizer(vocab=vocab, do_lower_case=not cased).backend_tokenizer
    template = "BERT's pair template" if pair.one_separator else "fairseq's pair template"
    description = f"WordPiece ({'cased' if cased else 'uncased'}, BERT's normalisation, {template})"
    specials = _specials(dictionary)
    return _save_fast_tokenizer(
        tokenizer,
        out,
        specials,
        list(BERT_SPECIALS.values()),
        max_length,
        description,
        names=BERT_SPECIALS,
        pair=pair,
    )


def read_fastbpe_codes(path: str) -> List[Tuple[str, str]]:
    """The merges of a fastBPE codes file (``left right count`` per line, best first), as fastBPE
    reads them."""
    merges, seen = [], set()
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                fields = line.rstrip("\n").split(" ")
                if len(fields) != 3 or not all(fields) or not fields[2].isdigit():
                    raise HFConvertError(
                        f"{path}:{number}: expected 'left right count', got {line.rstrip()!r}"
                    )
                pair = (fields[0], fields[1])
                if pair in seen:  # fastBPE itself refuses a repeated pair
                    raise HFConvertError(
                        f"{path}:{number}: merge {' '.join(pair)!r} is listed twice"
                    )
                seen.add(pair)
                merges.append(pair)
    except FileNotFoundError:
        raise HFConvertError(f"{path}: not found (bpe_codes in bpe.json)") from None
    except UnicodeDecodeError:
        raise HFConvertError(f"{path}: not UTF-8 text") from None
    return merges


def _write_fastbpe_tokenizer(
    out: Path, dictionary, bpe: Dict, max_length: int, pair: PairFormat
) -> Dict:
    # Built here: transformers has no tokenizer class or converter for fastBPE / subword-nmt codes.
    from tokenizers import Tokenizer, decoders, models

    path = bpe["bpe_codes"]
    merges = read_fastbpe_codes(path)
    symbols = _word_symbols(dictionary)
    # fastBPE splits a word into characters, the last one marked "</w>", and applies the merges by
    # rank (each round merges every occurrence of the best-ranked pair), as HF's BPE does with
    # end_of_word_suffix "</w>". What it can emit: single characters and merge results; each must be
    # the dict.txt symbol fairseq reads.
    vocab, source = {}, {}  # HF token -> fairseq id; fairseq id -> the HF token given it

    def add(token: str, where: str) -> None:
        symbol = fastbpe_symbol(token)
        if symbol not in symbols:
            raise HFConvertError(
                f"{where}: {token!r} (dict.txt symbol {symbol!r}) is not in dict.txt; fairseq would read it as <unk> "
                "where an HF tokenizer cannot"
            )
        i = symbols[symbol]
        if source.setdefault(i, token) != token:
            raise HFConvertError(
                f"{where}: {token!r} and {source[i]!r} are both dict.txt symbol {symbol!r}; an HF tokenizer needs one "
                "id per token"
            )
        vocab[token] = i

    for (
        symbol
    ) in symbols:  # the characters dict.txt knows, inside a word ("c@@") or ending it ("c")
        if len(symbol) == 1 + len(CONTINUATION) and symbol.endswith(CONTINUATION):
            add(symbol[0], "dict.txt")
        elif len(symbol) == 1:
            add(symbol + END_OF_WORD, "dict.txt")
    for number, (left, right) in enumerate(merges, 1):
        for token in (left, right, left + right):
            if token not in vocab:
                add(token, f"{path}:{number}")
    specials = _specials(dictionary)
    # Control symbols (fairseq's specials, <mask>, madeupword padding) are added tokens; dict.txt
    # symbols no merge or character makes are never emitted and keep their ids as their own (unused)
    # tokens.
    controls = [dictionary[i] for i in range(len(dictionary)) if dictionary[i] not in symbols]
    for symbol, i in symbols.items():
        if i not in source:
            token = (
                symbol[: -len(CONTINUATION)]
                if symbol.endswith(CONTINUATION)
                else symbol + END_OF_WORD
            )
            vocab.setdefault(token, i)
    vocab.update({symbol: dictionary.index(symbol) for symbol in controls})
    model = models.BPE(
        vocab,
        merges,
        unk_token="<unk>",
        end_of_word_suffix=END_OF_WORD,
        fuse_unk=False,
        ignore_merges=False,
    )
    tokenizer = Tokenizer(model)
    tokenizer.normalizer, tokenizer.pre_tokenizer = fastbpe_pipeline()
    tokenizer.decoder = decoders.BPEDecoder(suffix=END_OF_WORD)
    description = 'fastBPE (subword-nmt codes as an HF BPE with "</w>")'
    return _save_fast_tokenizer(
        tokenizer, out, specials, controls, max_length, description, pair=pair
    )


# SentencePiece settings the exported tokenizer reproduces (sentencepiece's defaults, which
# fairseq-bio-vocab uses).
_SPM_SETTINGS = {
    ("normalizer_spec", "add_dummy_prefix"): True,
    ("normalizer_spec", "remove_extra_whitespaces"): True,
    ("normalizer_spec", "escape_whitespaces"): True,
    ("trainer_spec", "byte_fallback"): False,
    ("trainer_spec", "treat_whitespace_as_suffix"): False,
    ("trainer_spec", "split_by_whitespace"): True,
    ("trainer_spec", "allow_whitespace_only_pieces"): False,
}
_SPM_NORMAL, _SPM_UNKNOWN, _SPM_CONTROL = 1, 2, 3  # ModelProto.SentencePiece.Type
_SPM_UNIGRAM, _SPM_BPE = 1, 2  # TrainerSpec.ModelType
# sentencepiece adds its scores in float32, HF's Unigram in float64: equal-scoring segmentations may
# differ.
SPM_UNIGRAM_NOTE = (
    "SentencePiece unigram: where two segmentations of a word score exactly the same (runs such as '000' with "
    "pieces '0' and '00'), sentencepiece picks one by the rounding of its float32 sums and HF's Unigram (float64) "
    "may pick the other order of the same pieces"
)


def read_sentencepiece_model(path: str):
    """The ``ModelProto`` of a SentencePiece model file (pieces, scores, types, normaliser and
    trainer settings)."""
    try:
        from sentencepiece import sentencepiece_model_pb2
    except ImportError as e:  # the generated module needs protobuf
        raise HFConvertError(
            f"{path}: reading a SentencePiece model needs sentencepiece and protobuf ({e})"
        ) from None
    proto = sentencepiece_model_pb2.ModelProto()
    try:
        with open(path, "rb") as f:
            proto.ParseFromString(f.read())
    except FileNotFoundError:
        raise HFConvertError(f"{path}: not found (sentencepiece_model in bpe.json)") from None
    except Exception as e:  # protobuf's DecodeError
        raise HFConvertError(f"{path}: not a SentencePiece model ({e})") from None
    return proto


def _write_sentencepiece_tokenizer(
    out: Path, dictionary, bpe: Dict, max_length: int, pair: PairFormat
) -> Dict:
    # Built here, not with transformers' SpmConverter: that keeps sentencepiece's piece ids
    # (fairseq's dictionary orders the pieces its own way) and keeps leading spaces, which
    # sentencepiece's remove_extra_whitespaces drops.
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    from ..data.word_boundaries import SENTENCEPIECE_SPACE

    path = bpe["sentencepiece_model"]
    proto = read_sentencepiece_model(path)
    for (section, key), expected in _SPM_SETTINGS.items():
        if getattr(getattr(proto, section), key) != expected:
            raise HFConvertError(
                f"{path}: {section}.{key} is {not expected}; the exported tokenizer reproduces sentencepiece's "
                f"default ({expected}) only"
            )
    model_type = proto.trainer_spec.model_type
    if model_type not in (_SPM_UNIGRAM, _SPM_BPE):
        raise HFConvertError(
            f"{path}: model type {model_type} (word/char); unigram and bpe models are exported"
        )
    scores = {}
    for piece in proto.pieces:
        if piece.type == _SPM_NORMAL:
            scores[piece.piece] = piece.score
        elif piece.type not in (_SPM_UNKNOWN, _SPM_CONTROL):  # user-defined, unused or byte pieces
            raise HFConvertError(
                f"{path}: piece {piece.piece!r} has type {piece.type}; only normal pieces are exported"
            )
    symbols = _word_symbols(dictionary)
    for piece in scores:
        if piece not in symbols:
            raise HFConvertError(
                f"{path}: piece {piece!r} is not in dict.txt; fairseq maps it to <unk> where an HF tokenizer cannot"
            )
    for symbol in symbols:
        if symbol not in scores:
            raise HFConvertError(f"dict.txt: symbol {symbol!r} is no piece of {path}")
    specials = _specials(dictionary)
    # Control symbols (fairseq's specials, <mask>, madeupword padding) are added tokens: matched in
    # raw text before the model, never produced by it.
    controls = [dictionary[i] for i in range(len(dictionary)) if dictionary[i] not in scores]
    if model_type == _SPM_UNIGRAM:
        vocab = [(dictionary[i], scores.get(dictionary[i], 0.0)) for i in range(len(dictionary))]
        model = models.Unigram(vocab, unk_id=dictionary.unk(), byte_fallback=False)
    else:
        # sentencepiece's BPE merges the adjacent pair whose union is the best-scoring piece; HF's
        # BPE applies merge rules by rank: every split of every piece into two pieces, ranked by the
        # union's score (ties in the model's piece order; transformers' generate_merges breaks them
        # by length instead).
        order = {piece: rank for rank, piece in enumerate(sorted(scores, key=lambda p: -scores[p]))}
        merges = sorted(
            ((order[p], order[p[:k]], order[p[k:]]), (p[:k], p[k:]))
            for p in scores
            for k in range(1, len(p))
            if p[:k] in scores and p[k:] in scores
        )
        vocab = {dictionary[i]: i for i in range(len(dictionary))}
        model = models.BPE(
            vocab, [m for _, m in merges], unk_token="<unk>", fuse_unk=True, byte_fallback=False
        )
    tokenizer = Tokenizer(model)
    # sentencepiece: the charsmap (NFKC, nmt_nfkc's extras), leading/trailing/repeated spaces
    # removed, "▁" before every word; spaces only (other whitespace is whatever the charsmap makes
    # of it).
    charsmap = proto.normalizer_spec.precompiled_charsmap
    steps = [normalizers.Precompiled(charsmap)] if charsmap else []
    tokenizer.normalizer = normalizers.Sequence(
        steps
        + [normalizers.Replace(Regex("^ +| +$"), ""), normalizers.Replace(Regex(" {2,}"), " ")]
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(
        SENTENCEPIECE_SPACE, prepend_scheme="always", split=True
    )
    tokenizer.decoder = decoders.Metaspace(SENTENCEPIECE_SPACE, prepend_scheme="always", split=True)
    kind = "unigram" if model_type == _SPM_UNIGRAM else "BPE"
    description = f"SentencePiece {kind} (rebuilt with tokenizers)"
    info = _save_fast_tokenizer(
        tokenizer, out, specials, controls, max_length, description, pair=pair
    )
    if model_type == _SPM_UNIGRAM:
        info["note"] = SPM_UNIGRAM_NOTE
    return info


def _save_fast_tokenizer(
    tokenizer,
    out: Path,
    specials: Dict,
    controls,
    max_length: int,
    description: str,
    names: Optional[Dict] = None,
    pair: PairFormat = PairFormat(),
) -> Dict:
    """A ``tokenizers`` tokenizer with fairseq's ``<s> A </s>`` / ``<s> A </s></s> B </s>`` template
    (one token type; ``pair`` BERT's: ``<s> A </s> B </s>``, with segments ``B </s>`` of type 1) and
    ``controls`` as special tokens, saved as ``tokenizer.json`` for ``PreTrainedTokenizerFast``;
    ``names`` maps fairseq's ``<s> </s> <pad> <unk> <mask>`` to the vocabulary's own tokens
    (default: the same)."""
    from tokenizers import AddedToken, processors

    name = {role: (names or {}).get(role, role) for role in specials}
    bos, eos = name["<s>"], name["</s>"]
    # the pair as the model's hub encode and its tasks' rows make it (data/pair_format.py)
    second = f"$B:1 {eos}:1" if pair.segments else f"$B {eos}"
    template = f"{bos} $A {eos} {second}" if pair.one_separator else f"{bos} $A {eos} {eos} $B {eos}"
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}",
        pair=template,
        special_tokens=[(bos, specials["<s>"]), (eos, specials["</s>"])],
    )
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True, normalized=False, lstrip=t == MASK) for t in controls]
    )
    tokenizer.save(str(out / "tokenizer.json"))
    # Written here, not by PreTrainedTokenizerFast.save_pretrained: transformers 5 records the class
    # as "TokenizersBackend", which transformers 4 cannot load; "PreTrainedTokenizerFast" loads in
    # both.
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": bos,
        "eos_token": eos,
        "sep_token": eos,
        "cls_token": bos,
        "unk_token": name["<unk>"],
        "pad_token": name["<pad>"],
        "mask_token": name["<mask>"],
        "model_max_length": max_length,
        "clean_up_tokenization_spaces": False,
    }
    if pair.segments:  # tokenizer(a, b) then gives the model the token types it reads
        config["model_input_names"] = ["input_ids", "token_type_ids", "attention_mask"]
    write_json(out / "tokenizer_config.json", config)
    return {"class": config["tokenizer_class"], "description": description}

"""How vocabularies split biomedical words: BioMegatron's break-out rate and PubMedBERT's term table, measured.

Per vocabulary and CoNLL NER dataset: sub-tokens per entity word (BioMegatron Table 3's
#tokens/#words) and per word, the share of entity words kept whole and of those with the unknown
token; per vocabulary, the share of a term list (default: PubMedBERT Table 1, shipped with the
paper's columns) that is one sub-token. Words are encoded one at a time as the tagging task encodes
them (``WordEncoder``), so the numbers are what the tagger sees. A vocabulary is a fairseq one
(``bpe.json``) or an HF tokenizer directory, read offline. Outputs: ``vocab_report.md``, ``.json``
and ``.png``.
"""

import collections
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from fairseq_bio.cli.options import Parser, add_data, add_out, add_overwrite, run_cli
from fairseq_bio.files import atomic_write, check_output

from .common import PreprocessError

DATA_DIR = Path(__file__).resolve().parent / "data"
DEFAULT_TERMS = DATA_DIR / "pubmedbert_table1_terms.tsv"
PUBLISHED_BREAK_OUT = DATA_DIR / "biomegatron_table3.tsv"
OUTPUT_NAMES = ("vocab_report.md", "vocab_report.json", "vocab_report.png")
VOCAB_REPORT = (
    "fairseq-bio-vocab-report"  # the script, and what its report files are recorded as made by
)
HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
EXAMPLE_WORDS = 10  # most frequent entity words shown with their pieces in the JSON


@dataclass
class Vocabulary:
    """A tokenizer seen word by word: ``pieces(word, first)`` are the sub-tokens of one word
    (``first``: the word opens its sentence), never empty."""

    name: str
    path: str
    kind: str
    size: int
    unk: Optional[str]
    pieces: Callable[[str, bool], List[str]]
    _cache: Dict[Tuple[str, bool], List[str]] = field(default_factory=dict, repr=False)

    def split(self, word: str, first: bool = False) -> List[str]:
        key = (word, first)
        pieces = self._cache.get(key)
        if pieces is None:
            pieces = self._cache[key] = self.pieces(word, first)
        return pieces


def load_vocabulary(path: Union[str, os.PathLike], name: Optional[str] = None) -> Vocabulary:
    """A fairseq vocabulary directory (``bpe.json`` + ``dict.txt``) or an HF tokenizer directory."""
    path = Path(path)
    name = name or path.name
    if not path.is_dir():
        raise PreprocessError(
            f"{path}: not a directory (give a vocabulary or HF tokenizer directory)"
        )
    if (path / "bpe.json").is_file():
        return _fairseq_vocabulary(path, name)
    if any((path / f).is_file() for f in HF_TOKENIZER_FILES):
        return _hf_vocabulary(path, name)
    raise PreprocessError(
        f"{path}: neither bpe.json (fairseq-bio-vocab, fairseq-bio-import-hf) nor HF tokenizer files "
        f"({', '.join(HF_TOKENIZER_FILES)})"
    )


def _fairseq_vocabulary(path: Path, name: str) -> Vocabulary:
    from fairseq_bio.data.dictionary import load_dictionary
    from fairseq_bio.data.tagging_dataset import WordEncoder
    from fairseq_bio.data.tokenizer_files import WordBoundaryError, load_bpe_json

    if not (path / "dict.txt").is_file():
        raise PreprocessError(
            f"{path / 'dict.txt'}: not found (a fairseq vocabulary has dict.txt beside bpe.json)"
        )
    try:
        spec = load_bpe_json(str(path / "bpe.json"))
    except WordBoundaryError as e:
        raise PreprocessError(str(e)) from None
    dictionary = load_dictionary(path / "dict.txt")
    try:
        encoder = WordEncoder(dictionary, spec)
    except ImportError as e:  # fastBPE, an optional extra
        raise PreprocessError(f"{path / 'bpe.json'}: {e}") from None
    kind = spec["_name"]
    if kind == "bert":
        kind += " (cased)" if spec.get("bpe_cased") else " (uncased)"
    # dict.txt of a byte BPE holds GPT-2 token ids: show their byte-level text instead.
    decoder = encoder.bpe.bpe.decoder if spec["_name"] == "gpt2" else {}

    def symbol(i: int) -> str:
        s = dictionary[i]
        return decoder.get(int(s), s) if decoder and s.isdigit() else s

    def pieces(word: str, first: bool) -> List[str]:
        return [symbol(i) for i in encoder.encode(word, first)]

    return Vocabulary(
        name, str(path), f"fairseq {kind}", len(dictionary) - dictionary.nspecial, "<unk>", pieces
    )


def _hf_vocabulary(path: Path, name: str) -> Vocabulary:
    if (path / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        try:
            tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        except Exception as e:  # tokenizers raises a bare Exception on malformed files
            raise PreprocessError(
                f"{path / 'tokenizer.json'}: not a tokenizers file ({e})"
            ) from None
    else:
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise PreprocessError(
                f"{path}: no tokenizer.json, and transformers is not installed to read it"
            ) from None
        try:
            hf = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except Exception as e:
            raise PreprocessError(
                f"{path}: AutoTokenizer cannot read it offline ({str(e).splitlines()[0]})"
            ) from None
        if not hf.is_fast:
            raise PreprocessError(
                f"{path}: only a slow (Python) tokenizer loads; give a directory with tokenizer.json"
            )
        tokenizer = hf.backend_tokenizer
    # Words are measured one at a time: a saved padding/truncation setting (sentence-transformers
    # pads to 128) would add pieces that are not the word's.
    tokenizer.no_padding()
    tokenizer.no_truncation()
    spec = json.loads(tokenizer.to_str())
    model = spec.get("model") or {}
    # Byte-level BPE marks a word that follows a space, as fairseq's gpt2 BPE does; other HF
    # pre-tokenizers drop the space (BERT) or mark every word alike.
    space_prefix = '"ByteLevel"' in json.dumps(spec.get("pre_tokenizer"))
    unk = model.get("unk_token")

    def pieces(word: str, first: bool) -> List[str]:
        text = " " + word if space_prefix and not first else word
        return tokenizer.encode(text, add_special_tokens=False).tokens or [unk or "<unk>"]

    return Vocabulary(
        name, str(path), f"HF {model.get('type', '?')}", tokenizer.get_vocab_size(), unk, pieces
    )


# ---------------------------------------------------------------------------------------------------- data


@dataclass
class Dataset:
    """CoNLL sentences of one NER dataset: ``sentences`` of ``(words, tags)``."""

    name: str
    files: List[str]
    sentences: List[Tuple[List[str], List[str]]]


def load_dataset(path: Union[str, os.PathLike], splits: Sequence[str] = ("train",)) -> Dataset:
    """A folder of CoNLL files (``<split>.tsv`` for each split) or one CoNLL file; tags are
    checked."""
    from fairseq_bio.data.conll import TaggingDataError, read_conll
    from fairseq_bio.metrics.tagging import split_tag

    path = Path(path)
    if path.is_dir():
        files = [path / f"{split}.tsv" for split in splits]
        name = path.name
    elif path.is_file():
        files, name = [path], f"{path.parent.name}/{path.stem}"
    else:
        raise PreprocessError(f"{path}: no such file or directory")
    sentences = []
    for file in files:
        if not file.is_file():
            raise PreprocessError(f"{file}: not found (splits: {', '.join(splits)})")
        try:
            read = read_conll(file)
        except TaggingDataError as e:
            raise PreprocessError(str(e)) from None
        for sentence in read:
            for tag, line in zip(sentence.tags, sentence.lines):
                if tag != "O":
                    try:
                        split_tag(tag)
                    except ValueError:
                        raise PreprocessError(
                            f"{file}:{line}: tag {tag!r} is not O or B-/I-/E-/S-/L-/U-<type>"
                        ) from None
            sentences.append((sentence.words, sentence.tags))
    return Dataset(name, [str(f) for f in files], sentences)


def read_terms(path: Union[str, os.PathLike]) -> Tuple[List[Dict], List[str]]:
    """Terms of a term list and the names of its published columns.

    A plain file holds one term per line; a TSV whose header starts with ``term`` may add a
    ``category`` column and 0/1 columns saying whether a published vocabulary holds the term whole.
    ``#`` lines are comments.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise PreprocessError(f"{path}: not found") from None
    except UnicodeDecodeError as e:
        raise PreprocessError(f"{path}: not valid UTF-8 (byte 0x{e.object[e.start]:02x})") from None
    rows = [
        (n, line.rstrip("\r"))
        for n, line in enumerate(lines, 1)
        if line.strip() and not line.startswith("#")
    ]
    header = rows[0][1].split("\t") if rows and rows[0][1].split("\t")[0] == "term" else None
    if header:
        rows = rows[1:]
    published = [h for h in (header or [])[1:] if h != "category"]
    terms = []
    for n, line in rows:
        cells = line.split("\t") if header else [line.strip()]
        if header and len(cells) != len(header):
            raise PreprocessError(f"{path}:{n}: {len(cells)} columns; the header has {len(header)}")
        row = dict(zip(header or ["term"], cells))
        if not row["term"].strip() or len(row["term"].split()) != 1:
            raise PreprocessError(f"{path}:{n}: term {row['term']!r} is not one word")
        entry = {"term": row["term"].strip(), "category": row.get("category", "")}
        entry["published"] = {}
        for column in published:
            if row[column] not in ("0", "1"):
                raise PreprocessError(
                    f"{path}:{n}: field {column!r} is {row[column]!r}; expected 0 or 1"
                )
            entry["published"][column] = row[column] == "1"
        terms.append(entry)
    if not terms:
        raise PreprocessError(f"{path}: no terms")
    return terms, published


def _published_break_out() -> Dict[str, Dict[str, float]]:
    rows = [
        line.split("\t") for line in PUBLISHED_BREAK_OUT.read_text(encoding="utf-8").splitlines()
    ]
    rows = [r for r in rows if not r[0].startswith("#")]
    header = rows[0]
    return {r[0]: {h: float(v) for h, v in zip(header[1:], r[1:])} for r in rows[1:]}


# ------------------------------------------------------------------------------------------------- measures


def word_stats(vocab: Vocabulary, dataset: Dataset) -> Dict:
    """Sub-tokens per word over entity words and all words, entity words whole / with the unknown
    token.

    Entity words are the words inside mentions (tag not ``O``). Each word is encoded alone with the
    vocabulary's fairseq BPE, a space before every word but a sentence's first for byte-level
    BPE."""
    words = entity_words = pieces = entity_pieces = whole = unk = 0
    frequent = collections.Counter()
    for sentence_words, tags in dataset.sentences:
        for i, (word, tag) in enumerate(zip(sentence_words, tags)):
            split = vocab.split(word, i == 0)
            words += 1
            pieces += len(split)
            if tag != "O":
                entity_words += 1
                entity_pieces += len(split)
                whole += len(split) == 1
                unk += vocab.unk in split
                frequent[word] += 1
    return {
        "vocabulary": vocab.name,
        "dataset": dataset.name,
        "sentences": len(dataset.sentences),
        "words": words,
        "subtokens": pieces,
        "entity_words": entity_words,
        "entity_subtokens": entity_pieces,
        "subtokens_per_word": pieces / words if words else None,
        "subtokens_per_entity_word": entity_pieces / entity_words if entity_words else None,
        "entity_words_whole": whole / entity_words if entity_words else None,
        "entity_words_unk": unk / entity_words if entity_words else None,
        "frequent_entity_words": [
            {"word": w, "count": c, "pieces": vocab.split(w)}
            for w, c in frequent.most_common(EXAMPLE_WORDS)
        ],
    }


def term_coverage(vocab: Vocabulary, terms: Sequence[Dict]) -> Dict:
    """Pieces of each term (as a word inside a sentence) and the share of terms that are one
    piece."""
    pieces = {t["term"]: vocab.split(t["term"]) for t in terms}
    return {
        "vocabulary": vocab.name,
        "pieces": pieces,
        "covered": sum(len(p) == 1 for p in pieces.values()),
        "coverage": sum(len(p) == 1 for p in pieces.values()) / len(terms),
    }


def vocab_report(
    vocabs: Sequence[Union[str, os.PathLike, Tuple[str, Union[str, os.PathLike]]]],
    data: Sequence[Union[str, os.PathLike]],
    out_dir: Union[str, os.PathLike],
    *,
    splits: Sequence[str] = ("train",),
    terms: Union[str, os.PathLike] = DEFAULT_TERMS,
    plot: bool = True,
    overwrite: bool = False,
) -> Dict:
    """Measure every vocabulary on every dataset and the term list; write md/json/png into
    ``out_dir`` (a report there is replaced only with ``overwrite`` and only if an earlier report
    wrote it)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise PreprocessError(
            f"{out_dir}: exists and is not a directory; --out names the folder for the report"
        )
    if not vocabs:
        raise PreprocessError("give at least one --vocab")
    if not data:
        raise PreprocessError("give at least one --data")
    named = [v if isinstance(v, tuple) else (None, v) for v in vocabs]
    names = [n or Path(p).name for n, p in named]
    # Two directories called "vocab" get their parent's name too.
    names = [
        n if names.count(n) == 1 or given else f"{Path(p).parent.name}/{n}"
        for n, (given, p) in zip(names, named)
    ]
    if len(set(names)) != len(names):
        raise PreprocessError(
            f"two vocabularies are both called {_duplicate(names)!r}; name them NAME=PATH"
        )
    for output in OUTPUT_NAMES[: 2 + plot]:  # before the measuring: a refusal costs nothing
        check_output(
            out_dir / output,
            [*(p for _, p in named), *data, terms],
            overwrite,
            option="--out",
            by=VOCAB_REPORT,
        )
    loaded = [load_vocabulary(p, n) for n, (_, p) in zip(names, named)]
    datasets = [load_dataset(d, splits) for d in data]
    if len({d.name for d in datasets}) != len(datasets):
        raise PreprocessError(
            f"two datasets are both called {_duplicate([d.name for d in datasets])!r}"
        )
    term_list, published_columns = read_terms(terms)

    results = [word_stats(v, d) for v in loaded for d in datasets]
    coverage = [term_coverage(v, term_list) for v in loaded]
    published_coverage = {
        c: sum(t["published"][c] for t in term_list) / len(term_list) for c in published_columns
    }
    report = {
        "vocabularies": [
            {"name": v.name, "path": v.path, "kind": v.kind, "size": v.size} for v in loaded
        ],
        "datasets": [
            {"name": d.name, "files": d.files, "sentences": len(d.sentences)} for d in datasets
        ],
        "splits": list(splits),
        "results": results,
        "terms": {
            "source": str(terms),
            "terms": term_list,
            "coverage": {c["vocabulary"]: c["coverage"] for c in coverage},
            "pieces": {c["vocabulary"]: c["pieces"] for c in coverage},
            "published_coverage": published_coverage,
        },
        "published_break_out": _published_break_out(),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    with atomic_write(out_dir / OUTPUT_NAMES[1], by=VOCAB_REPORT) as f:
        json.dump(report, f, indent=2, ensure_ascii=False)
        f.write("\n")
    with atomic_write(out_dir / OUTPUT_NAMES[0], by=VOCAB_REPORT) as f:
        f.write(markdown(report))
    if plot:
        _plot(report, out_dir / OUTPUT_NAMES[2])
    return report


def _duplicate(names: List[str]) -> str:
    return next(n for n in names if names.count(n) > 1)


def _fmt(x: Optional[float], digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def markdown(report: Dict) -> str:
    """The report's tables as markdown."""
    sizes = {v["name"]: v for v in report["vocabularies"]}
    lines = [
        f"Sub-tokens per word on the {'+'.join(report['splits'])} split (entity words: tag not O; "
        "BioMegatron Table 3's break-out rate is the entity column)",
        "",
        "| vocabulary | kind | size | dataset | entity words | sub-tokens / entity word | sub-tokens / word "
        "| entity words whole | entity words with unk |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in report["results"]:
        v = sizes[r["vocabulary"]]
        lines.append(
            f"| {v['name']} | {v['kind']} | {v['size']:,} | {r['dataset']} | {r['entity_words']:,} "
            f"| {_fmt(r['subtokens_per_entity_word'])} | {_fmt(r['subtokens_per_word'])} "
            f"| {_pct(r['entity_words_whole'])} | {_pct(r['entity_words_unk'])} |"
        )
    published = report["published_break_out"]
    columns = list(next(iter(published.values())))
    lines += [
        "",
        "Published (BioMegatron Table 3, sub-tokens per entity word, training sets): "
        + "; ".join(
            f"{name}: " + ", ".join(f"{c} {v[c]}" for c in columns) for name, v in published.items()
        ),
        "",
    ]
    terms = report["terms"]
    vocab_names = list(terms["pieces"])
    paper = list(terms["published_coverage"])
    lines += [
        f"Terms kept whole (one sub-token, as a word inside a sentence; list: {Path(terms['source']).name})",
        "",
        "| term | category | " + " | ".join(vocab_names + [f"{c} (paper)" for c in paper]) + " |",
        "| --- | --- | " + " | ".join(["---"] * (len(vocab_names) + len(paper))) + " |",
    ]
    for t in terms["terms"]:
        cells = []
        for name in vocab_names:
            pieces = terms["pieces"][name][t["term"]]
            cells.append("✓" if len(pieces) == 1 else " ".join(pieces).replace("|", "\\|"))
        cells += ["✓" if t["published"][c] else "" for c in paper]
        lines.append(f"| {t['term']} | {t['category']} | " + " | ".join(cells) + " |")
    lines.append(
        "| **coverage** | | "
        + " | ".join(_pct(terms["coverage"][n]) for n in vocab_names)
        + "".join(f" | {_pct(terms['published_coverage'][c])}" for c in paper)
        + " |"
    )
    return "\n".join(lines) + "\n"


def _plot(report: Dict, path: Path) -> None:
    import logging

    logging.getLogger("matplotlib").setLevel(
        logging.WARNING
    )  # fairseq's import leaves the root logger chatty
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    vocabs = [v["name"] for v in report["vocabularies"]]
    datasets = [d["name"] for d in report["datasets"]]
    by_key = {(r["vocabulary"], r["dataset"]): r for r in report["results"]}
    panels = [
        ("subtokens_per_entity_word", "sub-tokens per entity word"),
        ("subtokens_per_word", "sub-tokens per word"),
        ("entity_words_whole", "entity words kept whole"),
    ]
    fig, axes = plt.subplots(1, 4, figsize=(18, 4.5))
    width = 0.8 / len(vocabs)
    x = np.arange(len(datasets))
    for ax, (key, title) in zip(axes, panels):
        for k, name in enumerate(vocabs):
            values = [by_key[(name, d)][key] or 0.0 for d in datasets]
            bars = ax.bar(x + (k - (len(vocabs) - 1) / 2) * width, values, width, label=name)
            ax.bar_label(bars, fmt="%.2f", fontsize=7)
        ax.set_xticks(x, datasets, fontsize=8)
        ax.set_title(title)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.08)  # room for the bar labels
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(vocabs), fontsize=8)
    terms = report["terms"]
    labels = vocabs + [f"{c}\n(paper)" for c in terms["published_coverage"]]
    values = [terms["coverage"][n] for n in vocabs] + list(terms["published_coverage"].values())
    colors = [f"C{k}" for k in range(len(vocabs))] + ["0.6"] * len(terms["published_coverage"])
    bars = axes[3].bar(range(len(labels)), values, color=colors)
    axes[3].bar_label(bars, fmt="%.2f", fontsize=7)
    axes[3].set_xticks(range(len(labels)), labels, fontsize=7, rotation=30)
    axes[3].set_ylim(0, 1.05)
    axes[3].set_title(f"terms kept whole ({len(terms['terms'])})")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    with atomic_write(path, "wb", by=VOCAB_REPORT) as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)


def _vocab_arg(value: str):
    name, sep, path = value.partition("=")
    if sep and name and not Path(value).exists():
        return (name, path)
    return value


def build_parser() -> Parser:
    parser = Parser(prog=VOCAB_REPORT, description=__doc__.splitlines()[0])
    parser.add_argument(
        "--vocab",
        action="append",
        type=_vocab_arg,
        required=True,
        metavar="[NAME=]DIR",
        help="a vocabulary directory (bpe.json + dict.txt) or HF tokenizer directory; repeat for more",
    )
    add_data(
        parser,
        "CoNLL NER folders (<split>.tsv) or files",
        nargs="+",
        action="extend",
        required=True,
    )
    add_out(parser, "the folder to write vocab_report.md/.json/.png to")
    add_overwrite(parser, "the report")
    parser.add_argument(
        "--splits", nargs="+", default=["train"], help="splits read from each folder"
    )
    parser.add_argument(
        "--terms",
        default=str(DEFAULT_TERMS),
        help="term list (default: PubMedBERT Table 1, with its columns)",
    )
    parser.add_argument(
        "--no-plot", action="store_true", help="skip the PNG (no matplotlib needed)"
    )
    return parser


def main(argv=None) -> None:
    """Sub-tokens per (entity) word and term coverage of vocabularies."""
    args = build_parser().parse_args(argv)
    vocab_report(
        args.vocab,
        args.data,
        args.out,
        splits=args.splits,
        terms=args.terms,
        plot=not args.no_plot,
        overwrite=args.overwrite,
    )
    print((Path(args.out) / OUTPUT_NAMES[0]).read_text(encoding="utf-8"), end="")
    print(
        f"written: {', '.join(str(Path(args.out) / n) for n in OUTPUT_NAMES[: 2 + (not args.no_plot)])}"
    )


def cli_main(argv=None) -> None:
    run_cli(VOCAB_REPORT, main, argv)


if __name__ == "__main__":
    cli_main()

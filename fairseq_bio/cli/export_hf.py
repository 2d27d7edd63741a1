"""``fairseq-bio-export-hf <checkpoint> <out_dir>``: a ``bio_roberta`` masked-LM checkpoint as an HF transformers
model directory.

``out_dir`` receives ``config.json``, ``model.safetensors``, the tokenizer of the vocabulary the model was trained
with (``tokenizer.json`` that ``AutoTokenizer`` loads offline, ``tokenizer_config.json``, and the classic files:
byte-level BPE -> RoBERTa tokenizer ``vocab.json`` + ``merges.txt``; WordPiece -> BERT tokenizer ``vocab.txt``)
and a model card ``README.md``. Post-LN models become ``RobertaForMaskedLM``; pre-LN models with an embedding
LayerNorm ``RobertaPreLayerNormForMaskedLM`` (the same computation); pre-LN models without one are refused, as
HF has no class that computes them. HF ids are fairseq's dictionary ids. Before the directory appears, the
command loads it with transformers (offline) and checks on real sentences that HF's tokenizer gives fairseq's
token ids and that HF's logits equal fairseq's; otherwise it fails and leaves nothing that looks complete.

The vocabulary (``dict.txt`` + ``bpe.json`` + BPE files) is found next to the checkpoint (an encoder
checkpoint), else in ``--data``, else in the first directory of the checkpoint's ``task.data``.
"""

import argparse
import json
import os
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

import torch

from preprocess.common import check_destination, make_temp_dir, remove_temp_dir, replace_dir, run_cli

from .hf_convert import CHECK_SENTENCES, ENCODER, HFConvertError, compare_with_hf, encoder_name_map

MARKERS = ("config.json", "model.safetensors")
DEFAULT_TOLERANCE = 1e-4
# fairseq activation_fn -> HF hidden_act computing the same function.
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_accurate": "gelu_new", "relu": "relu"}
BERT_SPECIALS = {"<s>": "[CLS]", "<pad>": "[PAD]", "</s>": "[SEP]", "<unk>": "[UNK]", "<mask>": "[MASK]"}
# Pre-LN layers in HF's RobertaPreLayerNorm: the LayerNorms sit before attention and before the FFN.
_PRE_LN_LAYER_MAP = {
    "attention.self.query": "self_attn.q_proj",
    "attention.self.key": "self_attn.k_proj",
    "attention.self.value": "self_attn.v_proj",
    "attention.output.dense": "self_attn.out_proj",
    "attention.LayerNorm": "self_attn_layer_norm",
    "intermediate.LayerNorm": "final_layer_norm",
    "intermediate.dense": "fc1",
    "output.dense": "fc2",
}


def find_vocab_dir(checkpoint: Path, state: Dict, data: Optional[str]) -> Path:
    """Where dict.txt and bpe.json of the checkpoint's vocabulary are (see the module docstring)."""
    if data is not None:
        candidates = [Path(data)]
    else:
        task = _section(state, "task")
        first = str(task.get("data") or "").split(os.pathsep)[0]
        candidates = [checkpoint.parent] + ([Path(first)] if first else [])
    for directory in candidates:
        if (directory / "dict.txt").is_file() and (directory / "bpe.json").is_file():
            return directory
    raise HFConvertError(
        f"{checkpoint}: no dict.txt + bpe.json in {' or '.join(map(str, candidates))} (pass --data <vocabulary dir>)"
    )


def _section(state: Dict, name: str) -> Dict:
    # Hydra-trained checkpoints hold plain dicts; argparse-trained ones an argparse.Namespace per section.
    cfg = state.get("cfg") or {}
    section = cfg.get(name) if isinstance(cfg, dict) else None
    if section is None and state.get("args") is not None:
        section = state["args"]
    return section if isinstance(section, dict) else vars(section) if section is not None else {}


def load_fairseq_model(checkpoint: Path, vocab_dir: Path):
    """The checkpoint as fairseq's hub interface (BPE from the vocabulary's bpe.json), in eval mode."""
    from ..models.bio_roberta import BioRobertaModel

    hub = BioRobertaModel.from_pretrained(str(checkpoint.parent), checkpoint.name, data_name_or_path=str(vocab_dir))
    return hub.eval()


def roberta_hf_model(hub) -> Tuple[Dict, Dict[str, torch.Tensor]]:
    """HF ``config.json`` and state dict of a bio_roberta masked LM: RobertaForMaskedLM (post-LN) or
    RobertaPreLayerNormForMaskedLM (pre-LN with an embedding LayerNorm)."""
    model, args = hub.model, hub.model.args
    if len(model.classification_heads):
        raise HFConvertError(
            f"the checkpoint has classification heads ({', '.join(model.classification_heads)}); only masked-LM "
            "checkpoints are exported so far (*ForTokenClassification / *ForSequenceClassification are next)"
        )
    encoder = model.encoder.sentence_encoder
    pre_ln = bool(args.encoder_normalize_before)
    if pre_ln and encoder.layernorm_embedding is None:
        raise HFConvertError(
            "pre-LN model without an embedding LayerNorm: HF's RobertaPreLayerNorm always normalises the "
            "embeddings, so no HF class computes this model exactly (train with model.layernorm_embedding=true)"
        )
    if args.activation_fn not in HF_ACTIVATIONS:
        raise HFConvertError(f"activation_fn {args.activation_fn!r} has no HF equivalent ({', '.join(HF_ACTIVATIONS)})")
    if args.activation_fn != "gelu":
        raise HFConvertError(f"HF RoBERTa's MLM head applies gelu, this model's applies {args.activation_fn}")
    state = {k: v.detach().float() for k, v in model.state_dict().items()}
    dictionary = hub.task.source_dictionary
    layers, dim = len(encoder.layers), encoder.embed_tokens.embedding_dim
    untied = model.encoder.lm_head.weight is not encoder.embed_tokens.weight
    prefix = "roberta_prelayernorm." if pre_ln else "roberta."
    hf = {
        prefix + "embeddings.word_embeddings.weight": state[f"{ENCODER}embed_tokens.weight"],
        prefix + "embeddings.position_embeddings.weight": state[f"{ENCODER}embed_positions.weight"],
        prefix + "embeddings.token_type_embeddings.weight": torch.zeros(1, dim),
    }
    if pre_ln:
        names = [(f"embeddings.LayerNorm.{p}", f"{ENCODER}layernorm_embedding.{p}") for p in ("weight", "bias")]
        names += [(f"LayerNorm.{p}", f"{ENCODER}layer_norm.{p}") for p in ("weight", "bias")]
        for i in range(layers):
            for hf_name, fs_name in _PRE_LN_LAYER_MAP.items():
                names += [
                    (f"encoder.layer.{i}.{hf_name}.{p}", f"{ENCODER}layers.{i}.{fs_name}.{p}")
                    for p in ("weight", "bias")
                ]
    else:
        names = encoder_name_map(layers)
    hf.update({prefix + hf_name: state[fs_name] for hf_name, fs_name in names})
    for p in ("weight", "bias"):
        hf[f"lm_head.dense.{p}"] = state[f"encoder.lm_head.dense.{p}"]
        hf[f"lm_head.layer_norm.{p}"] = state[f"encoder.lm_head.layer_norm.{p}"]
    hf["lm_head.bias"] = state["encoder.lm_head.bias"]
    if untied:  # HF's own files carry the output matrix and the decoder's bias only when untied
        hf["lm_head.decoder.weight"] = state["encoder.lm_head.weight"]
        hf["lm_head.decoder.bias"] = state["encoder.lm_head.bias"]
    used = {fs for _, fs in names} | {f"{ENCODER}embed_tokens.weight", f"{ENCODER}embed_positions.weight"}
    buffers = (".version", "_float_tensor")  # fairseq's bookkeeping buffers
    left = [k for k in state if k not in used and not k.startswith("encoder.lm_head.") and not k.endswith(buffers)]
    if left:
        raise HFConvertError(f"parameter {left[0]!r} has no place in the HF model ({len(left)} such)")
    config = {
        "architectures": ["RobertaPreLayerNormForMaskedLM" if pre_ln else "RobertaForMaskedLM"],
        "model_type": "roberta-prelayernorm" if pre_ln else "roberta",
        "vocab_size": len(dictionary),
        "hidden_size": dim,
        "num_hidden_layers": layers,
        "num_attention_heads": encoder.layers[0].self_attn.num_heads,
        "intermediate_size": encoder.layers[0].fc1.out_features,
        "hidden_act": HF_ACTIVATIONS[args.activation_fn],
        "hidden_dropout_prob": float(args.dropout),
        "attention_probs_dropout_prob": float(args.attention_dropout),
        "max_position_embeddings": encoder.embed_positions.weight.size(0),
        "type_vocab_size": 1,
        "initializer_range": 0.02,
        "layer_norm_eps": float(encoder.layers[0].final_layer_norm.eps),
        "position_embedding_type": "absolute",
        "pad_token_id": dictionary.pad(),
        "bos_token_id": dictionary.bos(),
        "eos_token_id": dictionary.eos(),
        "tie_word_embeddings": not untied,
        "dtype": "float32",
    }
    return config, hf


# ------------------------------------------------------------------------------------------------ tokenizers


def write_hf_tokenizer(out: Path, dictionary, bpe: Dict, max_length: int) -> Dict:
    """HF tokenizer files whose ids are ``dictionary``'s, for the fairseq BPE ``bpe`` (a loaded bpe.json)."""
    if bpe["_name"] == "gpt2":
        return _write_byte_bpe_tokenizer(out, dictionary, bpe, max_length)
    if bpe["_name"] == "bert":
        return _write_wordpiece_tokenizer(out, dictionary, bpe, max_length)
    raise HFConvertError(
        f'bpe "{bpe["_name"]}": HF tokenizers are written for gpt2 (byte-level BPE) and bert (WordPiece) '
        "vocabularies so far"
    )


def _specials(dictionary) -> Dict[str, int]:
    return {"<s>": dictionary.bos(), "<pad>": dictionary.pad(), "</s>": dictionary.eos(), "<unk>": dictionary.unk(),
            "<mask>": dictionary.index("<mask>")}  # fmt: skip


def _word_symbols(dictionary):
    """Dictionary entries that stand for tokens (not control symbols or fairseq's padding words)."""
    from ..data.word_boundaries import special_symbols

    special = special_symbols(dictionary)
    return {dictionary[i]: i for i in range(len(dictionary)) if not special[i] and i != dictionary.unk()}


def _write_byte_bpe_tokenizer(out: Path, dictionary, bpe: Dict, max_length: int) -> Dict:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    with open(bpe["gpt2_encoder_json"], encoding="utf-8") as f:
        encoder = json.load(f)
    with open(bpe["gpt2_vocab_bpe"], encoding="utf-8") as f:
        merges = f.read().split("\n")[1:-1]  # exactly fairseq's reading: header and final empty line dropped
    symbols = _word_symbols(dictionary)
    vocab = _specials(dictionary)
    for token, gpt2_id in encoder.items():
        if str(gpt2_id) not in symbols:
            raise HFConvertError(
                f"{bpe['gpt2_encoder_json']}: token {token!r} (id {gpt2_id}) is not in dict.txt; fairseq would map it "
                "to <unk> where an HF tokenizer cannot"
            )
        if token in vocab:
            raise HFConvertError(f"{bpe['gpt2_encoder_json']}: token {token!r} clashes with a special token")
        vocab[token] = symbols[str(gpt2_id)]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(m.split()) for m in merges], ignore_merges=False))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.RobertaProcessing(
        ("</s>", vocab["</s>"]), ("<s>", vocab["<s>"]), trim_offsets=True, add_prefix_space=False
    )
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in ("<s>", "<pad>", "</s>", "<unk>")]
        + [AddedToken("<mask>", special=True, lstrip=True, normalized=False)]
    )
    tokenizer.save(str(out / "tokenizer.json"))
    with open(out / "vocab.json", "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(out / "merges.txt", "w", encoding="utf-8", newline="\n") as f:
        f.write("#version: 0.2\n")
        f.writelines(m + "\n" for m in merges)
    config = {"tokenizer_class": "RobertaTokenizer", "add_prefix_space": False, "trim_offsets": True,
              "bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>", "unk_token": "<unk>",
              "pad_token": "<pad>", "mask_token": "<mask>"}  # fmt: skip
    return _write_tokenizer_config(out, config, max_length, "RoBERTa byte-level BPE (GPT-2 format)")


def _write_wordpiece_tokenizer(out: Path, dictionary, bpe: Dict, max_length: int) -> Dict:
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

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
    tokenizer = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    # transformers' BertTokenizer(do_lower_case=not cased), which fairseq's bert BPE runs.
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=not cased
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in BERT_SPECIALS.values()])
    tokenizer.save(str(out / "tokenizer.json"))
    by_id = sorted(vocab.items(), key=lambda item: item[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise HFConvertError("dict.txt: the dictionary has entries that are no WordPiece token")
    with open(out / "vocab.txt", "w", encoding="utf-8", newline="\n") as f:
        f.writelines(token + "\n" for token, _ in by_id)
    config = {"tokenizer_class": "BertTokenizer", "do_lower_case": not cased, "tokenize_chinese_chars": True,
              "strip_accents": None, "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
              "cls_token": "[CLS]", "mask_token": "[MASK]"}  # fmt: skip
    return _write_tokenizer_config(out, config, max_length, f"WordPiece ({'cased' if cased else 'uncased'})")


def _write_tokenizer_config(out: Path, config: Dict, max_length: int, description: str) -> Dict:
    config = {**config, "model_max_length": max_length, "clean_up_tokenization_spaces": False}
    with open(out / "tokenizer_config.json", "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    return {"class": config["tokenizer_class"], "description": description}


# ------------------------------------------------------------------------------------------------ model card


def model_card(checkpoint: Path, state: Dict, config: Dict, tokenizer: Dict, check: Dict, vocab_dir: Path) -> str:
    """README.md: architecture, vocabulary, training data and updates, metrics the checkpoint holds, the check."""
    task, extra = _section(state, "task"), state.get("extra_state") or {}
    history = state.get("optimizer_history") or [{}]
    updates = history[-1].get("num_updates", 0)
    imported = extra.get("hf_import")
    metrics = []
    for key, label in (
        ("best", "best validation loss (base 2, as fairseq logs)"),
        ("val_loss", "last validation loss"),
    ):
        if isinstance(extra.get(key), (int, float)):
            metrics.append(f"- {label}: {extra[key]:.4f}")
    layer_order = "pre-LayerNorm" if config["model_type"] == "roberta-prelayernorm" else "post-LayerNorm (BERT/RoBERTa)"
    lines = [
        "---",
        "library_name: transformers",
        "pipeline_tag: fill-mask",
        "tags: [fill-mask, biomedical, fairseq, fairseq_bio]",
        "---",
        f"# {checkpoint.parent.name}/{checkpoint.name}",
        "",
        f"A biomedical masked language model exported from the fairseq_bio checkpoint `{checkpoint}` by "
        "`fairseq-bio-export-hf`.",
        "",
        "## Architecture",
        f"`{config['architectures'][0]}`: {config['num_hidden_layers']} layers, hidden size {config['hidden_size']}, "
        f"{config['num_attention_heads']} attention heads, feed-forward size {config['intermediate_size']}, "
        f"{config['hidden_act']}, {layer_order}, LayerNorm eps {config['layer_norm_eps']:g}, "
        f"{config['max_position_embeddings'] - config['pad_token_id'] - 1} positions, output layer "
        f"{'tied to' if config['tie_word_embeddings'] else 'separate from'} the input embeddings.",
        "",
        "## Vocabulary",
        f"{tokenizer['description']}, {config['vocab_size']} entries (`{tokenizer['class']}`; ids are the fairseq "
        f"dictionary's, from `{vocab_dir}`).",
        "",
        "## Training",
        f"- task: `{task.get('_name', task.get('task', 'unknown'))}` on `{task.get('data', 'unknown')}`",
        f"- updates: {updates}" + (f" (started from the HF model `{imported['source']}`)" if imported else ""),
        f"- tokens per sample: {task.get('tokens_per_sample', 'unknown')}, mask probability "
        f"{task.get('mask_prob', 'unknown')}, whole-word masking: {task.get('mask_whole_words', 'unknown')}",
        "",
        "## Metrics",
        *(metrics or ["none recorded in the checkpoint"]),
        "",
        "## Check",
        f"On {check['sentences']} real PubMed sentences ({check['tokens']} tokens) HF's tokenizer gives fairseq's "
        f"token ids and the logits differ from fairseq's by at most {check['logits_max_abs_diff']:.2e} (fp32).",
        "",
        "## Use",
        "```python",
        "from transformers import AutoModelForMaskedLM, AutoTokenizer",
        "",
        'tokenizer = AutoTokenizer.from_pretrained("<this directory>")',
        'model = AutoModelForMaskedLM.from_pretrained("<this directory>")',
        "```",
        "",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------- export


def export_hf(
    checkpoint,
    out_dir,
    *,
    data: Optional[str] = None,
    overwrite: bool = False,
    tolerance: float = DEFAULT_TOLERANCE,
    sentences: Sequence[str] = CHECK_SENTENCES,
) -> Dict:
    """Export ``checkpoint`` into the HF directory ``out_dir`` (built in a temp dir and renamed only once HF's
    outputs were checked against fairseq's); returns the check's numbers."""
    from safetensors.torch import save_file

    from .. import compat
    from ..data.word_boundaries import load_bpe_json

    checkpoint, out_dir = Path(checkpoint).absolute(), Path(out_dir).absolute()
    if not checkpoint.is_file():
        raise HFConvertError(f"{checkpoint}: no such checkpoint")
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise HFConvertError("the export checks its output with transformers: pip install transformers") from None
    state = compat.load_checkpoint(checkpoint)
    model_name = str(_section(state, "model").get("_name") or _section(state, "model").get("arch") or "")
    if not model_name.startswith("bio_roberta"):
        raise HFConvertError(f"{checkpoint}: model {model_name!r}: only bio_roberta checkpoints are exported so far")
    vocab_dir = find_vocab_dir(checkpoint, state, data)
    check_destination(out_dir, overwrite, MARKERS)
    hub = load_fairseq_model(checkpoint, vocab_dir)
    config, hf_state = roberta_hf_model(hub)
    bpe = load_bpe_json(str(vocab_dir / "bpe.json"))

    tmp = make_temp_dir(out_dir)
    try:
        max_length = config["max_position_embeddings"] - config["pad_token_id"] - 1
        tokenizer = write_hf_tokenizer(tmp, hub.task.source_dictionary, bpe, max_length)
        config["tokenizer_class"] = tokenizer["class"]
        with open(tmp / "config.json", "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2)
            f.write("\n")
        save_file({k: v.contiguous().clone() for k, v in hf_state.items()}, str(tmp / "model.safetensors"),
                  metadata={"format": "pt"})  # fmt: skip
        identity = torch.arange(len(hub.task.source_dictionary))
        check = compare_with_hf(tmp, hub, identity, sentences, logits=True).__dict__
        if check["logits_max_abs_diff"] > tolerance or check["hidden_max_abs_diff"] > tolerance:
            raise HFConvertError(
                f"{checkpoint}: HF's outputs differ from fairseq's: logits {check['logits_max_abs_diff']:.2e}, hidden "
                f"states {check['hidden_max_abs_diff']:.2e} > {tolerance}"
            )
        (tmp / "README.md").write_text(model_card(checkpoint, state, config, tokenizer, check, vocab_dir), "utf-8")
        replace_dir(tmp, out_dir, overwrite, MARKERS)
    except BaseException:
        remove_temp_dir(tmp)
        raise
    return {"architecture": config["architectures"][0], "tokenizer": tokenizer["class"], **check}


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    """``fairseq-bio-export-hf``: bio_roberta checkpoint -> HF transformers directory, checked."""

    def main(argv):
        parser = argparse.ArgumentParser(
            prog="fairseq-bio-export-hf", description=__doc__.split("\n\n")[0].replace("``", "")
        )
        parser.add_argument("checkpoint", help="fairseq checkpoint (model.pt of an import, checkpoint_best.pt, ...)")
        parser.add_argument("out_dir", help="output directory (must not exist unless --overwrite)")
        parser.add_argument(
            "--data", help="vocabulary dir (dict.txt, bpe.json); default: beside the checkpoint, else task.data"
        )
        parser.add_argument("--overwrite", action="store_true", help="replace an earlier export in out_dir")
        parser.add_argument(
            "--tolerance", type=float, default=DEFAULT_TOLERANCE, help="largest |logit difference| the check accepts"
        )
        args = parser.parse_args(argv)
        result = export_hf(args.checkpoint, args.out_dir, data=args.data, overwrite=args.overwrite,
                           tolerance=args.tolerance)  # fmt: skip
        print(
            f"wrote {Path(args.out_dir).absolute()} ({result['architecture']}, {result['tokenizer']}); checked on "
            f"{result['sentences']} real sentences: token ids equal fairseq's, logits max |diff| "
            f"{result['logits_max_abs_diff']:.2e}"
        )

    run_cli("fairseq-bio-export-hf", main, argv)


if __name__ == "__main__":
    cli_main()

"""``fairseq-bio-export-hf <checkpoint> <out_dir>``: a ``bio_roberta`` checkpoint (masked LM, or fine-tuned with a
token- or sentence-classification head) as an HF transformers model directory.

``out_dir`` receives ``config.json``, ``model.safetensors``, the tokenizer of the vocabulary the model was trained
with (``tokenizer.json`` that ``AutoTokenizer`` loads offline, ``tokenizer_config.json``, and the classic files:
byte-level BPE -> RoBERTa tokenizer ``vocab.json`` + ``merges.txt``; WordPiece -> its ``vocab.txt`` and a fast
tokenizer with BERT's normalisation and fairseq's pair template;
SentencePiece -> its unigram or BPE model rebuilt with the ``tokenizers`` library; fastBPE -> an HF BPE over its
codes with end-of-word suffix ``</w>``) and a model card ``README.md``. HF ids are fairseq's dictionary ids.

What the checkpoint becomes is decided by its model and its head (``TARGETS``; ``--head`` picks one of several):
no head -> ``*ForMaskedLM``; a ``bio_tagging`` token head -> ``*ForTokenClassification`` with the label list as
``id2label``; a ``bio_sentence_prediction`` head (fairseq's RobertaClassificationHead) -> ``*ForSequenceClassification``
with its labels and ``problem_type`` (single-label, multi-label classification or regression); a ``bio_extractive_qa``
span head -> ``*ForQuestionAnswering`` (its two outputs per token are HF's ``qa_outputs``); post-LN models are
``Roberta*``, pre-LN models with an embedding LayerNorm ``RobertaPreLayerNorm*`` (the same computation); pre-LN
models without one are refused, as HF has no class that computes them. A CRF has no HF equivalent: its emission
layer is exported as the token-classification layer and its transitions go to ``crf.json`` (one warning line says
so). ELECTRA is refused in one line until its exporter exists.

Before the directory appears, the command loads it with transformers (offline) and checks on real sentences that
HF's tokenizer gives fairseq's token ids (sentence heads: also on sentence pairs, ``<s> a </s></s> b </s>``) and
that HF's hidden states and logits equal fairseq's; otherwise it fails and leaves nothing that looks complete. The
vocabulary (``dict.txt`` + ``bpe.json`` + BPE files) is found next to the checkpoint (an encoder checkpoint, or a
fine-tuned run's save_dir), else in ``--data``, else in the checkpoint's ``task.vocab`` or the first directory of its
``task.data``.
"""

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from preprocess.common import (
    check_destination,
    make_temp_dir,
    remove_temp_dir,
    replace_dir,
    require_fastbpe,
    run_cli,
)

from .hf_convert import (
    CHECK_PAIRS,
    CHECK_SENTENCES,
    CONTINUATION,
    ENCODER,
    END_OF_WORD,
    HFConvertError,
    Text,
    compare_with_hf,
    encoder_name_map,
    fastbpe_pipeline,
    fastbpe_symbol,
)

MARKERS = ("config.json", "model.safetensors")
DEFAULT_TOLERANCE = 1e-4
CRF_FILE = "crf.json"
# fairseq activation_fn -> HF hidden_act computing the same function.
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_accurate": "gelu_new", "relu": "relu"}
BERT_SPECIALS = {"<s>": "[CLS]", "<pad>": "[PAD]", "</s>": "[SEP]", "<unk>": "[UNK]", "<mask>": "[MASK]"}
# bio_sentence_prediction's task.kind -> HF's problem_type (which loss HF's *ForSequenceClassification trains with)
PROBLEM_TYPES = {"classification": "single_label_classification", "multilabel": "multi_label_classification",
                 "regression": "regression"}  # fmt: skip
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
LM_HEAD = "encoder.lm_head."
BUFFERS = (".version", "_float_tensor")  # fairseq's bookkeeping buffers


# ------------------------------------------------------------------------------------ what a checkpoint becomes


@dataclass
class HFModel:
    """An HF model ready to be written: config.json fields, parameters, side files, and what was left out."""

    config: Dict
    state: Dict[str, torch.Tensor]
    side_files: Dict[str, Dict] = field(default_factory=dict)  # file name -> JSON content
    dropped: List[str] = field(default_factory=list)  # fairseq parts with no place in the HF model, named
    warnings: List[str] = field(default_factory=list)  # one line each, printed by the command


@dataclass(frozen=True)
class Target:
    """What one kind of checkpoint becomes: the HF class suffix (``Roberta`` + suffix), the Auto class that loads
    it, the card's pipeline tag, and the function adding the head to the encoder's ``HFModel`` (None: not built
    yet, refused with ``missing``)."""

    suffix: str
    auto_class: str
    pipeline_tag: str
    add_head: Optional[Callable] = None  # (hf: HFModel, hub, head_name, used fairseq names) -> None
    missing: str = ""


# Model names (cfg.model._name) whose export is not built yet: refused before the checkpoint is loaded.
PENDING_MODELS = {
    "bio_electra": "ELECTRA export (discriminator -> ElectraForPreTraining, generator -> ElectraForMaskedLM) is not "
    "built yet",
}


def head_kind(model, head_name: Optional[str] = None) -> Tuple[str, Optional[str]]:
    """(kind in ``TARGETS``, head name or None) of a loaded ``bio_roberta``: its only classification head decides,
    or the one ``head_name`` picks."""
    from fairseq.models.roberta.model import RobertaClassificationHead

    from ..modules.tagging_head import TokenClassificationHead

    heads = dict(model.classification_heads)
    if head_name is not None:
        if head_name not in heads:
            raise HFConvertError(
                f"--head {head_name}: the checkpoint has no such classification head (it has: "
                f"{', '.join(heads) or 'none'})"
            )
        name, head = head_name, heads[head_name]
    elif not heads:
        return "masked_lm", None
    elif len(heads) > 1:
        raise HFConvertError(
            f"the checkpoint has {len(heads)} classification heads ({', '.join(heads)}); an HF model has one: pick it "
            "with --head NAME"
        )
    else:
        name, head = next(iter(heads.items()))
    if isinstance(head, TokenClassificationHead):
        return "token_classification", name
    if isinstance(head, RobertaClassificationHead):
        return "sequence_classification", name
    raise HFConvertError(f"classification head {name!r} ({type(head).__name__}) has no HF export")


def find_vocab_dir(checkpoint: Path, state: Dict, data: Optional[str]) -> Path:
    """Where dict.txt and bpe.json of the checkpoint's vocabulary are (see the module docstring)."""
    if data is not None:
        candidates = [Path(data)]
    else:
        task = _section(state, "task")
        first = str(task.get("data") or "").split(os.pathsep)[0]
        candidates = [checkpoint.parent] + [Path(d) for d in (task.get("vocab"), first) if d]
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

    # ``vocab`` points a fine-tuning task at the vocabulary (other tasks have no such option and ignore it).
    hub = BioRobertaModel.from_pretrained(
        str(checkpoint.parent), checkpoint.name, data_name_or_path=str(vocab_dir), vocab=str(vocab_dir)
    )
    return hub.eval()


def roberta_encoder(hub) -> Tuple[HFModel, str, set]:
    """The encoder of a bio_roberta as HF RoBERTa (post-LN) or RobertaPreLayerNorm (pre-LN with an embedding
    LayerNorm) base-model parameters: (HFModel, HF class prefix, the fairseq parameter names it took)."""
    model, args = hub.model, hub.model.args
    encoder = model.encoder.sentence_encoder
    pre_ln = bool(args.encoder_normalize_before)
    if pre_ln and encoder.layernorm_embedding is None:
        raise HFConvertError(
            "pre-LN model without an embedding LayerNorm: HF's RobertaPreLayerNorm always normalises the "
            "embeddings, so no HF class computes this model exactly (train with model.layernorm_embedding=true)"
        )
    if args.activation_fn not in HF_ACTIVATIONS:
        raise HFConvertError(f"activation_fn {args.activation_fn!r} has no HF equivalent ({', '.join(HF_ACTIVATIONS)})")
    state = {k: v.detach().float() for k, v in model.state_dict().items()}
    dictionary = hub.task.source_dictionary
    layers, dim = len(encoder.layers), encoder.embed_tokens.embedding_dim
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
    used = {fs for _, fs in names} | {f"{ENCODER}embed_tokens.weight", f"{ENCODER}embed_positions.weight"}
    config = {
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
    }
    return HFModel(config, hf), "RobertaPreLayerNorm" if pre_ln else "Roberta", used


def _add_masked_lm_head(hf: HFModel, hub, head_name: Optional[str], used: set) -> None:
    """RoBERTa's ``lm_head``: transform dense + LayerNorm, output bias, and the output matrix when untied."""
    model = hub.model
    if model.args.activation_fn != "gelu":
        raise HFConvertError(f"HF RoBERTa's MLM head applies gelu, this model's applies {model.args.activation_fn}")
    state = {k: v.detach().float() for k, v in model.state_dict().items() if k.startswith(LM_HEAD)}
    untied = model.encoder.lm_head.weight is not model.encoder.sentence_encoder.embed_tokens.weight
    for p in ("weight", "bias"):
        hf.state[f"lm_head.dense.{p}"] = state[f"{LM_HEAD}dense.{p}"]
        hf.state[f"lm_head.layer_norm.{p}"] = state[f"{LM_HEAD}layer_norm.{p}"]
    hf.state["lm_head.bias"] = state[f"{LM_HEAD}bias"]
    if untied:  # HF's own files carry the output matrix and the decoder's bias only when untied
        hf.state["lm_head.decoder.weight"] = state[f"{LM_HEAD}weight"]
        hf.state["lm_head.decoder.bias"] = state[f"{LM_HEAD}bias"]
    hf.config["tie_word_embeddings"] = not untied
    used.update(state)


def _add_token_classification_head(hf: HFModel, hub, head_name: str, used: set) -> None:
    """A ``bio_tagging`` token head (dropout -> linear) as RoBERTa's ``classifier``, labels as ``id2label``; a CRF's
    parameters go to ``crf.json``. The masked-LM head a fine-tuned checkpoint keeps (frozen) is left out."""
    head, task = hub.model.classification_heads[head_name], hub.task
    labels = list(getattr(task, "labels", None) or [])
    if len(labels) != head.out_proj.out_features:
        raise HFConvertError(
            f"token head {head_name!r} scores {head.out_proj.out_features} labels but the checkpoint's task state "
            f"lists {len(labels)} ({', '.join(labels) or 'none'})"
        )
    key = f"classification_heads.{head_name}."
    for p in ("weight", "bias"):
        hf.state[f"classifier.{p}"] = getattr(head.out_proj, p).detach().float()
        used.add(f"{key}out_proj.{p}")
    hf.config.update(
        id2label={str(i): label for i, label in enumerate(labels)},
        label2id={label: i for i, label in enumerate(labels)},
        classifier_dropout=float(head.dropout.p),
    )
    used.update(k for k in hub.model.state_dict() if k.startswith(LM_HEAD))
    hf.dropped.append("the masked-LM head (kept frozen by fine-tuning; HF's token-classification model has none)")
    info = {
        "task": "bio_tagging",
        "head": head_name,
        "tag_scheme": str(task.cfg.tag_scheme),
        "label_all_subtokens": bool(task.cfg.label_all_subtokens),
        "crf": None,
    }
    if head.crf is not None:
        hf.side_files[CRF_FILE] = crf_json(head.crf, labels)
        used.update(f"{key}crf.{name}" for name, _ in head.crf.named_parameters())
        info["crf"] = CRF_FILE
        hf.dropped.append(f"the CRF (HF has no CRF layer): its parameters are in {CRF_FILE}")
        hf.warnings.append(
            f"token head {head_name!r} has a CRF, which HF has no layer for: its emission scores are the exported "
            f"logits (their argmax is not the CRF's Viterbi path); transitions, start/end scores in {CRF_FILE}"
        )
    hf.config["fairseq_bio"] = info


def _add_question_answering_head(hf: HFModel, hub, head_name: str, used: set) -> None:
    """A ``bio_extractive_qa`` span head (two outputs per token: start, end) as RoBERTa's ``qa_outputs``, the task's
    windowing and decoding options under ``fairseq_bio``. The masked-LM head fine-tuning keeps (frozen) is left out."""
    head, task = hub.model.classification_heads[head_name], hub.task
    if head.out_proj.out_features != 2:
        raise HFConvertError(f"span head {head_name!r} has {head.out_proj.out_features} outputs per token, not 2")
    key = f"classification_heads.{head_name}."
    for p in ("weight", "bias"):
        hf.state[f"qa_outputs.{p}"] = getattr(head.out_proj, p).detach().float()
        used.add(f"{key}out_proj.{p}")
    used.update(k for k in hub.model.state_dict() if k.startswith(LM_HEAD))
    hf.dropped.append("the masked-LM head (kept frozen by fine-tuning; HF's question-answering model has none)")
    cfg = task.cfg
    hf.config["fairseq_bio"] = {
        "task": "bio_extractive_qa",
        "head": head_name,
        "window": task.window,
        "doc_stride": cfg.doc_stride,
        "max_query_length": cfg.max_query_length,
        "max_answer_length": cfg.max_answer_length,
        "n_best": cfg.n_best,
    }


def _add_sequence_classification_head(hf: HFModel, hub, head_name: str, used: set) -> None:
    """fairseq's RobertaClassificationHead (``<s>``'s last state -> dropout -> dense -> tanh -> dropout -> out_proj,
    what HF's RobertaClassificationHead computes) as ``classifier``; a ``bio_sentence_prediction`` checkpoint's labels
    as ``id2label`` and its kind as ``problem_type``. The masked-LM head fine-tuning keeps (frozen) is left out."""
    model, task = hub.model, hub.task
    task_head = getattr(getattr(task, "cfg", None), "head_name", None)
    if getattr(task, "kind", None) not in PROBLEM_TYPES:
        raise HFConvertError(
            f"classification head {head_name!r}: the checkpoint's task ({type(task).__name__}) saved no labels for it; "
            "sentence-level heads are exported from bio_sentence_prediction checkpoints"
        )
    if head_name != task_head:
        raise HFConvertError(
            f"classification head {head_name!r} is not the head of the checkpoint's bio_sentence_prediction task "
            f"({task_head!r}), whose labels are the only ones the checkpoint saved"
        )
    if model.args.pooler_activation_fn != "tanh":
        raise HFConvertError(
            f"classification head {head_name!r} applies {model.args.pooler_activation_fn}; HF's "
            "RobertaClassificationHead applies tanh"
        )
    key = f"classification_heads.{head_name}."
    params = sorted(k[len(key) :] for k in model.state_dict() if k.startswith(key))
    expected = [f"{layer}.{p}" for layer in ("dense", "out_proj") for p in ("bias", "weight")]
    if params != expected:
        raise HFConvertError(
            f"classification head {head_name!r} has parameters {', '.join(params)}; HF's RobertaClassificationHead "
            f"has {', '.join(expected)} (spectral norm is not exported)"
        )
    head, kind, labels = model.classification_heads[head_name], task.kind, list(task.labels)
    width = 1 if kind == "regression" else len(labels)
    if head.out_proj.out_features != width:
        raise HFConvertError(
            f"classification head {head_name!r} has {head.out_proj.out_features} outputs but the checkpoint's {kind} "
            f"task state lists {len(labels)} labels ({', '.join(labels) or 'none'})"
        )
    for name in expected:
        hf.state[f"classifier.{name}"] = model.state_dict()[key + name].detach().float()
        used.add(key + name)
    if kind == "regression":  # one output, unnamed: HF's own form for regression
        labels = ["LABEL_0"]
    hf.config.update(
        id2label={str(i): label for i, label in enumerate(labels)},
        label2id={label: i for i, label in enumerate(labels)},
        problem_type=PROBLEM_TYPES[kind],
        classifier_dropout=float(head.dropout.p),
    )
    lm_head = [k for k in model.state_dict() if k.startswith(LM_HEAD)]
    if lm_head:
        used.update(lm_head)
        hf.dropped.append(
            "the masked-LM head (kept frozen by fine-tuning; HF's sequence-classification model has none)"
        )
    cfg = task.cfg
    hf.config["fairseq_bio"] = {
        "task": "bio_sentence_prediction",
        "head": head_name,
        "kind": kind,
        "text_fields": list(task.text_fields),
        "threshold": float(cfg.threshold) if kind == "multilabel" else None,
        "score_range": [cfg.min_score, cfg.max_score] if kind == "regression" else None,
        "window": task.window,
        "window_overlap": bool(cfg.window_overlap),
        "pooling": "mean of the windows' logits",
    }


def crf_json(crf, labels: Sequence[str]) -> Dict:
    """The CRF's parameters and constraints, with how fairseq_bio decodes with them."""
    from ..modules.crf import DISALLOWED

    def listed(tensor):
        if tensor is None:
            return None
        return tensor.tolist() if tensor.dtype == torch.bool else tensor.detach().float().tolist()

    return {
        "labels": list(labels),
        "start": listed(crf.start),
        "end": listed(crf.end),
        "transitions": listed(crf.transitions),
        "allowed_start": listed(crf.allowed_start),
        "allowed": listed(crf.allowed),
        "disallowed_score": DISALLOWED,
        "decoding": "Viterbi over the logits at each word's first token: a label path y scores start[y_0] + "
        "sum_i logits[i][y_i] + sum_i transitions[y_i][y_(i+1)] + end[y_last], with disallowed_score added to "
        "start[j] where allowed_start[j] is false and to transitions[i][j] where allowed[i][j] is false",
    }


TARGETS = {
    "masked_lm": Target("ForMaskedLM", "AutoModelForMaskedLM", "fill-mask", _add_masked_lm_head),
    "token_classification": Target(
        "ForTokenClassification", "AutoModelForTokenClassification", "token-classification",
        _add_token_classification_head,
    ),
    "sequence_classification": Target(
        "ForSequenceClassification", "AutoModelForSequenceClassification", "text-classification",
        _add_sequence_classification_head,
    ),
    "question_answering": Target(
        "ForQuestionAnswering", "AutoModelForQuestionAnswering", "question-answering", _add_question_answering_head,
    ),
}  # fmt: skip


def hf_model(hub, head: Optional[str] = None) -> Tuple[HFModel, str, Optional[str]]:
    """The loaded checkpoint as an HF model: (HFModel, kind in ``TARGETS``, head name); ``head`` picks one of
    several classification heads (the others are left out and named)."""
    kind, head_name = head_kind(hub.model, head)
    if kind == "token_classification" and getattr(hub.task, "task_name", None) == "bio_extractive_qa":
        kind = "question_answering"  # the span head is a token head with outputs (start, end)
    target = TARGETS[kind]
    if target.add_head is None:
        raise HFConvertError(f"classification head {head_name!r}: {target.missing}")
    hf, class_prefix, used = roberta_encoder(hub)
    target.add_head(hf, hub, head_name, used)
    for other in hub.model.classification_heads:
        if other != head_name:
            used.update(k for k in hub.model.state_dict() if k.startswith(f"classification_heads.{other}."))
            hf.dropped.append(f"classification head {other!r} (--head {head_name} was exported)")
    hf.config = {"architectures": [class_prefix + target.suffix], **hf.config}
    left = [k for k in hub.model.state_dict() if k not in used and not k.endswith(BUFFERS)]
    if left:
        raise HFConvertError(f"parameter {left[0]!r} has no place in the HF model ({len(left)} such)")
    return hf, kind, head_name


# ------------------------------------------------------------------------------------------------ tokenizers


def write_hf_tokenizer(out: Path, dictionary, bpe: Dict, max_length: int) -> Dict:
    """HF tokenizer files whose ids are ``dictionary``'s, for the fairseq BPE ``bpe`` (a loaded bpe.json)."""
    if bpe["_name"] == "gpt2":
        return _write_byte_bpe_tokenizer(out, dictionary, bpe, max_length)
    if bpe["_name"] == "bert":
        return _write_wordpiece_tokenizer(out, dictionary, bpe, max_length)
    if bpe["_name"] == "sentencepiece":
        return _write_sentencepiece_tokenizer(out, dictionary, bpe, max_length)
    if bpe["_name"] == "fastbpe":
        return _write_fastbpe_tokenizer(out, dictionary, bpe, max_length)
    raise HFConvertError(
        f'bpe "{bpe["_name"]}": HF tokenizers are written for gpt2 (byte-level BPE), bert (WordPiece), '
        "sentencepiece and fastbpe vocabularies"
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
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

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
    by_id = sorted(vocab.items(), key=lambda item: item[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise HFConvertError("dict.txt: the dictionary has entries that are no WordPiece token")
    with open(out / "vocab.txt", "w", encoding="utf-8", newline="\n") as f:
        f.writelines(token + "\n" for token, _ in by_id)
    # Not transformers' BertTokenizer class: it builds BERT's own pair template ([CLS] a [SEP] b [SEP], token type 1
    # for b), where fairseq (and this RoBERTa model, one token type) reads <s> a </s></s> b </s>.
    description = f"WordPiece ({'cased' if cased else 'uncased'}, BERT's normalisation, fairseq's pair template)"
    specials = _specials(dictionary)
    return _save_fast_tokenizer(tokenizer, out, specials, list(BERT_SPECIALS.values()), max_length, description,
                                names=BERT_SPECIALS)  # fmt: skip


def read_fastbpe_codes(path: str) -> List[Tuple[str, str]]:
    """The merges of a fastBPE codes file (``left right count`` per line, best first), as fastBPE reads them."""
    merges, seen = [], set()
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                fields = line.rstrip("\n").split(" ")
                if len(fields) != 3 or not all(fields) or not fields[2].isdigit():
                    raise HFConvertError(f"{path}:{number}: expected 'left right count', got {line.rstrip()!r}")
                pair = (fields[0], fields[1])
                if pair in seen:  # fastBPE itself refuses a repeated pair
                    raise HFConvertError(f"{path}:{number}: merge {' '.join(pair)!r} is listed twice")
                seen.add(pair)
                merges.append(pair)
    except FileNotFoundError:
        raise HFConvertError(f"{path}: not found (bpe_codes in bpe.json)") from None
    except UnicodeDecodeError:
        raise HFConvertError(f"{path}: not UTF-8 text") from None
    return merges


def _write_fastbpe_tokenizer(out: Path, dictionary, bpe: Dict, max_length: int) -> Dict:
    from tokenizers import Tokenizer, decoders, models

    path = bpe["bpe_codes"]
    merges = read_fastbpe_codes(path)
    symbols = _word_symbols(dictionary)
    # fastBPE splits a word into characters, the last one marked "</w>", and applies the merges by rank (each
    # round merges every occurrence of the best-ranked pair), as HF's BPE does with end_of_word_suffix "</w>".
    # What it can emit: single characters and merge results; each must be the dict.txt symbol fairseq reads.
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

    for symbol in symbols:  # the characters dict.txt knows, inside a word ("c@@") or ending it ("c")
        if len(symbol) == 1 + len(CONTINUATION) and symbol.endswith(CONTINUATION):
            add(symbol[0], "dict.txt")
        elif len(symbol) == 1:
            add(symbol + END_OF_WORD, "dict.txt")
    for number, (left, right) in enumerate(merges, 1):
        for token in (left, right, left + right):
            if token not in vocab:
                add(token, f"{path}:{number}")
    specials = _specials(dictionary)
    # Control symbols (fairseq's specials, <mask>, madeupword padding) are added tokens; dict.txt symbols no merge
    # or character makes are never emitted and keep their ids as their own (unused) tokens.
    controls = [dictionary[i] for i in range(len(dictionary)) if dictionary[i] not in symbols]
    for symbol, i in symbols.items():
        if i not in source:
            token = symbol[: -len(CONTINUATION)] if symbol.endswith(CONTINUATION) else symbol + END_OF_WORD
            vocab.setdefault(token, i)
    vocab.update({symbol: dictionary.index(symbol) for symbol in controls})
    model = models.BPE(vocab, merges, unk_token="<unk>", end_of_word_suffix=END_OF_WORD, fuse_unk=False,
                       ignore_merges=False)  # fmt: skip
    tokenizer = Tokenizer(model)
    tokenizer.normalizer, tokenizer.pre_tokenizer = fastbpe_pipeline()
    tokenizer.decoder = decoders.BPEDecoder(suffix=END_OF_WORD)
    description = 'fastBPE (subword-nmt codes as an HF BPE with "</w>")'
    return _save_fast_tokenizer(tokenizer, out, specials, controls, max_length, description)


# SentencePiece settings the exported tokenizer reproduces (sentencepiece's defaults, which fairseq-bio-vocab uses).
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
# sentencepiece adds its scores in float32, HF's Unigram in float64: equal-scoring segmentations may differ.
SPM_UNIGRAM_NOTE = (
    "SentencePiece unigram: where two segmentations of a word score exactly the same (runs such as '000' with "
    "pieces '0' and '00'), sentencepiece picks one by the rounding of its float32 sums and HF's Unigram (float64) "
    "may pick the other order of the same pieces"
)


def read_sentencepiece_model(path: str):
    """The ``ModelProto`` of a SentencePiece model file (pieces, scores, types, normaliser and trainer settings)."""
    try:
        from sentencepiece import sentencepiece_model_pb2
    except ImportError as e:  # the generated module needs protobuf
        raise HFConvertError(f"{path}: reading a SentencePiece model needs sentencepiece and protobuf ({e})") from None
    proto = sentencepiece_model_pb2.ModelProto()
    try:
        with open(path, "rb") as f:
            proto.ParseFromString(f.read())
    except FileNotFoundError:
        raise HFConvertError(f"{path}: not found (sentencepiece_model in bpe.json)") from None
    except Exception as e:  # protobuf's DecodeError
        raise HFConvertError(f"{path}: not a SentencePiece model ({e})") from None
    return proto


def _write_sentencepiece_tokenizer(out: Path, dictionary, bpe: Dict, max_length: int) -> Dict:
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
        raise HFConvertError(f"{path}: model type {model_type} (word/char); unigram and bpe models are exported")
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
    # Control symbols (fairseq's specials, <mask>, madeupword padding) are added tokens: matched in raw text
    # before the model, never produced by it.
    controls = [dictionary[i] for i in range(len(dictionary)) if dictionary[i] not in scores]
    if model_type == _SPM_UNIGRAM:
        vocab = [(dictionary[i], scores.get(dictionary[i], 0.0)) for i in range(len(dictionary))]
        model = models.Unigram(vocab, unk_id=dictionary.unk(), byte_fallback=False)
    else:
        # sentencepiece's BPE merges the adjacent pair whose union is the best-scoring piece; HF's BPE applies
        # merge rules by rank: every split of every piece into two pieces, ranked by the union's score.
        order = {piece: rank for rank, piece in enumerate(sorted(scores, key=lambda p: -scores[p]))}
        merges = sorted(
            ((order[p], order[p[:k]], order[p[k:]]), (p[:k], p[k:]))
            for p in scores
            for k in range(1, len(p))
            if p[:k] in scores and p[k:] in scores
        )
        vocab = {dictionary[i]: i for i in range(len(dictionary))}
        model = models.BPE(vocab, [m for _, m in merges], unk_token="<unk>", fuse_unk=True, byte_fallback=False)
    tokenizer = Tokenizer(model)
    # sentencepiece: the charsmap (NFKC, nmt_nfkc's extras), leading/trailing/repeated spaces removed, "▁" before
    # every word; spaces only (other whitespace is whatever the charsmap makes of it).
    charsmap = proto.normalizer_spec.precompiled_charsmap
    steps = [normalizers.Precompiled(charsmap)] if charsmap else []
    tokenizer.normalizer = normalizers.Sequence(
        steps + [normalizers.Replace(Regex("^ +| +$"), ""), normalizers.Replace(Regex(" {2,}"), " ")]
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(SENTENCEPIECE_SPACE, prepend_scheme="always", split=True)
    tokenizer.decoder = decoders.Metaspace(SENTENCEPIECE_SPACE, prepend_scheme="always", split=True)
    kind = "unigram" if model_type == _SPM_UNIGRAM else "BPE"
    description = f"SentencePiece {kind} (rebuilt with tokenizers)"
    info = _save_fast_tokenizer(tokenizer, out, specials, controls, max_length, description)
    if model_type == _SPM_UNIGRAM:
        info["note"] = SPM_UNIGRAM_NOTE
    return info


def _save_fast_tokenizer(
    tokenizer, out: Path, specials: Dict, controls, max_length: int, description: str, names: Optional[Dict] = None
) -> Dict:
    """A ``tokenizers`` tokenizer with fairseq's ``<s> A </s>`` / ``<s> A </s></s> B </s>`` template (one token type)
    and ``controls`` as special tokens, saved as ``tokenizer.json`` for ``PreTrainedTokenizerFast``; ``names`` maps
    fairseq's ``<s> </s> <pad> <unk> <mask>`` to the vocabulary's own tokens (default: the same)."""
    from tokenizers import AddedToken, processors

    name = {role: (names or {}).get(role, role) for role in specials}
    bos, eos = name["<s>"], name["</s>"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}",
        pair=f"{bos} $A {eos} {eos} $B {eos}",  # fairseq's hub encode of a pair, and bio_sentence_prediction's
        special_tokens=[(bos, specials["<s>"]), (eos, specials["</s>"])],
    )
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True, normalized=False, lstrip=t == "<mask>") for t in controls]
    )
    tokenizer.save(str(out / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": eos, "sep_token": eos,
              "cls_token": bos, "unk_token": name["<unk>"], "pad_token": name["<pad>"],
              "mask_token": name["<mask>"]}  # fmt: skip
    return _write_tokenizer_config(out, config, max_length, description)


def _write_tokenizer_config(out: Path, config: Dict, max_length: int, description: str) -> Dict:
    config = {**config, "model_max_length": max_length, "clean_up_tokenization_spaces": False}
    with open(out / "tokenizer_config.json", "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    return {"class": config["tokenizer_class"], "description": description}


# ------------------------------------------------------------------------------------------------ model card


def checkpoint_metrics(state: Dict) -> List[str]:
    """Card lines for the validation metric the checkpoint records (fairseq's ``best_checkpoint_metric``)."""
    extra, settings = state.get("extra_state") or {}, _section(state, "checkpoint")
    metric = settings.get("best_checkpoint_metric") or "loss"
    what = "loss (base 2, as fairseq logs)" if metric == "loss" else metric
    lines = []
    for key, label in (
        ("val_loss", f"validation {what} of this checkpoint"),
        ("best", f"best validation {what} of the run"),
    ):
        if isinstance(extra.get(key), (int, float)):
            lines.append(f"- {label}: {extra[key]:.4f}")
    return lines


def _tagging_use(words_var: str = "words") -> List[str]:
    # Words are encoded one at a time as fairseq_bio's tagging task does (a space before every word but the first),
    # and each word's label is read at its first token.
    return [
        "```python",
        "import torch",
        "from transformers import AutoModelForTokenClassification, AutoTokenizer",
        "",
        'tokenizer = AutoTokenizer.from_pretrained("<this directory>")',
        'model = AutoModelForTokenClassification.from_pretrained("<this directory>").eval()',
        "",
        "def tag(words):",
        "    ids, first = [tokenizer.bos_token_id], []",
        "    for i, word in enumerate(words):",
        "        first.append(len(ids))",
        '        ids += tokenizer(word if i == 0 else " " + word, add_special_tokens=False)["input_ids"]',
        "    with torch.no_grad():",
        "        logits = model(torch.tensor([ids + [tokenizer.eos_token_id]])).logits[0]",
        "    return [model.config.id2label[int(i)] for i in logits[first].argmax(-1)]",
        "",
        'tag(["Familial", "deficiency", "of", "the", "seventh", "component", "of", "complement", "."])',
        "```",
    ]


# What a model with a sentence-level head is, and what its outputs are, per problem type.
_SEQUENCE_MODELS = {"single_label_classification": "sentence-classification model",
                    "multi_label_classification": "multi-label sentence-classification model",
                    "regression": "sentence-regression model"}  # fmt: skip
_SEQUENCE_OUTPUTS = {
    "single_label_classification": "one logit per label; the prediction is the argmax (softmax cross-entropy in "
    "training)",
    "multi_label_classification": "one logit per label, each label predicted when its sigmoid exceeds {threshold:g} "
    "(binary cross-entropy per label in training)",
    "regression": "one output, the predicted score ({score_range}squared error in training)",
}


def _sequence_labels(config: Dict) -> List[str]:
    """Card sections of a sentence-level head: its labels and outputs, and its input."""
    info, problem = config["fairseq_bio"], config["problem_type"]
    low, high = info["score_range"] or (None, None)
    score_range = f"gold scores {low:g} to {high:g}; " if low is not None and high is not None else ""
    outputs = _SEQUENCE_OUTPUTS[problem].format(threshold=info["threshold"] or 0.5, score_range=score_range)
    lines = ["## Labels", f"`problem_type: {problem}` (task kind `{info['kind']}`): {outputs}."]
    if problem != "regression":
        labels = [config["id2label"][str(i)] for i in range(len(config["id2label"]))]
        lines[-1] += f" {len(labels)} labels (`id2label` in config.json): " + ", ".join(f"`{x}`" for x in labels) + "."
    fields = info["text_fields"]
    lines += [
        "",
        "## Input",
        (
            f"A pair of texts ({' and '.join(f'`{f}`' for f in fields)}), read as `<s> a </s></s> b </s>`: "
            "`tokenizer(a, b)` builds exactly that."
            if len(fields) == 2
            else f"One text (`{fields[0]}`), read as `<s> text </s>`: `tokenizer(text)`."
        )
        + " fairseq_bio reads a text as words split at whitespace: give HF the words joined by single spaces.",
        "",
    ]
    return lines


def _sequence_use(config: Dict) -> List[str]:
    """The card's snippet: one input (a text or a pair) through AutoModelForSequenceClassification, read per kind."""
    problem, pair = config["problem_type"], len(config["fairseq_bio"]["text_fields"]) == 2
    read = {
        "single_label_classification": "model.config.id2label[int(logits.argmax(-1))]",
        "multi_label_classification": "[model.config.id2label[i] for i, p in enumerate(torch.sigmoid(logits)) "
        f"if p > {config['fairseq_bio']['threshold'] or 0.5:g}]",
        "regression": "float(logits[0])",
    }[problem]
    inputs = '"<first text>", "<second text>"' if pair else '"<text>"'
    return [
        "```python",
        "import torch",
        "from transformers import AutoModelForSequenceClassification, AutoTokenizer",
        "",
        'tokenizer = AutoTokenizer.from_pretrained("<this directory>")',
        'model = AutoModelForSequenceClassification.from_pretrained("<this directory>").eval()',
        f'encoded = tokenizer({inputs}, truncation=True, return_tensors="pt")',
        "with torch.no_grad():",
        "    logits = model(**encoded).logits[0]",
        f"prediction = {read}",
        "```",
    ]


def _qa_input(config: Dict) -> List[str]:
    """Card section of a span head: its input rows and outputs."""
    return [
        "## Input and outputs",
        "A question and a context, read as `<s> question </s></s> context </s>`: `tokenizer(question, context)` "
        "builds exactly that (fairseq_bio reads texts as words split at whitespace: give HF the words joined by single "
        "spaces). `start_logits` and `end_logits` score each token as the first and the last of the answer; only "
        "context tokens are candidates (fairseq_bio masks the question and the special tokens).",
        "",
    ]


def _qa_use() -> List[str]:
    """The card's snippet: the best span of one row through AutoModelForQuestionAnswering."""
    return [
        "```python",
        "import torch",
        "from transformers import AutoModelForQuestionAnswering, AutoTokenizer",
        "",
        'tokenizer = AutoTokenizer.from_pretrained("<this directory>")',
        'model = AutoModelForQuestionAnswering.from_pretrained("<this directory>").eval()',
        'question, context = "<question>", "<context>"',
        'encoded = tokenizer(question, context, return_offsets_mapping=True, return_tensors="pt")',
        'offsets = encoded.pop("offset_mapping")[0]',
        "context_tokens = torch.tensor([s == 1 for s in encoded.sequence_ids(0)])",
        "with torch.no_grad():",
        "    out = model(**encoded)",
        "start = out.start_logits[0].masked_fill(~context_tokens, -1e4)",
        "end = out.end_logits[0].masked_fill(~context_tokens, -1e4)",
        "scores = start[:, None] + end[None, :]  # start x end, end >= start, at most 30 tokens",
        "allowed = torch.ones_like(scores, dtype=torch.bool).triu() & ~torch.ones_like(scores, dtype=torch.bool).triu(30)",
        "i, j = divmod(int(scores.masked_fill(~allowed, -1e9).argmax()), scores.size(1))",
        "answer = context[int(offsets[i][0]) : int(offsets[j][1])]",
        "```",
    ]


def model_card(
    checkpoint: Path, state: Dict, hf: HFModel, kind: str, tokenizer: Dict, check: Dict, vocab_dir: Path
) -> str:
    """README.md: architecture, task and labels, vocabulary, training data and updates, the metrics the checkpoint
    holds, the check, what was left out, and how to load it."""
    config, target = hf.config, TARGETS[kind]
    task, extra = _section(state, "task"), state.get("extra_state") or {}
    history = state.get("optimizer_history") or [{}]
    updates = history[-1].get("num_updates", 0)
    imported = extra.get("hf_import")
    layer_order = "pre-LayerNorm" if config["model_type"] == "roberta-prelayernorm" else "post-LayerNorm (BERT/RoBERTa)"
    positions = config["max_position_embeddings"] - config["pad_token_id"] - 1
    what = {"masked_lm": "masked language model", "token_classification": "token-classification (tagging) model",
            "sequence_classification": _SEQUENCE_MODELS.get(config.get("problem_type")),
            "question_answering": "extractive question-answering model"}  # fmt: skip
    if kind == "masked_lm":
        head = f", output layer {'tied to' if config['tie_word_embeddings'] else 'separate from'} the input embeddings."
    elif kind == "token_classification":
        head = (
            f", a linear token-classification layer (dropout {config['classifier_dropout']:g}) over the last hidden "
            "states."
        )
    elif kind == "question_answering":
        head = ", a linear span layer (`qa_outputs`: a start and an end logit per token) over the last hidden states."
    else:
        head = (
            f"; a sentence head on the last hidden state of `<s>`: dropout {config['classifier_dropout']:g}, dense "
            f"{config['hidden_size']} x {config['hidden_size']}, tanh, dropout, linear to {len(config['id2label'])} "
            f"output{'s' if len(config['id2label']) > 1 else ''} (fairseq's and HF's RobertaClassificationHead compute "
            "the same)."
        )
    lines = [
        "---",
        "library_name: transformers",
        f"pipeline_tag: {target.pipeline_tag}",
        f"tags: [{target.pipeline_tag}, biomedical, fairseq, fairseq_bio]",
        "---",
        f"# {checkpoint.parent.name}/{checkpoint.name}",
        "",
        f"A biomedical {what[kind]} exported from the fairseq_bio checkpoint `{checkpoint}` by "
        "`fairseq-bio-export-hf`.",
        "",
        "## Architecture",
        f"`{config['architectures'][0]}`: {config['num_hidden_layers']} layers, hidden size {config['hidden_size']}, "
        f"{config['num_attention_heads']} attention heads, feed-forward size {config['intermediate_size']}, "
        f"{config['hidden_act']}, {layer_order}, LayerNorm eps {config['layer_norm_eps']:g}, {positions} positions"
        + head,
        "",
    ]
    if kind == "token_classification":
        info = config["fairseq_bio"]
        labels = [config["id2label"][str(i)] for i in range(len(config["id2label"]))]
        lines += [
            "## Labels",
            f"{len(labels)} labels, tag scheme `{info['tag_scheme']}` (`id2label` in config.json): "
            + ", ".join(f"`{label}`" for label in labels)
            + ". A word's label is the prediction at its first token"
            + (" (training also labelled its later tokens)" if info["label_all_subtokens"] else "")
            + "; fairseq_bio reads predicted labels with conlleval's rules (an I-X that continues no X entity "
            "starts one).",
            "",
        ]
    elif kind == "sequence_classification":
        lines += _sequence_labels(config)
    elif kind == "question_answering":
        lines += _qa_input(config)
    lines += [
        "## Vocabulary",
        f"{tokenizer['description']}, {config['vocab_size']} entries (`{tokenizer['class']}`; ids are the fairseq "
        f"dictionary's, from `{vocab_dir}`)." + (f" Note: {tokenizer['note']}." if tokenizer.get("note") else ""),
        "",
        "## Training",
        f"- task: `{task.get('_name', task.get('task', 'unknown'))}` on `{task.get('data', 'unknown')}`",
        f"- updates: {updates}" + (f" (started from the HF model `{imported['source']}`)" if imported else ""),
    ]
    if kind == "masked_lm":
        lines.append(
            f"- tokens per sample: {task.get('tokens_per_sample', 'unknown')}, mask probability "
            f"{task.get('mask_prob', 'unknown')}, whole-word masking: {task.get('mask_whole_words', 'unknown')}"
        )
    else:
        lines.append(f"- fine-tuned from `{task.get('finetune_from_model') or task.get('restore_file')}`")
    lines += [
        "",
        "## Metrics",
        *(checkpoint_metrics(state) or ["- none recorded in the checkpoint"]),
    ]
    if kind != "masked_lm":
        lines.append("- test set: not recorded in the checkpoint (fairseq evaluates the validation split only)")
    singles = check["sentences"] - check.get("pairs", 0)
    checked = f"{singles} real PubMed sentences" + (
        f" and {check['pairs']} pairs of them" if check.get("pairs") else ""
    )
    if kind == "question_answering":
        checked = f"{check['pairs']} question-context pairs of real PubMed sentences"
    ids = {
        "masked_lm": "fairseq's token ids",
        "token_classification": "the token ids fairseq_bio's tagging task encodes their words to",
        "sequence_classification": "the token ids of the rows fairseq_bio's sentence task makes of them",
        "question_answering": "the token ids of the question-context rows fairseq_bio's QA task makes of them",
    }
    lines += [
        "",
        "## Check",
        f"On {checked} ({check['tokens']} tokens) HF's tokenizer gives {ids[kind]}, and the logits differ from "
        f"fairseq's by at most {check['logits_max_abs_diff']:.2e} (fp32).",
        "",
    ]
    if hf.dropped or kind != "masked_lm":
        lines.append("## Not exported")
        lines += [f"- {what}" for what in hf.dropped]
        if kind == "token_classification":
            lines.append(
                f"- windows: fairseq_bio tags sentences longer than {positions - 2} tokens in overlapping windows; "
                "HF models truncate, so split long sentences yourself"
            )
        elif kind == "sequence_classification":
            info = config["fairseq_bio"]
            pair = len(info["text_fields"]) == 2
            lines.append(
                f"- windows: an input longer than {info['window']} tokens is cut by fairseq_bio at word boundaries "
                f"into {'half-overlapping' if info['window_overlap'] else 'consecutive'} windows"
                + (
                    " of the second text, the first text repeated in each (and cut when it needs more than half)"
                    if pair
                    else ""
                )
                + ", and its prediction is the mean of the windows' logits, in training and in scoring. HF sees one "
                f"window: `truncation=True` cuts the tokens beyond {info['window']} (not at word boundaries); to "
                "predict as fairseq_bio does, run each window and average the logits (a window that starts after "
                "a text's first word keeps the space before it: fairseq_bio encodes words in context)"
            )
        elif kind == "question_answering":
            info = config["fairseq_bio"]
            lines.append(
                f"- windows and decoding: fairseq_bio cuts the question to {info['max_query_length']} tokens, windows "
                f"a context longer than a row of {info['window']} tokens with a doc stride of {info['doc_stride']} "
                f"tokens, and answers with the best span (start + end logit, at most {info['max_answer_length']} "
                "tokens, starting in the window where its first token has the most context) over all windows, mapped "
                "back to the context's characters (`fairseq-bio-predict`). HF's model scores one row; HF's "
                "question-answering pipeline windows with `doc_stride` as the *overlap* of windows instead"
            )
        lines.append("")
    lines += ["## Use"]
    if kind == "token_classification":
        lines += _tagging_use()
    elif kind == "sequence_classification":
        lines += _sequence_use(config)
    elif kind == "question_answering":
        lines += _qa_use()
    else:
        lines += [
            "```python",
            f"from transformers import {target.auto_class}, AutoTokenizer",
            "",
            'tokenizer = AutoTokenizer.from_pretrained("<this directory>")',
            f'model = {target.auto_class}.from_pretrained("<this directory>")',
            "```",
        ]
    return "\n".join(lines + [""])


# ---------------------------------------------------------------------------------------------------- export


def _word_encoder_ids(hub) -> Callable[[str], torch.Tensor]:
    """``sentence -> T`` ids as the tagging task encodes its words (split at whitespace): the ids it was fine-tuned
    on, which HF's tokenizer must give for the sentence's text."""
    task, dictionary = hub.task, hub.task.source_dictionary

    def encode(sentence: str) -> torch.Tensor:
        pieces = [i for word in task.word_encoder.encode_sentence(sentence.split()) for i in word]
        return torch.tensor([dictionary.bos()] + pieces + [dictionary.eos()])

    return encode


def sentence_task_ids(hub) -> Callable[..., Optional[torch.Tensor]]:
    """``text or (a, b) -> T`` ids of the row bio_sentence_prediction makes of it (its word encoding, its dataset
    and collater: ``<s> text </s>`` / ``<s> a </s></s> b </s>``); a text that needs more than one window is refused,
    since HF sees one (``fits=True``: None instead)."""
    from ..data.sentence_dataset import SentencePredictionDataset
    from ..data.tagging_dataset import EncodedWords

    task = hub.task

    def encode(text: Text, fits: bool = False) -> Optional[torch.Tensor]:
        texts = (text,) if isinstance(text, str) else tuple(text)
        encoded = [EncodedWords.encode(task.word_encoder, [t.split()]) for t in texts]
        dataset = SentencePredictionDataset(encoded, task.source_dictionary, task.window)
        rows = dataset.collater([dataset[0]])["net_input"]["src_tokens"]
        if len(rows) == 1 and not dataset.truncated:
            return rows[0]
        if fits:
            return None
        raise HFConvertError(f"check text {texts[0][:60]!r}... does not fit one window of {task.window} tokens")

    return encode


def qa_task_ids(hub) -> Callable[..., Optional[torch.Tensor]]:
    """``(question, context) -> T`` ids of the first row bio_extractive_qa makes of them (its word encoding,
    dataset and collater: ``<s> question </s></s> context </s>``); a pair that needs more than one window, or whose
    question is cut, is refused (``fits=True``: None instead)."""
    from ..data.squad import QAExample, SquadFile

    task = hub.task

    def encode(text: Text, fits: bool = False) -> Optional[torch.Tensor]:
        question, context = (text, text) if isinstance(text, str) else text
        squad = SquadFile("<check>", [context], [QAExample("check", question, 0, None, 1)])
        dataset = task.build_dataset(squad)
        pieces = sum(len(task.word_encoder.encode(w, k == 0)) for k, w in enumerate(question.split()))
        if dataset.windows(0) == 1 and len(dataset.encoded.question(0)) == pieces:
            return dataset.collater([dataset[0]])["net_input"]["src_tokens"][0]
        if fits:
            return None
        raise HFConvertError(f"check pair {question[:60]!r}... does not fit one row of {task.window} tokens")

    return encode


def compare_qa_logits(hf_dir: Path, hub, head_name: str, pairs: Sequence[Text], encode) -> float:
    """Largest |difference| of HF's start/end logits from the fairseq span head's on ``pairs`` (ids from
    ``encode``, already checked equal to HF's tokenizer's by ``compare_with_hf``)."""
    import transformers

    verbosity = transformers.utils.logging.get_verbosity()
    transformers.utils.logging.set_verbosity_error()
    try:
        model = transformers.AutoModelForQuestionAnswering.from_pretrained(str(hf_dir)).float().eval()
    finally:
        transformers.utils.logging.set_verbosity(verbosity)
    worst = 0.0
    for pair in pairs:
        ids = encode(pair)
        with torch.no_grad():
            out = model(ids[None])
            scores, _ = hub.model(ids[None], features_only=True, classification_head_name=head_name)
        worst = max(worst, (out.start_logits[0] - scores[0, :, 0]).abs().max().item())
        worst = max(worst, (out.end_logits[0] - scores[0, :, 1]).abs().max().item())
    return worst


def export_hf(
    checkpoint,
    out_dir,
    *,
    data: Optional[str] = None,
    overwrite: bool = False,
    tolerance: float = DEFAULT_TOLERANCE,
    sentences: Optional[Sequence[Text]] = None,
    head: Optional[str] = None,
    log: Callable[[str], None] = print,
) -> Dict:
    """Export ``checkpoint`` into the HF directory ``out_dir`` (built in a temp dir and renamed only once HF's
    outputs were checked against fairseq's on ``sentences``, default ``CHECK_SENTENCES``, and ``CHECK_PAIRS`` for a
    sentence-level head); ``head`` picks one of several classification heads; ``log`` gets one line per warning;
    returns the check's numbers."""
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
    for prefix, why in PENDING_MODELS.items():
        if model_name.startswith(prefix):
            raise HFConvertError(f"{checkpoint}: model {model_name!r}: {why}")
    if not model_name.startswith("bio_roberta"):
        raise HFConvertError(f"{checkpoint}: model {model_name!r}: only bio_roberta checkpoints are exported")
    markers = str(_section(state, "task").get("entity_representation") or "dummy_cls")
    if markers != "dummy_cls":  # HF heads pool <s>, and HF's tokenizers know no [E1]: refused, not half-exported
        raise HFConvertError(
            f"{checkpoint}: task.entity_representation={markers}: not exported: an HF tokenizer cannot wrap the "
            "entities in [E1]/[E2] markers from their offsets, and no HF sequence-classification model pools "
            "entity-start states; fairseq-bio-predict serves this checkpoint"
        )
    vocab_dir = find_vocab_dir(checkpoint, state, data)
    check_destination(out_dir, overwrite, MARKERS)
    bpe = load_bpe_json(str(vocab_dir / "bpe.json"))
    if bpe["_name"] == "fastbpe":  # fairseq's fastbpe BPE needs the optional fastBPE, which reads the codes unchecked
        require_fastbpe()
        read_fastbpe_codes(bpe["bpe_codes"])
    hub = load_fairseq_model(checkpoint, vocab_dir)
    hf, kind, head_name = hf_model(hub, head)
    encode = {"token_classification": _word_encoder_ids, "sequence_classification": sentence_task_ids,
              "question_answering": qa_task_ids}.get(kind)  # fmt: skip
    encode = encode(hub) if encode else None
    if sentences is None:
        sentences = CHECK_SENTENCES
        if kind == "sequence_classification":  # the pairs that fit one window of the model's positions
            sentences += tuple(pair for pair in CHECK_PAIRS if encode(pair, fits=True) is not None)
        if kind == "question_answering":  # question-context rows: the pairs (and each sentence asked about itself)
            pairs = CHECK_PAIRS + tuple((s, s) for s in CHECK_SENTENCES)
            sentences = tuple(pair for pair in pairs if encode(pair, fits=True) is not None)

    tmp = make_temp_dir(out_dir)
    try:
        max_length = hf.config["max_position_embeddings"] - hf.config["pad_token_id"] - 1
        tokenizer = write_hf_tokenizer(tmp, hub.task.source_dictionary, bpe, max_length)
        hf.config["tokenizer_class"] = tokenizer["class"]
        for name, content in {"config.json": hf.config, **hf.side_files}.items():
            with open(tmp / name, "w", encoding="utf-8") as f:
                json.dump(content, f, indent=2)
                f.write("\n")
        save_file({k: v.contiguous().clone() for k, v in hf.state.items()}, str(tmp / "model.safetensors"),
                  metadata={"format": "pt"})  # fmt: skip
        identity = torch.arange(len(hub.task.source_dictionary))
        if kind == "question_answering":  # HF's QA models give start/end logits: the hidden states, then those
            check = compare_with_hf(tmp, hub, identity, sentences, "hidden", None, encode).__dict__
            check["logits_max_abs_diff"] = compare_qa_logits(tmp, hub, head_name, sentences, encode)
        else:
            check = compare_with_hf(tmp, hub, identity, sentences, kind, head_name, encode).__dict__
        if check["logits_max_abs_diff"] > tolerance or check["hidden_max_abs_diff"] > tolerance:
            raise HFConvertError(
                f"{checkpoint}: HF's outputs differ from fairseq's: logits {check['logits_max_abs_diff']:.2e}, hidden "
                f"states {check['hidden_max_abs_diff']:.2e} > {tolerance}"
            )
        card = model_card(checkpoint, state, hf, kind, tokenizer, check, vocab_dir)
        (tmp / "README.md").write_text(card, "utf-8")
        replace_dir(tmp, out_dir, overwrite, MARKERS)
    except BaseException:
        remove_temp_dir(tmp)
        raise
    for line in hf.warnings + ([tokenizer["note"]] if tokenizer.get("note") else []):
        log(line)
    return {"architecture": hf.config["architectures"][0], "tokenizer": tokenizer["class"], "kind": kind,
            "head": head_name, "files": sorted(p.name for p in out_dir.iterdir()), "warnings": hf.warnings, **check}  # fmt: skip


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    """``fairseq-bio-export-hf``: bio_roberta checkpoint -> HF transformers directory, checked."""

    def main(argv):
        parser = argparse.ArgumentParser(
            prog="fairseq-bio-export-hf", description=__doc__.split("\n\n")[0].replace("``", "")
        )
        parser.add_argument(
            "checkpoint", help="fairseq checkpoint (model.pt of an import, checkpoint_best.pt of pretraining or "
            "of a bio_tagging / bio_sentence_prediction fine-tuning run, ...)"
        )  # fmt: skip
        parser.add_argument("out_dir", help="output directory (must not exist unless --overwrite)")
        parser.add_argument(
            "--data", help="vocabulary dir (dict.txt, bpe.json); default: beside the checkpoint, else task.vocab or "
            "task.data"
        )  # fmt: skip
        parser.add_argument(
            "--head", help="the classification head to export when the checkpoint has several (the others are left out)"
        )
        parser.add_argument("--overwrite", action="store_true", help="replace an earlier export in out_dir")
        parser.add_argument(
            "--tolerance", type=float, default=DEFAULT_TOLERANCE, help="largest |logit difference| the check accepts"
        )
        args = parser.parse_args(argv)
        result = export_hf(args.checkpoint, args.out_dir, data=args.data, overwrite=args.overwrite,
                           tolerance=args.tolerance, head=args.head,
                           log=lambda line: print(f"fairseq-bio-export-hf: warning: {line}", file=sys.stderr))  # fmt: skip
        pairs = f" ({result['pairs']} pairs)" if result["pairs"] else ""
        print(
            f"wrote {Path(args.out_dir).absolute()} ({result['architecture']}, {result['tokenizer']}); checked on "
            f"{result['sentences']} real sentences{pairs}: token ids equal fairseq's, logits max |diff| "
            f"{result['logits_max_abs_diff']:.2e}"
        )

    run_cli("fairseq-bio-export-hf", main, argv)


if __name__ == "__main__":
    cli_main()

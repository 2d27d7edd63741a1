"""What a bio_roberta checkpoint becomes in HF: its encoder as HF RoBERTa (RobertaPreLayerNorm,
MegatronBERT) plus the head it was trained with (masked LM, token classification with a CRF's
parameters on the side, sentence classification or regression, extractive QA spans), the head's
labels and task options in config.json, and what has no place there named."""

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence, Tuple

import torch

from .common import HFConvertError
from .config import MEGATRON
from .weights import (
    FAIRSEQ_BUFFERS,
    HEADS_WITH_ENCODER_ACTIVATION,
    LM_HEAD,
    MLM_HEADS,
    HFModel,
    hf_encoder,
)

CRF_FILE = "crf.json"
# bio_sentence_prediction's task.entity_representation values HF cannot serve -> why (HF heads pool
# <s>)
ENTITY_REFUSALS = dict.fromkeys(
    ("marker_cls", "marker_start", "marker_mention"),
    "an HF tokenizer cannot wrap the entities in [E1]/[E2] markers from their offsets, and no HF "
    "sequence-classification model pools entity-start states",
)
ENTITY_REFUSALS["mention_pool"] = (
    "no HF sequence-classification model max-pools entity mention states (HF heads read <s>), and an HF tokenizer "
    "does not know where the mentions are"
)
# bio_sentence_prediction's task.kind -> HF's problem_type (which loss HF's
# *ForSequenceClassification trains with)
PROBLEM_TYPES = {
    "classification": "single_label_classification",
    "multilabel": "multi_label_classification",
    "regression": "regression",
}
# HF names of fairseq's sentence head (dense, out_proj): RoBERTa's classifier; MegatronBERT's pooler
# (dense + tanh on the first token, the same computation) and its classifier.
SENTENCE_HEADS = {MEGATRON: ("bert.pooler.dense", "classifier")}
ROBERTA_SENTENCE_HEAD = ("classifier.dense", "classifier.out_proj")


@dataclass(frozen=True)
class Target:
    """What one kind of checkpoint becomes: the HF class suffix (``Roberta`` + suffix), the Auto
    class that loads it, the card's pipeline tag, and the function adding the head to the encoder's
    ``HFModel`` (None: not built yet, refused with ``missing``)."""

    suffix: str
    auto_class: str
    pipeline_tag: str
    add_head: Optional[Callable] = None  # (hf: HFModel, hub, head_name, used fairseq names) -> None
    missing: str = ""


def head_kind(model, head_name: Optional[str] = None) -> Tuple[str, Optional[str]]:
    """(kind in ``TARGETS``, head name or None) of a loaded ``bio_roberta``: its only classification
    head decides, or the one ``head_name`` picks."""
    from fairseq.models.roberta.model import RobertaClassificationHead

    from ..modules.sentence_head import SentenceClassificationHead
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
    hidden = (
        head.hidden
        if isinstance(head, (TokenClassificationHead, SentenceClassificationHead))
        else ()
    )
    if len(hidden):  # HF's heads have no such layers: refused, not half-exported
        raise HFConvertError(
            f"classification head {name!r} has {len(hidden)} hidden layer(s) (task.head_hidden_layers): not exported: "
            "HF's classification heads have none; fairseq-bio-predict serves this checkpoint"
        )
    if isinstance(head, TokenClassificationHead):
        return "token_classification", name
    if isinstance(head, RobertaClassificationHead):
        return "sequence_classification", name
    raise HFConvertError(f"classification head {name!r} ({type(head).__name__}) has no HF export")


def _add_masked_lm_head(hf: HFModel, hub, head_name: Optional[str], used: set) -> None:
    """RoBERTa's ``lm_head`` (MegatronBERT's ``cls.predictions``): transform dense + LayerNorm,
    output bias, and the output matrix when untied."""
    model, model_type = hub.model, hf.config["model_type"]
    if model_type not in HEADS_WITH_ENCODER_ACTIVATION and model.args.activation_fn != "gelu":
        raise HFConvertError(
            f"HF RoBERTa's MLM head applies gelu, this model's applies {model.args.activation_fn}"
        )
    dense, norm, (decoder_bias, bias), decoder = MLM_HEADS[model_type]
    state = {k: v.detach().float() for k, v in model.state_dict().items() if k.startswith(LM_HEAD)}
    untied = model.encoder.lm_head.weight is not model.encoder.sentence_encoder.embed_tokens.weight
    for p in ("weight", "bias"):
        hf.state[f"{dense}.{p}"] = state[f"{LM_HEAD}dense.{p}"]
        hf.state[f"{norm}.{p}"] = state[f"{LM_HEAD}layer_norm.{p}"]
    hf.state[bias] = state[f"{LM_HEAD}bias"]
    if untied:  # HF's own files carry the output matrix and the decoder's bias only when untied
        hf.state[decoder] = state[f"{LM_HEAD}weight"]
        hf.state[decoder_bias] = state[f"{LM_HEAD}bias"]
    hf.config["tie_word_embeddings"] = not untied
    used.update(state)


def _add_token_classification_head(hf: HFModel, hub, head_name: str, used: set) -> None:
    """A ``bio_tagging`` token head (dropout -> linear) as RoBERTa's ``classifier``, labels as
    ``id2label``; a CRF's parameters go to ``crf.json``. The masked-LM head a fine-tuned checkpoint
    keeps (frozen) is left out.
    """
    head, task = hub.model.classification_heads[head_name], hub.task
    if (
        head.lstm is not None
    ):  # HF's token classifiers are one linear layer on the encoder: refused, not half-exported
        raise HFConvertError(
            f"token head {head_name!r} has a BiLSTM (task.lstm_layers={head.lstm.num_layers}): not exported: HF's "
            "token-classification models have no LSTM layer; fairseq-bio-predict serves this checkpoint"
        )
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
    hf.dropped.append(
        "the masked-LM head (kept frozen by fine-tuning; HF's token-classification model has none)"
    )
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
    """A ``bio_extractive_qa`` span head (two outputs per token: start, end) as RoBERTa's
    ``qa_outputs``, the task's windowing and decoding options under ``fairseq_bio``. The masked-LM
    head fine-tuning keeps (frozen) is left out.
    """
    head, task = hub.model.classification_heads[head_name], hub.task
    if head.out_proj.out_features != 2:
        raise HFConvertError(
            f"span head {head_name!r} has {head.out_proj.out_features} outputs per token, not 2"
        )
    key = f"classification_heads.{head_name}."
    for p in ("weight", "bias"):
        hf.state[f"qa_outputs.{p}"] = getattr(head.out_proj, p).detach().float()
        used.add(f"{key}out_proj.{p}")
    used.update(k for k in hub.model.state_dict() if k.startswith(LM_HEAD))
    hf.dropped.append(
        "the masked-LM head (kept frozen by fine-tuning; HF's question-answering model has none)"
    )
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
    """fairseq's RobertaClassificationHead (``<s>``'s last state -> dropout -> dense -> tanh ->
    dropout -> out_proj, what HF's RobertaClassificationHead computes, and MegatronBERT's pooler +
    classifier) as ``classifier``; a ``bio_sentence_prediction`` checkpoint's labels as ``id2label``
    and its kind as ``problem_type``. The masked-LM head fine-tuning keeps (frozen) is left out.
    """
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
    names = dict(
        zip(
            ("dense", "out_proj"),
            SENTENCE_HEADS.get(hf.config["model_type"], ROBERTA_SENTENCE_HEAD),
        )
    )
    for name in expected:
        layer, p = name.split(".")
        hf.state[f"{names[layer]}.{p}"] = model.state_dict()[key + name].detach().float()
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
        "ForTokenClassification",
        "AutoModelForTokenClassification",
        "token-classification",
        _add_token_classification_head,
    ),
    "sequence_classification": Target(
        "ForSequenceClassification",
        "AutoModelForSequenceClassification",
        "text-classification",
        _add_sequence_classification_head,
    ),
    "question_answering": Target(
        "ForQuestionAnswering",
        "AutoModelForQuestionAnswering",
        "question-answering",
        _add_question_answering_head,
    ),
}


def hf_model(hub, head: Optional[str] = None) -> Tuple[HFModel, str, Optional[str]]:
    """The loaded checkpoint as an HF model: (HFModel, kind in ``TARGETS``, head name); ``head``
    picks one of several classification heads (the others are left out and named)."""
    kind, head_name = head_kind(hub.model, head)
    if (
        kind == "token_classification"
        and getattr(hub.task, "task_name", None) == "bio_extractive_qa"
    ):
        kind = "question_answering"  # the span head is a token head with outputs (start, end)
    target = TARGETS[kind]
    if target.add_head is None:
        raise HFConvertError(f"classification head {head_name!r}: {target.missing}")
    hf, class_prefix, used = hf_encoder(hub)
    target.add_head(hf, hub, head_name, used)
    for other in hub.model.classification_heads:
        if other != head_name:
            used.update(
                k for k in hub.model.state_dict() if k.startswith(f"classification_heads.{other}.")
            )
            hf.dropped.append(f"classification head {other!r} (--head {head_name} was exported)")
    hf.config = {"architectures": [class_prefix + target.suffix], **hf.config}
    left = [k for k in hub.model.state_dict() if k not in used and not k.endswith(FAIRSEQ_BUFFERS)]
    if left:
        raise HFConvertError(
            f"parameter {left[0]!r} has no place in the HF model ({len(left)} such)"
        )
    return hf, kind, head_name

"""The model card (README.md) of an exported checkpoint: what the model is, its labels and inputs,
vocabulary, training, metrics, the exactness check, what HF does not do as fairseq_bio does, and a
snippet that uses it."""

from pathlib import Path
from typing import Dict, List

from ..checkpoints import checkpoint_section, updates as checkpoint_updates
from .config import MEGATRON, PRE_LN, position_offset
from .heads import TARGETS
from .weights import HFModel

LAYER_ORDERS = {
    PRE_LN: "pre-LayerNorm",
    MEGATRON: "pre-LayerNorm, no embedding LayerNorm (Megatron-LM's)",
}


def checkpoint_metrics(state: Dict) -> List[str]:
    """Card lines for the validation metric the checkpoint records (fairseq's
    ``best_checkpoint_metric``)."""
    extra, settings = state.get("extra_state") or {}, checkpoint_section(state, "checkpoint")
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
    # Words are encoded one at a time as fairseq_bio's tagging task does (a space before every word
    # but the first), and each word's label is read at its first token.
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
_SEQUENCE_MODELS = {
    "single_label_classification": "sentence-classification model",
    "multi_label_classification": "multi-label sentence-classification model",
    "regression": "sentence-regression model",
}
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
    score_range = (
        f"gold scores {low:g} to {high:g}; " if low is not None and high is not None else ""
    )
    outputs = _SEQUENCE_OUTPUTS[problem].format(
        threshold=info["threshold"] or 0.5, score_range=score_range
    )
    lines = ["## Labels", f"`problem_type: {problem}` (task kind `{info['kind']}`): {outputs}."]
    if problem != "regression":
        labels = [config["id2label"][str(i)] for i in range(len(config["id2label"]))]
        lines[-1] += (
            f" {len(labels)} labels (`id2label` in config.json): "
            + ", ".join(f"`{x}`" for x in labels)
            + "."
        )
    fields = info["text_fields"]
    lines += [
        "",
        "## Input",
        (
            f"A pair of texts ({' and '.join(f'`{f}`' for f in fields)}), read as {_pair_row(config, 'a', 'b')}: "
            "`tokenizer(a, b)` builds exactly that."
            if len(fields) == 2
            else f"One text (`{fields[0]}`), read as `<s> text </s>`: `tokenizer(text)`."
        )
        + " fairseq_bio reads a text as words split at whitespace: give HF the words joined by single spaces.",
        "",
    ]
    return lines


def _sequence_use(config: Dict) -> List[str]:
    """The card's snippet: one input (a text or a pair) through AutoModelForSequenceClassification,
    read per kind."""
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
        f"A question and a context, read as {_pair_row(config, 'question', 'context')}: `tokenizer(question, context)` "
        "builds exactly that (fairseq_bio reads texts as words split at whitespace: give HF the words joined by single "
        "spaces). `start_logits` and `end_logits` score each token as the first and the last of the answer; only "
        "context tokens are candidates (fairseq_bio masks the question and the special tokens).",
        "",
    ]


def _pair_row(config: Dict, a: str, b: str) -> str:
    """How the exported model reads a pair: BERT's row with token types, or RoBERTa's."""
    if config.get("type_vocab_size", 1) > 1:
        return f"`<s> {a} </s> {b} </s>` (`{b} </s>` of token type 1)"
    return f"`<s> {a} </s></s> {b} </s>`"


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
    checkpoint: Path,
    state: Dict,
    hf: HFModel,
    kind: str,
    tokenizer: Dict,
    check: Dict,
    vocab_dir: Path,
):
    """README.md as a ``huggingface_hub.ModelCard``: the Hub's metadata (library, pipeline tag,
    tags), then architecture, task and labels, vocabulary, training data and updates, the metrics
    the checkpoint holds, the check, what was left out, and how to load it."""
    from huggingface_hub import ModelCard, ModelCardData

    config, target = hf.config, TARGETS[kind]
    task, extra = checkpoint_section(state, "task"), state.get("extra_state") or {}
    updates = checkpoint_updates(state) or 0
    imported = extra.get("hf_import")
    layer_order = LAYER_ORDERS.get(config["model_type"], "post-LayerNorm (BERT/RoBERTa)")
    positions = config["max_position_embeddings"] - position_offset(config)
    what = {
        "masked_lm": "masked language model",
        "token_classification": "token-classification (tagging) model",
        "sequence_classification": _SEQUENCE_MODELS.get(config.get("problem_type")),
        "question_answering": "extractive question-answering model",
    }
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
            f"output{'s' if len(config['id2label']) > 1 else ''} (fairseq's head and HF's compute the same)."
        )
    lines = [
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
        f"dictionary's, from `{vocab_dir}`)."
        + (f" Note: {tokenizer['note']}." if tokenizer.get("note") else ""),
        "",
        "## Training",
        f"- task: `{task.get('_name', task.get('task', 'unknown'))}` on `{task.get('data', 'unknown')}`",
        f"- updates: {updates}"
        + (f" (started from the HF model `{imported['source']}`)" if imported else ""),
    ]
    if kind == "masked_lm":
        lines.append(
            f"- tokens per sample: {task.get('tokens_per_sample', 'unknown')}, mask probability "
            f"{task.get('mask_prob', 'unknown')}, whole-word masking: {task.get('mask_whole_words', 'unknown')}"
        )
    else:
        lines.append(
            f"- fine-tuned from `{task.get('finetune_from_model') or task.get('restore_file')}`"
        )
    lines += [
        "",
        "## Metrics",
        *(checkpoint_metrics(state) or ["- none recorded in the checkpoint"]),
    ]
    if kind != "masked_lm":
        lines.append(
            "- test set: not recorded in the checkpoint (fairseq evaluates the validation split only)"
        )
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
    data = ModelCardData(
        library_name="transformers",
        pipeline_tag=target.pipeline_tag,
        tags=[target.pipeline_tag, "biomedical", "fairseq", "fairseq_bio"],
    )
    return ModelCard("\n".join(["---", data.to_yaml(), "---"] + lines + [""]))


# What each half of an exported ELECTRA pair is, and its Auto class and pipeline tag.
_ELECTRA_PARTS = {
    "discriminator": (
        "discriminator (replaced-token detection: the encoder to fine-tune)",
        "AutoModelForPreTraining",
        None,
    ),
    "generator": (
        "generator (the masked LM that proposes the replacements in pretraining)",
        "AutoModelForMaskedLM",
        "fill-mask",
    ),
}


def electra_model_card(
    checkpoint: Path, state: Dict, part: str, hf: HFModel, tokenizer: Dict, check, vocab_dir: Path
):
    """README.md of one half (``part``) of an exported ELECTRA pair: what it is and where its other
    half is, architecture, vocabulary, training, metrics, the pair's check, and how to load it."""
    from huggingface_hub import ModelCard, ModelCardData

    config, (role, auto_class, pipeline_tag) = hf.config, _ELECTRA_PARTS[part]
    other = "generator" if part == "discriminator" else "discriminator"
    task, extra = checkpoint_section(state, "task"), state.get("extra_state") or {}
    updates = checkpoint_updates(state) or 0
    imported = extra.get("hf_import")
    hidden, width = config["hidden_size"], config["embedding_size"]
    head = {
        "discriminator": f"head `discriminator_predictions`: dense {hidden} x {hidden}, gelu, one logit per token "
        "(replaced or original)",
        "generator": f"head `generator_predictions`: dense {hidden} x {width}, gelu, LayerNorm, then the output layer "
        "tied to the input embeddings",
    }[part]
    lines = [
        f"# {checkpoint.parent.name}/{checkpoint.name}: {part}",
        "",
        f"The {role} of a biomedical ELECTRA exported from the fairseq_bio `bio_electra` checkpoint `{checkpoint}` by "
        f"`fairseq-bio-export-hf`. Its {other} is `../{other}`; the two share their embeddings, as in pretraining.",
        "",
        "## Architecture",
        f"`{config['architectures'][0]}`: {config['num_hidden_layers']} layers, hidden size {hidden}, "
        f"{config['num_attention_heads']} attention heads, feed-forward size {config['intermediate_size']}, gelu, "
        f"post-LayerNorm, LayerNorm eps {config['layer_norm_eps']:g}, {config['max_position_embeddings']} positions, "
        f"{width}-wide embeddings"
        + (f" projected to {hidden}" if width != hidden else "")
        + f"; {head}.",
        "",
        "## Vocabulary",
        f"{tokenizer['description']}, {config['vocab_size']} entries (`{tokenizer['class']}`; ids are the fairseq "
        f"dictionary's, from `{vocab_dir}`)."
        + (f" Note: {tokenizer['note']}." if tokenizer.get("note") else ""),
        "",
        "## Training",
        f"- task: `{task.get('_name', 'unknown')}` on `{task.get('data', 'unknown')}` (ELECTRA: generator MLM loss + "
        "weighted replaced-token detection loss)",
        f"- updates: {updates}"
        + (
            f" (started from the HF ELECTRA pair `{imported['source']}`, "
            f"`{imported.get('generator')}`)"
            if imported
            else ""
        ),
        f"- tokens per sample: {task.get('tokens_per_sample', 'unknown')}, mask probability "
        f"{task.get('mask_prob', 'unknown')}, whole-word masking: {task.get('mask_whole_words', 'unknown')}",
        "",
        "## Metrics",
        *(checkpoint_metrics(state) or ["- none recorded in the checkpoint"]),
        "",
        "## Check",
        f"On {check.sentences} real PubMed sentences ({check.tokens} tokens) HF's tokenizer gives fairseq's token ids; "
        f"every layer's states of both models differ from fairseq's by at most {check.hidden_max_abs_diff:.2e}, the "
        f"discriminator's logits by at most {check.discriminator_logits_max_abs_diff:.2e} and the generator's MLM "
        f"logits (on the sentences and on copies with tokens masked) by at most "
        f"{check.generator_logits_max_abs_diff:.2e} (fp32).",
        "",
        "## Use",
        "```python",
        f"from transformers import {auto_class}, AutoTokenizer",
        "",
        'tokenizer = AutoTokenizer.from_pretrained("<this directory>")',
        f'model = {auto_class}.from_pretrained("<this directory>")',
        "```",
    ]
    tags = ["electra", "biomedical", "fairseq", "fairseq_bio"] + (
        [pipeline_tag] if pipeline_tag else []
    )
    data = ModelCardData(library_name="transformers", pipeline_tag=pipeline_tag, tags=tags)
    return ModelCard("\n".join(["---", data.to_yaml(), "---"] + lines + [""]))

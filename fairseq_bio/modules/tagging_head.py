"""Token-classification head: dropout -> linear per token, optionally a linear-chain CRF over labelled positions.

It lives in the model's ``classification_heads`` beside fairseq's sentence heads, and is told apart from them in
a state dict by having ``out_proj`` but no ``dense`` (fairseq's ``RobertaClassificationHead`` always has both).
"""

from typing import Optional, Sequence

import torch
from torch import nn

from .crf import LinearChainCRF, bio_constraints


class TokenClassificationHead(nn.Module):
    """``B x T x C`` features -> ``B x T x K`` label scores (CRF emissions when ``crf``)."""

    def __init__(self, input_dim: int, num_classes: int, dropout: float = 0.1, crf: bool = False):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.out_proj = nn.Linear(input_dim, num_classes)
        self.crf = LinearChainCRF(num_classes) if crf else None

    def forward(self, features, **kwargs):
        return self.out_proj(self.dropout(features))

    def constrain(self, labels: Sequence[str]) -> None:
        """Forbid the CRF transitions the tagging scheme of ``labels`` rules out (I-X after O, ...)."""
        if self.crf is not None:
            self.crf.set_constraints(*bio_constraints(labels))

    def loss(self, scores: torch.Tensor, target: torch.Tensor, ignore_index: int) -> torch.Tensor:
        """Summed loss over positions whose ``target`` is not ``ignore_index``: cross-entropy, or the CRF's
        negative log-likelihood of each row's sequence of labelled positions."""
        mask = target.ne(ignore_index)
        if self.crf is None:
            return (
                nn.functional.cross_entropy(scores[mask].float(), target[mask], reduction="sum")
                if mask.any()
                else scores.sum() * 0.0
            )
        emissions, tags, packed = pack_positions(scores, mask, target)
        return self.crf(emissions, tags, packed).sum()

    def predict(self, scores: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``B x T`` best labels at ``positions`` (-1 elsewhere): argmax, or Viterbi over each row's positions."""
        if self.crf is None:
            return torch.where(positions, scores.argmax(-1), torch.full_like(positions, -1, dtype=torch.long))
        emissions, _, packed = pack_positions(scores, positions)
        decoded = self.crf.decode(emissions, packed)
        out = torch.full(positions.shape, -1, dtype=torch.long, device=scores.device)
        out[positions] = decoded[packed]
        return out


def pack_positions(scores: torch.Tensor, mask: torch.Tensor, target: Optional[torch.Tensor] = None):
    """The ``mask``ed positions of each row moved to the left: (``B x N x K`` scores, ``B x N`` targets or None,
    ``B x N`` bool), N the most positions of a row. Row order of the positions is kept."""
    counts = mask.sum(-1)
    width = max(int(counts.max()) if counts.numel() else 0, 1)
    packed = torch.arange(width, device=mask.device).unsqueeze(0) < counts.unsqueeze(1)
    emissions = scores.new_zeros(scores.size(0), width, scores.size(-1))
    emissions[packed] = scores[mask]
    tags = None
    if target is not None:
        tags = target.new_zeros(target.size(0), width)
        tags[packed] = target[mask]
    return emissions, tags, packed

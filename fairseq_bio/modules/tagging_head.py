"""Token-classification head: dropout -> linear per token, optionally a bidirectional LSTM before
the linear layer (PubMedBERT Table 10's Bi-LSTM), fully connected hidden layers before it
(BioMegatron Tables 1-2's num-fc-layers) and a linear-chain CRF over labelled positions (together:
BiLSTM-CRF).

It lives in the model's ``classification_heads`` beside fairseq's sentence heads, and is told apart
from them in a state dict by having ``out_proj`` but no ``dense`` (fairseq's
``RobertaClassificationHead`` always has both); ``head_options`` reads its shape (labels, CRF, LSTM)
back from a state dict.
"""

from typing import Dict, Mapping, Optional, Sequence

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .crf import LinearChainCRF, bio_constraints


class TokenClassificationHead(nn.Module):
    """``B x T x C`` features -> ``B x T x K`` label scores (CRF emissions when ``crf``): dropout ->
    linear, or with ``lstm_layers`` dropout -> BiLSTM (``lstm_hidden_size`` per direction, dropout
    between layers) -> dropout -> linear. ``hidden_layers`` adds that many linear (``hidden_size``
    wide) -> ReLU -> dropout layers before the last linear one (NeMo's MLP, which BioMegatron
    fine-tuned with). The BiLSTM reads each row up to its padding (``padding_mask``, right padding),
    so a row's scores do not depend on the batch it is in."""

    def __init__(
        self,
        input_dim: int,
        num_classes: int,
        dropout: float = 0.1,
        crf: bool = False,
        lstm_layers: int = 0,
        lstm_hidden_size: int = 0,
        hidden_layers: int = 0,
        hidden_size: int = 0,
    ):
        super().__init__()
        if lstm_layers < 0 or (lstm_layers and lstm_hidden_size < 1):
            raise ValueError(
                f"lstm_layers {lstm_layers} must be >= 0, and lstm_hidden_size {lstm_hidden_size} >= 1"
            )
        if hidden_layers < 0 or (hidden_layers and hidden_size < 1):
            raise ValueError(
                f"hidden_layers {hidden_layers} must be >= 0, and hidden_size {hidden_size} >= 1"
            )
        self.dropout = nn.Dropout(p=dropout)
        self.lstm = None
        if lstm_layers:
            self.lstm = nn.LSTM(
                input_dim,
                lstm_hidden_size,
                num_layers=lstm_layers,
                batch_first=True,
                bidirectional=True,
                dropout=dropout if lstm_layers > 1 else 0.0,
            )
        width = 2 * lstm_hidden_size if lstm_layers else input_dim
        self.hidden = nn.ModuleList()
        for _ in range(hidden_layers):
            self.hidden.append(nn.Linear(width, hidden_size))
            width = hidden_size
        self.out_proj = nn.Linear(width, num_classes)
        self.crf = LinearChainCRF(num_classes) if crf else None

    def forward(self, features, padding_mask: Optional[torch.Tensor] = None, **kwargs):
        """``padding_mask`` (``B x T``, True at padding): what the BiLSTM must not read; None: no
        padding."""
        x = self.dropout(features)
        if self.lstm is not None:
            x = self.dropout(self.run_lstm(x, padding_mask))
        for layer in self.hidden:
            x = self.dropout(torch.relu(layer(x)))
        return self.out_proj(x)

    def run_lstm(self, x: torch.Tensor, padding_mask: Optional[torch.Tensor]) -> torch.Tensor:
        """``B x T x C`` -> ``B x T x 2H`` BiLSTM states over each row's first ``T - padding``
        positions (zeros at the padding)."""
        if padding_mask is None or not bool(padding_mask.any()):
            return self.lstm(x)[0]
        if bool((padding_mask[:, :-1] & ~padding_mask[:, 1:]).any()):
            raise ValueError(
                "the BiLSTM tagging head reads right-padded rows; a row has padding before a token"
            )
        lengths = (~padding_mask).sum(1).clamp(min=1).cpu()
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        return pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=x.size(1))[
            0
        ]

    def options(self) -> Dict[str, int]:
        """The head's shape as ``register_tagging_head`` takes it (and ``head_options`` reads from a
        state dict)."""
        return {
            "num_classes": self.out_proj.out_features,
            "crf": self.crf is not None,
            "lstm_layers": self.lstm.num_layers if self.lstm is not None else 0,
            "lstm_hidden_size": self.lstm.hidden_size if self.lstm is not None else 0,
            "hidden_layers": len(self.hidden),
            "hidden_size": self.hidden[0].out_features if len(self.hidden) else 0,
        }

    def constrain(self, labels: Sequence[str]) -> None:
        """Forbid the CRF transitions the tagging scheme of ``labels`` rules out (I-X after O,
        ...)."""
        if self.crf is not None:
            self.crf.set_constraints(*bio_constraints(labels))

    def loss(self, scores: torch.Tensor, target: torch.Tensor, ignore_index: int) -> torch.Tensor:
        """Summed loss over positions whose ``target`` is not ``ignore_index``: cross-entropy, or
        the CRF's negative log-likelihood of each row's sequence of labelled positions."""
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
        """``B x T`` best labels at ``positions`` (-1 elsewhere): argmax, or Viterbi over each row's
        positions."""
        if self.crf is None:
            return torch.where(
                positions, scores.argmax(-1), torch.full_like(positions, -1, dtype=torch.long)
            )
        emissions, _, packed = pack_positions(scores, positions)
        decoded = self.crf.decode(emissions, packed)
        out = torch.full(positions.shape, -1, dtype=torch.long, device=scores.device)
        out[positions] = decoded[packed]
        return out


def head_options(params: Mapping[str, torch.Tensor], prefix: str) -> Dict[str, int]:
    """The ``options`` of the token head whose parameters are ``params`` (keys start with
    ``prefix``)."""
    layers = sum(
        1
        for key in params
        if key.startswith(prefix + "lstm.weight_ih_l") and not key.endswith("_reverse")
    )
    hidden = hidden_layer_count(params, prefix)
    return {
        "num_classes": params[prefix + "out_proj.weight"].size(0),
        "crf": prefix + "crf.transitions" in params,
        "lstm_layers": layers,
        "lstm_hidden_size": params[prefix + "lstm.weight_hh_l0"].size(1) if layers else 0,
        "hidden_layers": hidden,
        "hidden_size": params[prefix + "hidden.0.weight"].size(0) if hidden else 0,
    }


def hidden_layer_count(params: Mapping[str, torch.Tensor], prefix: str) -> int:
    """How many fully connected hidden layers (``hidden.<i>.weight``) the head whose parameters are
    ``params`` has: checkpoints from before the option have none."""
    return sum(
        1 for key in params if key.startswith(prefix + "hidden.") and key.endswith(".weight")
    )


def pack_positions(scores: torch.Tensor, mask: torch.Tensor, target: Optional[torch.Tensor] = None):
    """The ``mask``ed positions of each row moved to the left: (``B x N x K`` scores, ``B x N``
    targets or None, ``B x N`` bool), N the most positions of a row. Row order of the positions is
    kept."""
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

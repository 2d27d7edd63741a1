"""Sentence-classification head with fully connected hidden layers before the classifier
(BioMegatron Tables 1-2's num-fc-layers and fc-dropout): fairseq's [CLS] head (dropout -> dense ->
activation -> dropout) then ``hidden_layers`` x (linear -> ReLU -> dropout), then ``out_proj``.

A subclass of fairseq's ``RobertaClassificationHead`` with its ``dense`` and ``out_proj``, so
fairseq's head bookkeeping when loading a checkpoint reads it the same way; the task registers it
before any checkpoint is loaded.
"""

import torch
from fairseq.models.roberta.model import RobertaClassificationHead
from torch import nn


class SentenceClassificationHead(RobertaClassificationHead):
    """``B x T x C`` features -> ``B x K`` from the first token's state; with ``hidden_layers`` 0 it
    is fairseq's head (same parameters, same order of initialisation)."""

    def __init__(
        self,
        input_dim: int,
        num_classes: int,
        activation_fn: str = "tanh",
        pooler_dropout: float = 0.1,
        hidden_layers: int = 0,
        hidden_size: int = 0,
    ):
        super().__init__(input_dim, input_dim, num_classes, activation_fn, pooler_dropout)
        if hidden_layers < 0 or (hidden_layers and hidden_size < 1):
            raise ValueError(
                f"hidden_layers {hidden_layers} must be >= 0, and hidden_size {hidden_size} >= 1"
            )
        width = input_dim
        self.hidden = nn.ModuleList()
        for _ in range(hidden_layers):
            self.hidden.append(nn.Linear(width, hidden_size))
            width = hidden_size
        if hidden_layers:
            self.out_proj = nn.Linear(width, num_classes)

    def forward(self, features: torch.Tensor, **kwargs) -> torch.Tensor:
        x = self.dropout(self.activation_fn(self.dense(self.dropout(features[:, 0, :]))))
        for layer in self.hidden:
            x = self.dropout(torch.relu(layer(x)))
        return self.out_proj(x)

"""ELECTRA's pieces as plain modules: the narrow generator encoder, the generator's tied MLM head,
the discriminator's per-token head, and the sampling of replacements."""

from typing import Optional

import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.modules import LayerNorm
from torch import Tensor, nn

from .transformer_encoder import BioTransformerEncoder


class ProjectedTransformerEncoder(BioTransformerEncoder):
    """A ``BioTransformerEncoder`` whose layers may differ in width from its embeddings: ``E``-wide
    token/position embeddings and embedding LayerNorm, then a linear projection to the layers' width
    ``H`` (ELECTRA's generator, and ELECTRA-small's discriminator; no projection, and a plain
    encoder's parameters, when ``E == H``).
    """

    def __init__(self, args, dictionary, embed_tokens, token_types: int = 0):
        super().__init__(args, dictionary, embed_tokens, token_types)
        embed_dim, hidden = embed_tokens.embedding_dim, args.encoder_embed_dim
        self.embed_proj = nn.Linear(embed_dim, hidden) if embed_dim != hidden else None
        if (
            self.layer_norm is not None and embed_dim != hidden
        ):  # pre-LN's final norm acts on the layers' width
            self.layer_norm = LayerNorm(hidden)

    def forward_embedding(self, src_tokens, token_embedding: Optional[Tensor] = None):
        """``B x T`` -> (``B x T x H`` layer input, ``B x T x E`` scaled token embeddings)."""
        x, embed = super().forward_embedding(src_tokens, token_embedding)
        if self.embed_proj is not None:
            x = self.embed_proj(x)
        return x, embed


class GeneratorHead(nn.Module):
    """``N x H`` generator features -> ``N x V`` logits: dense to the embedding width ``E``,
    activation, LayerNorm, then the shared ``V x E`` token embeddings (tied) plus a bias. With
    ``H == E`` it has the parameter names and computation of fairseq's ``RobertaLMHead``."""

    def __init__(self, hidden: int, weight: nn.Parameter, activation_fn: str = "gelu"):
        super().__init__()
        vocab, embed_dim = weight.shape
        self.dense = nn.Linear(hidden, embed_dim)
        self.activation_fn = utils.get_activation_fn(activation_fn)
        self.layer_norm = LayerNorm(embed_dim)
        self.weight = weight
        self.bias = nn.Parameter(torch.zeros(vocab))

    def forward(self, features: Tensor) -> Tensor:
        x = self.layer_norm(self.activation_fn(self.dense(features)))
        return F.linear(x, self.weight) + self.bias


class DiscriminatorHead(nn.Module):
    """``B x T x C`` features -> ``B x T`` logits of "this token was replaced" (ELECTRA: dense,
    activation, one output)."""

    def __init__(self, hidden: int, activation_fn: str = "gelu"):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.activation_fn = utils.get_activation_fn(activation_fn)
        self.out_proj = nn.Linear(hidden, 1)

    def forward(self, features: Tensor) -> Tensor:
        return self.out_proj(self.activation_fn(self.dense(features))).squeeze(-1)


@torch.no_grad()
def sample_replacements(
    logits: Tensor,
    forbidden: Tensor,
    temperature: float = 1.0,
    generator: Optional[torch.Generator] = None,
) -> Tensor:
    """``N x V`` generator logits -> ``N`` tokens drawn from ``softmax(logits / temperature)`` with
    the ``forbidden`` (``V`` bool) symbols excluded; no gradient flows through the draw."""
    if temperature <= 0:
        raise ValueError(f"sampling temperature must be > 0, got {temperature}")
    if logits.size(0) == 0:
        return logits.new_zeros(0, dtype=torch.long)
    scaled = logits.float() / temperature
    scaled = scaled.masked_fill(forbidden.to(logits.device), float("-inf"))
    probs = F.softmax(scaled, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)

"""Relation classification from the relation's two entities (PubMedBERT Table 12), through BERT's
pooler-style head on their concatenated states: the top-layer states at the ``[E1]`` and ``[E2]``
start markers (Baldini Soares et al. 2019; "entity start"), or each entity mention's states
max-pooled ("MENTION"). Also the dictionary growth that adds the marker tokens to a pretrained
encoder.

The heads have ``dense`` and ``out_proj`` like fairseq's ``RobertaClassificationHead`` (so fairseq's
head bookkeeping when loading a checkpoint reads them the same way), but ``dense`` takes ``2 x C``.
"""

import logging
from typing import Sequence

import torch
from fairseq import utils
from torch import nn

logger = logging.getLogger(__name__)

# Rows a pretrained encoder's vocabulary-sized tensors have, grown when the task adds tokens (the LM
# head's weight is tied to the embeddings and appears under both names in a state dict).
VOCAB_TENSORS = (
    "encoder.sentence_encoder.embed_tokens.weight",
    "encoder.lm_head.weight",
    "encoder.lm_head.bias",
)


class EntityPairClassificationHead(nn.Module):
    """``B x 2C`` (the two entities' states, concatenated) -> ``B x K``: dropout -> dense (2C -> C)
    -> activation -> dropout -> out_proj. Subclasses pick the entities' states from the
    ``B x T x C`` features."""

    def __init__(
        self,
        input_dim: int,
        num_classes: int,
        activation_fn: str = "tanh",
        pooler_dropout: float = 0.1,
    ):
        super().__init__()
        self.dense = nn.Linear(2 * input_dim, input_dim)
        self.activation_fn = utils.get_activation_fn(activation_fn)
        self.dropout = nn.Dropout(p=pooler_dropout)
        self.out_proj = nn.Linear(input_dim, num_classes)

    def classify(self, pair: torch.Tensor) -> torch.Tensor:
        x = self.activation_fn(self.dense(self.dropout(pair)))
        return self.out_proj(self.dropout(x))


class EntityStartClassificationHead(EntityPairClassificationHead):
    """``B x T x C`` features and ``B x 2`` entity-start positions -> ``B x K`` from [h(E1);
    h(E2)]."""

    def forward(self, features: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
        rows = torch.arange(features.size(0), device=features.device).unsqueeze(1)
        return self.classify(features[rows, starts].flatten(1))  # B x 2 x C -> B x 2C


class MentionPoolClassificationHead(EntityPairClassificationHead):
    """``B x T x C`` features and ``B x 2 x 2`` mention spans (``[start, end)`` positions of E1's
    and E2's pieces) -> ``B x K`` from [maxpool(E1); maxpool(E2)] (PubMedBERT Table 12's
    MENTION)."""

    def forward(self, features: torch.Tensor, mentions: torch.Tensor) -> torch.Tensor:
        return self.classify(mention_max_pool(features, mentions).flatten(1))


def mention_max_pool(features: torch.Tensor, mentions: torch.Tensor) -> torch.Tensor:
    """``B x E x C``: the element-wise max of ``B x T x C`` features over each of the ``B x E x 2``
    spans ``[start, end)``; an empty span is a ValueError (its max is undefined)."""
    starts, ends = mentions[..., 0], mentions[..., 1]
    if (
        bool((ends <= starts).any())
        or bool((starts < 0).any())
        or bool((ends > features.size(1)).any())
    ):
        raise ValueError(
            f"mention spans must be non-empty [start, end) positions within a row's {features.size(1)}"
        )
    positions = torch.arange(features.size(1), device=features.device)
    pooled = []
    for k in range(mentions.size(1)):  # one B x T x C masked copy at a time, not E of them
        inside = (positions >= starts[:, k, None]) & (positions < ends[:, k, None])  # B x T
        pooled.append(features.masked_fill(~inside.unsqueeze(-1), float("-inf")).amax(1))
    return torch.stack(pooled, 1)


def entity_start_positions(tokens: torch.Tensor, start_ids: Sequence[int]) -> torch.Tensor:
    """``B x 2``: the position of each start marker (its first occurrence) in every row of ``B x T``
    tokens."""
    positions = []
    for marker in start_ids:
        hits = tokens.eq(marker)
        if not bool(hits.any(1).all()):
            row = int((~hits.any(1)).nonzero()[0])
            raise ValueError(
                f"row {row} has no entity-start marker (id {marker}); markers are added by the task"
            )
        positions.append(hits.int().argmax(1))
    return torch.stack(positions, 1)


def grow_vocab_rows_on_load(model: nn.Module, added: int, padding_idx: int) -> None:
    """Let ``model`` (built with ``added`` tokens appended to its encoder's dictionary) load a state
    dict without them: its vocabulary-sized tensors get ``added`` rows, each the mean of its
    existing rows (padding left out). A state dict that already has them (a fine-tuned checkpoint)
    loads unchanged; any other size is left for torch's size-mismatch error."""
    expected = {
        key: tensor.shape[0] for key, tensor in model.state_dict().items() if key in VOCAB_TENSORS
    }

    def hook(module, state_dict, prefix, *args):
        for key, rows in expected.items():
            name = prefix + key
            loaded = state_dict.get(name)
            if loaded is None or loaded.shape[0] != rows - added:
                continue
            keep = torch.ones(loaded.shape[0], dtype=torch.bool)
            if 0 <= padding_idx < loaded.shape[0]:
                keep[padding_idx] = False
            mean = loaded[keep].float().mean(0, keepdim=True).to(loaded.dtype)
            state_dict[name] = torch.cat([loaded, mean.expand(added, *loaded.shape[1:])], 0)
            logger.info(
                "%s: %d rows added for the added tokens (the mean of its %d rows)",
                key,
                added,
                len(loaded),
            )

    model.register_load_state_dict_pre_hook(hook)

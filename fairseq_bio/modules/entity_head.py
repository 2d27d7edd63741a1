"""Relation classification from entity-start markers (Baldini Soares et al. 2019; PubMedBERT Table 12's "entity
markers + entity start"): the top-layer states at the ``[E1]`` and ``[E2]`` tokens, concatenated, through BERT's
pooler-style head. Also the dictionary growth that adds the marker tokens to a pretrained encoder.

The head has ``dense`` and ``out_proj`` like fairseq's ``RobertaClassificationHead`` (so fairseq's head bookkeeping
when loading a checkpoint reads it the same way), but ``dense`` takes ``2 x C``.
"""

import logging
from typing import Sequence

import torch
from fairseq import utils
from torch import nn

logger = logging.getLogger(__name__)

# Rows a pretrained encoder's vocabulary-sized tensors have, grown when the task adds tokens (the LM head's weight is
# tied to the embeddings and appears under both names in a state dict).
VOCAB_TENSORS = ("encoder.sentence_encoder.embed_tokens.weight", "encoder.lm_head.weight", "encoder.lm_head.bias")


class EntityStartClassificationHead(nn.Module):
    """``B x T x C`` features and ``B x 2`` entity-start positions -> ``B x K``: [h(E1); h(E2)] -> dropout -> dense
    (2C -> C) -> activation -> dropout -> out_proj."""

    def __init__(self, input_dim: int, num_classes: int, activation_fn: str = "tanh", pooler_dropout: float = 0.1):
        super().__init__()
        self.dense = nn.Linear(2 * input_dim, input_dim)
        self.activation_fn = utils.get_activation_fn(activation_fn)
        self.dropout = nn.Dropout(p=pooler_dropout)
        self.out_proj = nn.Linear(input_dim, num_classes)

    def forward(self, features: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
        rows = torch.arange(features.size(0), device=features.device).unsqueeze(1)
        x = features[rows, starts].flatten(1)  # B x 2 x C -> B x 2C
        x = self.dropout(x)
        x = self.activation_fn(self.dense(x))
        return self.out_proj(self.dropout(x))


def entity_start_positions(tokens: torch.Tensor, start_ids: Sequence[int]) -> torch.Tensor:
    """``B x 2``: the position of each start marker (its first occurrence) in every row of ``B x T`` tokens."""
    positions = []
    for marker in start_ids:
        hits = tokens.eq(marker)
        if not bool(hits.any(1).all()):
            row = int((~hits.any(1)).nonzero()[0])
            raise ValueError(f"row {row} has no entity-start marker (id {marker}); markers are added by the task")
        positions.append(hits.int().argmax(1))
    return torch.stack(positions, 1)


def grow_vocab_rows_on_load(model: nn.Module, added: int, padding_idx: int) -> None:
    """Let ``model`` (built with ``added`` tokens appended to its encoder's dictionary) load a state dict without
    them: its vocabulary-sized tensors get ``added`` rows, each the mean of its existing rows (padding left out).
    A state dict that already has them (a fine-tuned checkpoint) loads unchanged; any other size is left for
    torch's size-mismatch error."""
    expected = {key: tensor.shape[0] for key, tensor in model.state_dict().items() if key in VOCAB_TENSORS}

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
            logger.info("%s: %d rows added for the added tokens (the mean of its %d rows)", key, added, len(loaded))

    model.register_load_state_dict_pre_hook(hook)

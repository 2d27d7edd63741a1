"""bio_masked_lm: fairseq's ``masked_lm`` loss with the LM head's output matmul and cross-entropy
fused.

fairseq's criterion asks the model for the ``N x V`` logits of the N masked positions and keeps
their fp32 log-softmax for the backward pass (2 GB at 128 x 512 tokens, 15 % masked, RoBERTa's
50,265 words). With ``fused_head`` (default) a ``bio_roberta`` model computes the same summed loss
in its forward (``fused_lm_loss``, torch's chunked ``linear_cross_entropy``) without holding the
logits. Loss, sample size and logged values are fairseq's, its rare all-positions case included;
other models, ``fused_head=false`` and TPUs take fairseq's computation."""

from dataclasses import dataclass, field

import torch
from fairseq.criterions import register_criterion
from fairseq.criterions.masked_lm import MaskedLmConfig, MaskedLmLoss

from ..models.bio_roberta import BioRobertaEncoder
from ..modules.masking import flat_positions, take_positions


@dataclass
class BioMaskedLmConfig(MaskedLmConfig):
    fused_head: bool = field(
        default=True,
        metadata={
            "help": "bio_roberta models: the LM head's output matmul and the cross-entropy in one chunked "
            "op, without the masked positions' N x V logits (false: fairseq masked_lm's computation)"
        },
    )


@register_criterion("bio_masked_lm", dataclass=BioMaskedLmConfig)
class BioMaskedLmLoss(MaskedLmLoss):
    def __init__(self, cfg: BioMaskedLmConfig, task):
        super().__init__(cfg, task)
        self.fused_head = cfg.fused_head

    def forward(self, model, sample, reduce=True):
        if (
            not self.fused_head
            or self.tpu
            or not isinstance(getattr(model, "encoder", None), BioRobertaEncoder)
        ):
            return super().forward(model, sample, reduce)
        masked_tokens = sample["target"].ne(self.padding_idx)
        sample_size = masked_tokens.int().sum()
        # fairseq's rare case, nothing masked: every position, whose targets are all padding (a loss
        # of 0), as fairseq on a GPU (on a CPU fairseq reads "anything masked?" back; the same
        # result)
        masked_tokens = torch.where(masked_tokens.any(), masked_tokens, masked_tokens.new([True]))
        positions = flat_positions(
            masked_tokens
        )  # the step's one read, before the forward: waits for the masking
        targets = take_positions(sample["target"], positions)
        loss, _ = model(
            **sample["net_input"],
            masked_tokens=positions,
            lm_targets=targets,
            lm_ignore_index=self.padding_idx
        )
        logging_output = {
            "loss": loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["nsentences"],
            "sample_size": sample_size,
        }
        return loss, sample_size, logging_output

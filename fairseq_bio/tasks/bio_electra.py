"""bio_electra: replaced-token-detection pretraining data: the masked-LM task's blocks and batch
masker, with ``[MASK]`` at every chosen position of the generator's input and the original tokens
carried along.

ELECTRA's paper writes the generator input as REPLACE(x, m, [MASK]) for every chosen position, which
is the default here (``leave_unmasked_prob=0``, ``random_token_prob=0``); the public ELECTRA code
(google-research/electra, ``pretrain_helpers.mask``) puts [MASK] at 85 % of the chosen positions and
leaves the original token at the other 15 %, never a random one: ``task.leave_unmasked_prob=0.15``,
which ``recipe/bioelectra.yaml`` sets (BioELECTRA trained with that code), with its budget of
round(15 % of the tokens) positions (``task.mask_budget=tokens``).
"""

from dataclasses import dataclass, field
from itertools import chain

import torch
from fairseq.tasks import register_task

from ..errors import BioConfigError
from .bio_masked_lm import BioMaskedLMConfig, BioMaskedLMTask, first_id

_SAMPLING = 1  # keys the replacement draws apart from the masks of the same batch


@dataclass
class BioElectraTaskConfig(BioMaskedLMConfig):
    leave_unmasked_prob: float = field(
        default=0.0,
        metadata={"help": "fraction of chosen words left as they are in the generator's input"},
    )
    random_token_prob: float = field(
        default=0.0,
        metadata={
            "help": "fraction of chosen words replaced by random tokens in the generator's input"
        },
    )


@register_task("bio_electra", dataclass=BioElectraTaskConfig)
class BioElectraTask(BioMaskedLMTask):
    """The masked-LM task whose batches also hold ``original_tokens`` (``B x T``) and
    ``sampling_seed``: the seed of the generator's replacement draws, keyed like the masks (seed,
    update, sample ids), so a resumed run draws the same replacements."""

    cfg: BioElectraTaskConfig
    head_warmup_supported = False  # a generator and a discriminator, no single MLM head to warm up

    def mask_sample(self, sample, mask_prob: float, stream: int):
        masked = super().mask_sample(sample, mask_prob, stream)
        tokens = sample["net_input"]["src_tokens"]
        # Integers only: hash() of a str differs between processes.
        key = (
            self.cfg.seed,
            stream,
            first_id(sample),
            sample["id"].numel(),
            tokens.size(1),
            _SAMPLING,
        )
        return {
            **masked,
            "original_tokens": tokens,
            "sampling_seed": hash(key) & 0x7FFF_FFFF_FFFF_FFFF,
        }

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        electra = getattr(model, "module", model)  # under DistributedDataParallel
        if getattr(electra, "grown_positions_from", None) is not None:
            # Phase 2 restored from a phase 1 with fewer positions: its optimizer state (restored
            # with the update count and lr schedule) is one table short. The new rows start with
            # zero moments.
            grow_optimizer_state(
                optimizer.optimizer,
                model,
                criterion,
                electra.discriminator.embed_positions.weight,
                electra.grown_positions_from,
            )
            electra.grown_positions_from = None
        return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)


@torch.no_grad()
def grow_optimizer_state(
    optimizer: torch.optim.Optimizer, model, criterion, grown: torch.Tensor, old_rows: int
):
    """Pad the restored state of ``optimizer`` (per-parameter, or fairseq's flat fp16 master copy of
    ``chain(model, criterion)`` parameters) with zeros for the rows ``old_rows:`` of the ``R x E``
    parameter ``grown``, which a checkpoint with ``old_rows`` rows was loaded into."""
    rows, width = grown.shape
    params = [p for p in chain(model.parameters(), criterion.parameters()) if p.requires_grad]
    for group in optimizer.param_groups:
        for param in group["params"]:
            state = optimizer.state.get(param, {})
            for key, value in state.items():
                if not torch.is_tensor(value) or value.dim() == 0 or value.shape == param.shape:
                    continue  # counters (Adam's step) and state that fits
                if value.shape == (old_rows, width) and param.shape == grown.shape:
                    state[key] = torch.cat([value, value.new_zeros(rows - old_rows, width)])
                elif (
                    value.dim() == param.dim() == 1
                    and param.numel() - value.numel() == (rows - old_rows) * width
                ):
                    # fairseq's FP16Optimizer: one flat vector of every parameter in this order.
                    at = sum(
                        p.numel()
                        for p in params[: next(i for i, p in enumerate(params) if p is grown)]
                    )
                    at += old_rows * width
                    state[key] = torch.cat(
                        [value[:at], value.new_zeros((rows - old_rows) * width), value[at:]]
                    )
                else:
                    raise BioConfigError(
                        f"restored optimizer state '{key}' of shape {tuple(value.shape)} does not fit a parameter of"
                        f" shape {tuple(param.shape)}: restore with checkpoint.reset_optimizer=true"
                    )

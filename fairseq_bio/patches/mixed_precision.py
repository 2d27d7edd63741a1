"""fairseq's fp16/bf16 optimizer wrapper with its per-parameter copies done by torch's multi-tensor
kernels.

Every update fairseq's ``FP16Optimizer`` zero-fills its fp32 master gradients, copies every
gradient into them and every master weight back: three Python loops of one small kernel per tensor
(about 600 launches per bio_roberta_base update), host time the GPU waits for between the backward
pass and the next forward (benchmarks/README.md, "Master-weight copies in bf16").
``MultiTensorFP16Optimizer`` does each loop as one multi-tensor kernel per device: the same bits,
state dict, checkpoints and loss scaling."""

from collections import defaultdict
from typing import Dict, List, Tuple

import torch
from fairseq.optim.fp16_optimizer import FP16Optimizer


class MultiTensorFP16Optimizer(FP16Optimizer):
    """``FP16Optimizer`` with its gradient and weight copies as one multi-tensor kernel per device.

    ``torch._foreach_copy_`` / ``torch._foreach_zero_`` over each device's tensors give the same
    values in the same tensors (a copy with the same rounding). Both of fairseq's layouts are
    covered: one fp32 tensor per parameter (bf16 always; fp16 with
    ``common.fp16_no_flatten_grads``) and one flat fp32 tensor per device (fp16's default)."""

    @classmethod
    def adopt(cls, optimizer: FP16Optimizer) -> FP16Optimizer:
        """Give the ``FP16Optimizer`` fairseq built these methods, in place (its state and the
        learning-rate scheduler's reference to it stay): only an instance of exactly that class, not
        a subclass it may have been given by someone else.

        ``BioTrainer._build_optimizer`` (``trainer.py``) calls it; the memory-efficient and AMP
        wrappers, BMUF and the CPU's fp32 path are left as they are."""
        if type(optimizer) is FP16Optimizer and not torch.is_tensor(
            optimizer.fp32_params
        ):  # (a dict when flat)
            optimizer.__class__ = cls
        return optimizer

    def _pairs(
        self, with_grads: bool
    ) -> Dict[torch.device, Tuple[List[torch.Tensor], List[torch.Tensor]]]:
        """{device: (the model's tensors, the master tensors they pair with)} for the trained
        parameters: the gradients (``with_grads``) or the weights. Flat layout: the master tensor's
        slice for each parameter, viewed in its shape, in fairseq's order (parameters in order, per
        device)."""
        pairs = defaultdict(lambda: ([], []))
        if self.has_flat_params:
            # fairseq's layout: each device's parameters in order, packed; its gradient copy packs
            # only those that require gradients, its weight copy all of them (the trainer passes
            # only trained ones anyway)
            offsets = defaultdict(int)
            for p in self.fp16_params:
                key = p.device.index
                if key not in self.fp32_params or (with_grads and not p.requires_grad):
                    continue
                flat, offset = self.fp32_params[key], offsets[key]
                offsets[key] += p.numel()
                master = (
                    (flat.grad if with_grads else flat).data[offset : offset + p.numel()].view_as(p)
                )
                if with_grads:
                    model_side = p.grad.data if p.grad is not None else p.data.new_zeros(p.shape)
                else:
                    model_side = p.data
                pairs[p.device][0].append(model_side)
                pairs[p.device][1].append(master)
            return pairs
        for p, p32 in zip(self.fp16_params, self.fp32_params):
            if not p.requires_grad:
                continue
            if with_grads:
                if p.grad is None:
                    p32.grad = torch.zeros_like(p.data, dtype=torch.float)
                    continue
                if p32.grad is None:
                    p32.grad = torch.empty_like(p32.data)
                pairs[p.device][0].append(p.grad.data)
                pairs[p.device][1].append(p32.grad.data)
            else:
                pairs[p.device][0].append(p.data)
                pairs[p.device][1].append(p32.data)
        return pairs

    def _sync_fp16_grads_to_fp32(self):
        if self._needs_sync:
            for low, master in self._pairs(with_grads=True).values():
                torch._foreach_copy_(master, low)
            self._needs_sync = False

    def _sync_fp32_params_to_fp16(self):
        for low, master in self._pairs(with_grads=False).values():
            torch._foreach_copy_(low, master)

    def zero_grad(self):
        if self.has_flat_params:
            return super().zero_grad()  # already one kernel per device
        for p in self.fp16_params:
            p.grad = None
        grads = defaultdict(list)
        for p32 in self.fp32_params:
            if p32.grad is not None:
                grads[p32.grad.device].append(p32.grad)
        for group in grads.values():
            torch._foreach_zero_(group)
        self._needs_sync = False
        if self.scaler is not None:
            self._multiply_factor = 1.0 / float(self.scaler.loss_scale)

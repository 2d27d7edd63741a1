"""fairseq's ``adam`` with its update and its gradient norm as multi-tensor kernels: the same
numbers, state and checkpoints.

Without apex or fairseq's CUDA extension (pip installs have neither) fairseq's ``adam`` updates
each parameter in a Python loop, about eight elementwise kernels per tensor, and takes its gradient
norm one kernel per tensor; on a GPU the device waits while the host launches them. ``ForeachAdam``
does the same arithmetic in the same order with ``torch._foreach_*`` ops, and ``adopt`` gives it to
the optimizers fairseq's trainer builds (docs/pretraining.md, "Precision and memory")."""

import math
from collections import defaultdict
from typing import List

import torch
from fairseq.optim.adam import Adam, FairseqAdam
from fairseq.optim.composite import FairseqCompositeOptimizer

from ..optim.bio_adamw import foreach_grad_norm, tensor_chunks

# Elements per multi-tensor launch group: bounds the denominators made at once (512 MiB of fp32).
CHUNK = 2**27
# Where the multi-tensor step runs. On a CPU there are no launches to save and fairseq's loop is
# faster: each tensor's eight passes run while it is in the cache, where the multi-tensor ops
# stream every tensor through memory eight times.
DEVICES = ("cuda",)


class ForeachAdam(Adam):
    """fairseq's ``Adam`` (``fairseq.optim.adam.Adam``) with one multi-tensor op per step of its
    arithmetic."""

    def step(self, closure=None):
        if not all(_plain(group) for group in self.param_groups):
            return super().step(closure)
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            buckets = defaultdict(list)  # (device, update count) -> parameters
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p.data)
                    state["exp_avg_sq"] = torch.zeros_like(p.data)
                else:  # as fairseq: a restored state moves to the parameter's device and dtype
                    state["exp_avg"] = state["exp_avg"].to(p.data)
                    state["exp_avg_sq"] = state["exp_avg_sq"].to(p.data)
                state["step"] += 1
                buckets[(p.device, state["step"])].append(p)
            for (_, step), params in buckets.items():
                for chunk in tensor_chunks(params, CHUNK):
                    self._update(group, step, chunk)
        return loss

    def _update(self, group: dict, step: int, params: List[torch.Tensor]) -> None:
        """fairseq's update of ``params`` (all at update ``step``), statement by statement."""
        grads = [p.grad.data for p in params]
        weights = [p.data for p in params]
        exp_avgs = [self.state[p]["exp_avg"] for p in params]
        exp_avg_sqs = [self.state[p]["exp_avg_sq"] for p in params]
        beta1, beta2 = group["betas"]
        torch._foreach_mul_(exp_avgs, beta1)
        torch._foreach_add_(exp_avgs, grads, alpha=1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
        denoms = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_add_(denoms, group["eps"])
        bias_correction1 = 1 - beta1**step
        bias_correction2 = 1 - beta2**step
        step_size = group["lr"] * math.sqrt(bias_correction2) / bias_correction1
        if group["weight_decay"] != 0:
            torch._foreach_add_(weights, weights, alpha=-group["weight_decay"] * group["lr"])
        torch._foreach_addcdiv_(weights, exp_avgs, denoms, value=-step_size)


def _plain(group: dict) -> bool:
    """Whether fairseq's loop would do nothing but the fp32 arithmetic on this group (no amsgrad, no
    casts), on ``DEVICES``: sparse or non-fp32 gradients or weights (the memory-efficient fp16
    wrapper) are not."""
    if group.get("amsgrad", False):
        return False
    for p in group["params"]:
        if p.grad is None:
            continue
        if p.grad.is_sparse or p.dtype != torch.float32 or p.grad.dtype != torch.float32:
            return False
        if p.device.type not in DEVICES:
            return False
    return True


class ForeachGradNorm:
    """``clip_grad_norm`` by ``foreach_grad_norm``: for fairseq optimizers whose own is
    ``FairseqOptimizer``'s."""

    def clip_grad_norm(self, max_norm, aggregate_norm_fn=None):
        return foreach_grad_norm(self.params, max_norm, aggregate_norm_fn)


class ForeachFairseqAdam(ForeachGradNorm, FairseqAdam):
    """fairseq's ``adam`` with the multi-tensor gradient norm (its ``ForeachAdam`` set by
    ``adopt``)."""


class ForeachCompositeOptimizer(ForeachGradNorm, FairseqCompositeOptimizer):
    """fairseq's ``composite`` with the multi-tensor gradient norm over all its groups'
    parameters."""


def adopt(optimizer):
    """Give the optimizer fairseq's trainer built, and those inside it, the multi-tensor methods, in
    place (state, the learning-rate scheduler's reference and checkpoints unchanged). Returns
    ``optimizer``.

    The plugin's trainer calls it on every optimizer fairseq builds. It changes, by class, exactly
    fairseq's ``FairseqAdam`` running fairseq's own ``Adam`` (not a fused one, not on a TPU) and
    the composite optimizer's gradient norm, wherever they sit: alone, inside the fp16/bf16
    wrappers or in a composite. A step with anything else in it (``_plain``) stays fairseq's
    loop."""
    inner = getattr(optimizer, "fp32_optimizer", None) or getattr(
        optimizer, "wrapped_optimizer", None
    )
    if (
        inner is not None
    ):  # fairseq's fp16/bf16 wrappers: the optimizer of the fp32 (or low-precision) weights
        adopt(inner)
    elif type(optimizer) is FairseqCompositeOptimizer:
        optimizer.__class__ = ForeachCompositeOptimizer
        for sub in optimizer.optimizers.values():
            adopt(sub)
    elif type(optimizer) is FairseqAdam and not getattr(optimizer.cfg, "tpu", False):
        optimizer.__class__ = ForeachFairseqAdam
        if type(optimizer._optimizer) is Adam:  # not apex's or fairseq's fused kernels
            optimizer._optimizer.__class__ = ForeachAdam
    return optimizer

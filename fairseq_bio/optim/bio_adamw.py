"""bio_adamw: torch's fused AdamW behind fairseq's optimizer interface, with the option names of
fairseq's ``adam``.

fairseq's ``adam`` is AdamW too, but fused only with apex or fairseq's CUDA extension (pip installs
have neither); the update differs in one place: fairseq adds ``adam_eps`` to ``sqrt(v)`` before the
bias correction of ``v``, torch after it. bio_adamw also reads each parameter's weight-decay scale
(``weight_decay_groups``: ``task.exempt_from_weight_decay``), takes the gradient norm with torch's
multi-tensor kernel (``foreach_grad_norm``), and under ``precision=memory_efficient_fp16|bf16``
keeps fp32 moments for the fp16/bf16 weights (``FP32StateAdamW``). Timings and reasoning:
docs/pretraining.md ("Precision and memory").
"""

import ast
from collections import defaultdict
from collections.abc import Collection
from itertools import chain
from dataclasses import dataclass, field
from typing import Any, List, Tuple

import torch
from fairseq import utils
from fairseq.dataclass import FairseqDataclass
from fairseq.optim import FairseqOptimizer, register_optimizer
from omegaconf import II, OmegaConf
from torch.optim.adam import adam as functional_adam
from torch.optim.optimizer import _get_scalar_dtype

from ..errors import BioConfigError


@dataclass
class BioAdamWConfig(FairseqDataclass):
    adam_betas: Any = field(default=(0.9, 0.999), metadata={"help": "betas, e.g. '(0.9, 0.98)'"})
    adam_eps: float = field(default=1e-8, metadata={"help": "epsilon added to sqrt(v)"})
    weight_decay: float = field(default=0.0, metadata={"help": "decoupled weight decay (AdamW)"})
    fused: bool = field(
        default=True,
        metadata={
            "help": "torch's fused kernel (CUDA and CPU): one pass per parameter; false: the foreach kernels"
        },
    )
    lr: List[float] = II("optimization.lr")


@register_optimizer("bio_adamw", dataclass=BioAdamWConfig)
class BioAdamW(FairseqOptimizer):
    """``torch.optim.AdamW`` (fused by default) for fairseq's trainer. fp16/bf16 training keeps fp32
    master weights through fairseq's ``FP16Optimizer`` (flat or not); ``memory_efficient_*`` hands
    it the fp16/bf16 weights themselves, which get ``FP32StateAdamW``."""

    def __init__(self, cfg: BioAdamWConfig, params):
        super().__init__(cfg)
        kernel = {"fused": True} if cfg.fused else {"foreach": True}
        groups = weight_decay_groups(params, cfg.weight_decay)
        adamw = torch.optim.AdamW(groups, **self.optimizer_config, **kernel)
        if any(p.dtype in LOW_PRECISION for g in adamw.param_groups for p in g["params"]):
            adamw = FP32StateAdamW(adamw.param_groups, **self.optimizer_config, **kernel)
        self._optimizer = adamw

    @property
    def supports_memory_efficient_fp16(self):
        return True  # fp16/bf16 weights get FP32StateAdamW: fp32 moments, fp32 updates

    @property
    def optimizer_config(self):
        """The settings a restored checkpoint's optimizer state is overridden with (fairseq's
        ``adam`` keys)."""
        return {
            "lr": self.cfg.lr[0] if isinstance(self.cfg.lr, Collection) else self.cfg.lr,
            "betas": parse_betas(self.cfg.adam_betas),
            "eps": self.cfg.adam_eps,
            "weight_decay": self.cfg.weight_decay,
        }

    @property
    def supports_flat_params(self):
        return True  # an elementwise update: one flat fp32 master tensor works as well as many

    def clip_grad_norm(self, max_norm, aggregate_norm_fn=None):
        """fairseq's ``clip_grad_norm`` (the fp16/bf16 wrappers call it on the fp32 master copies,
        the memory-efficient ones on the fp16/bf16 gradients) with one multi-tensor norm per device
        and dtype instead of one per parameter."""
        return foreach_grad_norm(self.params, max_norm, aggregate_norm_fn)


LOW_PRECISION = (torch.float16, torch.bfloat16)


class FP32StateAdamW(torch.optim.AdamW):
    """``torch.optim.AdamW`` for fp16/bf16 weights without an fp32 master copy (fairseq's
    ``MemoryEfficientFP16Optimizer``): each such weight's moments are kept in fp32, and its update is
    torch's AdamW (the same functional call and kernel as ``step`` for fp32 weights) on fp32 copies
    of the weights and gradients, ``chunk_numel`` elements at a time (whole tensors; one larger
    tensor is a chunk of its own), copied back rounded to the weight's dtype. fp32 weights are
    updated in place as by torch. ``load_state_dict`` keeps saved moments fp32 (torch's casts them to
    the weight's dtype)."""

    chunk_numel = 1 << 24
    # fairseq's wrapper would put the saved moments back as they were saved (device included):
    # load_state_dict below does it on the weights' device
    disable_mem_eff_fp16_loading_hack = True

    @property
    def supports_memory_efficient_fp16(self):
        return True

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            for p in params:
                if p.grad.is_sparse or torch.is_complex(p):
                    raise RuntimeError("bio_adamw: sparse gradients or complex weights")
            self._update(group, [p for p in params if p.dtype not in LOW_PRECISION], fp32=True)
            low = [p for p in params if p.dtype in LOW_PRECISION]
            for chunk in tensor_chunks(low, self.chunk_numel):
                self._update(group, chunk, fp32=False)
        return loss

    def _update(self, group, params, fp32: bool) -> None:
        """torch's AdamW update of ``params`` (all of one group): in place, or (``fp32=False``) on
        fp32 copies written back."""
        if not params:
            return
        states = [self._state(group, p) for p in params]
        if fp32:
            weights, grads = params, [p.grad for p in params]
        else:
            weights = [p.detach().float() for p in params]
            grads = [p.grad.detach().float() for p in params]
        beta1, beta2 = group["betas"]
        functional_adam(
            weights,
            grads,
            [s["exp_avg"] for s in states],
            [s["exp_avg_sq"] for s in states],
            [s["max_exp_avg_sq"] for s in states] if group["amsgrad"] else [],
            [s["step"] for s in states],
            amsgrad=group["amsgrad"],
            has_complex=False,
            beta1=beta1,
            beta2=beta2,
            lr=group["lr"],
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            maximize=group["maximize"],
            foreach=group["foreach"],
            capturable=group["capturable"],
            differentiable=group["differentiable"],
            fused=group["fused"],
            grad_scale=getattr(self, "grad_scale", None),
            found_inf=getattr(self, "found_inf", None),
            decoupled_weight_decay=group["decoupled_weight_decay"],
        )
        if not fp32:
            torch._foreach_copy_([p.detach() for p in params], weights)

    def _state(self, group, p) -> dict:
        """``p``'s state as torch's ``_init_group`` makes it, with fp32 moments for an fp16/bf16
        ``p`` (state loaded by other means is brought to fp32 on ``p``'s device)."""
        state = self.state[p]
        moments = ["exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if group["amsgrad"] else [])
        dtype = torch.float32 if p.dtype in LOW_PRECISION else p.dtype
        device_step = group["capturable"] or group["fused"]
        if len(state) == 0:
            state["step"] = (
                torch.zeros((), dtype=_get_scalar_dtype(is_fused=group["fused"]), device=p.device)
                if device_step
                else torch.tensor(0.0, dtype=_get_scalar_dtype())
            )
            for key in moments:
                state[key] = torch.zeros_like(p, dtype=dtype, memory_format=torch.preserve_format)
        for key in moments:
            if state[key].dtype != dtype or state[key].device != p.device:
                state[key] = state[key].to(device=p.device, dtype=dtype)
        step = state["step"]
        if device_step and (step.device != p.device or step.dtype != torch.float32):
            state["step"] = step.to(device=p.device, dtype=torch.float32)
        return state

    def load_state_dict(self, state_dict):
        """torch's, then each fp16/bf16 weight's saved moments again, as fp32 on its device (torch
        casts every floating-point state tensor to its weight's dtype)."""
        super().load_state_dict(state_dict)
        saved = chain.from_iterable(g["params"] for g in state_dict["param_groups"])
        params = chain.from_iterable(g["params"] for g in self.param_groups)
        for saved_id, p in zip(saved, params):
            if p.dtype not in LOW_PRECISION or saved_id not in state_dict["state"]:
                continue
            for key, value in state_dict["state"][saved_id].items():
                if key != "step" and torch.is_tensor(value) and value.is_floating_point():
                    self.state[p][key] = value.to(device=p.device, dtype=torch.float32, copy=True)


def tensor_chunks(params, numel: int):
    """``params`` in order, in runs of at most ``numel`` elements (a larger tensor alone)."""
    chunk, size = [], 0
    for p in params:
        if chunk and size + p.numel() > numel:
            yield chunk
            chunk, size = [], 0
        chunk.append(p)
        size += p.numel()
    if chunk:
        yield chunk


def foreach_grad_norm(params, max_norm: float, aggregate_norm_fn=None) -> torch.Tensor:
    """What ``fairseq.utils.clip_grad_norm_`` computes (the fp32 2-norm of all gradients, then every
    gradient scaled by ``max_norm / (norm + 1e-6)`` when that is below 1 and ``max_norm > 0``;
    ``aggregate_norm_fn`` applied to the norm first), by ``torch._foreach_norm``: on CUDA one kernel
    per (device, dtype) group of gradients. Sparse or expert (MoE) gradients, which fairseq treats
    apart, go to fairseq's function."""
    params = [p for p in params if p is not None and getattr(p, "grad", None) is not None]
    if not params:
        return torch.tensor(0.0)
    if any(p.grad.is_sparse or hasattr(p, "expert") for p in params):
        return utils.clip_grad_norm_(params, max_norm, aggregate_norm_fn)
    grads = [p.grad.detach() for p in params]
    groups = defaultdict(list)
    for g in grads:
        groups[(g.device, g.dtype)].append(g)
    device = grads[0].device
    norms = [
        n.to(device)
        for group in groups.values()
        for n in torch._foreach_norm(group, 2, dtype=torch.float32)
    ]
    total_norm = torch.linalg.vector_norm(torch.stack(norms))
    if aggregate_norm_fn is not None:
        total_norm = aggregate_norm_fn(total_norm)
    if max_norm > 0:
        clip_coef = (float(max_norm) / (total_norm + 1e-6)).clamp_(max=1)
        for group in groups.values():
            torch._foreach_mul_(group, clip_coef.to(group[0].device))
    return total_norm


def weight_decay_groups(params, weight_decay: float) -> list:
    """Parameters -> torch param groups: one of them all, or, when some carry a weight-decay scale
    (``optim_overrides["optimizer"]["weight_decay_scale"]``, set by
    ``task.exempt_from_weight_decay``, and copied by fairseq onto the fp32 master copies it makes
    one per parameter), one group per scale in order of first appearance, each with ``weight_decay``
    x its scale. fairseq's one flat fp32 master tensor carries no scale: one group (the task refuses
    that optimizer)."""
    params = list(params)
    if any(isinstance(p, dict) for p in params):
        return params  # groups already
    groups = {}
    for param in params:
        scale = ((getattr(param, "optim_overrides", None) or {}).get("optimizer") or {}).get(
            "weight_decay_scale"
        )
        groups.setdefault(1.0 if scale is None else float(scale), []).append(param)
    if list(groups) in ([], [1.0]):
        return params
    return [
        {"params": group, "weight_decay": weight_decay * scale} for scale, group in groups.items()
    ]


def parse_betas(betas) -> Tuple[float, float]:
    """``'(0.9, 0.98)'`` (fairseq's string form), a list/tuple or an omegaconf list ->
    ``(0.9, 0.98)``."""
    value = betas
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            value = None
    elif OmegaConf.is_config(value):
        value = OmegaConf.to_container(value)
    if not (
        isinstance(value, (tuple, list))
        and len(value) == 2
        and all(isinstance(b, (int, float)) for b in value)
    ):
        raise BioConfigError(
            f"optimizer.adam_betas={betas!r}: not a pair of numbers such as '(0.9, 0.98)'"
        )
    return float(value[0]), float(value[1])

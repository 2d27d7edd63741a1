"""fairseq's ``distributed_training.ddp_backend=fully_sharded`` on PyTorch's FSDP2
(``torch.distributed.fsdp``'s ``fully_shard``) instead of fairscale, inside fairseq's own Trainer,
on GPUs (NCCL) and CPUs (gloo) alike.

``ShardedTrainer`` (the base of ``trainer.BioTrainer``) shards the model on two or more processes,
takes the gradient norm over every rank's shards and writes consolidated checkpoints, the ones
plain data parallel writes; ``install()`` makes fairseq's ``fsdp_enable_wrap`` a no-op. In fp16
and bf16 FSDP2 holds the fp32 master shards and computes in the low precision
(``precision_policy``), and fp16's loss scaler decides an overflow on the norm over every rank
(``ShardedFP16Optimizer``). Why FSDP2 and not fairscale, why under fairseq's own
``fully_sharded``: docs/cluster.md, "Fully sharded data parallel"."""

import contextlib
import logging
from argparse import Namespace
from itertools import chain
from typing import Any, Iterable

import torch
import torch.distributed as dist
from fairseq import optim, utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.optim import lr_scheduler
from fairseq.optim.fp16_optimizer import MemoryEfficientFP16Optimizer
from fairseq.trainer import Trainer
from omegaconf import open_dict, read_write
from torch import nn

from ..errors import BioConfigError

logger = logging.getLogger(__name__)

FULLY_SHARDED = "fully_sharded"
_MARK = "fairseq_bio_sharded"


def _dtensor():
    from torch.distributed.tensor import DTensor

    return DTensor


def precision_policy(cfg):
    """FSDP2's mixed precision for ``common.fp16`` / ``common.bf16``, else None (fp32): each unit's
    weights gathered in the low precision for its forward and backward, gradients reduce-scattered
    and accumulated in fp32 into the fp32 shards the optimizer updates (gloo and NCCL both
    all-gather fp16/bf16)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    dtype = torch.float16 if cfg.common.fp16 else torch.bfloat16 if cfg.common.bf16 else None
    if dtype is None:
        return None
    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)


def shard_model(model: nn.Module, mesh, policy=None) -> nn.Module:
    """Shard ``model`` in place with FSDP2: one unit per layer of each ``layers`` module list (the
    transformer blocks), then the root (embeddings, the tied LM head, heads); ``policy``: FSDP2's
    ``MixedPrecisionPolicy`` (None: fp32)."""
    from torch.distributed.fsdp import fully_shard

    options = {"mesh": mesh}
    if policy is not None:
        options["mp_policy"] = policy
    lists = [
        m
        for name, m in model.named_modules()
        if name.split(".")[-1] == "layers" and isinstance(m, nn.ModuleList)
    ]
    for layers in lists:
        for layer in layers:
            fully_shard(layer, **options)
    fully_shard(model, **options)
    # fairseq loads full tensors (a checkpoint, rank 0's broadcast); each rank keeps its shard of
    # them
    model.register_load_state_dict_pre_hook(_shard_full_tensors)
    return model


def _shard_full_tensors(module, state_dict, prefix, *args):
    DTensor = _dtensor()
    from torch.distributed.tensor import distribute_tensor

    targets = dict(
        module.named_parameters(remove_duplicate=False)
    )  # tied weights are in the state under each name
    for name, param in targets.items():
        value = state_dict.get(prefix + name)
        if isinstance(param, DTensor) and torch.is_tensor(value) and not isinstance(value, DTensor):
            # every rank holds the same full tensor: each cuts its own shard, no communication
            state_dict[prefix + name] = distribute_tensor(
                value.to(param.device), param.device_mesh, param.placements, src_data_rank=None
            )


def held_parameters(model: nn.Module):
    """(parameters this rank holds, parameters of the model): each rank holds 1/world of every
    sharded one."""
    DTensor = _dtensor()
    params = list(model.parameters())
    held = sum((p.to_local() if isinstance(p, DTensor) else p).numel() for p in params)
    return held, sum(p.numel() for p in params)


def consolidated(tree: Any, keep: bool) -> Any:
    """``tree`` with each sharded tensor gathered whole (a collective: every rank calls it, in the
    same order), on the CPU where ``keep``, else None."""
    DTensor = _dtensor()
    if isinstance(tree, DTensor):
        full = tree.full_tensor()
        return full.cpu() if keep else None
    if isinstance(tree, dict):
        return type(tree)((k, consolidated(v, keep)) for k, v in tree.items())
    if isinstance(tree, (list, tuple)):
        return type(tree)(consolidated(v, keep) for v in tree)
    return tree


def shard_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Optimizer states loaded whole (a consolidated checkpoint) cut to each parameter's shard, in
    place."""
    DTensor = _dtensor()
    from torch.distributed.tensor import distribute_tensor

    for param, state in optimizer.state.items():
        if not isinstance(param, DTensor):
            continue
        for key, value in state.items():
            if (
                torch.is_tensor(value)
                and not isinstance(value, DTensor)
                and value.shape == param.shape
            ):
                state[key] = distribute_tensor(
                    value.to(param.device), param.device_mesh, param.placements, src_data_rank=None
                )


def total_norm(grads: Iterable[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of all gradients, over every rank's shards (a collective); a plain fp32
    scalar."""
    DTensor = _dtensor()
    grads = list(grads)
    if not grads:
        return torch.tensor(0.0)
    norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0)
    return (norm.full_tensor() if isinstance(norm, DTensor) else norm).float()


# fairseq options that only fairscale's FSDP reads: refused rather than ignored
FAIRSCALE_ONLY = ("cpu_offload", "use_sharded_state", "no_reshard_after_forward")


def refuse_unsupported_settings(cfg) -> None:
    """One line for the settings ``fully_sharded`` cannot honour: fairscale's own options (FSDP2
    would ignore them), the memory-efficient precisions (FSDP2 keeps fp32 master shards whatever the
    precision: plain fp16 / bf16 are what they would save), AMP and BMUF."""
    precision = [
        f"common.{name}"
        for name in ("memory_efficient_fp16", "memory_efficient_bf16", "amp")
        if cfg.common.get(name, False)
    ]
    if precision:
        raise BioConfigError(
            f"{', '.join(precision)} with distributed_training.ddp_backend=fully_sharded: FSDP2 "
            "holds the fp32 master weights as 1/world shards and computes in fp16 / bf16 itself; "
            "use precision=fp16 or precision=bf16"
        )
    given = [
        f"distributed_training.{name}" for name in FAIRSCALE_ONLY if cfg.distributed_training[name]
    ]
    if cfg.distributed_training.zero_sharding != "none":
        given.append("distributed_training.zero_sharding")
    if given:
        raise BioConfigError(
            f"{', '.join(given)}: fairscale's options, which distributed_training.ddp_backend="
            "fully_sharded (PyTorch's FSDP2 here) does not read; leave them unset"
        )
    if cfg.optimization.use_bmuf:
        raise BioConfigError(
            "optimization.use_bmuf: not supported with distributed_training.ddp_backend="
            "fully_sharded"
        )


def half_precision(cfg) -> bool:
    return bool(cfg.common.fp16 or cfg.common.bf16)


@contextlib.contextmanager
def fp32_settings(cfg):
    """``cfg`` with ``common.fp16`` / ``common.bf16`` off for the duration: fairseq's constructor
    reads them to cast the model and criterion, which a sharded run leaves in fp32 for FSDP2."""
    saved = cfg.common.fp16, cfg.common.bf16
    with read_write(cfg), open_dict(cfg):
        cfg.common.fp16 = cfg.common.bf16 = False
    try:
        yield cfg
    finally:
        with read_write(cfg), open_dict(cfg):
            cfg.common.fp16, cfg.common.bf16 = saved


class ShardedFP16Optimizer(MemoryEfficientFP16Optimizer):
    """fp16 loss scaling around the optimizer of FSDP2's fp32 shards: fairseq's
    ``MemoryEfficientFP16Optimizer`` (what fairseq itself puts around fairscale's FSDP in fp16),
    which keeps no copy of its own: the loss scaled in ``backward``, fairseq's ``1 / sample size``,
    the unscaling and the clipping folded into one factor applied just before the step, and
    fairseq's ``DynamicLossScaler`` (``common.fp16_init_scale``, ``fp16_scale_window``,
    ``fp16_scale_tolerance``, ``min_loss_scale``; ``loss_scale`` in the checkpoint).

    One change: the norm the scaler judges is ``total_norm``, over every rank's shards, an
    all-reduce whose result every rank receives. An inf or nan in any rank's shard is an overflow on
    every rank: each raises fairseq's ``OverflowError`` for the same update, so all skip it and lower
    the scale alike (fairseq's trainer logs "gradient overflow detected" and zeroes the gradients).
    """

    def __init__(self, cfg, params, optimizer):
        # any optimizer: its weights are FSDP2's fp32 shards, not fp16 ones
        super().__init__(cfg, params, optimizer, allow_unsupported=True)

    def clip_grad_norm(self, max_norm, aggregate_norm_fn=None):
        max_norm = float(max_norm)
        norm = self._multiply_factor * total_norm(p.grad for p in self.params if p.grad is not None)
        value = float(norm)  # the same on every rank
        if value > max_norm > 0.0:
            self._multiply_factor *= max_norm / value
        self.scaler.check_overflow(value)
        return norm


def sharded_backend(cfg) -> bool:
    return cfg.distributed_training.ddp_backend == FULLY_SHARDED


class ShardedTrainer(Trainer):
    """fairseq's Trainer; with ``ddp_backend=fully_sharded`` on several processes, PyTorch's FSDP2
    (see the module). fairseq-train builds its subclass ``trainer.BioTrainer``.

    Sharded, each rank holds 1/world of every parameter, gradient and optimizer state, and a unit's
    full parameters exist only while it runs. A checkpoint is consolidated: every rank gathers each
    tensor in turn and rank 0 writes a normal checkpoint (the same keys, shapes and optimizer-state
    layout), which fine-tuning, the HF export, one process or plain data parallel read; a sharded
    run resumes from it, or from a plain one: fairseq hands every rank the full state and each
    keeps its shard. In fp16 / bf16 the model stays fp32 (FSDP2 casts each unit as it gathers it),
    the optimizer updates the fp32 shards, and fp16 wraps it in ``ShardedFP16Optimizer``."""

    def __init__(self, cfg, task, model, criterion, quantizer=None):
        if isinstance(cfg, Namespace):
            cfg = convert_namespace_to_omegaconf(cfg)
        keep_fp32 = False  # fairseq's constructor would cast what FSDP2 casts unit by unit
        if sharded_backend(cfg):
            refuse_unsupported_settings(cfg)
            keep_fp32 = half_precision(cfg) and cfg.distributed_training.distributed_world_size > 1
        if keep_fp32 and utils.has_parameters(criterion):
            raise BioConfigError(
                "distributed_training.ddp_backend=fully_sharded in fp16 / bf16: a criterion "
                "with weights of its own (the distillation projections) is not sharded; use "
                "precision=fp32"
            )
        with fp32_settings(cfg) if keep_fp32 else contextlib.nullcontext():
            super().__init__(cfg, task, model, criterion, quantizer)

    @property
    def is_fsdp(self) -> bool:
        return False  # fairseq's branches for fairscale's FSDP: never taken

    @property
    def sharded(self) -> bool:
        return sharded_backend(self.cfg) and self.data_parallel_world_size > 1

    @property
    def model(self):
        if self._wrapped_model is None and self.sharded:
            from torch.distributed.device_mesh import init_device_mesh

            if self.data_parallel_world_size != dist.get_world_size():
                raise BioConfigError(
                    "distributed_training.ddp_backend=fully_sharded: model parallelism is not "
                    "supported with it (the data-parallel group must be the whole world)"
                )
            mesh = init_device_mesh(self.device.type, (self.data_parallel_world_size,))
            policy = precision_policy(self.cfg)
            self._wrapped_model = shard_model(self._model.to(self.device), mesh, policy)
            held, total = held_parameters(self._wrapped_model)
            precision = f"; weights in fp32, computed in {policy.param_dtype}" if policy else ""
            logger.info(
                f"fully sharded (PyTorch FSDP2) over {self.data_parallel_world_size} ranks: this rank holds "
                f"{held:,} of the {total:,} parameters{precision}"
            )
        return super().model

    def _build_optimizer(self):
        if not (self.sharded and half_precision(self.cfg)):
            return super()._build_optimizer()
        # FSDP2 holds the fp32 weights the optimizer updates (fairseq's FP16Optimizer would keep a
        # second, unsharded copy); fp16 adds the loss scaler
        params = [
            p
            for p in chain(self.model.parameters(), self.criterion.parameters())
            if p.requires_grad
        ]
        self._optimizer = optim.build_optimizer(self.cfg.optimizer, params)
        if self.cfg.common.fp16:
            self._optimizer = ShardedFP16Optimizer(self.cfg, params, self._optimizer)
        self._lr_scheduler = lr_scheduler.build_lr_scheduler(self.cfg.lr_scheduler, self.optimizer)
        self._lr_scheduler.step_update(0)

    def clip_grad_norm(self, clip_norm):
        if not self.sharded:
            return super().clip_grad_norm(clip_norm)
        if isinstance(self.optimizer, ShardedFP16Optimizer):
            # raises fairseq's OverflowError on every rank alike
            return self.optimizer.clip_grad_norm(clip_norm).to(self.device)
        params = [p for p in self.optimizer.params if p.grad is not None]
        norm = total_norm(p.grad for p in params)
        if clip_norm > 0:
            torch.nn.utils.clip_grads_with_norm_(params, clip_norm, norm.to(params[0].device))
        return norm.to(self.device)

    @property
    def always_call_state_dict_during_save_checkpoint(self) -> bool:
        return self.sharded or super().always_call_state_dict_during_save_checkpoint

    def state_dict(self):
        state = super().state_dict()
        if self.sharded:
            keep = self.is_data_parallel_master
            state["model"] = consolidated(state["model"], keep)
            if "last_optimizer_state" in state:
                state["last_optimizer_state"] = consolidated(state["last_optimizer_state"], keep)
        return state

    def load_checkpoint(self, *args, **kwargs):
        extra_state = super().load_checkpoint(*args, **kwargs)
        if self.sharded and self._optimizer is not None:
            shard_optimizer_state(self.optimizer.optimizer)
        return extra_state


@contextlib.contextmanager
def fsdp_enable_wrap(cfg):
    """fairseq's ``fsdp_enable_wrap`` replaced: nothing, so fairseq builds the plain model (its own
    would need fairscale) and ``ShardedTrainer`` shards it."""
    yield


def install() -> None:
    """Make fairseq-train / fairseq-hydra-train build a plain model for ``ShardedTrainer`` to shard.
    Idempotent."""
    from fairseq_cli import train as module

    if getattr(module.fsdp_enable_wrap, _MARK, False):
        return
    fsdp_enable_wrap.fairseq_bio_sharded = True
    module.fsdp_enable_wrap = fsdp_enable_wrap

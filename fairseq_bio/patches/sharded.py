"""fairseq's ``distributed_training.ddp_backend=fully_sharded`` on PyTorch's FSDP2
(``torch.distributed.fsdp``'s ``fully_shard``) instead of fairscale, inside fairseq's own Trainer,
on GPUs (NCCL) and CPUs (gloo) alike.

``ShardedTrainer`` (the base of ``trainer.BioTrainer``) shards the model on two or more processes,
takes the gradient norm over every rank's shards and writes consolidated checkpoints, the ones
plain data parallel writes; ``install()`` makes fairseq's ``fsdp_enable_wrap`` a no-op. Why FSDP2
and not fairscale, why under fairseq's own ``fully_sharded``, and why fp32 only for now:
docs/cluster.md, "Fully sharded data parallel"."""

import contextlib
import logging
from typing import Any, Iterable

import torch
import torch.distributed as dist
from fairseq.trainer import Trainer
from torch import nn

from ..errors import BioConfigError

logger = logging.getLogger(__name__)

FULLY_SHARDED = "fully_sharded"
_MARK = "fairseq_bio_sharded"


def _dtensor():
    from torch.distributed.tensor import DTensor

    return DTensor


def shard_model(model: nn.Module, mesh) -> nn.Module:
    """Shard ``model`` in place with FSDP2: one unit per layer of each ``layers`` module list (the
    transformer blocks), then the root (embeddings, the tied LM head, heads)."""
    from torch.distributed.fsdp import fully_shard

    options = {"mesh": mesh}
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


def refuse_fairscale_options(cfg) -> None:
    # fp16 / bf16: fairseq would cast the model and flatten the shards into its FP16Optimizer;
    # FSDP2's own mixed precision is the way to add them
    if cfg.common.fp16 or cfg.common.bf16:
        raise BioConfigError(
            "distributed_training.ddp_backend=fully_sharded runs PyTorch's FSDP2 here, in fp32 "
            "only: use precision=fp32"
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
    keeps its shard."""

    def __init__(self, cfg, task, model, criterion, quantizer=None):
        if sharded_backend(cfg):
            refuse_fairscale_options(cfg)
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
            self._wrapped_model = shard_model(self._model.to(self.device), mesh)
            held, total = held_parameters(self._wrapped_model)
            logger.info(
                f"fully sharded (PyTorch FSDP2) over {self.data_parallel_world_size} ranks: this rank holds "
                f"{held:,} of the {total:,} parameters"
            )
        return super().model

    def clip_grad_norm(self, clip_norm):
        if not self.sharded:
            return super().clip_grad_norm(clip_norm)
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

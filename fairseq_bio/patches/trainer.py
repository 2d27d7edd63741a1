"""The trainer fairseq-train builds once the plugin is imported: ``BioTrainer``, fairseq's Trainer
with ``ddp_backend=fully_sharded`` on PyTorch's FSDP2 (``sharded``), multi-tensor copies to and
from the fp32 master weights in bf16/fp16 (``mixed_precision``), multi-tensor ``adam`` updates and
gradient norms on CUDA (``foreach_adam``), and a training update's logging that reads no meter
back to the host (``update_meter``). Everything else is fairseq's. ``install()`` makes
``fairseq_cli.train.Trainer`` this class: fairseq-train's ``main`` builds its trainer from that
name, and a ``--user-dir`` plugin has no other hook."""

import torch
from fairseq import metrics
from fairseq.logging import meters

from .mixed_precision import MultiTensorFP16Optimizer
from . import foreach_adam
from .sharded import ShardedTrainer

_MARK = "fairseq_bio_trainer"


class BioTrainer(ShardedTrainer):
    """fairseq's Trainer with the changes listed in the module docstring."""

    def _build_optimizer(self):
        super()._build_optimizer()
        self._optimizer = MultiTensorFP16Optimizer.adopt(foreach_adam.adopt(self._optimizer))

    def _reduce_and_log_stats(self, logging_outputs, sample_size, grad_norm=None):
        """fairseq's, except after a training update: the same meters are updated (``ups``,
        ``gnorm``, ``clip``, the task's), but without fairseq's ``isfinite(grad_norm)`` guard (a
        non-finite norm never gets here: fairseq raises or skips the update first) and without
        computing every meter's smoothed value for the return value, one host read each, which
        nothing reads (fairseq-train reads the meters at its log interval; fairseq returns ``{}`` on
        TPUs for the same reason). On a GPU each read waits for the device
        (benchmarks/host_reads.py). Returns ``{"sample_size": ...}``."""
        if grad_norm is None or not torch.is_tensor(grad_norm):
            return super()._reduce_and_log_stats(logging_outputs, sample_size, grad_norm)
        metrics.log_speed("ups", 1.0, priority=100, round=2)
        metrics.log_scalar("gnorm", grad_norm, priority=400, round=3)
        clip_norm = self.cfg.optimization.clip_norm
        if clip_norm > 0:
            clipped = torch.where(
                grad_norm > clip_norm, grad_norm.new_tensor(100), grad_norm.new_tensor(0)
            )
            metrics.log_scalar("clip", clipped, priority=500, round=1)
        with metrics.aggregate() as agg:
            if logging_outputs is not None:
                self.task.reduce_metrics(logging_outputs, self.get_criterion())
            if "loss" not in agg:
                metrics.log_scalar("loss", -1)  # as fairseq (which also warns once)
        return {"sample_size": sample_size}


_FAIRSEQ_UPDATE = meters.AverageMeter.update


def update_meter(meter, val, n=1):
    """fairseq's ``AverageMeter.update``, except for a tensor weight ``n``: fairseq's ``if n > 0``
    reads it back to the host (on a GPU a wait for the device, in every aggregate the value is
    logged to: three per update for masked_lm's loss, weighted by its masked-token count). Here a
    weight of 0 adds ``0`` to the sum instead of being skipped (its value, often 0 / 0, is not
    added) and 0 to the count: the same sum, count and average.
    """
    if val is None or not torch.is_tensor(n):
        return _FAIRSEQ_UPDATE(meter, val, n)
    meter.val = val
    meter.sum = meters.type_as(meter.sum, val) + torch.where(
        n > 0, val * n, torch.zeros_like(n, dtype=torch.float)
    )
    meter.count = meters.type_as(meter.count, n) + n


def install() -> None:
    """Make fairseq-train / fairseq-hydra-train build ``BioTrainer``, and fairseq's meters take
    device weights without reading them (``update_meter``). Idempotent."""
    from fairseq_cli import train as module

    meters.AverageMeter.update = update_meter
    if getattr(module.Trainer, _MARK, False):
        return
    setattr(BioTrainer, _MARK, True)
    module.Trainer = BioTrainer

"""Pre-emption: a checkpoint at the next update boundary on SIGUSR1, SIGUSR2 or SIGTERM, then an
exit that resumes.

SLURM warns a job before its time limit with the signal of ``--signal`` (submitit asks for SIGUSR2,
sbatch scripts usually SIGUSR1) and stops it with SIGTERM. fairseq 0.12 handles none of them, and
submitit's handler requeues without letting fairseq save. ``install()`` wraps fairseq_cli.train's
``train()`` and ``validate_and_save()`` and fairseq's ``save_checkpoint`` so that the run saves
``checkpoint_last.pt``, ends, and resumes with fairseq's own resume as if never stopped
(docs/cluster.md, "Pre-emption and time limits")."""

import functools
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from typing import Dict, Optional

import torch

logger = logging.getLogger(__name__)

SIGNALS = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM)
REQUEUE_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)  # SLURM's warning before the time limit
PREEMPTED_EXIT_STATUS = 75  # EX_TEMPFAIL (sysexits.h): a temporary failure, run it again

_MARK = "fairseq_bio_preemption"


class _State:
    """What the handlers recorded, per process."""

    pid: Optional[int] = (
        None  # the trainer's process (forked DataLoader workers inherit the handlers)
    )
    signum: int = 0  # the first signal received, 0 for none
    received_at: float = 0.0
    saved_at: int = -1  # the update of the last checkpoint_utils.save_checkpoint
    previous: Dict[int, object] = {}


_state = _State()


def received_signal() -> int:
    """The first pre-emption signal this process received (0: none)."""
    return _state.signum


def _handler(signum, frame) -> None:
    """Record the signal: writing a checkpoint from inside an update is not safe, so the save waits
    for the update boundary (``_validate_and_save_or_leave``)."""
    if os.getpid() != _state.pid:
        # a DataLoader worker: the trainer saves and ends, the worker keeps serving it until then
        return
    if not _state.signum:
        _state.signum, _state.received_at = signum, time.time()


def install_handlers() -> None:
    """Record SIGUSR1/SIGUSR2/SIGTERM for the update boundary, keeping the handlers they replace.
    Idempotent."""
    if _state.pid == os.getpid():
        return
    if threading.current_thread() is not threading.main_thread():
        logger.warning(
            "not in the main thread: no pre-emption handlers (signals keep their current handlers)"
        )
        return
    _state.pid, _state.signum, _state.previous = os.getpid(), 0, {}
    for signum in SIGNALS:
        _state.previous[signum] = signal.signal(signum, _handler)
        # Restart system calls the signal interrupts (gloo/NCCL waits, DataLoader reads) instead of
        # failing them.
        signal.siginterrupt(signum, False)


def _agreed_signal(trainer) -> int:
    """The signal any rank received (the largest number if several), 0 if none; every rank gets the
    same answer."""
    signum = _state.signum
    if trainer.data_parallel_world_size > 1:
        from fairseq.distributed import utils as distributed_utils

        flag = torch.tensor([signum], dtype=torch.long, device=trainer.device)
        distributed_utils.all_reduce(flag, group=trainer.data_parallel_process_group, op="max")
        signum = int(flag.item())
    return signum


def _wait_for_every_rank(trainer) -> None:
    if trainer.data_parallel_world_size > 1:
        from fairseq.distributed import utils as distributed_utils

        distributed_utils.all_reduce(
            torch.zeros(1, device=trainer.device), group=trainer.data_parallel_process_group
        )


def _slurm_job_id() -> Optional[str]:
    array_job, array_task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get(
        "SLURM_ARRAY_TASK_ID"
    )
    if array_job and array_task:
        return f"{array_job}_{array_task}"
    return os.environ.get("SLURM_JOB_ID")


def _requeue_slurm_job(job_id: str) -> None:
    try:
        subprocess.run(
            ["scontrol", "requeue", job_id], check=True, capture_output=True, text=True, timeout=60
        )
        logger.warning(
            "requeued SLURM job %s (scontrol requeue): it resumes from checkpoint_last.pt", job_id
        )
    except (OSError, subprocess.SubprocessError) as e:
        detail = getattr(e, "stderr", None) or e
        logger.error(
            "could not requeue SLURM job %s (scontrol requeue: %s): run it again to resume",
            job_id,
            detail,
        )


def _leave(signum: int, rank: int) -> None:
    """After the pre-emption checkpoint: call the handler we replaced, requeue, exit.

    A handler that was there before (submitit's, in a submitit job) gets the signal: on rank 0 it
    pickles the job and requeues it (``scontrol requeue``; its local executor starts it again).
    Otherwise, under SLURM, SIGUSR1 and SIGUSR2 (the time-limit warning) requeue the job from rank
    0; SIGTERM does not (SLURM requeues a pre-empted job itself when its partition says so). Rank 0
    then exits with ``PREEMPTED_EXIT_STATUS`` (run the same command again to resume), the other
    ranks with 0, so that a cluster's kill-on-bad-exit cannot stop rank 0 before it has
    requeued."""
    own = _state.signum or signum
    previous = _state.previous.get(own)
    if callable(previous):
        previous(
            own, None
        )  # submitit's: on rank 0 it requeues the job and exits; elsewhere it returns
    elif rank == 0 and own in REQUEUE_SIGNALS and _slurm_job_id():
        _requeue_slurm_job(_slurm_job_id())
    raise SystemExit(PREEMPTED_EXIT_STATUS if rank == 0 else 0)


def _validate_and_save_or_leave(original):
    @functools.wraps(original)
    def validate_and_save(cfg, trainer, task, epoch_itr, valid_subsets, end_of_epoch):
        signum = _agreed_signal(trainer)
        # What this update has anyway (validation, scheduled saves, the end of the run) happens
        # first, as in an uninterrupted run: skipping an epoch's validation would change which
        # checkpoint is the best one. A run that ends here just ends; else checkpoint_last.pt is
        # saved unless this update was.
        valid_losses, should_stop = original(
            cfg, trainer, task, epoch_itr, valid_subsets, end_of_epoch
        )
        if not signum or should_stop:
            return valid_losses, should_stop
        num_updates = trainer.get_num_updates()
        name = signal.Signals(signum).name
        if _state.saved_at != num_updates:
            logger.warning(
                "%s: saving a checkpoint at update %d, then ending this run to be resumed",
                name,
                num_updates,
            )
            from fairseq import checkpoint_utils

            checkpoint_utils.save_checkpoint(cfg.checkpoint, trainer, epoch_itr, None)
        else:
            logger.warning(
                "%s: update %d is saved; ending this run to be resumed", name, num_updates
            )
        if cfg.checkpoint.write_checkpoints_asynchronously:
            from fairseq.file_io import PathManager

            PathManager.async_close()
        _wait_for_every_rank(trainer)  # no rank may leave before rank 0's file is complete
        if _state.signum:
            logger.warning(
                "%s received %.1f s before this save", name, time.time() - _state.received_at
            )
        _leave(signum, trainer.data_parallel_rank)

    setattr(validate_and_save, _MARK, True)
    return validate_and_save


def _recording_saves(original):
    @functools.wraps(original)
    def save_checkpoint(cfg, trainer, epoch_itr, val_loss):
        result = original(cfg, trainer, epoch_itr, val_loss)
        _state.saved_at = trainer.get_num_updates()
        return result

    setattr(save_checkpoint, _MARK, True)
    return save_checkpoint


def check_distributed(cfg) -> None:
    """Refuse ``distributed_world_size`` > 1 in a process outside any process group (each would
    train alone on the whole data: fairseq's ``infer_init_method`` silently falls back to that, for
    one, under SLURM without ``scontrol`` on PATH)."""
    world_size = cfg.distributed_training.distributed_world_size
    if world_size <= 1 or cfg.common.tpu or torch.distributed.is_initialized():
        return
    if _slurm_job_id() and shutil.which("scontrol") is None:
        why = (
            f"this is SLURM job {_slurm_job_id()}, but fairseq finds the nodes with `scontrol show hostnames` and "
            "`scontrol` is not on PATH here (in a container: make it available inside)"
        )
    else:
        why = (
            "no init method was given or found (under SLURM, srun sets the SLURM_* variables fairseq reads; "
            "elsewhere give distributed_training.distributed_init_method=tcp://HOST:PORT and distributed_rank)"
        )
    raise RuntimeError(
        f"distributed_training.distributed_world_size={world_size}, but this process joined no process group: "
        f"{why}; it would train alone on all the data"
    )


def _train_with_handlers(original):
    @functools.wraps(original)
    def train(cfg, trainer, task, epoch_itr):
        check_distributed(cfg)
        install_handlers()
        return original(cfg, trainer, task, epoch_itr)

    setattr(train, _MARK, True)
    return train


def install() -> None:
    """Wrap fairseq_cli.train's train() (the first one of a process installs the handlers, main
    thread only) and validate_and_save() (after every update the ranks agree on a signal, then save
    and leave), and record fairseq's checkpoint saves. Idempotent."""
    from fairseq_cli import train as module

    if not getattr(module.train, _MARK, False):
        module.train = _train_with_handlers(module.train)
    if not getattr(module.validate_and_save, _MARK, False):
        module.validate_and_save = _validate_and_save_or_leave(module.validate_and_save)
    if not getattr(module.checkpoint_utils.save_checkpoint, _MARK, False):
        module.checkpoint_utils.save_checkpoint = _recording_saves(
            module.checkpoint_utils.save_checkpoint
        )

"""Kill-safe fairseq checkpoints, and one line naming a corrupt one (and what to resume from
instead).

fairseq 0.12 makes ``checkpoint_last.pt`` and the other copies with a plain copy into the final
name, so a pre-emption during the copy leaves a truncated file the requeued job cannot load.
``install()`` makes every local checkpoint write and copy atomic, answers a corrupt checkpoint with
one line naming the newest intact one beside it, and on resume removes the ``*.pt.tmp`` files a
killed save left (with ``FAIRSEQ_BIO_RESUME_FALLBACK=1`` it resumes from that intact one). Remote
(iopath) paths and asynchronous writes stay fairseq's (docs/reliability.md)."""

import functools
import glob
import logging
import os
import shutil
import time

import torch

from ..checkpoint_fit import check_run_start, load_failure
from ..checkpoints import (
    FAIRSEQ_SAFE_GLOBALS,
    FALLBACK_ENV,
    CorruptCheckpointError,
    corrupt_error,
    read_failure,
    read_state,
)
from ..errors import BioError
from ..files import discard_failed_write, no_space, publish

logger = logging.getLogger(__name__)

_TMP = ".tmp"  # fairseq's own suffix, so that one clean-up covers its temp files and ours


def save_atomically(obj, path) -> None:
    """``torch.save(obj)`` into ``path`` so that ``path`` holds either its old content or all of
    the new one: written into ``<name>.tmp`` in the same directory, fsynced, ``os.replace``d onto
    the name, directory fsynced."""
    path = os.fspath(path)
    tmp = path + _TMP
    try:
        for attempt in range(3):  # fairseq retries a failed torch.save twice (network filesystems)
            try:
                with open(tmp, "wb") as f:
                    torch.save(obj, f)
                    f.flush()
                    os.fsync(f.fileno())
                break
            except Exception as e:
                if attempt == 2 or no_space(e, path) is not None:  # a full disk stays full
                    raise
                logger.warning("writing %s failed, retrying", tmp, exc_info=True)
                time.sleep(2.5)
        _publish(tmp, path)
    except (
        BaseException
    ) as e:  # a full disk: one line naming the checkpoint, not torch's "unexpected pos"
        discard_failed_write(tmp, path, e)
        raise


def copy_atomically(src, dst) -> None:
    """Copy ``src`` to ``dst`` so that ``dst`` holds either its old content or all of ``src``."""
    src, dst = os.fspath(src), os.fspath(dst)
    tmp = dst + _TMP
    try:
        # A copy, not a hard link: a link would be instant, but a later in-place write to one
        # name (torch.save over checkpoint_best.pt to strip its optimizer state, a truncate)
        # would change the other too.
        shutil.copyfile(src, tmp)  # sendfile on Linux: the bytes never pass through Python
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        _publish(tmp, dst)
    except BaseException as e:
        discard_failed_write(tmp, dst, e)
        raise


def _publish(tmp: str, path: str) -> None:
    # The rename itself must reach the disk too, or a crash can bring back the old name (or none).
    publish(tmp, path, durable=True)


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def fallback_enabled() -> bool:
    """Whether ``FAIRSEQ_BIO_RESUME_FALLBACK`` asks to resume from the newest intact checkpoint."""
    value = os.environ.get(FALLBACK_ENV, "").strip().lower()
    if value in ("", "0", "false", "no"):
        return False
    if value in ("1", "true", "yes"):
        return True
    raise ValueError(
        f"{FALLBACK_ENV}={value}: must be 1 (fall back to the newest intact checkpoint) or 0"
    )


def remove_interrupted_writes(save_dir) -> None:
    """Remove the ``checkpoint*.pt.tmp`` files a killed save left in ``save_dir`` (each as large as
    a checkpoint)."""
    for tmp in glob.glob(os.path.join(glob.escape(os.fspath(save_dir)), "checkpoint*.pt" + _TMP)):
        size = os.path.getsize(tmp)
        _remove_quietly(tmp)
        logger.info("removed %s (%d bytes), left by an interrupted checkpoint write", tmp, size)


_MARK = "fairseq_bio_kill_safe"


def install() -> None:
    """Make fairseq's checkpoint writes atomic, name corrupt checkpoints in one line, and offer the
    resume fallback (see the module docstring). Idempotent."""
    from fairseq import checkpoint_utils
    from fairseq.file_io import PathManager

    if not getattr(checkpoint_utils.torch_persistent_save, _MARK, False):
        checkpoint_utils.torch_persistent_save = _atomic_torch_persistent_save(
            checkpoint_utils.torch_persistent_save, PathManager
        )
    if not getattr(checkpoint_utils.PathManager, _MARK, False):
        checkpoint_utils.PathManager = _atomic_copy_path_manager(checkpoint_utils.PathManager)
    if not getattr(checkpoint_utils.load_checkpoint_to_cpu, _MARK, False):
        checkpoint_utils.load_checkpoint_to_cpu = _explaining_failures_to_read(
            checkpoint_utils.load_checkpoint_to_cpu
        )
    if not getattr(checkpoint_utils.load_checkpoint, _MARK, False):
        checkpoint_utils.load_checkpoint = _resuming_with_fallback(checkpoint_utils.load_checkpoint)
    _install_safe_globals()


def _install_safe_globals() -> None:
    """Allowlist the classes fairseq pickles, and the placeholder of its resume broadcast, for
    torch's ``weights_only`` loading."""
    from fairseq.distributed.utils import _TensorPlaceholder

    known = set(map(id, torch.serialization.get_safe_globals()))
    # fairseq's broadcast_object (rank 0 -> the others, when a run resumes on several GPUs) pickles
    # the checkpoint state with its tensors replaced by _TensorPlaceholder(index), and the other
    # ranks torch.load it with torch's default, weights_only=True: without it every rank but 0 fails
    # to resume. Never written to a file, so not in FAIRSEQ_SAFE_GLOBALS (what checkpoint files
    # hold).
    allowed = FAIRSEQ_SAFE_GLOBALS + [_TensorPlaceholder]
    torch.serialization.add_safe_globals([g for g in allowed if id(g) not in known])


def _atomic_torch_persistent_save(original, path_manager):
    @functools.wraps(original)
    def torch_persistent_save(obj, filename, async_write: bool = False):
        if async_write or not path_manager.supports_rename(os.fspath(filename)):
            return original(obj, filename, async_write=async_write)
        save_atomically(obj, filename)

    setattr(torch_persistent_save, _MARK, True)
    return torch_persistent_save


def _atomic_copy_path_manager(base):
    class AtomicCopyPathManager(base):
        """fairseq's ``PathManager``, whose ``copy`` of a local file makes the destination appear
        atomically."""

        @staticmethod
        def copy(src_path: str, dst_path: str, overwrite: bool = False) -> bool:
            if base.path_requires_pathmanager(src_path) or base.path_requires_pathmanager(dst_path):
                return base.copy(src_path, dst_path, overwrite)
            if not overwrite and os.path.exists(dst_path):
                return False  # iopath's answer (fairseq always overwrites)
            copy_atomically(src_path, dst_path)
            return True

    setattr(AtomicCopyPathManager, _MARK, True)
    return AtomicCopyPathManager


def _explaining_failures_to_read(loader):
    """fairseq's loader, a corrupt checkpoint or one that pickles a class outside the allowlist
    refused in one line (``checkpoints.read_failure``, as ``checkpoints.load_checkpoint`` refuses
    them) instead of torch's traceback.
    """

    @functools.wraps(loader)
    def load_checkpoint_to_cpu(path, *args, **kwargs):
        try:
            return loader(path, *args, **kwargs)
        except (
            Exception
        ) as e:  # a broken file can make torch raise almost anything (EOFError, KeyError, ...)
            failure = read_failure(path, e)
            if failure is None or failure is e:
                raise
            raise failure from None

    setattr(load_checkpoint_to_cpu, _MARK, True)
    return load_checkpoint_to_cpu


def _resuming_with_fallback(load_checkpoint):
    @functools.wraps(load_checkpoint)
    def resume(cfg, trainer, **passthrough_args):
        if (
            cfg.save_dir
            and trainer.should_save_checkpoint_on_current_rank
            and os.path.isdir(cfg.save_dir)
        ):
            remove_interrupted_writes(cfg.save_dir)
        try:
            path, state = check_run_start(cfg, trainer)
            return _explaining_failures(
                load_checkpoint, cfg, trainer, path, state, **passthrough_args
            )
        except CorruptCheckpointError as corrupt:
            e = (
                corrupt_error(corrupt.path, corrupt, resuming=True) or corrupt
            )  # with what to resume from
            in_save_dir = os.path.dirname(os.path.abspath(e.path)) == os.path.abspath(cfg.save_dir)
            if e.fallback is None or not in_save_dir or not fallback_enabled():
                raise e from None
            logger.warning(
                "%s: corrupt checkpoint, %s; %s=1: resuming from the newest intact one, %s (update %d)",
                e.path,
                e.problem,
                FALLBACK_ENV,
                e.fallback,
                e.fallback_updates,
            )
            fallback = e.fallback
        # Restored afterwards: the run's own later resumes still start from checkpoint_last.pt.
        restore_file, finetune_from_model = cfg.restore_file, cfg.finetune_from_model
        cfg.restore_file, cfg.finetune_from_model = fallback, None
        try:
            return _explaining_failures(
                load_checkpoint, cfg, trainer, fallback, None, **passthrough_args
            )
        finally:
            cfg.restore_file, cfg.finetune_from_model = restore_file, finetune_from_model

    setattr(resume, _MARK, True)
    return resume


def _explaining_failures(load_checkpoint, cfg, trainer, path, state, **passthrough_args):
    """fairseq's ``load_checkpoint``, whose "please ensure that the architectures match" (a
    traceback of two chained exceptions) becomes one line naming what differs
    (``checkpoint_fit.load_failure``)."""
    try:
        return load_checkpoint(cfg, trainer, **passthrough_args)
    except BioError:
        raise
    except Exception as e:
        if path is None or "architectures match" not in str(e):
            raise
        explained = load_failure(path, read_state(path) if state is None else state, trainer)
        if explained is None:
            raise
        raise explained from None

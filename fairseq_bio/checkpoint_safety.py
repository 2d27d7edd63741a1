"""Kill-safe fairseq checkpoints, and one line naming a corrupt one (and what to resume from instead).

fairseq 0.12's ``save_checkpoint`` writes the first file through ``torch_persistent_save`` (``<name>.tmp``, then a
rename, without fsync) and then makes ``checkpoint_last.pt``, ``checkpoint_best.pt`` and the others with
``PathManager.copy``: a plain copy into the final name. A pre-emption during that copy (seconds for a large model
with its optimizer state) leaves a truncated ``checkpoint_last.pt``, and the requeued job dies in torch's
"PytorchStreamReader failed reading zip archive". ``install()`` (called by ``compat.install()``) repairs, narrowly:

- every local checkpoint file appears atomically: written (or copied) into ``<name>.tmp`` in the same directory,
  fsynced, ``os.replace``d onto the name, directory fsynced. The copies stay copies (the kernel's ``sendfile``): a
  hard link would be instant, but then a later in-place write to one name (``torch.save`` over
  ``checkpoint_best.pt`` to strip its optimizer state, a ``truncate``) would change the other too.
- a checkpoint that torch cannot read because it is empty, truncated or damaged raises ``CorruptCheckpointError``:
  one line naming the file, what is wrong with it, and (for a run that resumes) the newest intact checkpoint beside
  it (by update count); a checkpoint write that fails on a full disk is one line naming the file.
- resuming (``checkpoint_utils.load_checkpoint``) removes the ``*.pt.tmp`` files an interrupted save left in
  ``checkpoint.save_dir``, and with ``FAIRSEQ_BIO_RESUME_FALLBACK=1`` restores that newest intact checkpoint instead
  of a corrupt one in ``checkpoint.save_dir``.

Remote paths (iopath handlers) and ``checkpoint.write_checkpoints_asynchronously`` are left to fairseq as they are.
"""

import functools
import glob
import logging
import os
import shutil
import time
import zipfile
from typing import Optional, Tuple

import torch

from .errors import BioError
from .files import discard_failed_write, no_space, publish

logger = logging.getLogger(__name__)

FALLBACK_ENV = "FAIRSEQ_BIO_RESUME_FALLBACK"
_TMP = ".tmp"  # fairseq's own suffix, so that one clean-up covers its temp files and ours


class CorruptCheckpointError(BioError, RuntimeError):
    """A checkpoint file is empty, truncated or damaged; ``fallback`` is the newest intact one beside it (or None)."""

    def __init__(
        self,
        path: str,
        problem: str,
        advice: str,
        fallback: Optional[str] = None,
        fallback_updates: Optional[int] = None,
    ):
        super().__init__(f"{path}: corrupt checkpoint, {problem}; {advice}")
        self.path, self.problem, self.fallback, self.fallback_updates = path, problem, fallback, fallback_updates


def save_atomically(obj, path) -> None:
    """``torch.save(obj)`` into ``path`` so that ``path`` holds either its old content or all of the new one."""
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
    except BaseException as e:  # a full disk: one line naming the checkpoint, not torch's "unexpected pos"
        discard_failed_write(tmp, path, e)
        raise


def copy_atomically(src, dst) -> None:
    """Copy ``src`` to ``dst`` so that ``dst`` holds either its old content or all of ``src``."""
    src, dst = os.fspath(src), os.fspath(dst)
    tmp = dst + _TMP
    try:
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


def checkpoint_problem(path) -> Optional[str]:
    """What makes ``path`` unreadable as a checkpoint (empty, truncated, damaged, not one), or None if nothing shows."""
    path = os.fspath(path)
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return None  # missing or unreadable: the loader's own error says so
    if size == 0:
        return "an empty file (0 bytes)"
    if head.startswith(b"\x80"):
        return None  # torch's legacy pickle format: its completeness cannot be checked from outside
    if head != b"PK\x03\x04":
        return f"not a PyTorch checkpoint ({size:,} bytes starting {head!r}, not a zip archive)"
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError):  # the zip directory is the last thing written
        return f"truncated: {size:,} bytes and no complete zip directory at its end"
    with archive:
        try:
            damaged = _crc_failure(archive)
        except (zipfile.BadZipFile, EOFError, OSError) as e:
            return f"damaged: {e}"
    return f"damaged: {damaged} fails its CRC check" if damaged else None


def _crc_failure(archive: zipfile.ZipFile) -> Optional[str]:
    """The first member whose bytes differ from its CRC; skipped when the file was saved without CRCs."""
    # torch.serialization.set_crc32_options(False) writes CRC 0 for every member.
    if any(info.CRC == 0 and info.file_size > 0 for info in archive.infolist()):
        return None
    return archive.testzip()


def resume_point(path) -> Optional[int]:
    """The update count a training checkpoint records, read without its tensors' bytes; None if its archive is
    incomplete or its state does not unpickle under ``weights_only``."""
    try:
        # mmap: only the pickled structure is read, not the tensors
        state = torch.load(os.fspath(path), map_location="cpu", weights_only=True, mmap=True)
        return int(state["optimizer_history"][-1]["num_updates"])
    except Exception:
        return None


def newest_intact_checkpoint(directory, exclude=None) -> Optional[Tuple[str, int]]:
    """(path, update count) of the intact ``checkpoint*.pt`` in ``directory`` with the most updates (ties: the newer
    file), ``exclude`` left out; None if there is none. Intact: complete archive, CRCs match, state unpickles."""
    exclude = os.path.abspath(exclude) if exclude else None
    candidates = []
    for path in glob.glob(os.path.join(glob.escape(os.fspath(directory)), "checkpoint*.pt")):
        if os.path.abspath(path) == exclude or not os.path.isfile(path):
            continue
        updates = resume_point(path)
        if updates is not None:
            candidates.append((updates, os.path.getmtime(path), path))
    # The CRC check reads a whole file: only as many as it takes, newest first.
    for updates, _, path in sorted(candidates, reverse=True):
        if checkpoint_problem(path) is None:
            return path, updates
    return None


def corrupt_error(path, error: BaseException, resuming: bool = False) -> Optional[CorruptCheckpointError]:
    """A ``CorruptCheckpointError`` for ``path`` if that is why loading it raised ``error``, else None. Only a
    training run that is ``resuming`` is told which intact checkpoint beside it to resume from; a command that
    reads a checkpoint (predict, export, a fine-tuning's encoder) is told the file itself is the problem."""
    path = os.fspath(path)
    problem = checkpoint_problem(path)
    if problem is None:
        return None
    if not resuming:
        return CorruptCheckpointError(path, problem, "copy it again from where it came from, or name another one")
    directory = os.path.dirname(os.path.abspath(path))
    newest = newest_intact_checkpoint(directory, exclude=path)
    if newest is None:
        advice = f"no intact checkpoint in {directory} to resume from (move it away to start afresh)"
        return CorruptCheckpointError(path, problem, advice)
    fallback, updates = newest
    advice = (
        f"the newest intact checkpoint in {directory} is {os.path.basename(fallback)} (update {updates}): resume "
        f"from it with checkpoint.restore_file={fallback}, or set {FALLBACK_ENV}=1 to fall back to it automatically"
    )
    return CorruptCheckpointError(path, problem, advice, fallback, updates)


def fallback_enabled() -> bool:
    """Whether ``FAIRSEQ_BIO_RESUME_FALLBACK`` asks to resume from the newest intact checkpoint."""
    value = os.environ.get(FALLBACK_ENV, "").strip().lower()
    if value in ("", "0", "false", "no"):
        return False
    if value in ("1", "true", "yes"):
        return True
    raise ValueError(f"{FALLBACK_ENV}={value}: must be 1 (fall back to the newest intact checkpoint) or 0")


def remove_interrupted_writes(save_dir) -> None:
    """Remove the ``checkpoint*.pt.tmp`` files a killed save left in ``save_dir`` (each as large as a checkpoint)."""
    for tmp in glob.glob(os.path.join(glob.escape(os.fspath(save_dir)), "checkpoint*.pt" + _TMP)):
        size = os.path.getsize(tmp)
        _remove_quietly(tmp)
        logger.info("removed %s (%d bytes), left by an interrupted checkpoint write", tmp, size)


_MARK = "fairseq_bio_kill_safe"


def install() -> None:
    """Make fairseq's checkpoint writes atomic, name corrupt checkpoints in one line, and offer the resume
    fallback (see the module docstring). Idempotent."""
    from fairseq import checkpoint_utils
    from fairseq.file_io import PathManager

    if not getattr(checkpoint_utils.torch_persistent_save, _MARK, False):
        checkpoint_utils.torch_persistent_save = _atomic_torch_persistent_save(
            checkpoint_utils.torch_persistent_save, PathManager
        )
    if not getattr(checkpoint_utils.PathManager, _MARK, False):
        checkpoint_utils.PathManager = _atomic_copy_path_manager(checkpoint_utils.PathManager)
    if not getattr(checkpoint_utils.load_checkpoint_to_cpu, _MARK, False):
        checkpoint_utils.load_checkpoint_to_cpu = _naming_corrupt(checkpoint_utils.load_checkpoint_to_cpu)
    if not getattr(checkpoint_utils.load_checkpoint, _MARK, False):
        checkpoint_utils.load_checkpoint = _resuming_with_fallback(checkpoint_utils.load_checkpoint)


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
        """fairseq's ``PathManager``, whose ``copy`` of a local file makes the destination appear atomically."""

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


def _naming_corrupt(loader):
    @functools.wraps(loader)
    def load_checkpoint_to_cpu(path, *args, **kwargs):
        try:
            return loader(path, *args, **kwargs)
        except Exception as e:  # a broken file can make torch raise almost anything (EOFError, KeyError, ...)
            if isinstance(e, CorruptCheckpointError):
                raise
            corrupt = corrupt_error(path, e)
            if corrupt is None:
                raise
            raise corrupt from None

    setattr(load_checkpoint_to_cpu, _MARK, True)
    return load_checkpoint_to_cpu


def _resuming_with_fallback(load_checkpoint):
    @functools.wraps(load_checkpoint)
    def resume(cfg, trainer, **passthrough_args):
        if cfg.save_dir and trainer.should_save_checkpoint_on_current_rank and os.path.isdir(cfg.save_dir):
            remove_interrupted_writes(cfg.save_dir)
        try:
            return load_checkpoint(cfg, trainer, **passthrough_args)
        except CorruptCheckpointError as corrupt:
            e = corrupt_error(corrupt.path, corrupt, resuming=True) or corrupt  # with what to resume from
            in_save_dir = os.path.dirname(os.path.abspath(e.path)) == os.path.abspath(cfg.save_dir)
            if e.fallback is None or not in_save_dir or not fallback_enabled():
                raise e from None
            logger.warning("%s: corrupt checkpoint, %s; %s=1: resuming from the newest intact one, %s (update %d)",
                           e.path, e.problem, FALLBACK_ENV, e.fallback, e.fallback_updates)  # fmt: skip
            fallback = e.fallback
        # Restored afterwards: the run's own later resumes still start from checkpoint_last.pt.
        restore_file, finetune_from_model = cfg.restore_file, cfg.finetune_from_model
        cfg.restore_file, cfg.finetune_from_model = fallback, None
        try:
            return load_checkpoint(cfg, trainer, **passthrough_args)
        finally:
            cfg.restore_file, cfg.finetune_from_model = restore_file, finetune_from_model

    setattr(resume, _MARK, True)
    return resume

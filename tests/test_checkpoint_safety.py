"""Kill-safe checkpoints (fairseq_bio.patches.checkpoint_safety): a kill in the middle of any
checkpoint write, the copy to checkpoint_last.pt included, leaves the old file in place and a run
that resumes; a corrupt checkpoint_last.pt is named in one line with the newest intact checkpoint,
and FAIRSEQ_BIO_RESUME_FALLBACK=1 resumes from it. Also: raw text as task.data is refused in one
line, and the pre-LN encoder pretrains and fine-tunes end to end."""

import os
import re
import shutil
import signal
import subprocess
import sys

import pytest
import torch
from conftest import ENCODER_SIZE, fine_tune, logged
from training_processes import first_update_after_restart

from fairseq_bio import checkpoints, runs
from fairseq_bio.patches import checkpoint_safety

ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}

# A child process that the kernel kills (SIGXFSZ) once it has written `limit` bytes of one file: a
# pre-emption in the middle of that write, with no chance to clean up. Python ignores SIGXFSZ, so
# the default action is restored.
_KILLED_MID_WRITE = """
import os, resource, shutil, signal, sys
def kill_mid_write(limit):
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
"""

# The same, inside a real fairseq-hydra-train (fairseq_cli.hydra_train.cli_main, what the console
# script runs): the copy of checkpoint_<epoch>_<KILL_COPY_OF>.pt to checkpoint_last.pt is killed
# half way.
_TRAIN_KILLED_MID_COPY = (
    _KILLED_MID_WRITE
    + """
copyfile = shutil.copyfile
def copyfile_killed_half_way(src, dst, *args, **kwargs):
    if os.path.basename(dst).startswith("checkpoint_last.pt") and src.endswith(f"_{os.environ['KILL_COPY_OF']}.pt"):
        kill_mid_write(os.path.getsize(src) // 2)
    return copyfile(src, dst, *args, **kwargs)
shutil.copyfile = copyfile_killed_half_way
from fairseq_cli.hydra_train import cli_main
sys.argv = ["fairseq-hydra-train", *sys.argv[1:]]
cli_main()
"""
)

# 10 updates between checkpoints, every one kept.
TRAIN = [
    *ENCODER_SIZE,
    "checkpoint.save_interval_updates=10",
    "checkpoint.keep_interval_updates=-1",
    "dataset.disable_validation=true",
    "lr_scheduler.warmup_updates=5",
    "optimization.lr=[0.001]",
    "common.log_interval=5",
    "common.tensorboard_logdir=null",
]


def hydra_command(data, save_dir, *overrides):
    """bio_roberta_tiny's training command line: TRAIN, a json log in ``<save_dir>.log``."""
    return runs.hydra_train(
        "bio_roberta_tiny",
        f"task.data={data}",
        *TRAIN,
        *overrides,
        save_dir=save_dir,
        log=f"{save_dir}.log",
    )


def train(data, save_dir, *overrides, env=None, check=True):
    """The hydra training console script."""
    result = subprocess.run(
        hydra_command(data, save_dir, *overrides),
        env={**ENV, **(env or {})},
        cwd=save_dir.parent,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"fairseq-hydra-train failed ({result.returncode}):\n{result.stderr[-4000:]}"
        )
    return result


def updates_of(path):
    return checkpoints.resume_point(path)


@pytest.fixture(scope="module")
def killed_and_resumed(data_bin, tmp_path_factory):
    """A run killed half way through copying its update-20 checkpoint to checkpoint_last.pt, then
    the same command again: (save_dir, what the save_dir held right after the kill)."""
    save = tmp_path_factory.mktemp("kill-mid-copy") / "run"
    save.mkdir()
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            _TRAIN_KILLED_MID_COPY,
            *hydra_command(data_bin("bytebpe"), save, "optimization.max_update=30")[1:],
        ],
        env={**ENV, "KILL_COPY_OF": "20"},
        cwd=save.parent,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert killed.returncode == -signal.SIGXFSZ, killed.stderr[-3000:]
    after_kill = {
        "files": sorted(p.name for p in save.glob("checkpoint*")),
        "last_updates": updates_of(save / "checkpoint_last.pt"),
        "tmp_size": (save / "checkpoint_last.pt.tmp").stat().st_size,
        "full_size": (save / "checkpoint_1_20.pt").stat().st_size,
        "log": logged(f"{save}.log", "train_inner"),
    }
    train(data_bin("bytebpe"), save, "optimization.max_update=30")
    return save, after_kill


def test_a_kill_mid_copy_to_checkpoint_last_leaves_the_previous_one_and_the_run_resumes(
    killed_and_resumed,
):
    save, after_kill = killed_and_resumed
    # Killed half way through the copy: the partial bytes are only in the temp file,
    # checkpoint_last.pt is the complete update-10 checkpoint (stock fairseq leaves it truncated:
    # the next test).
    assert after_kill["files"] == [
        "checkpoint_1_10.pt",
        "checkpoint_1_20.pt",
        "checkpoint_last.pt",
        "checkpoint_last.pt.tmp",
    ]
    assert after_kill["tmp_size"] == after_kill["full_size"] // 2
    assert after_kill["last_updates"] == 10
    # The same command resumed from it, removed the temp file, and replayed updates 11-20 exactly.
    assert first_update_after_restart(f"{save}.log") == 15
    assert sorted(p.name for p in save.glob("checkpoint*")) == [
        "checkpoint_1_10.pt",
        "checkpoint_1_20.pt",
        "checkpoint_1_30.pt",
        "checkpoint_last.pt",
    ]
    assert updates_of(save / "checkpoint_last.pt") == 30
    resumed = logged(f"{save}.log", "train_inner")
    assert sorted(resumed) == [5, 10, 15, 20, 25, 30]
    for update in (15, 20):
        assert resumed[update]["loss"] == after_kill["log"][update]["loss"], update
    # checkpoint_last.pt is a copy (its own inode), not a hard link to checkpoint_1_30.pt.
    assert (save / "checkpoint_last.pt").read_bytes() == (save / "checkpoint_1_30.pt").read_bytes()
    assert (
        os.stat(save / "checkpoint_last.pt").st_ino != os.stat(save / "checkpoint_1_30.pt").st_ino
    )


def _killed_mid_write(code, *args):
    return subprocess.run(
        [sys.executable, "-c", _KILLED_MID_WRITE + code, *map(str, args)],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_stock_copy_and_ours_killed_mid_write(killed_and_resumed, tmp_path):
    """fairseq's own PathManager.copy, killed half way, leaves a truncated checkpoint_last.pt that
    torch cannot read; the installed copy and torch_persistent_save leave the old file whole."""
    save, _ = killed_and_resumed
    old, new = save / "checkpoint_1_10.pt", save / "checkpoint_1_30.pt"
    half = new.stat().st_size // 2
    stock = tmp_path / "stock" / "checkpoint_last.pt"
    ours = {
        "copy": tmp_path / "copy" / "checkpoint_last.pt",
        "save": tmp_path / "save" / "checkpoint_last.pt",
    }
    for dst in (stock, *ours.values()):
        dst.parent.mkdir()
        shutil.copyfile(old, dst)

    killed = _killed_mid_write(
        """
from fairseq.file_io import PathManager
kill_mid_write(int(sys.argv[3]))
PathManager.copy(sys.argv[1], sys.argv[2], overwrite=True)
""",
        new,
        stock,
        half,
    )
    assert killed.returncode == -signal.SIGXFSZ, killed.stderr[-2000:]
    assert stock.stat().st_size == half
    with pytest.raises(RuntimeError, match="failed finding central directory"):
        torch.load(stock, weights_only=True)

    killed = _killed_mid_write(
        """
import fairseq_bio, torch
from fairseq import checkpoint_utils
state = torch.load(sys.argv[1], weights_only=True)
kill_mid_write(int(sys.argv[4]))
if os.fork() == 0:
    checkpoint_utils.PathManager.copy(sys.argv[1], sys.argv[2], overwrite=True)
else:
    os.wait()
    checkpoint_utils.torch_persistent_save(state, sys.argv[3])
""",
        new,
        ours["copy"],
        ours["save"],
        half,
    )
    assert killed.returncode == -signal.SIGXFSZ, killed.stderr[-2000:]
    for dst in ours.values():
        assert dst.read_bytes() == old.read_bytes(), dst  # untouched
        assert (
            dst.parent / "checkpoint_last.pt.tmp"
        ).stat().st_size == half  # the kill came mid-write
        checkpoint_safety.remove_interrupted_writes(dst.parent)
        assert sorted(dst.parent.iterdir()) == [dst]


def test_atomic_copy_and_save_write_whole_files(killed_and_resumed, tmp_path):
    save, _ = killed_and_resumed
    src = save / "checkpoint_1_30.pt"
    checkpoint_safety.copy_atomically(src, tmp_path / "copy.pt")
    assert (tmp_path / "copy.pt").read_bytes() == src.read_bytes()
    state = checkpoints.load_checkpoint(src)
    checkpoint_safety.save_atomically(state, tmp_path / "saved.pt")
    assert updates_of(tmp_path / "saved.pt") == 30
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.pt", "saved.pt"]


def test_corrupt_checkpoint_last_is_one_line_naming_the_newest_intact_one_and_the_fallback_resumes(
    killed_and_resumed, data_bin, tmp_path
):
    source, _ = killed_and_resumed
    save = tmp_path / "run"
    shutil.copytree(source, save)
    shutil.copyfile(f"{source}.log", f"{save}.log")
    # As a new user would: truncate checkpoint_last.pt (and checkpoint_1_30.pt, so that the newest
    # intact one is neither of them), and make the oldest one the newest file: the choice goes by
    # update count, not by mtime.
    for name in ("checkpoint_last.pt", "checkpoint_1_30.pt"):
        os.truncate(save / name, 100_000)
    os.utime(save / "checkpoint_1_10.pt")

    failed = train(data_bin("bytebpe"), save, "optimization.max_update=30", check=False)
    assert failed.returncode != 0
    # one line, the last on stderr (fairseq_bio.errors.OneLineErrors), no traceback
    error = failed.stderr.strip().splitlines()[-1:]
    assert "Traceback" not in failed.stderr and error == [
        f"{save}/checkpoint_last.pt: corrupt checkpoint, truncated: "
        f"100,000 bytes and no complete zip directory at its end; the newest intact checkpoint in {save} is "
        f"checkpoint_1_20.pt (update 20): resume from it with checkpoint.restore_file={save}/checkpoint_1_20.pt, or "
        "set FAIRSEQ_BIO_RESUME_FALLBACK=1 to fall back to it automatically"
    ]
    assert "PytorchStreamReader" not in failed.stderr

    train(
        data_bin("bytebpe"),
        save,
        "optimization.max_update=30",
        env={"FAIRSEQ_BIO_RESUME_FALLBACK": "1"},
    )
    assert first_update_after_restart(f"{save}.log") == 25
    assert updates_of(save / "checkpoint_last.pt") == 30
    before, after = logged(f"{source}.log", "train_inner"), logged(f"{save}.log", "train_inner")
    for update in (25, 30):  # resumed exactly from update 20
        assert after[update]["loss"] == before[update]["loss"], update


def test_corruption_is_diagnosed_by_kind(killed_and_resumed, tmp_path, monkeypatch):
    save, _ = killed_and_resumed
    good = (save / "checkpoint_1_30.pt").read_bytes()
    cases = {
        "empty.pt": (b"", "an empty file (0 bytes)"),
        "cut.pt": (
            good[:-1],
            f"truncated: {len(good) - 1:,} bytes and no complete zip directory at its end",
        ),
        "text.pt": (
            b"hello\n",
            "not a PyTorch checkpoint (6 bytes starting b'hell', not a zip archive)",
        ),
    }
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0xFF  # inside a tensor: torch itself loads this without noticing
    for name, (data, problem) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(checkpoints.CorruptCheckpointError) as error:
            checkpoints.load_checkpoint(tmp_path / name)  # not an UnsafeCheckpointError
        # read by a command (not a resuming run): the file is the problem, no resume advice
        assert (
            str(error.value)
            == f"{tmp_path / name}: corrupt checkpoint, {problem}; copy it again from where it "
            "came from, or name another one"
        )
        resuming = checkpoints.corrupt_error(tmp_path / name, error.value, resuming=True)
        assert str(resuming).startswith(
            f"{tmp_path / name}: corrupt checkpoint, {problem}; no intact checkpoint"
        )
    (tmp_path / "flipped.pt").write_bytes(flipped)
    assert checkpoints.checkpoint_problem(tmp_path / "flipped.pt").endswith("fails its CRC check")
    assert checkpoints.newest_intact_checkpoint(tmp_path) is None
    # checkpoint_last.pt and checkpoint_1_30.pt both hold update 30; the tie goes to the newer file.
    assert checkpoints.newest_intact_checkpoint(save) == (str(save / "checkpoint_last.pt"), 30)
    assert checkpoints.newest_intact_checkpoint(save, exclude=save / "checkpoint_last.pt") == (
        str(save / "checkpoint_1_30.pt"),
        30,
    )
    monkeypatch.setenv("FAIRSEQ_BIO_RESUME_FALLBACK", "sometimes")
    with pytest.raises(ValueError, match="FAIRSEQ_BIO_RESUME_FALLBACK=sometimes: must be 1"):
        checkpoint_safety.fallback_enabled()


def test_raw_text_as_task_data_is_one_line_saying_what_to_run(pubmed_corpus, tmp_path):
    from fairseq_bio.tasks.bio_electra import BioElectraTask, BioElectraTaskConfig
    from fairseq_bio.tasks.bio_masked_lm import BioMaskedLMConfig, BioMaskedLMTask

    text_dir = pubmed_corpus  # train.txt, valid.txt
    for task, config in (
        (BioMaskedLMTask, BioMaskedLMConfig),
        (BioElectraTask, BioElectraTaskConfig),
    ):
        with pytest.raises(
            FileNotFoundError,
            match=rf"task.data={re.escape(str(text_dir))}: no dict.txt, .* fairseq-bio-encode",
        ):
            task.setup_task(config(data=str(text_dir)))
        with pytest.raises(
            FileNotFoundError,
            match=rf"task.data={re.escape(str(tmp_path))}/nothing: no such directory",
        ):
            task.setup_task(config(data=f"{tmp_path}/nothing"))

    result = subprocess.run(
        runs.hydra_train(
            "bio_roberta_tiny", f"task.data={text_dir / 'train.txt'}", save_dir=f"{tmp_path}/ckpt"
        ),
        env=ENV,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    error = result.stderr.strip().splitlines()[-1:]
    assert "Traceback" not in result.stderr and error == [
        f"task.data={text_dir / 'train.txt'}: a file, not a binarised data directory (dict.txt, "
        "train.bin/.idx); if it is text, encode and binarise it first: fairseq-bio-encode --vocab VOCAB "
        "train.txt valid.txt --out train.bpe valid.bpe, then fairseq-bio-binarize --vocab VOCAB --train train.bpe "
        "--valid valid.bpe --out data-bin (VOCAB from fairseq-bio-vocab; `make demo` runs every step), and give "
        "task.data=data-bin"
    ]
    assert "dict.txt'" not in result.stderr  # no FileNotFoundError about <file>/dict.txt


def test_pre_layer_norm_pretrains_reloads_and_fine_tunes(
    data_bin, ncbi_slice, tmp_path, monkeypatch
):
    """model.encoder_normalize_before=true through fairseq-hydra-train: the loss falls over 40
    updates, and the checkpoint restores into bio_tagging, which keeps the pre-LN layout and starts
    from the pretrained weights.
    """
    save = tmp_path / "pre-ln"
    save.mkdir()
    train(
        data_bin("bytebpe"),
        save,
        "model.encoder_normalize_before=true",
        "optimization.max_update=40",
    )
    losses = [
        float(entry["loss"]) for _, entry in sorted(logged(f"{save}.log", "train_inner").items())
    ]
    assert len(losses) == 8 and losses[-1] < losses[0] - 0.8, losses
    pretrained = checkpoints.load_checkpoint(save / "checkpoint_last.pt")
    assert pretrained["cfg"]["model"]["encoder_normalize_before"] is True
    norms = {
        k for k in pretrained["model"] if "norm" in k and ".layers." not in k and "lm_head" not in k
    }
    assert norms == {
        "encoder.sentence_encoder.layer_norm.weight",
        "encoder.sentence_encoder.layer_norm.bias",
    }

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    tuned_dir = tmp_path / "ner"
    tuned_dir.mkdir()
    log = fine_tune(
        ncbi_slice, tuned_dir, f"checkpoint.restore_file={save / 'checkpoint_last.pt'}", updates=10
    )
    inner = logged(log, "train_inner")
    assert sorted(inner) == [10] and float(inner[10]["loss"]) > 0
    tuned = checkpoints.load_checkpoint(tuned_dir / "checkpoint_last.pt")
    assert tuned["cfg"]["model"]["encoder_normalize_before"] is True
    for name, before in pretrained["model"].items():
        if name.startswith("encoder.sentence_encoder."):
            after = tuned["model"][name]
            # 10 Adam steps at lr <= 5e-4 move each weight by at most 5e-3: restored, not
            # re-initialised.
            assert (after - before).abs().max() <= 5.1e-3, name

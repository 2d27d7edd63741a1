"""Real training processes for the launch tests (fairseq_bio.runs.Run): started, watched through
their json log, signalled."""

import os
from pathlib import Path

import pytest
from conftest import ENCODER_SIZE, THREADS, build_once, logged

from fairseq_bio import runs

ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}  # one thread per process: several run side by side


def hydra_command(config, save_dir, *overrides, log=None):
    """The hydra training command line of ``config``: checkpoints in ``save_dir``, a json log line
    per update in ``log`` (default ``<save_dir>.log``), no tensorboard."""
    return runs.hydra_train(
        config,
        "common.log_interval=1",
        "common.tensorboard_logdir=null",
        *overrides,
        save_dir=save_dir,
        log=log or f"{save_dir}.log",
    )


class Run(runs.Run):
    """``runs.Run`` with the tests' one thread per process, run beside its output file ``out``;
    ``log`` is the json log it writes."""

    def __init__(self, argv, out: Path, log: Path, env=None, cwd=None, session=False):
        super().__init__(
            argv,
            out,
            log=log,
            env={**ENV, **(env or {})},
            cwd=cwd or Path(out).parent,
            session=session,
        )

    @classmethod
    def train(cls, config, save_dir, *overrides, env=None, out=None, log=None, session=False):
        """``hydra_command``'s run, its output in ``out`` (default ``<save_dir>.out``)."""
        log = log or f"{save_dir}.log"
        return cls(
            hydra_command(config, save_dir, *overrides, log=log),
            out or f"{save_dir}.out",
            log,
            env=env,
            session=session,
        )


def killed_at(command, log, update: int, cwd) -> int:
    """``command`` started in a process group of its own (its output in ``<log>.out``) and killed
    with SIGKILL, whole, once its json log ``log`` shows ``update``; the last update it logged.
    Threads as ``conftest.run_cli`` gives them, so that the killed run computes what an
    uninterrupted one does."""
    run = runs.Run(
        command,
        f"{log}.out",
        log=log,
        cwd=cwd,
        session=True,
        env={"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", THREADS)},
    )
    run.wait_for_update(update)
    assert run.poll() is None, "training ended before it could be killed"
    run.kill()
    return max(logged(log, "train_inner"))


def first_update_after_restart(log_file) -> int:
    """The first training update a resumed run logged (after the last "Start iterating over
    samples")."""
    after = Path(log_file).read_text(encoding="utf-8").split("Start iterating over samples")[-1]
    return min(runs.entries(after.splitlines(), "train_inner"))


def losses(log_file):
    """{update: loss} of every train_inner line in a json log (later lines of a resumed run win)."""
    return {u: float(entry["loss"]) for u, entry in logged(log_file, "train_inner").items()}


def updates_in(checkpoint) -> int:
    from fairseq_bio import checkpoints

    return int(checkpoints.load_checkpoint(checkpoint)["optimizer_history"][-1]["num_updates"])


# The MLM run every launch test compares with: bio_roberta_tiny at the suite's encoder size, dropout
# off (so that two ranks can equal one process), 16 sequences per update as 2 micro-batches of 8, 14
# updates, no scheduled saves.
MLM = [
    *ENCODER_SIZE,
    "model.dropout=0",
    "model.attention_dropout=0",
    "dataset.batch_size=8",
    "optimization.max_update=14",
    "optimization.lr=[0.002]",
    "lr_scheduler.warmup_updates=4",
    "dataset.disable_validation=true",
    "checkpoint.save_interval_updates=1000",
    "dataset.num_workers=0",
]
MLM_UPDATES = 14


@pytest.fixture(scope="session")
def reference(data_bin, tmp_path_factory) -> Path:
    """save_dir of the uninterrupted single-process MLM run (update_freq 2), its json log
    ``train.log`` inside; built once per session (conftest.build_once: whichever test module, or
    pytest-xdist worker, asks first). A fixture: the launch tests import it.
    """

    def build(save_dir):
        data = f"task.data={data_bin('bytebpe')}"
        run = Run.train(
            "bio_roberta_tiny",
            save_dir,
            data,
            *MLM,
            "optimization.update_freq=[2]",
            log=save_dir / "train.log",
            out=save_dir / "train.out",
        )
        assert run.finish() == 0, run.output()
        return save_dir

    return build_once(tmp_path_factory, "launch-mlm-reference", build)

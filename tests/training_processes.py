"""Real fairseq-hydra-train processes for the launch tests: started, watched through their json log, signalled."""

import os
import signal
import subprocess
import time
from pathlib import Path

from conftest import BIN, ENCODER_SIZE, REPO, build_once, logged

ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def hydra_args(config, save_dir, *overrides, log=None):
    """fairseq-hydra-train arguments: ``config`` from hydra_configs, a json log line per update in ``log``
    (default ``<save_dir>.log``)."""
    return ["--config-dir", str(REPO / "hydra_configs"), "--config-name", config,
            f"common.user_dir={REPO / 'fairseq_bio'}", f"checkpoint.save_dir={save_dir}",
            f"common.log_file={log or f'{save_dir}.log'}", "common.log_format=json", "common.log_interval=1",
            "common.tensorboard_logdir=null", *map(str, overrides)]  # fmt: skip


class Run:
    """One process, its output in ``<out>``; ``log`` is the json log it writes."""

    def __init__(self, argv, out: Path, log: Path, env=None, cwd=None, session=False):
        """``session``: in a process group of its own (``os.killpg(run.proc.pid, sig)`` signals it and its
        DataLoader workers, as SLURM signals every process of a job step)."""
        self.out, self.log = Path(out), Path(log)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        with open(self.out, "ab") as f:
            self.proc = subprocess.Popen([str(a) for a in argv], stdout=f, stderr=subprocess.STDOUT,
                                         env={**ENV, **(env or {})}, cwd=cwd or self.out.parent,
                                         start_new_session=session)  # fmt: skip

    @classmethod
    def train(cls, config, save_dir, *overrides, env=None, out=None, log=None, session=False):
        save_dir = Path(save_dir)
        args = hydra_args(config, save_dir, *overrides, log=log)
        return cls([BIN / "fairseq-hydra-train", *args], out or f"{save_dir}.out", log or f"{save_dir}.log", env=env,
                   session=session)  # fmt: skip

    def output(self, whole=False) -> str:
        text = self.out.read_text(errors="replace")
        return text if whole else text[-4000:]

    def wait_for_update(self, update: int, timeout: float = 300, log=None) -> int:
        """Block until the json log shows ``update`` (or later); the update it shows."""
        log = Path(log or self.log)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if log.exists():
                done = [u for u in logged(log, "train_inner") if u >= update]
                if done:
                    return min(done)
            if self.proc.poll() is not None:
                raise AssertionError(f"exited ({self.proc.returncode}) before update {update}:\n{self.output()}")
            time.sleep(0.05)
        raise AssertionError(f"no update {update} within {timeout} s:\n{self.output()}")

    def signal(self, signum=signal.SIGUSR1):
        self.proc.send_signal(signum)

    def finish(self, timeout: float = 300) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"still running after {timeout} s:\n{self.output()}")


def losses(log_file):
    """{update: loss} of every train_inner line in a json log (later lines of a resumed run win)."""
    return {u: float(entry["loss"]) for u, entry in logged(log_file, "train_inner").items()}


def updates_in(checkpoint) -> int:
    from fairseq_bio import compat

    return int(compat.load_checkpoint(checkpoint)["optimizer_history"][-1]["num_updates"])


# The MLM run every launch test compares with: bio_roberta_tiny at the suite's encoder size, dropout off (so that
# two ranks can equal one process), 16 sequences per update as 2 micro-batches of 8, 14 updates, no scheduled saves.
MLM = [*ENCODER_SIZE, "model.dropout=0", "model.attention_dropout=0", "dataset.batch_size=8",
       "optimization.max_update=14", "optimization.lr=[0.002]", "lr_scheduler.warmup_updates=4",
       "dataset.disable_validation=true", "checkpoint.save_interval_updates=1000", "dataset.num_workers=0"]  # fmt: skip
MLM_UPDATES = 14


def mlm_reference(data_bin, tmp_path_factory) -> Path:
    """save_dir of the uninterrupted single-process MLM run (update_freq 2), its json log ``train.log`` inside; built
    once per session (conftest.build_once: whichever test module, or pytest-xdist worker, asks first)."""

    def build(save_dir):
        data = f"task.data={data_bin('bytebpe')}"
        run = Run.train("bio_roberta_tiny", save_dir, data, *MLM, "optimization.update_freq=[2]",
                        log=save_dir / "train.log", out=save_dir / "train.out")  # fmt: skip
        assert run.finish() == 0, run.output()
        return save_dir

    return build_once(tmp_path_factory, "launch-mlm-reference", build)

"""A one-node, two-task SLURM job step on this machine: the environment srun gives each task, a stand-in for the
cluster's scontrol (answers ``show hostnames``, records ``requeue``), and two real fairseq-hydra-train processes
started as the job's tasks."""

import os
import socket

import pytest
from training_processes import Run

SCONTROL = """#!/bin/sh
# Stand-in for SLURM's scontrol: what fairseq (show hostnames) and fairseq_bio (requeue) ask of it.
echo "$@" >> "$SCONTROL_LOG"
[ "$1 $2" = "show hostnames" ] && echo "$3" | tr ',' '\\n'
exit 0
"""
JOB_ID = "4242"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.fixture
def slurm(tmp_path):
    """``slurm(rank)``: the environment srun gives task ``rank`` of a one-node, two-task job; and the scontrol log."""
    return slurm_job(tmp_path)


def slurm_job(tmp_path):
    """The ``slurm`` fixture's value, its scontrol in ``tmp_path`` (for fixtures of a wider scope)."""
    bin_dir = tmp_path / "slurm-bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(SCONTROL)
    (bin_dir / "scontrol").chmod(0o755)
    log = tmp_path / "scontrol.log"

    def env(rank):
        # SLURM_LOCALID is the task's GPU for fairseq (torch.cuda.set_device(SLURM_LOCALID) when it is > 0), which a
        # CPU-only torch cannot do; on the CPU the id has no other use, so both tasks say 0.
        return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SCONTROL_LOG": str(log), "SLURM_JOB_ID": JOB_ID,
                "SLURM_JOB_NODELIST": "localhost", "SLURM_NNODES": "1", "SLURM_NTASKS": "2",
                "SLURM_NTASKS_PER_NODE": "2", "SLURM_NODEID": "0", "SLURM_PROCID": str(rank),
                "SLURM_LOCALID": "0"}  # fmt: skip

    env.log = log
    return env


def two_tasks(config, save_dir, slurm, *overrides):
    """The two tasks of one SLURM job step (rank 1 logs only warnings, to its own file)."""
    port = free_port()
    dist = ["distributed_training.distributed_world_size=2", f"distributed_training.distributed_port={port}",
            "distributed_training.distributed_backend=gloo"]  # fmt: skip
    return [Run.train(config, save_dir, *overrides, *dist, env=slurm(rank), out=f"{save_dir}.rank{rank}.out",
                      log=None if rank == 0 else f"{save_dir}.rank1.log") for rank in (0, 1)]  # fmt: skip

"""What SLURM says about jobs, for the two places that wait for jobs without sacct: the SLURM
presets' sweeps (``patches.slurm_jobs``) and ``fairseq-bio-blurb --launcher slurm``
(``runner.slurm``). Where a cluster keeps no accounting, sacct fails and squeue is all there is."""

import logging
import subprocess
from typing import Dict, Optional, Sequence, Tuple

logger = logging.getLogger(__name__)

# squeue's states after which nothing of a job runs any more (PREEMPTED is not one: a requeued job
# is PENDING again)
ENDED = frozenset(
    "BOOT_FAIL CANCELLED COMPLETED DEADLINE FAILED NODE_FAIL OUT_OF_MEMORY REVOKED SPECIAL_EXIT "
    "TIMEOUT".split()
)


def last_line(text, limit: int = 300) -> str:
    """The last non-empty line of a task's saved error (submitit keeps its traceback), at most
    ``limit`` characters; "no message" when there is none."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[-1][:limit] if lines else "no message"


def client(command: Sequence[str], timeout: float = 120):
    """A SLURM client command's CompletedProcess (text), None where it cannot run."""
    try:
        return subprocess.run(list(command), capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as e:
        logger.warning("%s: %s", command[0], e)
        return None


def squeue_states(job_ids: Sequence[str]) -> Optional[Dict[str, Tuple[str, str]]]:
    """{job id: (state, reason)} of the jobs SLURM still knows, array tasks one by one ("5_0");
    None when squeue itself failed."""
    arrays = sorted({j.split("_")[0] for j in job_ids})
    if not arrays:
        return {}
    out = client(["squeue", "-h", "-r", "-t", "all", "-j", ",".join(arrays), "-o", "%i|%T|%r"])
    if out is None:
        return None
    if out.returncode != 0:
        if "Invalid job id" in out.stderr:  # every job id unknown (ended long ago)
            return {}
        logger.warning("squeue: exit %d: %s", out.returncode, out.stderr.strip())
        return None
    states = {}
    for line in out.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3:
            states[parts[0]] = (parts[1], parts[2])
    return states

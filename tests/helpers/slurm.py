"""SLURM for the launch tests, two ways.

- A one-node, two-task job step on this machine, stood in for: the environment srun gives each task,
  a stand-in for the cluster's scontrol (answers ``show hostnames``, records ``requeue``), and two
  real fairseq-hydra-train processes started as the job's tasks (``slurm``, ``two_tasks``).
- A real one-node SLURM cluster (``Cluster``): munged, slurmctld and slurmd of its own in a temp
  dir, on free ports, for sbatch, srun and hydra's submitit launcher (Debian's slurmctld, slurmd,
  slurm-client, munge; ``available`` says why not where they are missing)."""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

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
    """``slurm(rank)``: the environment srun gives task ``rank`` of a one-node, two-task job; and
    the scontrol log."""
    return slurm_job(tmp_path)


def slurm_job(tmp_path):
    """The ``slurm`` fixture's value, its scontrol in ``tmp_path`` (for fixtures of a wider
    scope)."""
    bin_dir = tmp_path / "slurm-bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(SCONTROL)
    (bin_dir / "scontrol").chmod(0o755)
    log = tmp_path / "scontrol.log"

    def env(rank):
        # As srun gives them: SLURM_LOCALID is the task's place on its node (fairseq's GPU for it; a
        # CPU task keeps device 0, patches.fairseq_repairs).
        return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SCONTROL_LOG": str(log), "SLURM_JOB_ID": JOB_ID,
                "SLURM_JOB_NODELIST": "localhost", "SLURM_NNODES": "1", "SLURM_NTASKS": "2",
                "SLURM_NTASKS_PER_NODE": "2", "SLURM_NODEID": "0", "SLURM_PROCID": str(rank),
                "SLURM_LOCALID": str(rank)}  # fmt: skip

    env.log = log
    return env


def two_tasks(config, save_dir, slurm, *overrides):
    """The two tasks of one SLURM job step (rank 1 logs only warnings, to its own file)."""
    port = free_port()
    dist = ["distributed_training.distributed_world_size=2", f"distributed_training.distributed_port={port}",
            "distributed_training.distributed_backend=gloo"]  # fmt: skip
    return [Run.train(config, save_dir, *overrides, *dist, env=slurm(rank), out=f"{save_dir}.rank{rank}.out",
                      log=None if rank == 0 else f"{save_dir}.rank1.log") for rank in (0, 1)]  # fmt: skip


# --- a real one-node SLURM cluster ---------------------------------------------------------------

PACKAGES = "slurmctld slurmd slurm-client munge"
INSTALL = f"apt-get install -y --no-install-recommends {PACKAGES}"
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "squeue", "sinfo", "scontrol", "scancel")
ENDED = set("COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL OUT_OF_MEMORY BOOT_FAIL DEADLINE".split())
CONFIG = """\
ClusterName={name}
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.socket,cred_expire=10
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=2
MinJobAge=600
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
{node} NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName={partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def available():
    """None where a one-node SLURM can start here, else the one line why not (the tests' skip)."""
    missing = [n for n in DAEMONS + CLIENTS if _which(n) is None]
    if missing:
        return f"SLURM not installed: {INSTALL}"
    if os.geteuid() != 0:
        return "SLURM tests need root: slurmd starts each job's tasks as the submitting user"
    return None


def _which(name):
    return shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")


class ClusterError(RuntimeError):
    """The cluster did not start, a job did not end in time, or something of it was left running."""


class Cluster:
    """A one-node SLURM cluster: its own munged, slurmctld and slurmd, in a temp dir, on free ports.

    ``start()`` writes the config, starts the three daemons (their PIDs in ``pids``) and waits until
    the node is idle; ``env`` is what a client (sbatch, srun, fairseq-hydra-train -m) needs to find
    it; ``stop()`` cancels its jobs, ends exactly its daemons and checks that no process of it is
    left. Jobs run as root, tasks with the submitting environment."""

    def __init__(self, partition="debug"):
        import tempfile
        import uuid

        self.partition = partition
        # lowercase and unique: two suites on one machine never share a cluster
        self.name = f"fbio{uuid.uuid4().hex[:10]}"
        # short: the munge socket's path must fit a unix socket address
        self.root = Path(tempfile.mkdtemp(prefix=f"{self.name}-"))
        self.root.chmod(0o755)  # munged refuses a socket in a directory others cannot enter
        self.conf = self.root / "slurm.conf"
        self.pids = {}
        self._procs = {}
        sbin = os.path.dirname(_which("slurmctld") or "/usr/sbin/slurmctld")
        self.env = {"SLURM_CONF": str(self.conf), "PATH": f"{sbin}:{os.environ['PATH']}"}

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def start(self, timeout=60.0):
        """Config, daemons, then a wait (``timeout`` s) for the node to be idle; returns self."""
        try:
            self._write_config()
            self._start_munge()
            self._daemon("slurmctld", "-D", "-i")
            self._daemon("slurmd", "-D")
            self._wait_idle(timeout)
        except BaseException:
            self.stop(check=False)
            raise
        return self

    def _write_config(self):
        for sub in ("munge", "state", "spool", "logs"):
            (self.root / sub).mkdir(mode=0o755)
        node = self._node_line()
        host = socket.gethostname().split(".")[0]
        self.conf.write_text(
            CONFIG.format(
                name=self.name,
                host=host,
                root=self.root,
                ctld_port=free_port(),
                slurmd_port=free_port(),
                node=node,
                partition=self.partition,
            )
        )

    def _node_line(self):
        """This machine as ``slurmd -C`` sees it (NodeName=<host> CPUs=... RealMemory=...)."""
        out = subprocess.run(
            [_which("slurmd"), "-C"], capture_output=True, text=True, check=True, timeout=30
        )
        return next(line for line in out.stdout.splitlines() if line.startswith("NodeName="))

    def _start_munge(self):
        """munged of its own: its key, socket, pid and seed files in the temp dir."""
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        m = self.root / "munge"
        self._daemon(
            "munged",
            "-F",
            f"--socket={m}/munge.socket",
            f"--key-file={key}",
            f"--pid-file={m}/munged.pid",
            f"--seed-file={m}/munged.seed",
            f"--log-file={m}/munged.log",
        )
        self._wait(lambda: (m / "munge.socket").exists(), 10, "munged made no socket")

    def _daemon(self, name, *args):
        """Daemon ``name`` in the foreground, a child of ours (pid in ``pids``), output in logs/."""
        with open(self.root / "logs" / f"{name}.out", "ab") as out:
            proc = subprocess.Popen(
                [_which(name), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env},
                start_new_session=True,
            )
        self._procs[name], self.pids[name] = proc, proc.pid

    def _wait(self, ready, timeout, what):
        deadline = time.monotonic() + timeout
        while not ready():
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise ClusterError(f"{name} exited {proc.returncode}\n{self.logs()}")
            if time.monotonic() > deadline:
                raise ClusterError(f"{what} within {timeout:g} s\n{self.logs()}")
            time.sleep(0.2)

    def _wait_idle(self, timeout):
        def idle():
            out = self.client("sinfo", "-h", "-N", "-o", "%T", check=False)
            return out.returncode == 0 and out.stdout.split() == ["idle"]

        self._wait(idle, timeout, "the node was not idle")

    def client(self, name, *args, check=True, timeout=60):
        """A SLURM client command (squeue, srun, ...) on this cluster; its CompletedProcess."""
        out = subprocess.run(
            [_which(name), *map(str, args)],
            capture_output=True,
            text=True,
            env={**os.environ, **self.env},
            timeout=timeout,
        )
        if check and out.returncode != 0:
            raise ClusterError(
                f"{name} {' '.join(map(str, args))}: exit {out.returncode}\n{out.stderr}"
            )
        return out

    def sbatch(self, script, *args, cwd=None):
        """``script`` (text) submitted with sbatch ``args``; the job id."""
        path = self.root / "logs" / f"job-{time.monotonic_ns()}.sh"
        path.write_text(script)
        out = subprocess.run(
            [_which("sbatch"), "--parsable", *map(str, args), str(path)],
            capture_output=True,
            text=True,
            env={**os.environ, **self.env},
            cwd=cwd,
            timeout=60,
        )
        if out.returncode != 0:
            raise ClusterError(f"sbatch: exit {out.returncode}\n{out.stderr}")
        return int(out.stdout.strip().split(";")[0])

    def jobs(self):
        """{job id: its ``scontrol show job`` fields} of every job the controller still knows."""
        out = self.client("scontrol", "show", "job", "-o", check=False)
        found = {}
        for line in out.stdout.splitlines():
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            if "JobId" in fields:
                found[int(fields["JobId"])] = fields
        return found

    def job(self, job_id):
        """The ``scontrol show job`` fields of one job (JobState, Restarts, StdOut, ...)."""
        return self.jobs()[int(job_id)]

    def wait_job(self, job_id, timeout, states=ENDED):
        """Wait until job ``job_id`` is in one of ``states`` (default: ended); its fields. A
        ``ClusterError`` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            fields = self.jobs().get(int(job_id))
            if fields is not None and fields["JobState"] in states:
                return fields
            if time.monotonic() > deadline:
                raise ClusterError(f"job {job_id} still {_state(fields)} after {timeout:g} s")
            time.sleep(0.5)

    def logs(self, chars=2000):
        """The tail of each daemon's log, for error messages."""
        parts = []
        for log in (
            sorted(self.root.glob("*.log"))
            + sorted(self.root.glob("*/*.log"))
            + sorted(self.root.glob("logs/*.out"))
        ):
            text = log.read_text(errors="replace")[-chars:]
            parts.append(f"--- {log}\n{text}")
        return "\n".join(parts)

    def stop(self, check=True, timeout=30.0):
        """Cancel its jobs, end its daemons (TERM, then KILL after ``timeout``), and check
        (``check``) that no process of it is left: none with its SLURM_CONF in its environment or
        its directory on its command line (job tasks, slurmstepd). Those are killed, then reported
        in a ``ClusterError``. Its temp dir is removed when nothing was left."""
        if "slurmctld" in self._procs and self._procs["slurmctld"].poll() is None:
            for job_id, fields in self.jobs().items():
                if fields["JobState"] not in ENDED:
                    self.client("scancel", job_id, check=False)
            with contextlib.suppress(ClusterError):
                self._wait(
                    lambda: all(f["JobState"] in ENDED for f in self.jobs().values()),
                    timeout,
                    "jobs still running after scancel",
                )
        for name in reversed(list(self._procs)):
            proc = self._procs[name]
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout)
        left = self.leftovers()
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not left:
            shutil.rmtree(self.root, ignore_errors=True)
        elif check:
            raise ClusterError(f"left running after stop(), now killed: {left} ({self.root})")

    def leftovers(self):
        """The pids of live processes of this cluster: its SLURM_CONF in their environment, or its
        directory on their command line."""
        marks = (f"SLURM_CONF={self.conf}".encode(), str(self.root).encode())
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                        continue  # a zombie runs nothing
                with open(f"/proc/{entry}/environ", "rb") as f:
                    environ = f.read()
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if marks[0] + b"\0" in environ + b"\0" or marks[1] in cmdline:
                found.append(int(entry))
        return found


def _state(fields):
    return (
        "unknown to the controller"
        if fields is None
        else f"{fields['JobState']} ({fields['Reason']})"
    )

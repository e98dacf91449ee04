"""The Slurm allocation a `vigil run` runs in, and how a job goes on after nodes are drained.

`Allocation.from_env` reads what `srun` gives every task: `SLURM_JOB_ID`, `SLURM_JOB_NODELIST`
(expanded by `hostlist.expand`, else by `scontrol show hostnames`), `SLURM_PROCID`, and the node
the task runs on (`SLURMD_NODENAME`, which is also the host name vigil uses, so that a drain
names the node the agent speaks for).

Going on after a drain: inside the allocation the controller's restart already leaves out every
host in `cordoned()` (vigil's drains) — the agents started by `srun` stay and take the next
generation. Where a job must be relaunched at the Slurm level, `relaunch_argv` says how: while
the allocation runs, `srun -N MIN-MAX --exclude=<drained> ...` (a job step on the nodes left);
when none remains, a fresh job `sbatch --no-requeue -N MIN-MAX --exclude=... SCRIPT`, never a
requeue of the failed job (a requeue keeps its id and may hand back the same node). The
controller submits that fresh job itself (`relaunch`) when a recovery finds the allocation gone.

`vigil run` under `srun` names its job `slurm-<SLURM_JOB_ID>` (`vigil_job_id`); `slurm_job_of`
reads the allocation back from that name (a job named otherwise is not relaunched by vigil).
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from vigil.recovery.backends.slurm.cli import SlurmCli
from vigil.recovery.backends.slurm.hostlist import exclude_arg, expand
from vigil.recovery.backends.slurm.settings import SlurmSettings
from vigil.recovery.errors import BackendError

JOB_PREFIX = "slurm-"
_JOB = re.compile(rf"{JOB_PREFIX}([0-9]{{1,12}})")


def vigil_job_id(slurm_job_id: str) -> str:
    """The vigil job id of the tasks of Slurm job `slurm_job_id`."""
    return f"{JOB_PREFIX}{slurm_job_id}"


def slurm_job_of(job_id: str) -> str | None:
    """The Slurm job id behind a vigil job id `slurm-<digits>`, else None."""
    m = _JOB.fullmatch(job_id)
    return m.group(1) if m else None


@dataclass(frozen=True, kw_only=True)
class Allocation:
    job_id: str
    nodes: tuple[str, ...]
    host: str  # the node this task runs on
    procid: int | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str], *,
                 hostnames: Callable[[str], list[str]] | None = None) -> Allocation | None:
        """The allocation of this process, or None outside Slurm (no `SLURM_JOB_ID`)."""
        job = env.get("SLURM_JOB_ID", "").strip()
        if not job:
            return None
        nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
        try:
            nodes = expand(nodelist)
        except ValueError:
            if hostnames is None:
                raise
            nodes = hostnames(nodelist)
        procid = env.get("SLURM_PROCID", "")
        host = env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
        return cls(job_id=job, nodes=tuple(nodes), host=host, procid=int(procid) if procid.isdigit() else None)


def hostnames(cli: SlurmCli, settings: SlurmSettings, hostlist: str) -> list[str]:
    """`scontrol show hostnames LIST`: Slurm's own expansion, for forms `expand` does not read."""
    out = cli.run([settings.scontrol, "show", "hostnames", hostlist], timeout_s=settings.command_timeout_s)
    return [line.strip() for line in out.splitlines() if line.strip()]


def running(cli: SlurmCli, settings: SlurmSettings, job_id: str) -> bool:
    """Whether the allocation still runs (`squeue -h -j ID -o %T`); a job Slurm forgot is not running."""
    try:
        out = cli.run([settings.squeue, "-h", "-j", job_id, "-o", "%T"], timeout_s=settings.command_timeout_s)
    except BackendError as exc:
        if "Invalid job id" in str(exc):
            return False
        raise
    return any(line.strip() == "RUNNING" for line in out.splitlines())


def relaunch_argv(alloc: Allocation, *, alive: bool, exclude: set[str], nodes_min: int, nodes_max: int,
                  command: list[str], script: str, sbatch: str = "sbatch",
                  options: Sequence[str] = ()) -> list[str] | None:
    """The job's relaunch without the `exclude`d nodes, keeping `-N MIN-MAX`; None when it cannot fit.

    Inside a running allocation: a job step on the nodes left (None when fewer than `nodes_min`
    remain: then the allocation is no use, and the caller ends it and submits). Otherwise a fresh
    job with `--no-requeue`, never a requeue.
    """
    if not 1 <= nodes_min <= nodes_max:
        raise ValueError(f"nodes {nodes_min}..{nodes_max}: need 1 <= MIN <= MAX")
    left = [n for n in alloc.nodes if n not in exclude]
    if alive:
        hi = min(nodes_max, len(left))
        if hi < nodes_min:
            return None
        inside = exclude & set(alloc.nodes)
        return ["srun", f"--jobid={alloc.job_id}", "-N", f"{nodes_min}-{hi}", "--ntasks-per-node=1",
                *(["--exclude=" + exclude_arg(inside)] if inside else []), *command]
    return [sbatch, "--no-requeue", "-N", f"{nodes_min}-{nodes_max}",
            *(["--exclude=" + exclude_arg(exclude)] if exclude else []), *options, script]

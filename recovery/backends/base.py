"""The node backend: how the controller takes a host out of service and puts it back.

One small Protocol, three implementations: `local` (a registry file under `VIGIL_HOME` that the
node agents honour: `backends.local`), `kubernetes` (node cordon, a taint, audit annotations,
eviction of the job's pods through the Eviction API: `backends.kubernetes`) and `slurm` (a drain
with vigil's reason, resumed only when that reason is vigil's: `backends.slurm`). Every call is idempotent: cordoning a cordoned host changes nothing
and says so (`Change.changed` False), which is what makes a controller restarted mid-action
safe. Calls raise `BackendError` (naming the host and backend) when the backend fails.
A backend that can also submit a job afresh (Slurm) is a `Relauncher` too.

A backend with `gpu_quarantine` True can also take single GPUs of a host out (`quarantine`) while the host
stays in service (local: the registry's GPU list its agent honours; kubernetes: a node label + cordon); the
controller quarantines instead of cordoning where the Xid catalog calls for a GPU reset and the fact names
the GPU (no backend resets a GPU). `uncordon` clears a host's quarantine too. Slurm has no per-GPU cordon here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from vigil.cordons import Quarantine


@dataclass(frozen=True, kw_only=True)
class Change:
    """What a backend call did."""

    changed: bool  # False: it was already so (or there was nothing to do)
    detail: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class CordonInfo:
    host: str
    reason: str = ""
    incident_id: str = ""
    by: str = ""
    at: str = ""  # ISO 8601 UTC, when known


GpuQuarantine = Quarantine  # the one record of a host's quarantined GPUs (vigil.cordons: the local registry's)


class NodeBackend(Protocol):
    name: str
    gpu_quarantine: bool  # `quarantine` takes single GPUs out; False: the controller cordons the host instead

    def cordon(self, host: str, *, reason: str, incident_id: str, actor: str) -> Change:
        """Mark `host` unschedulable for new work, with who, why, which incident and when."""
        ...

    def uncordon(self, host: str, *, reason: str, actor: str) -> Change:
        """Put `host` back in service."""
        ...

    def evict(self, host: str, *, job_id: str, reason: str, incident_id: str) -> Change:
        """Remove the job's pods/processes from `host` (respecting disruption budgets, bounded)."""
        ...

    def cordoned(self) -> dict[str, CordonInfo]:
        """Every host this backend has cordoned."""
        ...

    def quarantine(self, host: str, gpus: tuple[int, ...], *, reason: str, incident_id: str, actor: str) -> Change:
        """Take GPUs `gpus` (NVML indices) of `host` out of service; the host's other GPUs stay in it."""
        ...

    def quarantined(self) -> dict[str, GpuQuarantine]:
        """Every host with GPUs this backend quarantined."""
        ...


@runtime_checkable
class Relauncher(Protocol):
    """A backend that can submit a job afresh when its allocation is gone (Slurm: `sbatch --no-requeue`)."""

    def allocation_gone(self, job_id: str) -> str | None:
        """The allocation's id when it is known to be gone; None while it runs, when unknown, or not ours."""
        ...

    def relaunch(self, job_id: str, *, exclude: Iterable[str], nodes_min: int, nodes_max: int, tag: str) -> Change:
        """Submit `job_id` afresh without the `exclude`d hosts, marked `tag`; `data["new_job_id"]`, `data["argv"]`.
        Raises `BackendError` (refused: nothing submitted) or `BackendTimeout` (unknown: ask `relaunched`)."""
        ...

    def relaunched(self, tag: str) -> str | None:
        """The job a `relaunch` marked `tag` submitted, while the backend still knows it."""
        ...

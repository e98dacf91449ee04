"""Node backends behind one Protocol (`base.NodeBackend`); `select` builds the configured one.

`VIGIL_RECOVERY_BACKEND=local` (default): the registry file under `VIGIL_HOME` that node
agents honour (`backends.local`). `kubernetes`: node cordon, taint, audit annotations and pod
eviction through the API server (`backends.kubernetes`, configured by the `kubernetes`
section of the recovery settings). `slurm`: drain and resume with vigil's reason through
`scontrol`/`sinfo` (`backends.slurm`, the `slurm` section).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vigil.cordons import CordonRegistry, registry_path
from vigil.recovery.backends.base import Change, CordonInfo, GpuQuarantine, NodeBackend
from vigil.recovery.backends.local import LocalBackend
from vigil.settings import VigilSettings

if TYPE_CHECKING:  # the settings hold the kubernetes backend's section: imported by them, not here
    from vigil.recovery.settings import RecoverySettings

__all__ = ["Change", "CordonInfo", "GpuQuarantine", "LocalBackend", "NodeBackend", "select"]


def select(settings: RecoverySettings, core: VigilSettings) -> NodeBackend:
    if settings.backend == "kubernetes":
        from vigil.recovery.backends.kubernetes import KubernetesBackend

        return KubernetesBackend(settings.kubernetes)
    if settings.backend == "slurm":
        from vigil.recovery.backends.slurm import SlurmBackend

        return SlurmBackend(settings.slurm)
    return LocalBackend(CordonRegistry(registry_path(core.home)))

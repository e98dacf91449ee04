"""Node backends behind one Protocol (`base.NodeBackend`); `select` builds the configured one.

`VIGIL_RECOVERY_BACKEND=local` (default): the registry file under `VIGIL_HOME` that node
agents honour. `kubernetes`: node cordon, taint, annotations and pod eviction (not built yet;
it will be `backends.kubernetes`, built from its own settings section).
"""

from __future__ import annotations

from vigil.cordons import CordonRegistry, registry_path
from vigil.recovery.backends.base import Change, CordonInfo, NodeBackend
from vigil.recovery.backends.local import LocalBackend
from vigil.recovery.errors import BackendError
from vigil.recovery.settings import RecoverySettings
from vigil.settings import VigilSettings

__all__ = ["Change", "CordonInfo", "LocalBackend", "NodeBackend", "select"]


def select(settings: RecoverySettings, core: VigilSettings) -> NodeBackend:
    if settings.backend == "local":
        return LocalBackend(CordonRegistry(registry_path(core.home)))
    raise BackendError(f"VIGIL_RECOVERY_BACKEND={settings.backend}: that node backend is not built yet "
                       "(available: local)")

"""The local node backend: the cordon registry under `VIGIL_HOME` (`vigil.cordons`).

For one machine (the demo, the tests) or hosts sharing a filesystem: `cordon` adds the host
to `$VIGIL_HOME/cordons.json`; each `vigil run` agent checks the registry every half second
and, while its host is listed, stops its training processes (SIGTERM to the launcher and
every worker's process group) and refuses to start new ones. So `evict` has nothing to do
beyond the cordon: the agent is the one that stops the job's processes.
"""

from __future__ import annotations

from dataclasses import dataclass

from vigil.cordons import CordonRegistry, RegistryError
from vigil.recovery.backends.base import Change, CordonInfo
from vigil.recovery.errors import BackendError


@dataclass
class LocalBackend:
    registry: CordonRegistry
    name: str = "local"

    def cordon(self, host: str, *, reason: str, incident_id: str, actor: str) -> Change:
        try:
            entry, added = self.registry.add(host, reason=reason, incident_id=incident_id, by=actor)
        except RegistryError as exc:
            raise BackendError(f"local backend: cordon {host}: {exc}") from None
        if not added:
            return Change(changed=False, detail=f"already cordoned since {entry.at} ({entry.reason})")
        return Change(changed=True, detail=f"added to {self.registry.path}", data={"at": entry.at})

    def uncordon(self, host: str, *, reason: str, actor: str) -> Change:
        try:
            held = self.registry.remove(host)
        except RegistryError as exc:
            raise BackendError(f"local backend: uncordon {host}: {exc}") from None
        if held is None:
            return Change(changed=False, detail="was not cordoned")
        return Change(changed=True, detail=f"removed from {self.registry.path}", data={"was": held.reason})

    def evict(self, host: str, *, job_id: str, reason: str, incident_id: str) -> Change:
        return Change(changed=False, detail="local: the host's agent stops the job's processes while it is cordoned")

    def cordoned(self) -> dict[str, CordonInfo]:
        try:
            entries = self.registry.read()
        except RegistryError as exc:
            raise BackendError(f"local backend: {exc}") from None
        return {h: CordonInfo(host=h, reason=e.reason, incident_id=e.incident_id, by=e.by, at=e.at)
                for h, e in entries.items()}

"""The local node backend: the cordon registry under `VIGIL_HOME` (`vigil.cordons`).

For one machine (the demo, the tests) or hosts sharing a filesystem: `cordon` adds the host
to `$VIGIL_HOME/cordons.json`; each `vigil run` agent checks the registry every half second
and, while its host is listed, stops its training processes (SIGTERM to the launcher and
every worker's process group) and refuses to start new ones. So `evict` has nothing to do
beyond the cordon: the agent is the one that stops the job's processes. `quarantine` adds GPU indices to the
host's entry in the registry's `gpus` list: the agent starts its next generation with `CUDA_VISIBLE_DEVICES`
without them (`collector.control.gpus`); `uncordon` clears the host's cordon and its quarantined GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

from vigil.cordons import CordonRegistry, RegistryError
from vigil.recovery.backends.base import Change, CordonInfo, GpuQuarantine
from vigil.recovery.errors import BackendError


@dataclass
class LocalBackend:
    registry: CordonRegistry
    name: str = "local"
    gpu_quarantine: bool = True

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
            gpus = self.registry.release(host)
        except RegistryError as exc:
            raise BackendError(f"local backend: uncordon {host}: {exc}") from None
        if held is None and gpus is None:
            return Change(changed=False, detail="was not cordoned")
        released = {"released_gpus": list(gpus.gpus)} if gpus is not None else {}
        what = "cordon" if gpus is None else ("quarantined GPUs" if held is None else "cordon and quarantined GPUs")
        return Change(changed=True, detail=f"{what} removed from {self.registry.path}",
                      data={"was": held.reason if held else gpus.reason if gpus else "", **released})

    def quarantine(self, host: str, gpus: tuple[int, ...], *, reason: str, incident_id: str, actor: str) -> Change:
        try:
            entry, added = self.registry.quarantine(host, gpus, reason=reason, incident_id=incident_id, by=actor)
        except (RegistryError, ValueError) as exc:
            raise BackendError(f"local backend: quarantine GPUs {list(gpus)} of {host}: {exc}") from None
        data = {"gpus": list(entry.gpus), "at": entry.at}
        if not added:
            return Change(changed=False, detail=f"GPUs {list(gpus)} already quarantined since {entry.at}", data=data)
        return Change(changed=True, detail=f"GPUs {list(entry.gpus)} quarantined in {self.registry.path}", data=data)

    def quarantined(self) -> dict[str, GpuQuarantine]:
        try:
            entries = self.registry.quarantined()
        except RegistryError as exc:
            raise BackendError(f"local backend: {exc}") from None
        return dict(entries)  # the registry's records are the backend's (GpuQuarantine is vigil.cordons.Quarantine)

    def evict(self, host: str, *, job_id: str, reason: str, incident_id: str) -> Change:
        return Change(changed=False, detail="local: the host's agent stops the job's processes while it is cordoned")

    def cordoned(self) -> dict[str, CordonInfo]:
        try:
            entries = self.registry.read()
        except RegistryError as exc:
            raise BackendError(f"local backend: {exc}") from None
        return {h: CordonInfo(host=h, reason=e.reason, incident_id=e.incident_id, by=e.by, at=e.at)
                for h, e in entries.items()}

"""Which GPU a PCI address names: NVML's bus ids where NVML answers, else the nvidia driver's sysfs and procfs.

The driver names a GPU by a short PCI address (`PCI:0000:3b:00` in an Xid line), NVML by a long one
(`00000000:3B:00.0`), sysfs by `0000:3b:00.0`: `pci_key` reduces each to (domain, bus, device). Without
NVML, the GPUs bound to the nvidia driver (`<sysfs>/bus/pci/drivers/nvidia/<address>`, else the driver's
`<procfs>/driver/nvidia/gpus/<address>` directories) in PCI order give the index NVML would (its default
enumeration is PCI bus order), and the driver's `<procfs>/driver/nvidia/gpus/<address>/information` its UUID
(the `GPU UUID:` line; at most `INFO_BYTES` read; "" where it is not readable).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from vigil.collector.gpu import NvmlProbe

_ADDRESS = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.[0-7])?$")
PciKey = tuple[int, int, int]
INFO_BYTES = 4096
_UUID = re.compile(r"^GPU UUID:\s*(GPU-[0-9A-Za-z-]{1,80})\s*$", re.MULTILINE)


def pci_key(address: str) -> PciKey | None:
    """(domain, bus, device) of a PCI address in any of the driver's, NVML's or sysfs's spellings."""
    m = _ADDRESS.match(address.strip().removeprefix("PCI:"))
    if m is None:
        return None
    return int(m[1] or "0", 16), int(m[2], 16), int(m[3], 16)


def _names(directory: Path) -> list[str]:
    try:
        return [p.name for p in directory.iterdir()]
    except OSError:
        return []


def driver_uuid(procfs_root: Path, address: str) -> str:
    """The UUID the nvidia driver gives the GPU at `address` (`<procfs>/driver/nvidia/gpus/<address>/information`),
    "" where it is not readable."""
    try:
        with (procfs_root / "driver" / "nvidia" / "gpus" / address / "information").open("rb") as f:
            text = f.read(INFO_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""
    m = _UUID.search(text)
    return m[1] if m else ""


def sysfs_gpus(sysfs_root: Path, procfs_root: Path | None = None) -> dict[PciKey, tuple[int, str]]:
    """The nvidia driver's devices in PCI order: key -> (index, UUID from the driver's procfs, else "")."""
    infos = {k: n for n in _names(procfs_root / "driver" / "nvidia" / "gpus") if (k := pci_key(n)) is not None} \
        if procfs_root is not None else {}
    keys = sorted({k for n in _names(sysfs_root / "bus" / "pci" / "drivers" / "nvidia")
                   if (k := pci_key(n)) is not None} or infos)
    return {k: (i, driver_uuid(procfs_root, infos[k]) if procfs_root is not None and k in infos else "")
            for i, k in enumerate(keys)}


@dataclass(kw_only=True)
class GpuMap:
    """PCI address -> (GPU index, UUID), read once and again when an address is not known."""

    sysfs_root: Path
    procfs_root: Path | None = None  # the driver's GPU UUIDs without NVML (the agent's procfs_root)
    probe: NvmlProbe | None = None
    _map: dict[PciKey, tuple[int, str]] = field(default_factory=dict, init=False)

    def refresh(self) -> None:
        found = self.probe.bus_ids() if self.probe is not None else {}
        self._map = {k: v for a, v in found.items() if (k := pci_key(a)) is not None} or \
            sysfs_gpus(self.sysfs_root, self.procfs_root)

    def indices(self) -> list[int]:
        """Every GPU index NVML (else sysfs) enumerates."""
        if not self._map:
            self.refresh()
        return sorted({i for i, _ in self._map.values()})

    def lookup(self, address: str) -> tuple[int | None, str]:
        key = pci_key(address)
        if key is None:
            return None, ""
        if key not in self._map:
            self.refresh()
        index, uuid = self._map.get(key, (None, ""))
        return index, uuid

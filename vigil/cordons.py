"""The local cordon registry: hosts taken out of service, in one JSON file their agents read.

Written by the recovery controller's local node backend (and `vigil cordon`), read by every
node agent (`vigil run`), which stops its training processes and takes no new work while
its host is listed. The file is `$VIGIL_HOME/cordons.json` (agents and controller share a
home on one machine, or a shared filesystem):

    {"hosts": {"node-7": {"reason": "Xid 79", "incident_id": "...", "by": "controller", "at": "2026-..."}},
     "gpus": {"node-3": {"gpus": [1], "reason": "Xid 48", "incident_id": "...", "by": "controller", "at": "..."}}}

`gpus` is the per-GPU quarantine: the host stays in service, and its agent starts the ranks with
`CUDA_VISIBLE_DEVICES` without those GPU indices (`collector.control.gpus`); uncordoning the host clears it.

Writers hold an exclusive `fcntl` lock on `cordons.json.lock` while they read, change and
replace the file (temporary file, fsync, rename), so concurrent writers never lose an entry
and readers, which never lock, always see a whole file. A missing file lists nothing; an
unreadable one is a `RegistryError` for the caller to report.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vigil.errors import VigilError

FILE_NAME = "cordons.json"


class RegistryError(VigilError):
    """The cordon registry could not be read or written; the message names the file."""


@dataclass(frozen=True, kw_only=True)
class Cordon:
    host: str
    reason: str
    incident_id: str = ""
    by: str = ""
    at: str = ""  # ISO 8601, UTC


@dataclass(frozen=True, kw_only=True)
class Quarantine:
    """GPUs of a host taken out (NVML indices, PCI bus order) while the host stays in service."""

    host: str
    gpus: tuple[int, ...]
    reason: str = ""
    incident_id: str = ""
    by: str = ""
    at: str = ""


MAX_GPUS = 64  # a host's GPU indices are 0..MAX_GPUS-1


def registry_path(home: Path) -> Path:
    return home / FILE_NAME


@dataclass(frozen=True)
class CordonRegistry:
    path: Path

    def read(self) -> dict[str, Cordon]:
        """Every cordoned host; {} when the file does not exist."""
        return self._read()[0]

    def quarantined(self) -> dict[str, Quarantine]:
        """Every host with quarantined GPUs; {} when the file does not exist."""
        return self._read()[1]

    def _read(self) -> tuple[dict[str, Cordon], dict[str, Quarantine]]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}, {}
        except OSError as exc:
            raise RegistryError(f"cordon registry {self.path}: cannot read ({exc.strerror})") from None
        try:
            doc = json.loads(text)
            hosts = {host: Cordon(host=host, **{k: str(v) for k, v in entry.items() if k != "host"})
                     for host, entry in doc.get("hosts", {}).items()}
            gpus = {host: Quarantine(host=host, gpus=_indices(entry.get("gpus")),
                                     **{k: str(v) for k, v in entry.items() if k not in ("host", "gpus")})
                    for host, entry in doc.get("gpus", {}).items()}
            return hosts, gpus
        except (ValueError, TypeError, AttributeError) as exc:
            raise RegistryError(f"cordon registry {self.path}: not a registry file ({exc})") from None

    def get(self, host: str) -> Cordon | None:
        return self.read().get(host)

    def add(self, host: str, *, reason: str, incident_id: str = "", by: str = "") -> tuple[Cordon, bool]:
        """Cordon `host`; (its entry, True) when newly cordoned, (the existing entry, False) when it was."""
        with self._locked():
            hosts, gpus = self._read()
            held = hosts.get(host)
            if held is not None:
                return held, False
            entry = Cordon(host=host, reason=reason, incident_id=incident_id, by=by,
                           at=datetime.now(UTC).isoformat(timespec="seconds"))
            hosts[host] = entry
            self._write(hosts, gpus)
            return entry, True

    def quarantine(self, host: str, gpus: tuple[int, ...], *, reason: str, incident_id: str = "",
                   by: str = "") -> tuple[Quarantine, bool]:
        """Add `gpus` to `host`'s quarantined GPUs; (its entry, True) when one was new, (the entry, False) when
        every one was quarantined already."""
        wanted = _indices(list(gpus))
        with self._locked():
            hosts, held = self._read()
            old = held.get(host)
            have = old.gpus if old is not None else ()
            if old is not None and set(wanted) <= set(have):
                return old, False
            entry = Quarantine(host=host, gpus=tuple(sorted({*have, *wanted})), reason=reason,
                               incident_id=incident_id, by=by, at=datetime.now(UTC).isoformat(timespec="seconds"))
            held[host] = entry
            self._write(hosts, held)
            return entry, True

    def release(self, host: str) -> Quarantine | None:
        """Clear `host`'s quarantined GPUs; its entry, or None when it had none."""
        with self._locked():
            hosts, gpus = self._read()
            held = gpus.pop(host, None)
            if held is not None:
                self._write(hosts, gpus)
            return held

    def remove(self, host: str) -> Cordon | None:
        """Uncordon `host`; its entry, or None when it was not cordoned."""
        with self._locked():
            hosts, gpus = self._read()
            held = hosts.pop(host, None)
            if held is not None:
                self._write(hosts, gpus)
            return held

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise RegistryError(f"cordon registry {self.path}: cannot lock ({exc.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _write(self, hosts: dict[str, Cordon], gpus: dict[str, Quarantine]) -> None:
        doc: dict[str, Any] = {"hosts": {h: {k: v for k, v in asdict(c).items() if k != "host"}
                                         for h, c in sorted(hosts.items())}}
        if gpus:
            doc["gpus"] = {h: {**{k: v for k, v in asdict(q).items() if k != "host"}, "gpus": list(q.gpus)}
                           for h, q in sorted(gpus.items())}
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "w") as fh:
                fh.write(json.dumps(doc, indent=1))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise RegistryError(f"cordon registry {self.path}: cannot write ({exc.strerror})") from None


def _indices(value: Any) -> tuple[int, ...]:
    """GPU indices, sorted and unique; ValueError for anything but a list of ints in 0..MAX_GPUS-1."""
    if not isinstance(value, list) or not all(type(i) is int and 0 <= i < MAX_GPUS for i in value):
        raise ValueError(f"GPU indices must be a list of integers 0..{MAX_GPUS - 1}, got {value!r}")
    return tuple(sorted(set(value)))

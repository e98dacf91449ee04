"""InfiniBand/RoCE port health from sysfs: error counters and port state, turned into faults (source=sysfs).

Read beside the byte counters (`collector/nic.py`), per `<sysfs>/class/infiniband/<dev>/ports/<port>`:
`counters/{symbol_error,link_downed,link_error_recovery,port_rcv_errors}`, `state` (`4: ACTIVE`) and
`phys_state` (`5: LinkUp`, `2: Polling`). `IbHealth.update` compares each port with its previous reading:

* `ib_link_flap` (error): `link_downed` grew and the port is up again: the link went down and came back;
* `ib_port_down` (critical, cordon): a port seen ACTIVE went DOWN with its physical link not training;
  `ib_port_polling` (critical, cordon): a port seen ACTIVE whose physical link stayed in Polling for
  `polling_s`. A port in Polling since the agent's start for `polling_s` (a cable that never came up) is
  `ib_port_polling` too, but a warning (watch): sysfs cannot tell it from an enabled port left without a cable, so
  it is told, not acted on. A port never seen ACTIVE and not Polling (Disabled, an unused port) is no fault;
  each is reported once until it is ACTIVE again;
* `ib_symbol_errors`, `ib_link_recovery`, `ib_rcv_errors` (warning, watch): the counter grew; reported at most
  once per `report_s` per port, with the growth since the last report (never lost, never one event a second);
  symbol errors reported rising `rising.condemn_after` times within a day: `ib_symbol_errors` critical, cordon
  (`collector/rising.py`: a wearing link passes a short self-test).

A port's first reading is its baseline, unless `restore` gave it the counters a previous agent saved
(`snapshot`, kept by the agent in its offsets store under `ib`): growth while the agent was down is then growth.
A counter that went backwards (a driver reload, a reboot) starts a new baseline. Pure apart from the sysfs read;
the caller passes the clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from vigil.collector.nic import read_int
from vigil.collector.rising import Rising
from vigil.contract import LogLine
from vigil.contract.telemetry import Severity
from vigil.contract.xid import XidAction

COUNTERS = ("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors")
GROWTH = {"symbol_error": "ib_symbol_errors", "link_error_recovery": "ib_link_recovery",
          "port_rcv_errors": "ib_rcv_errors"}
Key = tuple[str, int]
MAX_SAVED = 256  # ports whose counters `snapshot` keeps


@dataclass(frozen=True, kw_only=True)
class PortHealth:
    device: str
    port: int
    state: str  # ACTIVE, DOWN, INIT, ARMED ('' when unreadable)
    phys: str  # LinkUp, Polling, Disabled, ...
    counters: dict[str, int] = field(default_factory=dict)


def _name(path: Path) -> str:
    try:
        return path.read_text().strip().partition(":")[2].strip()
    except OSError:
        return ""


def read_ports(sysfs_root: Path) -> list[PortHealth]:
    out: list[PortHealth] = []
    try:
        devices = sorted((sysfs_root / "class" / "infiniband").iterdir())
    except OSError:
        return out
    for dev in devices:
        try:
            ports = sorted((p for p in (dev / "ports").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
        except OSError:
            continue
        for p in ports:
            counters = {c: v for c in COUNTERS if (v := read_int(p / "counters" / c)) is not None}
            out.append(PortHealth(device=dev.name, port=int(p.name), state=_name(p / "state"),
                                  phys=_name(p / "phys_state"), counters=counters))
    return out


@dataclass(kw_only=True)
class IbHealth:
    job_id: str
    host: str
    polling_s: float = 30.0
    report_s: float = 60.0
    _last: dict[Key, PortHealth] = field(default_factory=dict, init=False)
    _polling_since: dict[Key, float] = field(default_factory=dict, init=False)
    _pending: dict[tuple[Key, str], int] = field(default_factory=dict, init=False)
    _reported_at: dict[tuple[Key, str], float] = field(default_factory=dict, init=False)
    _down: set[Key] = field(default_factory=set, init=False)
    _active: set[Key] = field(default_factory=set, init=False)
    rising: Rising = field(default_factory=Rising)  # symbol errors that keep rising condemn the port
    _saved: dict[str, dict[str, int]] = field(default_factory=dict, init=False)  # what `snapshot` saved last

    def restore(self, saved: object) -> None:
        """Baselines from a previous agent's `snapshot` ({"<device>/<port>": {counter: value}}); an entry that does not
        parse (a damaged state file) is skipped, never the end of the agent."""
        if not isinstance(saved, dict):
            return
        for name, counters in list(saved.items())[:MAX_SAVED]:
            device, _, port = str(name).rpartition("/")
            if device and re.fullmatch(r"[0-9]{1,4}", port) and isinstance(counters, dict):
                self._last[(device, int(port))] = PortHealth(
                    device=device, port=int(port), state="", phys="",
                    counters={c: v for c, v in counters.items() if c in COUNTERS and isinstance(v, int)})
        self._saved = self._values()

    @property
    def dirty(self) -> bool:
        """What `snapshot` would save differs from what was saved last (a counter whose growth is still held for
        its report interval saves the same value: no rewrite of the state file every sample)."""
        return self._values() != self._saved

    def snapshot(self) -> dict[str, dict[str, int]]:
        """Each port's counters to save (growth not yet reported left out, so a restart reports it); bounded."""
        self._saved = self._values()
        return self._saved

    def _values(self) -> dict[str, dict[str, int]]:
        return {f"{d}/{n}": {c: v - self._pending.get(((d, n), c), 0) for c, v in p.counters.items()}
                for (d, n), p in list(self._last.items())[:MAX_SAVED]}

    def update(self, ports: list[PortHealth], now: float) -> list[LogLine]:
        out: list[LogLine] = []
        for p in ports:
            key = (p.device, p.port)
            prev = self._last.get(key)
            self._last[key] = p
            out += self._state(key, p, now)
            if prev is None:
                continue
            for name, value in p.counters.items():
                before = prev.counters.get(name)
                if before is None or value <= before:
                    continue  # a new baseline, or no growth
                if name == "link_downed":
                    if p.state == "ACTIVE":
                        out.append(self._fault(p, "ib_link_flap", "error", XidAction.WATCH,
                                               f"link_downed +{value - before}: the link went down and came back"))
                    continue
                self._pending[(key, name)] = self._pending.get((key, name), 0) + value - before
            out += self._growth(key, p, now)
        return out

    def _state(self, key: Key, p: PortHealth, now: float) -> list[LogLine]:
        if p.state == "ACTIVE":
            self._active.add(key)
            self._down.discard(key)
            self._polling_since.pop(key, None)
            return []
        if key in self._down:
            return []  # reported once until it is ACTIVE again
        if p.phys == "Polling":
            since = self._polling_since.setdefault(key, now)
            if now - since < self.polling_s:
                return []
            self._down.add(key)
            if key not in self._active:  # never up since the agent started: a cable that never came up, or none
                return [self._fault(p, "ib_port_polling", "warning", XidAction.WATCH,
                                    f"the link never came up: its training is stuck in Polling for {now - since:.0f} "
                                    "s (a cable or transceiver that never trained, or an enabled port left unused)")]
            return [self._fault(p, "ib_port_polling", "critical", XidAction.CORDON,
                                f"the link went down and its training is stuck in Polling for {now - since:.0f} s")]
        if key not in self._active:
            return []  # a port never seen up here and not training (Disabled: an unused port) is no fault
        if p.state == "DOWN":
            self._down.add(key)
            return [self._fault(p, "ib_port_down", "critical", XidAction.CORDON, "the port went down")]
        return []

    def _growth(self, key: Key, p: PortHealth, now: float) -> list[LogLine]:
        out = []
        for name, category in GROWTH.items():
            grown = self._pending.get((key, name), 0)
            if grown and now - self._reported_at.get((key, name), -self.report_s) >= self.report_s:
                self._reported_at[(key, name)] = now
                del self._pending[(key, name)]
                out.append(self._fault(p, category, "warning", XidAction.WATCH,
                                       f"{name} +{grown} (now {p.counters.get(name)})"))
                if name == "symbol_error" and self.rising.grew(key, now):
                    out.append(self._fault(p, category, "critical", XidAction.CORDON,
                                           f"symbol errors keep rising ({self.rising.condemn_after} reports within "
                                           f"{self.rising.window_s / 3600:.0f} h): condemned"))
        return out

    def _fault(self, p: PortHealth, category: str, severity: Severity, action: XidAction, what: str) -> LogLine:
        return LogLine(job_id=self.job_id, host=self.host, category=category, severity=severity, source="sysfs",
                       action=action, message=f"{p.device} port {p.port}: {what} (state {p.state or '?'}, "
                       f"phys_state {p.phys or '?'})")

"""NIC byte counters -> per-second rates: RDMA from sysfs, Ethernet from procfs.

RDMA/RoCE: `<sysfs>/class/infiniband/<dev>/ports/<port>/counters/port_xmit_data` and
`port_rcv_data` count 4-byte words (multiplied by 4 here); `hw_counters/*` are reported
as they are. Ethernet: `<procfs>/net/dev`, interfaces matching `exclude` (lo, bridges,
veths) skipped. Roots are parameters so tests point at fake trees.

`RateTracker` turns cumulative samples into rates. A counter that goes backwards is a
wrap when the previous value was in the top half of a 32- or 64-bit range, else a
reset (the counter restarted from zero, so the new value is the delta).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

log = logging.getLogger(__name__)
RDMA_WORD_BYTES = 4


@dataclass(frozen=True, kw_only=True)
class NicSample:
    device: str
    port: int
    link: Literal["rdma", "ethernet"]
    tx_bytes: int
    rx_bytes: int
    extra: dict[str, int] = field(default_factory=dict)
    unit: int = 1  # bytes per counter step (4 for RDMA), for wrap detection


@dataclass(frozen=True, kw_only=True)
class NicRate:
    sample: NicSample
    tx_bps: float
    rx_bps: float
    interval_s: float


def read_int(path: Path) -> int | None:
    """The first integer of a sysfs/procfs counter file; None when it is absent or unreadable."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def read_rdma(sysfs_root: Path) -> list[NicSample]:
    out: list[NicSample] = []
    base = sysfs_root / "class" / "infiniband"
    try:
        devices = sorted(p for p in base.iterdir())
    except OSError:
        return out
    for dev in devices:
        try:
            ports = sorted((p for p in (dev / "ports").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
        except OSError:
            continue
        for port in ports:
            tx = read_int(port / "counters" / "port_xmit_data")
            rx = read_int(port / "counters" / "port_rcv_data")
            if tx is None or rx is None:
                continue
            extra: dict[str, int] = {}
            hw = port / "hw_counters"
            try:
                for f in sorted(hw.iterdir()):
                    if (v := read_int(f)) is not None:
                        extra[f.name] = v
            except OSError:
                pass
            out.append(NicSample(device=dev.name, port=int(port.name), link="rdma",
                                 tx_bytes=tx * RDMA_WORD_BYTES, rx_bytes=rx * RDMA_WORD_BYTES, extra=extra,
                                 unit=RDMA_WORD_BYTES))
    return out


def parse_net_dev(text: str, exclude: str = r"^lo$") -> list[NicSample]:
    """`/proc/net/dev`: after two header lines, `iface: rx_bytes ... (8 rx fields) tx_bytes ...`."""
    skip = re.compile(exclude)
    out: list[NicSample] = []
    for line in text.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        name = name.strip()
        fields = rest.split()
        if not sep or not name or skip.search(name) or len(fields) < 9:
            continue
        try:
            rx, tx = int(fields[0]), int(fields[8])
        except ValueError:
            continue
        out.append(NicSample(device=name, port=0, link="ethernet", tx_bytes=tx, rx_bytes=rx))
    return out


def read_ethernet(procfs_root: Path, exclude: str = r"^lo$") -> list[NicSample]:
    try:
        text = (procfs_root / "net" / "dev").read_text()
    except OSError:
        return []
    return parse_net_dev(text, exclude)


def counter_delta(prev: int, cur: int, unit: int = 1) -> int:
    """Bytes between two readings of a counter that counts `unit`-byte steps."""
    if unit != 1:
        return counter_delta(prev // unit, cur // unit) * unit
    if cur >= prev:
        return cur - prev
    for bits in (32, 64):
        top = 1 << bits
        if top // 2 <= prev < top:
            return cur + top - prev  # wrapped
    return cur  # reset: counted from zero since


@dataclass(kw_only=True)
class RateTracker:
    _last: dict[tuple[str, int, str], tuple[float, NicSample]] = field(default_factory=dict)

    def update(self, samples: list[NicSample], now: float) -> list[NicRate]:
        """Rates since each NIC's previous sample (nothing for a NIC seen for the first time)."""
        out: list[NicRate] = []
        current: set[tuple[str, int, str]] = set()
        for s in samples:
            key = (s.device, s.port, s.link)
            current.add(key)
            prev = self._last.get(key)
            self._last[key] = (now, s)
            if prev is None or now <= prev[0]:
                continue
            dt = now - prev[0]
            out.append(NicRate(sample=s, interval_s=dt,
                               tx_bps=counter_delta(prev[1].tx_bytes, s.tx_bytes, s.unit) / dt,
                               rx_bps=counter_delta(prev[1].rx_bytes, s.rx_bytes, s.unit) / dt))
        for gone in [k for k in self._last if k not in current]:
            del self._last[gone]
        return out

"""A fake node for the agent's tests: copies of tests/fixtures' sysfs and procfs trees whose counters advance."""

from __future__ import annotations

import shutil
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


class FakeNode:
    """A copy of tests/fixtures' sysfs and procfs trees whose counters the test advances."""

    def __init__(self, root: Path) -> None:
        self.sysfs = root / "sysfs"
        self.procfs = root / "procfs"
        shutil.copytree(FIXTURES / "sysfs", self.sysfs)
        shutil.copytree(FIXTURES / "procfs", self.procfs)

    def rdma_dir(self, dev: str, port: int = 1) -> Path:
        return self.sysfs / "class" / "infiniband" / dev / "ports" / str(port)

    def set_rdma(self, dev: str, *, tx_words: int, rx_words: int, port: int = 1, **hw: int) -> None:
        d = self.rdma_dir(dev, port)
        (d / "counters").mkdir(parents=True, exist_ok=True)
        (d / "counters" / "port_xmit_data").write_text(f"{tx_words}\n")
        (d / "counters" / "port_rcv_data").write_text(f"{rx_words}\n")
        for name, value in hw.items():
            (d / "hw_counters").mkdir(exist_ok=True)
            (d / "hw_counters" / name).write_text(f"{value}\n")

    def set_ib_port(self, dev: str, *, state: str, phys: str, port: int = 1, **counters: int) -> None:
        """The port's `state` (ACTIVE, DOWN, ...), `phys_state` (LinkUp, Polling, ...) and error counters."""
        d = self.rdma_dir(dev, port)
        codes = {"DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4, "Sleep": 1, "Polling": 2, "Disabled": 3,
                 "LinkUp": 5, "LinkErrorRecovery": 6}
        (d / "state").write_text(f"{codes.get(state, 0)}: {state}\n")
        (d / "phys_state").write_text(f"{codes.get(phys, 0)}: {phys}\n")
        for name, value in counters.items():
            (d / "counters" / name).write_text(f"{value}\n")

    def set_eth(self, counters: dict[str, tuple[int, int]]) -> None:
        """Rewrite net/dev with (rx_bytes, tx_bytes) per interface (lo always included)."""
        lines = ["Inter-|   Receive                                                |  Transmit",
                 " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed"]
        for name, (rx, tx) in {"lo": (1, 1), **counters}.items():
            lines.append(f"{name:>6}: {rx} 10 0 0 0 0 0 0 {tx} 10 0 0 0 0 0 0")
        (self.procfs / "net" / "dev").write_text("\n".join(lines) + "\n")

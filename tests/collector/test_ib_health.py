"""InfiniBand port health from a fake sysfs tree: a flap, a port down, a link stuck in Polling, errors growing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fake_node import FakeNode
from vigil.collector.ibhealth import IbHealth, read_ports
from vigil.contract.xid import XidAction

pytestmark = pytest.mark.pure
ZERO = {"symbol_error": 0, "link_downed": 0, "link_error_recovery": 0, "port_rcv_errors": 0}


def faults(node: FakeNode, ib: IbHealth, now: float) -> list[tuple[str, str, str, XidAction | None]]:
    return [(e.category, e.severity, e.message.split(":")[0], e.action) for e in ib.update(read_ports(node.sysfs), now)]


def test_a_flap_a_port_down_and_a_link_stuck_in_polling(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    node.set_rdma("mlx5_1", tx_words=1, rx_words=1)
    for dev in ("mlx5_0", "mlx5_1"):
        node.set_ib_port(dev, state="ACTIVE", phys="LinkUp", **ZERO)
    ib = IbHealth(job_id="j", host="h", polling_s=30, report_s=60)
    assert faults(node, ib, 0) == []  # the baseline
    node.set_ib_port("mlx5_0", state="ACTIVE", phys="LinkUp", **{**ZERO, "link_downed": 1})
    assert faults(node, ib, 1) == [("ib_link_flap", "error", "mlx5_0 port 1", XidAction.WATCH)]
    node.set_ib_port("mlx5_0", state="DOWN", phys="Disabled", **{**ZERO, "link_downed": 2})
    assert faults(node, ib, 2) == [("ib_port_down", "critical", "mlx5_0 port 1", XidAction.CORDON)]
    assert faults(node, ib, 3) == []  # reported once while it stays down
    node.set_ib_port("mlx5_1", state="DOWN", phys="Polling", **ZERO)
    assert faults(node, ib, 4) == [] and faults(node, ib, 33) == []  # training may still succeed
    assert faults(node, ib, 34) == [("ib_port_polling", "critical", "mlx5_1 port 1", XidAction.CORDON)]
    node.set_ib_port("mlx5_0", state="ACTIVE", phys="LinkUp", **{**ZERO, "link_downed": 2})
    node.set_ib_port("mlx5_1", state="ACTIVE", phys="LinkUp", **ZERO)
    assert faults(node, ib, 40) == []  # up again: a later fall is a new fault
    node.set_ib_port("mlx5_0", state="DOWN", phys="Disabled", **{**ZERO, "link_downed": 3})
    assert [f[0] for f in faults(node, ib, 41)] == ["ib_port_down"]


def test_an_unused_port_is_no_fault(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    node.set_ib_port("mlx5_0", state="DOWN", phys="Polling", **ZERO)
    ib = IbHealth(job_id="j", host="h", polling_s=30)
    assert faults(node, ib, 0) == [] and faults(node, ib, 100) == []


def test_error_counters_growing_are_reported_at_most_once_per_interval_with_all_their_growth(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    node.set_ib_port("mlx5_0", state="ACTIVE", phys="LinkUp", **ZERO)
    ib = IbHealth(job_id="j", host="h", report_s=60)
    faults(node, ib, 0)
    node.set_ib_port("mlx5_0", state="ACTIVE", phys="LinkUp", **{**ZERO, "symbol_error": 5, "port_rcv_errors": 2})
    got = {e.category: e for e in ib.update(read_ports(node.sysfs), 1)}
    assert set(got) == {"ib_symbol_errors", "ib_rcv_errors"} and "symbol_error +5" in got["ib_symbol_errors"].message
    assert got["ib_symbol_errors"].source == "sysfs" and got["ib_symbol_errors"].severity == "warning"
    node.set_ib_port("mlx5_0", state="ACTIVE", phys="LinkUp", **{**ZERO, "symbol_error": 9, "port_rcv_errors": 2})
    assert faults(node, ib, 2) == []  # within the interval: held
    node.set_ib_port("mlx5_0", state="ACTIVE", phys="LinkUp", **{**ZERO, "symbol_error": 12, "port_rcv_errors": 2})
    (late,) = ib.update(read_ports(node.sysfs), 61)
    assert late.category == "ib_symbol_errors" and "symbol_error +7 (now 12)" in late.message
    node.set_ib_port("mlx5_0", state="ACTIVE", phys="LinkUp", **{**ZERO, "symbol_error": 1})  # a driver reload
    assert faults(node, ib, 200) == []  # a new baseline, not growth


def test_symbol_errors_that_keep_rising_condemn_the_port(tmp_path: Path) -> None:
    """The third report of rising symbol errors within a day is critical, cordon (once); a passing self-test of a
    wearing link does not clear it. Reports a day apart never add up."""
    node = FakeNode(tmp_path)
    node.set_ib_port("mlx5_0", state="ACTIVE", phys="LinkUp", **ZERO)
    ib = IbHealth(job_id="j", host="h", report_s=60)
    faults(node, ib, 0)
    got = []
    for n, at in enumerate((100, 200, 300, 400), 1):
        node.set_ib_port("mlx5_0", state="ACTIVE", phys="LinkUp", **{**ZERO, "symbol_error": n})
        got.append([(c, s, a) for c, s, _, a in faults(node, ib, at)])
    warn = ("ib_symbol_errors", "warning", XidAction.WATCH)
    assert got == [[warn], [warn], [warn, ("ib_symbol_errors", "critical", XidAction.CORDON)], [warn]]
    slow = IbHealth(job_id="j", host="h2", report_s=60)
    faults(node, slow, 0)
    for n, at in enumerate((0, 86_401, 172_802), 5):
        node.set_ib_port("mlx5_0", state="ACTIVE", phys="LinkUp", **{**ZERO, "symbol_error": n})
        assert all(s == "warning" for _, s, _, _ in faults(node, slow, at + 1))

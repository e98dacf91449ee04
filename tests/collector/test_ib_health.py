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
    node.set_ib_port("mlx5_0", state="DOWN", phys="Disabled", **ZERO)
    ib = IbHealth(job_id="j", host="h", polling_s=30)
    assert faults(node, ib, 0) == [] and faults(node, ib, 100) == []


def test_a_port_polling_since_the_agent_started_is_told_after_the_grace(tmp_path: Path) -> None:
    """A cable that never came up: Polling from the first reading is `ib_port_polling` after `polling_s`, a warning
    to watch (sysfs cannot tell it from an enabled port left without a cable), once until the port is ACTIVE."""
    node = FakeNode(tmp_path)
    node.set_ib_port("mlx5_0", state="DOWN", phys="Polling", **ZERO)
    ib = IbHealth(job_id="j", host="h", polling_s=30)
    assert faults(node, ib, 0) == [] and faults(node, ib, 29) == []
    assert faults(node, ib, 30) == [("ib_port_polling", "warning", "mlx5_0 port 1", XidAction.WATCH)]
    assert faults(node, ib, 100) == []  # once
    node.set_ib_port("mlx5_0", state="ACTIVE", phys="LinkUp", **ZERO)
    assert faults(node, ib, 110) == []
    node.set_ib_port("mlx5_0", state="DOWN", phys="Polling", **ZERO)  # seen up, then stuck: the critical fault
    assert faults(node, ib, 120) == [] and faults(node, ib, 150) == \
        [("ib_port_polling", "critical", "mlx5_0 port 1", XidAction.CORDON)]


def test_port_counters_are_compared_with_a_previous_agents_snapshot(tmp_path: Path) -> None:
    """The agent saves `snapshot()` in its offsets store; a restarted agent `restore`s it, so growth while it was
    down is growth, and growth held for the report interval when it stopped is reported after the restart."""
    node = FakeNode(tmp_path)
    node.set_ib_port("mlx5_0", state="ACTIVE", phys="LinkUp", **ZERO)
    first = IbHealth(job_id="j", host="h", report_s=60)
    faults(node, first, 0)
    node.set_ib_port("mlx5_0", state="ACTIVE", phys="LinkUp", **{**ZERO, "symbol_error": 2})
    assert [f[0] for f in faults(node, first, 1)] == ["ib_symbol_errors"]
    node.set_ib_port("mlx5_0", state="ACTIVE", phys="LinkUp", **{**ZERO, "symbol_error": 5})
    assert faults(node, first, 2) == [] and first.dirty  # +3 held for the interval
    saved = first.snapshot()
    assert saved["mlx5_0/1"] == {**ZERO, "symbol_error": 2} and not first.dirty  # the unreported +3 left out
    node.set_ib_port("mlx5_0", state="ACTIVE", phys="LinkUp", **{**ZERO, "symbol_error": 7})
    assert faults(node, first, 3) == [] and not first.dirty  # more growth held: the saved value is the same, no rewrite
    assert first.snapshot() == saved
    node.set_ib_port("mlx5_0", state="ACTIVE", phys="LinkUp", **{**ZERO, "symbol_error": 5})
    first.update(read_ports(node.sysfs), 4)
    node.set_ib_port("mlx5_0", state="ACTIVE", phys="LinkUp", **{**ZERO, "symbol_error": 6, "link_downed": 1})
    second = IbHealth(job_id="j", host="h", report_s=60)
    second.restore(saved)
    got = {e.category: e.message for e in second.update(read_ports(node.sysfs), 0)}
    assert set(got) == {"ib_link_flap", "ib_symbol_errors"} and "symbol_error +4 (now 6)" in got["ib_symbol_errors"]
    fresh = IbHealth(job_id="j", host="h")
    assert fresh.update(read_ports(node.sysfs), 0) == []  # without a snapshot the first reading is the baseline
    damaged = IbHealth(job_id="j", host="h")
    damaged.restore({"mlx5_0/\u00b2": {"symbol_error": 1}, "x": 1, "/1": {}})  # a damaged state file: skipped
    assert damaged.update(read_ports(node.sysfs), 0) == []


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


def test_the_agent_keeps_port_counters_in_its_offsets_store_across_a_restart(tmp_path: Path) -> None:
    from vigil.collector.agent import Agent
    from vigil.collector.settings import CollectorSettings, resolve_paths
    from vigil.collector.sink import MemorySink
    from vigil.contract import Event, LogLine

    node = FakeNode(tmp_path / "node")
    node.set_ib_port("mlx5_0", state="ACTIVE", phys="LinkUp", **ZERO)
    settings = CollectorSettings(host="h-ib", job_id="j", sysfs_root=node.sysfs, procfs_root=node.procfs,
                                 kmsg_path="")

    def agent() -> tuple[Agent, list[Event]]:
        a = Agent(settings=settings, paths=resolve_paths(settings, tmp_path), sink=MemorySink(), spool_roots=[])
        got: list[Event] = []
        a.emit = got.extend  # type: ignore[method-assign,assignment]
        return a, got

    first, _ = agent()
    first.sample_nics()
    assert first.store.get("ib")["mlx5_0/1"] == ZERO
    node.set_ib_port("mlx5_0", state="ACTIVE", phys="LinkUp", **{**ZERO, "symbol_error": 3})  # while no agent ran
    second, got = agent()
    second.sample_nics()
    (grew,) = [e for e in got if isinstance(e, LogLine)]
    assert grew.category == "ib_symbol_errors" and "symbol_error +3 (now 3)" in grew.message

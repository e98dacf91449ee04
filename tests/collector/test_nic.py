"""NIC counters from fake sysfs/procfs trees that advance: rates, units, wraps and resets."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fake_node import FakeNode
from vigil.collector.nic import RateTracker, counter_delta, read_ethernet, read_rdma

pytestmark = pytest.mark.pure


def rates(node: FakeNode, tracker: RateTracker, now: float) -> dict[str, tuple[float, float]]:
    samples = read_rdma(node.sysfs) + read_ethernet(node.procfs, r"^(lo|docker\d*)$")
    return {f"{r.sample.link}:{r.sample.device}": (r.tx_bps, r.rx_bps) for r in tracker.update(samples, now)}


def test_byte_rates_per_nic(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    tracker = RateTracker()
    assert rates(node, tracker, 0.0) == {}  # a first sample has no rate
    # one second later: mlx5_0 sent 250M words (1 GB) and received 125M words; eth0 +10 MB rx, +20 MB tx
    node.set_rdma("mlx5_0", tx_words=1000 + 250_000_000, rx_words=2000 + 125_000_000, out_of_sequence=7)
    node.set_rdma("mlx5_1", tx_words=1000, rx_words=2000)
    node.set_eth({"eth0": (100_000_000 + 10_000_000, 200_000_000 + 20_000_000), "docker0": (5, 5)})
    got = rates(node, tracker, 1.0)
    assert got == {"rdma:mlx5_0": (1e9, 5e8), "rdma:mlx5_1": (0.0, 0.0), "ethernet:eth0": (2e7, 1e7)}
    sample = {s.device: s for s in read_rdma(node.sysfs)}["mlx5_0"]
    assert sample.tx_bytes == (1000 + 250_000_000) * 4 and sample.extra["out_of_sequence"] == 7
    # two seconds later at half the rate: rates are per second
    node.set_rdma("mlx5_0", tx_words=1000 + 500_000_000, rx_words=2000 + 250_000_000)
    assert rates(node, tracker, 3.0)["rdma:mlx5_0"] == (5e8, 2.5e8)


def test_new_and_removed_nics(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    tracker = RateTracker()
    rates(node, tracker, 0.0)
    node.set_rdma("mlx5_2", tx_words=10, rx_words=10)
    got = rates(node, tracker, 1.0)
    assert "rdma:mlx5_2" not in got and "rdma:mlx5_0" in got
    assert "rdma:mlx5_2" in rates(node, tracker, 2.0)


def test_counter_wrap_and_reset() -> None:
    assert counter_delta(100, 150) == 50
    assert counter_delta(2**32 - 10, 5) == 15          # 32-bit wrap
    assert counter_delta(2**64 - 10, 5) == 15          # 64-bit wrap
    assert counter_delta(5_000_000, 1_000) == 1_000    # reset: counted from zero since
    assert counter_delta((2**32 - 1) * 4, 3 * 4, unit=4) == 4 * 4  # RDMA words wrap at 2^32 words


def test_reset_in_tree_gives_no_negative_rate(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    tracker = RateTracker()
    node.set_rdma("mlx5_0", tx_words=10_000_000, rx_words=10_000_000)
    rates(node, tracker, 0.0)
    node.set_rdma("mlx5_0", tx_words=100, rx_words=0)  # driver reload
    assert rates(node, tracker, 1.0)["rdma:mlx5_0"] == (400.0, 0.0)


def test_missing_roots_are_empty(tmp_path: Path) -> None:
    assert read_rdma(tmp_path / "nope") == [] and read_ethernet(tmp_path / "nope") == []

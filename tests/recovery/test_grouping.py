"""DLRover's two-round node check as pure functions: groups, suspects, re-pairing, verdicts."""

from __future__ import annotations

import pytest

from vigil.recovery.diagnostics.grouping import HostResult, judge, round1_groups, round2_groups, suspects

pytestmark = pytest.mark.pure


def ok(host: str, elapsed: float = 1.0) -> HostResult:
    return HostResult(host=host, ok=True, elapsed_s=elapsed)


def bad(host: str) -> HostResult:
    return HostResult(host=host, ok=False)


def test_round1_pairs_in_sorted_order_and_the_odd_host_joins_the_last_pair() -> None:
    assert round1_groups(["n4", "n1", "n3", "n2"]) == [["n1", "n2"], ["n3", "n4"]]
    assert round1_groups(["n1", "n2", "n3", "n4", "n5"]) == [["n1", "n2"], ["n3", "n4", "n5"]]
    assert round1_groups(["n1"]) == [["n1"]]
    assert round1_groups([]) == []


def test_dlrover_example_six_nodes_pair_5_and_6_fail_then_6_is_faulty() -> None:
    """Seed 000: [{1,2},{3,4},{5,6}], {5,6} fails; round 2 [{3,5},{4,6}]... {4,6} fails -> 6 is faulty."""
    hosts = [f"n{i}" for i in range(1, 7)]
    groups1 = round1_groups(hosts)
    r1 = {h: ok(h) for h in hosts} | {"n5": bad("n5"), "n6": bad("n6")}
    sus = suspects(r1, 2.0)
    assert sus == ["n5", "n6"]
    groups2 = round2_groups(sus, hosts, groups1)
    assert groups2 == [["n5", "n1"], ["n6", "n2"]]  # each suspect with a healthy host from another pair
    r2 = {"n5": ok("n5"), "n1": ok("n1"), "n6": bad("n6"), "n2": bad("n2")}
    verdicts = judge(r1, r2, 2.0)
    assert verdicts["n6"].verdict == "faulty" and verdicts["n6"].reason == "failed both rounds"
    assert verdicts["n5"].verdict == "healthy" and verdicts["n5"].reason == "cleared by round 2"
    assert {h for h, v in verdicts.items() if v.verdict != "healthy"} == {"n6"}
    assert verdicts["n2"].verdict == "healthy"  # its round-2 failure was n6's doing: not a suspect of round 1


def test_a_slow_host_is_slow_in_both_rounds_and_its_partner_healthy() -> None:
    r1 = {"a": ok("a", 0.2), "b": ok("b", 1.0), "c": ok("c", 0.21), "d": ok("d", 0.19)}
    sus = suspects(r1, 2.0)
    assert sus == ["b"]  # its partner a is not slow: the all-reduce is timed after a barrier
    groups2 = round2_groups(sus, list(r1), round1_groups(list(r1)))
    assert groups2 == [["b", "c"]]  # not its round-1 partner a
    verdicts = judge(r1, {"b": ok("b", 0.95), "c": ok("c", 0.2)}, 2.0)
    assert verdicts["b"].verdict == "slow"
    assert verdicts["b"].values["ratio_r1"] > 2 and verdicts["b"].values["ratio_r2"] > 2
    assert verdicts["a"].verdict == "healthy" and verdicts["c"].verdict == "healthy"


def test_slow_once_is_healthy_and_slowness_needs_three_timed_hosts() -> None:
    r1 = {"a": ok("a", 0.2), "b": ok("b", 1.0), "c": ok("c", 0.2)}
    assert judge(r1, {"b": ok("b", 0.21), "a": ok("a", 0.2)}, 2.0)["b"].verdict == "healthy"
    two = {"a": ok("a", 0.2), "b": ok("b", 1.0)}
    assert suspects(two, 2.0) == []  # no median worth the name


def test_suspects_without_a_healthy_partner_keep_their_round1_result() -> None:
    r1 = {"a": bad("a"), "b": bad("b")}
    assert round2_groups(["a", "b"], ["a", "b"], [["a", "b"]]) == []
    verdicts = judge(r1, {}, 2.0)
    assert {v.verdict for v in verdicts.values()} == {"faulty"}
    assert verdicts["a"].reason == "failed round 1, not re-tested" and verdicts["a"].values["retested"] == 0.0


def test_failed_once_and_slow_once_is_faulty() -> None:
    r1 = {"a": bad("a"), "b": ok("b", 0.2), "c": ok("c", 0.2), "d": ok("d", 0.2)}
    verdicts = judge(r1, {"a": ok("a", 5.0), "c": ok("c", 0.2)}, 2.0)
    assert verdicts["a"].verdict == "faulty" and "slow in the other" in verdicts["a"].reason

"""Ownership of jobs by detect shards: Kafka's partitioner, computed in vigil, and one shard's share."""

from __future__ import annotations

import pytest

from vigil.analyzer.shard import PARTITIONS, Ownership, describe, murmur2, partition_of

pytestmark = pytest.mark.pure


@pytest.mark.parametrize(("key", "expected"), [
    # the Java client's own test vectors (org.apache.kafka.common.utils.UtilsTest.testMurmur2)
    ("21", -973932308), ("foobar", -790332482), ("a-little-bit-long-string", -985981536),
    ("a-little-bit-longer-string", -1486304829), ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    ("abc", 479470107),
])
def test_murmur2_is_kafkas(key: str, expected: int) -> None:
    assert murmur2(key.encode()) == expected


def test_a_job_has_one_stable_partition_in_range() -> None:
    jobs = [f"job-{i}" for i in range(500)]
    parts = [partition_of(j) for j in jobs]
    assert parts == [partition_of(j) for j in jobs]
    assert all(0 <= p < PARTITIONS for p in parts)
    assert len(set(parts)) > PARTITIONS // 2  # spread, not piled on a few partitions
    assert partition_of("21", 64) == (-973932308 & 0x7FFFFFFF) % 64
    with pytest.raises(ValueError):
        partition_of("x", 0)


def test_shards_that_split_the_partitions_own_each_job_exactly_once() -> None:
    jobs = [f"train-{i}" for i in range(200)]
    shards = [Ownership(owned=range(k, PARTITIONS, 3)) for k in range(3)]
    for j in jobs:
        assert sum(s.owns(j) for s in shards) == 1
    assert sorted(j for s in shards for j in s.jobs(jobs)) == sorted(jobs)


def test_everything_owns_every_job_and_a_revoked_partition_is_let_go() -> None:
    assert all(Ownership.everything().owns(f"j{i}") for i in range(50))
    own = Ownership(owned=[])
    assert not own.owns("train-1")
    own.assign([partition_of("train-1")])
    assert own.owns("train-1") and own.changed == 1
    own.revoke([partition_of("train-1")])
    assert not own.owns("train-1") and own.changed == 2
    with pytest.raises(ValueError):
        own.assign([PARTITIONS])


def test_status_names_a_shards_partitions_and_jobs() -> None:
    assert describe(None, ["a"]) == "all jobs"
    own = Ownership(partitions=8, owned=[0, 1, 2, 5, 7])
    assert describe(own, ["a", "b"]) == "partitions 0-2,5,7 of 8, jobs a,b"
    assert describe(Ownership(partitions=8, owned=[]), []) == "partitions none of 8, jobs -"
    assert describe(own, [f"j{i}" for i in range(25)], shown=2) == "partitions 0-2,5,7 of 8, jobs j0,j1,+23"

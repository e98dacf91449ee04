"""The vigil-detect group through the real broker: members split the partitions; a leaver's move to the others;
`vigil status` (external mode) lists every shard from the lease records they keep on the broker."""

from __future__ import annotations

import threading

import pytest

from tests.support.waiting import wait_until
from vigil.analyzer.hosting import progress
from vigil.analyzer.shard import Ownership
from vigil.analyzer.shardgroup import ShardGroup
from vigil.analyzer.shardreport import read_shards
from vigil.app.cli.stack import shard_line
from vigil.settings import VigilSettings

pytestmark = pytest.mark.kafka

P = 8


def test_members_split_the_partitions_and_a_leavers_move_to_the_other(topics: VigilSettings) -> None:
    bootstrap = str(topics.kafka_bootstrap)
    owners = [Ownership(partitions=P, owned=[]) for _ in range(2)]
    groups = [ShardGroup(settings=topics, bootstrap=bootstrap, owner=o, turn_lock=threading.Lock(), name=f"shard-{i}")
              for i, o in enumerate(owners)]

    def split() -> bool:
        for g in groups:
            g.poll(0.1)
        a, b = (o.owned or frozenset() for o in owners)
        return bool(a) and bool(b) and not a & b and a | b == set(range(P))

    wait_until(split, 90, "two members sharing the partitions")
    assert read_shards(topics, bootstrap) == []  # nothing reported yet: no shard listed
    for i, g in enumerate(groups):
        assert g.report(turn_at=1000.0 + i, behind_s=2.5 * i, backlog=i, jobs=[f"job-{i}"])
        assert not g.report(turn_at=1000.0 + i, behind_s=2.5 * i, backlog=i, jobs=[f"job-{i}"])  # throttled
    def listed(among: list[ShardGroup]) -> list[dict[str, object]]:
        for g in among:
            g.poll(0.1)  # commits the lease records' offsets (the consumer's own thread)
        return read_shards(topics, bootstrap)

    wait_until(lambda: len(listed(groups)) == 2, 60, "both shards' records committed")
    shards = progress(topics, bootstrap)["shards"]  # what `vigil status` shows against an external cluster
    assert [s["shard"] for s in shards] == ["shard-0", "shard-1"]
    for i, shard in enumerate(shards):
        assert frozenset(shard["partitions"]) == owners[i].owned
        assert shard["jobs"] == [f"job-{i}"] and shard["behind_s"] == 2.5 * i and shard["backlog"] == i
    assert "shard-1: partitions" in shard_line(shards[1]) and "jobs job-1" in shard_line(shards[1])
    groups[0].close()
    assert owners[0].owned == frozenset()

    def taken() -> bool:
        groups[1].poll(0.1)
        return owners[1].owned == frozenset(range(P))

    wait_until(taken, 60, "the other member owning every partition")
    assert groups[1].report(turn_at=2000.0, behind_s=0.0, backlog=0, jobs=["job-0", "job-1"])  # its share changed
    wait_until(lambda: [(s["shard"], s["partitions"], s["jobs"]) for s in listed(groups[1:])]
               == [("shard-1", list(range(P)), ["job-0", "job-1"])], 60, "the survivor listed with every partition")
    with pytest.raises(ValueError, match="partitions"):
        ShardGroup(settings=topics, bootstrap=bootstrap, owner=Ownership(partitions=P + 1, owned=[]),
                   turn_lock=threading.Lock())
    groups[1].close()

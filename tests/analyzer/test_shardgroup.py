"""The vigil-detect group through the real broker: members split the partitions; a leaver's move to the others."""

from __future__ import annotations

import threading

import pytest

from tests.support.waiting import wait_until
from vigil.analyzer.shard import Ownership
from vigil.analyzer.shardgroup import ShardGroup
from vigil.settings import VigilSettings

pytestmark = pytest.mark.kafka

P = 8


def test_members_split_the_partitions_and_a_leavers_move_to_the_other(topics: VigilSettings) -> None:
    bootstrap = str(topics.kafka_bootstrap)
    owners = [Ownership(partitions=P, owned=[]) for _ in range(2)]
    groups = [ShardGroup(settings=topics, bootstrap=bootstrap, owner=o, turn_lock=threading.Lock()) for o in owners]

    def split() -> bool:
        for g in groups:
            g.poll(0.1)
        a, b = (o.owned or frozenset() for o in owners)
        return bool(a) and bool(b) and not a & b and a | b == set(range(P))

    wait_until(split, 90, "two members sharing the partitions")
    groups[0].close()
    assert owners[0].owned == frozenset()

    def taken() -> bool:
        groups[1].poll(0.1)
        return owners[1].owned == set(range(P))

    wait_until(taken, 60, "the other member owning every partition")
    with pytest.raises(ValueError, match="partitions"):
        ShardGroup(settings=topics, bootstrap=bootstrap, owner=Ownership(partitions=P + 1, owned=[]),
                   turn_lock=threading.Lock())
    groups[1].close()

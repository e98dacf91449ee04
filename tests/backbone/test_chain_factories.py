"""The chain each component gives its consumer: the analyzer's and the notifier's steps, listed in their packages.

Pure: the factories are called on ports with in-memory parts; the consumer is built against no broker.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from vigil.analyzer.ingest.chain import ingest_chain
from vigil.analyzer.ingest.offload import InlineDecode
from vigil.analyzer.ingest.steps.claim import Claim
from vigil.analyzer.ingest.steps.handover import HandOver
from vigil.analyzer.ingest.steps.intent import RecordIntent
from vigil.kafka.batchid import BatchId, Intent, Partition, Unstorable
from vigil.kafka.consumer import BatchingConsumer
from vigil.kafka.deadletter import DeadLetter
from vigil.kafka.stats import ConsumerStats
from vigil.kafka.steps.accumulate import Accumulate
from vigil.kafka.steps.chain import Chain, Ports, default
from vigil.kafka.steps.commit import Commit
from vigil.kafka.steps.decode import Decode
from vigil.kafka.steps.stage import Stage
from vigil.kafka.steps.write import Write
from vigil.notify.chain import notify_chain
from vigil.settings import VigilSettings

pytestmark = [pytest.mark.pure]


class Plain:
    def write(self, events: Sequence[Any], batch: BatchId) -> Sequence[Unstorable]:
        return []


class Stages(Plain):
    def stage(self, events: Sequence[Any]) -> None:
        pass


class Recording(Plain):
    def intents(self, partitions: Sequence[Partition]) -> dict[Partition, Intent]:
        return {}


class Letters:
    def write(self, letters: Sequence[DeadLetter]) -> None:
        pass


def _ports(writer: Any, pipeline: bool = True) -> Ports:
    return Ports(stats=ConsumerStats(), writer=writer, dead_letters=Letters(), max_events=7, max_s=2.5,
                 commit=lambda offsets: None, retry=lambda batch, bid, exc: None, pipeline=pipeline)


def _linked(chain: Chain, ports: Ports) -> None:
    """accumulate -> [stage] -> write -> commit, each the next's, over the ports' writer, sink, bounds and stats."""
    assert type(chain.accumulate) is Accumulate and type(chain.write) is Write and type(chain.commit) is Commit
    head = chain.accumulate.next
    while not isinstance(head, Write):  # the owner's batch steps, then the kernel's stage (with the write thread)
        assert not isinstance(head, Stage) or (head.store is chain.store and ports.pipeline)
        head = head.next  # type: ignore[attr-defined]
    assert head is chain.write
    assert chain.write.next is chain.commit
    assert chain.store.writer is ports.writer and chain.store.dead_letters is ports.dead_letters
    assert (chain.accumulate.max_events, chain.accumulate.max_s) == (7, 2.5)
    assert chain.store.stats is chain.commit.stats is ports.stats
    assert chain.commit.commit is ports.commit and chain.write.retry is ports.retry
    assert chain.write.pipeline == ports.pipeline


class Ledger:
    def record(self, batch: BatchId) -> datetime:
        return datetime.now(UTC)

    def latest(self, partitions: Sequence[Partition]) -> dict[Partition, Intent]:
        return {}


def test_the_analyzer_chain_lists_claim_decode_accumulate_hand_over_stage_write_intent_store_commit() -> None:
    offload, ledger, ports = InlineDecode(), Ledger(), _ports(Stages())
    chain = ingest_chain(offload, ledger)(ports)
    _linked(chain, ports)
    claim = chain.decode
    assert type(claim) is Claim and claim.offload is offload and claim.next is chain.accumulate
    assert type(claim.decode) is Decode and claim.decode.next is chain.accumulate
    assert claim.stats is claim.decode.stats is ports.stats
    handover = chain.accumulate.next
    assert type(handover) is HandOver and handover.offload is offload
    assert type(handover.next) is Stage and handover.next.next is chain.write
    intent = chain.write.store
    assert type(intent) is RecordIntent and intent.ledger is ledger and intent.next is chain.store
    assert chain.handler is intent and chain.intents() is intent, "written through and read on assignment"
    assert [id(s) for s in chain.steps] == [id(claim.decode), id(handover), id(handover.next)], "closed with the rest"
    unpiped = _ports(Stages(), pipeline=False)
    chain = ingest_chain(offload, ledger)(unpiped)
    _linked(chain, unpiped)
    assert type(chain.accumulate.next) is HandOver and chain.accumulate.next.next is chain.write, \
        "no stage without the write thread: nothing to overlap"


def test_the_default_chain_stages_with_the_write_thread_and_reads_a_writers_own_intents() -> None:
    ports = _ports(Stages())
    chain = default(ports)
    _linked(chain, ports)
    assert type(chain.decode) is Decode and chain.decode.next is chain.accumulate
    assert type(chain.accumulate.next) is Stage and chain.write.store is chain.store and chain.handler is None
    assert chain.intents() is None, "a writer that records no intents: nothing to read on assignment"
    recording = Recording()
    chain.use(recording)
    assert chain.intents() is recording, "the writer swapped in records intents: it is read"
    assert type(default(_ports(Stages(), pipeline=False)).accumulate.next) is Write, "no stage without the thread"


def test_the_notifier_chain_has_no_offload_no_staging_and_no_intents() -> None:
    ports = _ports(Stages())
    chain = notify_chain(ports)
    _linked(chain, ports)
    assert type(chain.decode) is Decode and chain.decode.next is chain.accumulate
    assert chain.accumulate.next is chain.write and chain.write.store is chain.store
    assert chain.handler is None and chain.intents() is None and chain.write.pipeline


def test_the_consumer_builds_its_chain_with_the_factory_it_is_given(tmp_path: Path) -> None:
    given: list[Ports] = []
    built: list[Chain] = []

    def factory(ports: Ports) -> Chain:
        given.append(ports)
        built.append(notify_chain(ports))
        return built[-1]

    writer = Plain()
    consumer = BatchingConsumer(settings=VigilSettings(home=tmp_path), bootstrap="127.0.0.1:1", group_id="g", topics=["t"],
                                writer=writer, dead_letters=Letters(), max_batch_events=7, max_batch_s=2.5,
                                pipeline=False, chain=factory)
    try:
        [ports] = given
        assert ports.writer is writer and (ports.max_events, ports.max_s, ports.pipeline) == (7, 2.5, False)
        assert ports.stats is consumer.stats
        swapped = Stages()
        consumer.writer = swapped  # a writer swapped after the start is the chain's from the next batch
        assert built[0].store.writer is swapped
    finally:
        consumer.close()

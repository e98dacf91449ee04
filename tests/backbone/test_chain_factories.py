"""The chain each component gives its consumer: the analyzer's and the notifier's steps, listed in their packages.

Pure: the factories are called on ports with in-memory parts; the consumer is built against no broker.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from vigil.analyzer.ingest.chain import ingest_chain
from vigil.analyzer.ingest.offload import InlineDecode
from vigil.kafka.batchid import BatchId, Unstorable
from vigil.kafka.consumer import BatchingConsumer
from vigil.kafka.deadletter import DeadLetter
from vigil.kafka.stats import ConsumerStats
from vigil.kafka.steps.accumulate import Accumulate
from vigil.kafka.steps.chain import Chain, Ports, default
from vigil.kafka.steps.commit import Commit
from vigil.kafka.steps.decode import Decode
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


class Letters:
    def write(self, letters: Sequence[DeadLetter]) -> None:
        pass


def _ports(writer: Any, pipeline: bool = True) -> Ports:
    return Ports(stats=ConsumerStats(), writer=writer, dead_letters=Letters(), max_events=7, max_s=2.5,
                 commit=lambda offsets: None, retry=lambda batch, bid, exc: None, pipeline=pipeline)


def _linked(chain: Chain, ports: Ports) -> None:
    """decode -> accumulate -> write -> commit, each the next's, over the ports' writer, sink, bounds and stats."""
    assert type(chain.decode) is Decode and type(chain.accumulate) is Accumulate
    assert type(chain.write) is Write and type(chain.commit) is Commit
    assert chain.decode.next is chain.accumulate and chain.accumulate.next is chain.write
    assert chain.write.next is chain.commit and chain.write.store is chain.store
    assert chain.store.writer is ports.writer and chain.store.dead_letters is ports.dead_letters
    assert (chain.accumulate.max_events, chain.accumulate.max_s) == (7, 2.5)
    assert chain.decode.stats is chain.store.stats is chain.commit.stats is ports.stats
    assert chain.commit.commit is ports.commit and chain.write.retry is ports.retry


def test_the_analyzer_chain_claims_with_its_offload_and_stages_with_its_writer() -> None:
    offload, ports = InlineDecode(), _ports(Stages())
    chain = ingest_chain(offload)(ports)
    _linked(chain, ports)
    assert chain.decode.offload is offload and chain.write.offload is offload
    assert chain.write.staging is ports.writer and chain.write.pipeline
    unpiped = _ports(Stages(), pipeline=False)
    chain = ingest_chain(offload)(unpiped)
    assert chain.write.staging is None and not chain.write.pipeline  # staging needs the write thread


def test_the_analyzer_chain_is_the_default_chain_with_its_offload() -> None:
    offload, ports = InlineDecode(), _ports(Stages())
    ours, kernel = ingest_chain(offload)(ports), default(Ports(**{**vars(ports), "offload": offload}))
    for chain in (ours, kernel):
        _linked(chain, ports)
    assert (kernel.decode.offload, kernel.write.offload, kernel.write.staging) == (
        ours.decode.offload, ours.write.offload, ours.write.staging)


def test_the_notifier_chain_has_no_offload_and_no_staging() -> None:
    ports = _ports(Stages())
    chain = notify_chain(ports)
    _linked(chain, ports)
    assert chain.decode.offload is None and chain.write.offload is None and chain.write.staging is None
    assert chain.write.pipeline


def test_the_consumer_builds_its_chain_with_the_factory_it_is_given(tmp_path: Path) -> None:
    given: list[Ports] = []

    def factory(ports: Ports) -> Chain:
        given.append(ports)
        return notify_chain(ports)

    writer = Plain()
    consumer = BatchingConsumer(settings=VigilSettings(home=tmp_path), bootstrap="127.0.0.1:1", group_id="g", topics=["t"],
                                writer=writer, dead_letters=Letters(), max_batch_events=7, max_batch_s=2.5,
                                pipeline=False, chain=factory)
    try:
        [ports] = given
        assert ports.writer is writer and (ports.max_events, ports.max_s, ports.pipeline) == (7, 2.5, False)
        assert ports.stats is consumer.stats and ports.offload is None
        swapped = Stages()
        consumer.writer = swapped  # a writer swapped after the start is the chain's from the next batch
        assert consumer._chain.store.writer is swapped
    finally:
        consumer.close()

"""The analyzer's ingest chain, listed in one place: decode (the offload claims its records) -> accumulate -> write
(the offload's decode and the next batch's staging while one batch is written) -> store (the ClickHouse writer: its
intent ledger, then the insert) -> commit.

`ingest_chain(offload)` is the `ChainFactory` the ingest loop gives its consumer (`vigil.kafka.steps.chain`): the
same steps and wiring as the kernel's default chain, with the analyzer's own parts named here rather than passed
as consumer options. The offload and staging are composed through the steps' hooks (`Decode.offload`,
`Write.offload`, `Write.staging`), the intent ledger through the writer (`ClickHouseWriter.intents`, read by the
consumer on assignment); they are not steps of their own yet.
"""

from __future__ import annotations

from vigil.kafka.ports import Offload, Staging
from vigil.kafka.steps.accumulate import Accumulate
from vigil.kafka.steps.chain import Chain, ChainFactory, Ports
from vigil.kafka.steps.commit import Commit
from vigil.kafka.steps.decode import Decode
from vigil.kafka.steps.store import Store
from vigil.kafka.steps.write import Write


def ingest_chain(offload: Offload) -> ChainFactory:
    """The ingest chain over a consumer's ports, `offload` decoding the records it claims (`DecodeProcess`,
    `InlineDecode`); the writer stages the next batch when it can (`Staging`) and the consumer pipelines."""

    def factory(ports: Ports) -> Chain:
        commit = Commit(commit=ports.commit, stats=ports.stats)
        store = Store(writer=ports.writer, dead_letters=ports.dead_letters, stats=ports.stats)
        staging = ports.writer if ports.pipeline and isinstance(ports.writer, Staging) else None
        write = Write(next=commit, store=store, identify=lambda batch: batch.identity(commit.recheck),
                      retry=ports.retry, offload=offload, pipeline=ports.pipeline, staging=staging)
        accumulate = Accumulate(next=write, max_events=ports.max_events, max_s=ports.max_s)
        decode = Decode(next=accumulate, stats=ports.stats, offload=offload)
        return Chain(decode=decode, accumulate=accumulate, write=write, store=store, commit=commit)

    return factory

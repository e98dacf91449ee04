"""The analyzer's ingest chain, listed in one place:

    claim (the offload takes the hot records) -> decode (the rest) -> accumulate (size/time)
    -> hand-over (the claimed records to the offload, decoded while the batch before is written)
    -> stage (the writer stages the next batch meanwhile; with the write thread only)
    -> write (one batch in flight): intent (the ledger, once per batch) -> store (the ClickHouse writer) -> commit

`ingest_chain(offload, ledger)` is the `ChainFactory` the ingest loop gives its consumer (`vigil.kafka.steps.chain`):
the kernel's steps with the analyzer's own (`vigil.analyzer.ingest.steps`: claim, hand-over, intent) in between.
The consumer reads the intent step on assignment (`Chain.intents`) and writes through it when it writes a batch
itself (`Chain.handle`).
"""

from __future__ import annotations

from vigil.analyzer.ingest.steps.claim import Claim
from vigil.analyzer.ingest.steps.handover import HandOver
from vigil.analyzer.ingest.steps.intent import Ledger, RecordIntent
from vigil.kafka.ports import Offload
from vigil.kafka.steps.accumulate import Accumulate
from vigil.kafka.steps.chain import Chain, ChainFactory, Ports
from vigil.kafka.steps.commit import Commit
from vigil.kafka.steps.decode import Decode
from vigil.kafka.steps.stage import Stage
from vigil.kafka.steps.step import Roomy
from vigil.kafka.steps.store import Store
from vigil.kafka.steps.write import Write


def ingest_chain(offload: Offload, ledger: Ledger, seconds: dict[str, float] | None = None) -> ChainFactory:
    """The ingest chain over a consumer's ports, `offload` decoding the records it claims (`DecodeProcess`,
    `InlineDecode`), `ledger` recording each batch's intent (`IntentLedger`; its time added to `seconds`)."""

    def factory(ports: Ports) -> Chain:
        commit = Commit(commit=ports.commit, stats=ports.stats)
        store = Store(writer=ports.writer, dead_letters=ports.dead_letters, stats=ports.stats)
        intent = RecordIntent(ledger=ledger, next=store, seconds=seconds)
        write = Write(next=commit, store=intent, identify=lambda batch: batch.identity(commit.recheck),
                      retry=ports.retry, pipeline=ports.pipeline)
        stage: Roomy = Stage(next=write, store=store) if ports.pipeline else write
        handover = HandOver(offload=offload, next=stage)
        accumulate = Accumulate(next=handover, max_events=ports.max_events, max_s=ports.max_s)
        decode = Decode(next=accumulate, stats=ports.stats)
        claim = Claim(offload=offload, stats=ports.stats, next=accumulate, decode=decode)
        return Chain(decode=claim, accumulate=accumulate, write=write, store=store, commit=commit, handler=intent,
                     steps=(decode, handover, *((stage,) if stage is not write else ())))

    return factory

"""The analyzer's own steps in its consumer chain, each with a recording next step: no broker, no store (pure).

Claim leaves a record the offload takes to it (with its estimate) and decodes the rest; hand-over submits a batch's
claimed records to the offload once, before the write waits for the batch in flight; intent records a batch's
intent once per batch id before it is written (not for a re-cut) and reads the latest ones on assignment.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.support.recording import Recorder
from vigil.analyzer.ingest.steps.claim import Claim
from vigil.analyzer.ingest.steps.handover import HandOver
from vigil.analyzer.ingest.steps.intent import RecordIntent
from vigil.contract import StepTiming, encode_batch
from vigil.errors import Unreachable
from vigil.kafka.batch import Batch, Raw
from vigil.kafka.batchid import BatchId, Intent, OffsetRange, Partition
from vigil.kafka.stats import ConsumerStats
from vigil.kafka.steps.step import Decoded, Stored

pytestmark = [pytest.mark.pure]


def raw(offset: int, value: bytes | None) -> Raw:
    return ("t", 0, offset, 1000 + offset, value)


def steps(n: int) -> bytes:
    return encode_batch([StepTiming(job_id="j", host="h0", rank=0, world_size=1, step=i, step_ms=1.0)
                         for i in range(n)])


class Offload:
    """Claims the records whose value starts with b"hot" (about 7 events each); records each hand-over."""

    def __init__(self) -> None:
        self.submitted: list[list[bytes | None]] = []

    def claim(self, value: bytes | None) -> int | None:
        return 7 if value is not None and value.startswith(b"hot") else None

    def submit(self, values: list[bytes | None]) -> Any:
        self.submitted.append(values)
        return f"pending-{len(self.submitted)}"


def test_claim_leaves_a_taken_record_to_the_offload_with_its_estimate_and_decodes_the_rest() -> None:
    offload, nxt, decode, stats = Offload(), Recorder(), Recorder(), ConsumerStats()
    claim = Claim(offload=offload, stats=stats, next=nxt, decode=decode)
    hot, cold = raw(1, b"hot:1"), raw(2, steps(3))
    claim.submit(hot)
    claim.submit(cold)
    assert nxt.got == [Decoded(hot, None, [], 7)], "claimed: no events yet, the offload's estimate counted"
    assert decode.got == [cold], "declined: decoded here"
    assert stats.records == 1, "a claimed record is counted here, a declined one by the decode"
    claim.poll()
    claim.join()
    claim.close()
    assert not offload.submitted and nxt.calls == decode.calls == ["submit"], "nothing handed over before the cut"


def claimed_batch(*offsets: int) -> Batch:
    batch = Batch()
    for o in offsets:
        batch.add(raw(o, b"hot:%d" % o), None, 7)
    return batch


def test_hand_over_submits_a_batchs_claimed_records_once_before_the_write_makes_room() -> None:
    offload, nxt = Offload(), Recorder()
    handover = HandOver(offload=offload, next=nxt)
    upcoming = claimed_batch(0, 1)
    handover.make_room(upcoming)
    assert offload.submitted == [[b"hot:0", b"hot:1"]] and upcoming.pending == "pending-1"
    assert nxt.calls == ["room:14"], "handed to the offload before the write waits for the batch in flight"
    handover.submit(upcoming)
    assert len(offload.submitted) == 1, "once a batch"
    assert nxt.got == [upcoming] and nxt.calls == ["room:14", "submit"]
    late = claimed_batch(5)
    handover.submit(late)  # a batch handed over with no request for room first (the source's own cut)
    assert offload.submitted[-1] == [b"hot:5"] and late.pending == "pending-2" and nxt.got[-1] is late
    plain = Batch()
    plain.add(raw(9, None), [])
    handover.make_room(plain)
    handover.submit(plain)
    assert len(offload.submitted) == 2 and plain.pending is None, "nothing claimed: nothing handed over"


class Ledger:
    def __init__(self, fail: int = 0) -> None:
        self.recorded: list[str] = []
        self.asked: list[list[Partition]] = []
        self.fail = fail

    def record(self, batch: BatchId) -> datetime:
        if self.fail:
            self.fail -= 1
            raise Unreachable("ledger down")
        self.recorded.append(batch.token)
        return datetime.now(UTC)

    def latest(self, partitions: Sequence[Partition]) -> dict[Partition, Intent]:
        self.asked.append(list(partitions))
        return {("t", 0): Intent(ranges=(OffsetRange(topic="t", partition=0, first=0, last=3),), at=AT)}


AT = datetime(2026, 1, 1, tzinfo=UTC)


class Handler:
    """The next handler: records each batch id it stores, after the ledger's state at that moment."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.seen: list[tuple[str, int]] = []

    def __call__(self, batch: Batch, bid: BatchId) -> Stored:
        self.seen.append((bid.token, len(self.ledger.recorded)))
        return Stored(bid, len(batch.records), [])


def bid(first: int, last: int, first_attempt: datetime | None = None) -> BatchId:
    return BatchId(ranges=(OffsetRange(topic="t", partition=0, first=first, last=last),), first_attempt=first_attempt)


def test_intent_records_a_batch_once_before_it_is_stored_but_not_a_re_cut_and_reads_the_latest() -> None:
    ledger = Ledger(fail=1)
    store, seconds = Handler(ledger), {"intent": 0.0}
    intent = RecordIntent(ledger=ledger, next=store, seconds=seconds)
    batch, first = Batch(), bid(0, 3)
    with pytest.raises(Unreachable):
        intent(batch, first)
    assert not store.seen, "a failed record: the batch is not written (the consumer retries it)"
    assert intent(batch, first) == Stored(first, 0, [])
    assert store.seen == [(first.token, 1)], "recorded before it was stored"
    intent(batch, first)
    assert ledger.recorded == [first.token] and len(store.seen) == 2, "a retry of the same batch records nothing"
    recut = bid(0, 3, first_attempt=AT)
    intent(batch, recut)
    assert ledger.recorded == [first.token] and store.seen[-1] == (recut.token, 1), "a re-cut batch: its intent is the one recorded before"
    second = bid(4, 9)
    intent(batch, second)
    assert ledger.recorded == [first.token, second.token]
    assert seconds["intent"] > 0
    assert intent.intents([("t", 0), ("t", 1)])[("t", 0)].at == AT and ledger.asked == [[("t", 0), ("t", 1)]]

"""The consumer's processing steps one by one, each with a recording next step: no broker, no store (pure).

What each step promises (`vigil.kafka.steps`): decode turns a record into its events or its dead letters (or leaves
it to the offload that claims it); accumulate cuts by size and by age, never while holding, asking for room first;
write stores one batch in flight, stages the next while waiting and commits the one before first, hands failures to
the retry; store dead-letters what its writer refuses, naming the record; commit commits each range's next offset,
nothing once stopped; a re-cut is planned only for a batch owned whole; a retry retries only transient failures.
The broker-backed consumer tests (test_consumer_*.py, test_kafka.py) are the acceptance suite.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from tests.support.recording import Recorder
from tests.support.waiting import wait_until
from vigil.contract import StepTiming, encode_batch
from vigil.errors import Unreachable
from vigil.kafka.batch import Batch, Raw
from vigil.kafka.batchid import BatchId, Intent, OffsetRange, Unstorable
from vigil.kafka.deadletter import DeadLetter
from vigil.kafka.failures import ConsumerFailed
from vigil.kafka.recut import plan
from vigil.kafka.retry import Retry
from vigil.kafka.stats import ConsumerStats
from vigil.kafka.steps.accumulate import Accumulate
from vigil.kafka.steps.chain import build
from vigil.kafka.steps.commit import Commit
from vigil.kafka.steps.decode import Decode
from vigil.kafka.steps.stage import Stage
from vigil.kafka.steps.step import Decoded, Stored
from vigil.kafka.steps.store import Store
from vigil.kafka.steps.write import Write

pytestmark = [pytest.mark.pure]


def steps(n: int, first: int = 0) -> bytes:
    return encode_batch([StepTiming(job_id="j", host="h0", rank=0, world_size=1, step=first + i, step_ms=1.0)
                         for i in range(n)])


def raw(offset: int, value: bytes | None, partition: int = 0) -> Raw:
    return ("t", partition, offset, 1000 + offset, value)


def test_decode_passes_a_records_events_and_dead_letters_its_rejects_naming_it() -> None:
    nxt, stats = Recorder(), ConsumerStats()
    decode = Decode(next=nxt, stats=stats)
    decode.submit(raw(3, steps(4)))
    decode.submit(raw(4, b"{not json"))
    good, bad = nxt.got
    assert good.raw[2] == 3 and [e.step for e in good.events] == [0, 1, 2, 3] and not good.letters
    assert bad.events == [] and [(x.offset, x.reason.split(":")[0]) for x in bad.letters] == [(4, "not JSON")]
    assert stats.records == 2


def decoded(offset: int, n: int, partition: int = 0) -> Decoded:
    return Decoded(raw(offset, None, partition), [object()] * n, [])  # type: ignore[list-item]


def test_accumulate_cuts_a_full_batch_after_asking_for_room_and_keeps_the_order() -> None:
    nxt = Recorder()
    acc = Accumulate(next=nxt, max_events=5, max_s=3600)
    for offset in range(4):
        acc.submit(decoded(offset, 2))
    assert nxt.calls == ["room:6", "submit"], "cut once full (6 >= 5), room asked with the batch still being read"
    batch = nxt.got[0]
    assert [r[3] for r in batch.records] == [0, 1, 2] and batch.ranges == {("t", 0): [0, 2, 1000]}
    assert len(acc.batch) == 2 and acc.batch.records[0][3] == 3, "the rest starts the next batch"
    acc.poll()
    assert nxt.calls == ["room:6", "submit"], "neither full nor old: not cut"


def test_accumulate_cuts_an_old_batch_on_poll_but_never_while_holding() -> None:
    nxt = Recorder()
    acc = Accumulate(next=nxt, max_events=3, max_s=0.0)
    acc.poll()
    assert not nxt.got, "an empty batch is never cut"
    acc.holding = True
    for offset in range(3):
        acc.submit(decoded(offset, 2))
    acc.poll()
    assert not nxt.got, "holding (a re-cut being completed): the consumer cuts"
    assert [r[3] for r in acc.take().records] == [0, 1, 2]
    acc.holding = False
    acc.submit(decoded(9, 1))
    acc.poll()
    assert [len(b) for b in nxt.got] == [1], "old: cut on poll"
    acc.submit(decoded(10, 1))
    acc.join()
    assert [len(b) for b in nxt.got] == [1, 1], "join hands over what is batched"


def batch_of(*offsets: int) -> Batch:
    batch = Batch()
    for o in offsets:
        batch.add(raw(o, None), [])
    return batch


class SlowStore:
    """A store that records each batch and waits for `go` before it returns."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.seen: list[BatchId] = []

    def __call__(self, batch: Batch, bid: BatchId) -> Stored:
        self.seen.append(bid)
        self.go.wait(30)
        return Stored(bid, len(batch.records), [])


class Stages:
    def __init__(self) -> None:
        self.staged: list[int] = []

    def stage(self, events: Sequence[Any]) -> None:
        self.staged.append(len(events))

    def write(self, events: Sequence[Any], batch: BatchId) -> list[Unstorable]:
        raise AssertionError("the store's handler is the test's own")


def test_write_keeps_one_batch_in_flight_stages_the_next_and_commits_the_one_before_first() -> None:
    nxt, store, staging = Recorder(), SlowStore(), Stages()
    write = Write(next=nxt, store=store, identify=lambda b: b.identity({}), retry=lambda *a: None)
    stage = Stage(next=write, store=Store(writer=staging, dead_letters=Letters(), stats=ConsumerStats()))
    try:
        assert not write.busy
        write.submit(batch_of(0, 1))
        write.poll()
        assert store.seen and not nxt.got and write.busy, "in flight: nothing passed on before it is written"
        store.go.set()

        def passed_on() -> bool:
            write.poll()
            return len(nxt.got) == 1

        wait_until(passed_on, 30, "the written batch passed on")
        assert nxt.got[0].bid.ranges == (OffsetRange(topic="t", partition=0, first=0, last=1, first_ts=1000),)
        store.go.clear()
        stage.make_room(batch_of(2))
        assert staging.staged == [], "nothing in flight: nothing to stage beside it"
        stage.submit(batch_of(2))
        upcoming = batch_of(3)
        upcoming.events.append(object())  # type: ignore[arg-type]
        threading.Timer(0.05, store.go.set).start()
        stage.make_room(upcoming)
        assert staging.staged == [1], "staged while the batch before was written"
        assert [s.stored for s in nxt.got] == [2, 1], "the batch before committed before the next is handed over"
        assert not write.busy
        stage.submit(upcoming)
        write.join()
        assert [s.bid.ranges[0].first for s in nxt.got] == [0, 2, 3]
    finally:
        store.go.set()
        write.close()


def test_write_hands_a_failed_batch_to_the_retry_and_without_pipeline_writes_through_it() -> None:
    failures: list[tuple[BatchId, str]] = []

    def broken(batch: Batch, bid: BatchId) -> Stored:
        raise TimeoutError("store down")

    write = Write(next=Recorder(), store=broken, identify=lambda b: b.identity({}),
                  retry=lambda batch, bid, exc: failures.append((bid, repr(exc))))
    write.submit(batch_of(5))
    write.join()
    write.close()
    assert [(bid.ranges[0].first, exc) for bid, exc in failures] == [(5, "TimeoutError('store down')")]
    inline = Write(next=Recorder(), store=broken, identify=lambda b: b.identity({}), pipeline=False,
                   retry=lambda batch, bid, exc: failures.append((bid, repr(exc))))
    inline.submit(batch_of(6))
    assert failures[-1][0].ranges[0].first == 6 and failures[-1][1] == "None", "written (and retried) by the retry"


class Refuses:
    """A writer that refuses every event of step 1."""

    def __init__(self) -> None:
        self.written: list[int] = []

    def write(self, events: Sequence[Any], batch: BatchId) -> list[Unstorable]:
        self.written += [e.step for e in events]
        return [Unstorable(event=e, reason="refused") for e in events if e.step == 1]


class Letters:
    def __init__(self) -> None:
        self.letters: list[DeadLetter] = []

    def write(self, letters: Sequence[DeadLetter]) -> None:
        self.letters += letters


def test_store_dead_letters_what_the_writer_refuses_naming_the_record_that_carried_it() -> None:
    writer, letters, stats = Refuses(), Letters(), ConsumerStats()
    acc = Recorder()
    decode = Decode(next=acc, stats=stats)
    decode.submit(raw(7, steps(1)))
    decode.submit(raw(8, steps(2)))
    decode.submit(raw(9, b"{not json"))
    batch = Batch()
    for d in acc.got:
        batch.letters.extend(d.letters)
        batch.add(d.raw, d.events)
    bid = batch.identity({})
    out = Store(writer=writer, dead_letters=letters, stats=stats)(batch, bid)
    assert writer.written == [0, 0, 1]
    assert out.bid == bid and out.stored == 2
    assert [(x.offset, x.reason.split(":")[0]) for x in letters.letters] == [(9, "not JSON"), (8, "refused")]
    assert out.letters == letters.letters


def test_commit_commits_each_ranges_next_offset_clears_rechecks_and_nothing_once_stopped() -> None:
    done: list[list[tuple[str, int, int]]] = []
    stats = ConsumerStats()
    commit = Commit(commit=lambda tps: done.append([(tp.topic, tp.partition, tp.offset) for tp in tps]), stats=stats,
                    recheck={("t", 0): 4, ("t", 1): 50})
    ranges = (OffsetRange(topic="t", partition=0, first=3, last=9), OffsetRange(topic="t", partition=1, first=0, last=2))
    commit.submit(Stored(BatchId(ranges=ranges, recheck=True), 12, [DeadLetter(reason="r", topic="t", partition=0,
                                                                             offset=4, payload=None, count=3)]))
    assert done == [[("t", 0, 10), ("t", 1, 3)]]
    assert commit.recheck == {("t", 1): 50}, "passed: no re-check; not yet passed: kept"
    assert (stats.events, stats.rejected, stats.batches, stats.rechecked_batches) == (12, 3, 1, 1)
    commit.stopped = True
    commit.submit(Stored(BatchId(ranges=ranges), 1, []))
    assert len(done) == 1 and stats.batches == 1, "stopped: nothing committed, nothing counted"


def test_the_chain_carries_a_record_from_decode_to_commit() -> None:
    committed: list[TopicPartition] = []
    stats, letters = ConsumerStats(), Letters()
    writer = Refuses()
    chain = build(stats=stats, writer=writer, dead_letters=letters, max_events=3, max_s=3600,
                  commit=committed.extend, retry=lambda *a: pytest.fail(f"retried: {a}"))
    try:
        chain.decode.submit(raw(0, steps(2)))
        chain.decode.submit(raw(1, steps(2, first=2)))
        chain.write.join()
        assert [(tp.partition, tp.offset) for tp in committed] == [(0, 2)]
        assert writer.written == [0, 1, 2, 3] and [x.offset for x in letters.letters] == [0]
        assert (stats.records, stats.events, stats.rejected, stats.batches) == (2, 3, 1, 1)
    finally:
        chain.close()


def intent(*ranges: tuple[int, int, int]) -> Intent:
    return Intent(ranges=tuple(OffsetRange(topic="t", partition=p, first=f, last=la) for p, f, la in ranges),
                  at=datetime(2026, 1, 1, tzinfo=UTC))


def test_an_uncommitted_batch_is_re_cut_when_owned_whole_else_its_offsets_are_re_checked() -> None:
    whole = intent((0, 10, 19), (1, 5, 9))
    recheck: dict[tuple[str, int], int] = {}
    recut = plan({("t", 0): whole, ("t", 1): whole}, {("t", 0): 10, ("t", 1): 5}, [("t", 0), ("t", 1)], recheck,
                 busy=False)
    assert recut is not None and recut.todo == {("t", 0): 19, ("t", 1): 9} and recut.last(("t", 1)) == 9
    assert not recheck
    split = plan({("t", 0): whole}, {("t", 0): 10}, [("t", 0)], recheck, busy=False)
    assert split is None and recheck == {("t", 0): 19}, "partition 1 went elsewhere: re-check, never re-cut"
    assert plan({("t", 0): whole, ("t", 1): whole}, {("t", 0): 10, ("t", 1): 5}, [("t", 0), ("t", 1)], recheck,
                busy=True) is None, "one re-cut at a time"
    assert plan({("t", 0): intent((0, 10, 19))}, {("t", 0): 20}, [("t", 0)], {}, busy=False) is None, "committed"


class Idles:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause(self) -> bool:
        self.calls.append("pause")
        return True

    def keep_alive(self, timeout: float) -> None:
        self.calls.append(f"alive:{timeout}")

    def resume(self) -> None:
        self.calls.append("resume")


def test_retry_retries_only_transient_failures_with_backoff_while_the_group_is_kept_alive() -> None:
    stats, idle = ConsumerStats(), Idles()
    retry = Retry(stats=stats, backoff_s=0.0001, max_backoff_s=0.0002)
    outcomes: list[Exception | None] = [TimeoutError("down"), Unreachable("still down"), None]

    def write() -> None:
        assert retry.retrying
        exc = outcomes.pop(0)
        if exc is not None:
            raise exc

    assert retry.attempt(write, 3, idle, None) and not outcomes and not retry.retrying
    assert idle.calls == ["pause", "alive:0.0001", "alive:0.0002", "resume"] and stats.write_errors == 2
    with pytest.raises(ConsumerFailed, match="bug") as failed:
        retry.attempt(write, 3, Idles(), None, failed=KeyError("bug"))
    assert isinstance(failed.value.__cause__, KeyError) and stats.state == "failed"
    stop = threading.Event()
    stop.set()
    assert not retry.attempt(lambda: (_ for _ in ()).throw(TimeoutError("down")), 1, Idles(), stop), \
        "stopped while retrying: left unwritten"


def test_retry_ends_when_a_rebalance_revokes_the_batch() -> None:
    retry = Retry(stats=ConsumerStats(), backoff_s=0.0001, max_backoff_s=0.0001)
    idle = Idles()
    idle.keep_alive = lambda timeout: setattr(retry, "revoked", True)  # type: ignore[method-assign]
    written: list[int] = []

    def write() -> None:
        written.append(1)
        raise TimeoutError("down")

    assert retry.attempt(write, 1, idle, None) and written == [1], "left to the next owner, not written again"


def test_the_chain_writes_to_a_writer_swapped_after_it_was_built() -> None:
    stats, first, second = ConsumerStats(), Refuses(), Refuses()
    chain = build(stats=stats, writer=first, dead_letters=Letters(), max_events=1, max_s=3600,
                  commit=lambda tps: None, retry=lambda *a: pytest.fail(f"retried: {a}"))
    try:
        chain.use(second)
        chain.decode.submit(raw(0, steps(1)))
        chain.write.join()
        assert not first.written and second.written == [0]
    finally:
        chain.close()

"""The ingest's decode process (`offload`): the same decisions, rows and events as the consumer's own decode.

Pure cases hold `offload.decode` to `decode_fast` + `staging.stage` + `BlockInserter`'s document on a corpus
of records (plain, escaped, invalid, id-less, repeated); store cases write the same batches through
`write_offloaded` and through `write` into the real engine and compare what is stored, what is skipped and
what is refused; process cases run the real child: killed, it is restarted and nothing waits on it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from tests.support.crafted import steps
from vigil.analyzer.ingest.blocks import BlockInserter, Columns, Encoded
from vigil.analyzer.ingest.offload import DecodeProcess, InlineDecode, Offloaded, claim, decode, taken_events
from vigil.analyzer.ingest.staging import stage
from vigil.analyzer.ingest.writer import ClickHouseWriter
from vigil.app.components import migrate_all
from vigil.clickhouse.client import connect
from vigil.contract import Heartbeat, NicCounters
from vigil.contract.fastwire import decode_fast, payload_of
from vigil.contract.wire import encode_batch
from vigil.kafka.consumer import BatchId, OffloadLost, OffsetRange

START = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30)


def nics(n: int, job: str = "off", second: int = 0) -> list[NicCounters]:
    return [NicCounters(job_id=job, host=f"h{i % 3:04d}", device=f"mlx5_{i}", link="rdma", tx_bytes=i, rx_bytes=2 * i,
                        tx_bps=1e9 + i, rx_bps=2e9, interval_s=1.0, ts=START + timedelta(seconds=second + i))
            for i in range(n)]


def escaped(record: bytes) -> bytes:
    """The same record with an escape in a string: not plain, so the fast path (and the child) declines it."""
    return record.replace(b'"h0000"', b'"h\\u0030000"', 1)


def corpus() -> list[bytes | None]:
    """Columnar records (as producers write steps and NICs) and row records (as they did before, still read)."""
    s = steps("off", 3, 4, gpus=2, start=START)
    first = encode_batch(s[:10], rows=True)
    doc = json.loads(encode_batch(s[10:14]))
    del doc["columns"]["event_id"]  # the decoder makes the ids: the child's must be the ones its columns hold
    idless = json.dumps(doc, separators=(",", ":")).encode()
    rows_doc = json.loads(encode_batch(s[10:14], rows=True))
    for e in rows_doc["events"]:
        del e["event_id"]
    bad = json.loads(encode_batch(s[14:16]))
    bad["columns"]["rank"][1] = -1
    return [first, encode_batch(nics(4)), encode_batch([Heartbeat(job_id="off", host="h0000", ts=START)]),
            escaped(encode_batch(s[16:20])), json.dumps(bad, separators=(",", ":")).encode(), None, b"not json",
            idless, encode_batch(s[4:12]), encode_batch(s[20:]),  # the last but one repeats 6 of the first
            json.dumps(rows_doc, separators=(",", ":")).encode(), encode_batch(nics(2, second=100), rows=True)]


IDLESS = (7, 10)


def doc(cols: Columns, inputs: dict[str, str]) -> bytes:
    return msgspec.json.encode({inputs.get(n, n): v for n, v in cols.items()})


class Capture:
    """A client that keeps each raw insert (and knows the tables' column types it is given)."""

    def __init__(self, types: dict[str, dict[str, str]]) -> None:
        self.types, self.inserts = types, []

    def query(self, _sql: str, parameters: dict[str, str]) -> Any:
        return type("R", (), {"result_rows": list(self.types[parameters["t"]].items())})()

    def raw_insert(self, table: str, names: list[str], body: bytes, settings: dict[str, Any], fmt: str) -> None:
        self.inserts.append((table, names, body, settings, fmt))


@pytest.mark.pure
def test_the_child_takes_exactly_the_records_the_fast_path_takes_whole() -> None:
    values = corpus()
    out = decode(values)
    for i, (value, count) in enumerate(zip(values, out.counts, strict=True)):
        plain = decode_fast(value)
        taken = claim(value) is not None and not plain.rejected and plain.events and \
            all(type(e).__name__.startswith("Fast") for e in plain.events) and i not in IDLESS
        assert (count is not None) == bool(taken), value
        if count is not None:
            assert count == len(plain.events)
    assert out.counts[2] is None and claim(values[2]) is None, "a heartbeat is decoded by the consumer"
    assert out.counts[3] is None and out.counts[4] is None and out.counts[5] is None and out.counts[6] is None
    for i in IDLESS:
        assert out.counts[i] is None and decode_fast(values[i]).events, "events without their ids: decoded here"
    assert None not in [out.counts[i] for i in (0, 1, 8, 9, 11)], "columnar and row records of steps and NICs taken"
    assert [claim(values[i]) for i in (0, 1, 8, 9, 11)] == [10, 4, 8, 4, 2], "the estimate: the rows a record holds"


@pytest.mark.pure
def test_groups_are_the_staged_columns_encoded_and_events_are_the_childs() -> None:
    values = corpus()
    now = datetime.now(UTC)
    out = decode(values, now)
    out.fetch = lambda: {k: msgspec.msgpack.encode(v) for k, v in taken_events(values, now).items()}
    per_value = out.events()
    taken = [e for evs in per_value if evs for e in evs]
    staged = stage(taken)
    assert set(out.groups) == set(staged.built) == {"step", "nic"}
    for kind, group in out.groups.items():
        cols = staged.built[kind]
        assert group.ids == cols["event_id"] and group.hosts == cols["host"] and group.jobs == cols["job_id"]
        assert group.times == [t.timestamp() for t in cols["ts"]]
        assert group.block.arrays == {n: msgspec.json.encode(v) for n, v in cols.items()}
        assert group.block.rows == len(staged.groups[kind])
        assert staged.encoded[kind] == group.block, "the consumer's staging encodes the columns as the child does"
        assert set(group.block.bounds) == {n for n, v in cols.items() if any(type(x) is int for x in v)}
        for n, (lo, hi) in group.block.bounds.items():
            present = [v for v in cols[n] if v is not None]
            assert (lo, hi) == (min(present), max(present))
    assert out.groups["step"].repeats == 6 and staged.repeats == 6
    inline = InlineDecode().submit(values).result()
    assert inline is not None and all(g.marks is None for g in out.groups.values())
    for kind, group in inline.groups.items():
        assert group.marks == staged.marks[kind], "made on the consumer's thread as staging makes them"
    assert per_value[7] is None
    for value, evs in zip(values, per_value, strict=True):
        if evs is not None:
            mine = decode_fast(value).events
            assert [payload_of(e) | {"event_id": ""} for e in evs] == [payload_of(e) | {"event_id": ""} for e in mine]


@pytest.mark.pure
def test_an_encoded_group_is_inserted_as_the_document_the_inserter_makes() -> None:
    out = decode(corpus())
    group = out.groups["step"]
    types = {"step_timings": {"rank": "UInt32", "step": "UInt64", "tokens": "Nullable(UInt64)", "phases_in": "Map"}}
    cap = Capture(types)
    inserter = BlockInserter(cap)
    cols = {n: msgspec.json.decode(a) for n, a in group.block.arrays.items()}
    inserter.insert("step_timings", group.block, "tok")
    inserter.insert("step_timings", cols, "tok")
    (t1, n1, b1, s1, f1), (t2, n2, b2, s2, f2) = cap.inserts
    assert (t1, n1, s1, f1) == (t2, n2, s2, f2) and "phases_in" in n1 and "phases" not in n1
    assert b1 == b2 == doc(cols, {"phases": "phases_in"})


@pytest.mark.pure
def test_an_encoded_group_beyond_its_column_fails_as_the_columns_would() -> None:
    out = decode(corpus())
    group = out.groups["step"]
    narrow = {"step_timings": {"rank": "UInt8"}}
    cols = {n: msgspec.json.decode(a) for n, a in group.block.arrays.items()}
    cols["rank"] = [300] * len(cols["rank"])
    bounds = {**group.block.bounds, "rank": (300, 300)}
    errors = []
    for call in (lambda i: i.insert("step_timings", cols, None),
                 lambda i: i.insert("step_timings", Encoded(arrays={**group.block.arrays, "rank": msgspec.json.encode(
                     cols["rank"])}, bounds=bounds, rows=group.block.rows), None)):
        with pytest.raises(ValueError) as info:
            call(BlockInserter(Capture(narrow)))
        errors.append(str(info.value))
    assert errors[0] == errors[1] == "step_timings.rank: 300 is out of the range of UInt8"


@pytest.mark.pure
def test_events_of_a_lost_batch_raise_offload_lost() -> None:
    out = decode(corpus())
    out.fetch = lambda: None
    with pytest.raises(OffloadLost):
        out.events()


# ---------------------------------------------------------------- the writer, both ways, into the engine

def batch_id(n: int, recheck: bool = False) -> BatchId:
    return BatchId(ranges=(OffsetRange(topic="t", partition=0, first=n * 100, last=n * 100 + 99),), recheck=recheck)


def split(values: list[bytes]) -> tuple[list[Any], Offloaded, list[Any]]:
    """As the consumer hands a batch over: the records the offload took, the events it decoded itself (in order),
    and every event of the batch in record order."""
    out = InlineDecode().submit(list(values)).result()
    assert out is not None
    here, everything = [], []
    for value, evs in zip(values, out.events(), strict=True):
        mine = decode_fast(value).events if evs is None else []
        here += mine
        everything += evs if evs is not None else mine
    return here, out, everything


def stored(client: Any) -> dict[str, list[tuple[Any, ...]]]:
    rows = {t: client.query(f"SELECT event_id, count() FROM {t} GROUP BY event_id ORDER BY event_id").result_rows
            for t in ("step_timings", "nic_counters", "heartbeats", "gpu_stats")}
    rows["job_steps"] = client.query("SELECT job_id, step, sum(ranks), sum(sum_step_ms) FROM job_steps "
                                     "GROUP BY job_id, step ORDER BY job_id, step").result_rows
    rows["host_clock"] = client.query("SELECT job_id, host, source, max(last_ts) FROM host_clock "
                                      "GROUP BY job_id, host, source ORDER BY job_id, host, source").result_rows
    return rows


def scenario() -> list[tuple[list[bytes], bool]]:
    """Batches of records: a steady one; one re-sending two of the first's steps and a NIC sample (the window has
    seen them); one whose heartbeat shares an event_id with one of its steps; a re-check; a new steady one."""
    s = steps("wr", 3, 12, gpus=2, start=START)
    hb = [Heartbeat(job_id="wr", host=f"h{i:04d}", ts=START + timedelta(seconds=2)) for i in range(3)]
    n1 = nics(3, job="wr")
    clash = Heartbeat(job_id="wr", host="h0000", ts=START + timedelta(seconds=4), event_id=s[30].event_id)
    return [([encode_batch(s[:12]), encode_batch(n1), encode_batch(hb)], False),
            ([encode_batch(s[12:24]), encode_batch([s[0], s[5]]), encode_batch(n1[1:2])], False),
            ([encode_batch([clash]), encode_batch(s[24:36])], False),
            ([encode_batch(s[36:48])], True),
            ([encode_batch(s[48:60]), escaped(encode_batch(s[60:66])), encode_batch(s[66:])], False)]


@pytest.mark.clickhouse
def test_offloaded_batches_are_stored_as_the_consumers_own(clickhouse_dsn: str) -> None:
    results = []
    batches = scenario()
    for offloaded in (False, True):
        client = connect(clickhouse_dsn, database=f"t_{uuid.uuid4().hex[:10]}")
        migrate_all(client, 30)
        writer = ClickHouseWriter(client=client)
        for n, (values, recheck) in enumerate(batches):
            here, out, everything = split(values)
            bid = batch_id(n, recheck)
            if offloaded:
                assert writer.write_offloaded(here, out, lambda e=everything: e, bid) == []  # type: ignore[misc]
            else:
                assert writer.write(everything, bid) == []
        results.append((stored(client), writer.rows_written, writer.skipped_duplicates, writer.looked_up))
        if offloaded:
            # the first batch steady; the re-sends, the shared id, the re-check and the escaped record's steps
            # (decoded here) take the ordinary path
            assert (writer.offloaded_batches, writer.offload_fallbacks) == (1, 4)
    assert results[0] == results[1]
    rows = results[1][0]
    assert all(n == 1 for table in ("step_timings", "nic_counters", "heartbeats") for _, n in rows[table])
    assert len(rows["step_timings"]) == 3 * 12 * 2 - 1, "the step sharing the heartbeat's id is not stored twice"


@pytest.mark.clickhouse
def test_a_refused_value_in_an_offloaded_batch_is_dead_lettered_as_in_the_consumers_own(clickhouse_dsn: str) -> None:
    """A column narrower than the contract (here: rank as UInt8 in the writer's view of the table) refuses the
    ranks above 255: the offloaded batch falls back to its events and refuses the very same ones."""
    s = steps("rf", 80, 2, gpus=2, start=START)  # ranks 0..159, then a second step; 160.. over 255 below
    s += [e.model_copy(update={"rank": 300 + i, "event_id": uuid.uuid4().hex}) for i, e in enumerate(s[:3])]
    values = [encode_batch(s[:100]), encode_batch(s[100:]), encode_batch(nics(2, job="rf"))]
    results = []
    for offloaded in (False, True):
        client = connect(clickhouse_dsn, database=f"t_{uuid.uuid4().hex[:10]}")
        migrate_all(client, 30)
        writer = ClickHouseWriter(client=client)
        writer._blocks._column_types("step_timings")["rank"] = "UInt8"
        here, out, everything = split(values)
        bads = (writer.write_offloaded(here, out, lambda e=everything: e, batch_id(0)) if offloaded
                else writer.write(everything, batch_id(0)))
        results.append((sorted((b.event.event_id, b.reason) for b in bads), stored(client)))
    assert results[0] == results[1]
    assert len(results[1][0]) == 3 and all("rank: 30" in reason for _, reason in results[1][0])
    assert len(results[1][1]["step_timings"]) == len(s) - 3 and len(results[1][1]["nic_counters"]) == 2


# ---------------------------------------------------------------- the real child process

def same(a: Offloaded | None, b: Offloaded | None) -> bool:
    assert a is not None and b is not None
    groups = [{k: dataclasses.replace(g, marks=None) for k, g in o.groups.items()} for o in (a, b)]  # marks: inline's
    return (a.counts, a.kinds, groups[0]) == (b.counts, b.kinds, groups[1])


@pytest.mark.pure
def test_the_child_answers_as_the_inline_decode_and_a_killed_child_is_restarted() -> None:
    values = [v for v in corpus() if v is None or b'"event_id"' in v or not v.startswith(b"{")]  # ids: comparable
    proc = DecodeProcess(timeout_s=60, restart_backoff_s=0)
    try:
        first, second = proc.submit(values), proc.submit(values[:2])
        inline = InlineDecode().submit(values).result()
        assert inline is not None
        got = first.result()
        assert same(got, inline) and got is not None
        assert [len(e) if e is not None else None for e in got.events()] == inline.counts  # type: ignore[union-attr]
        assert second.result() is not None
        kill(proc)
        assert proc.submit(values).result() is not None, "restarted at the next batch"
        assert proc.restarts == 1
        pending = proc.submit(values)
        kill(proc)  # dies holding the batch: the consumer decodes it itself
        assert pending.result() is None
        later = proc.submit(values[:1]).result()
        assert later is not None and later.counts == inline.counts[:1]
        kill(proc)
        with pytest.raises(OffloadLost):
            later.events()  # its events died with the child
    finally:
        proc.close()
    assert proc.pid is None and proc.submit(values).result() is None, "closed: decoded by the consumer"


def kill(proc: DecodeProcess) -> None:
    child = proc.process
    assert child is not None
    child.kill()
    child.wait(10)


@pytest.mark.pure
def test_a_hung_child_is_killed_after_its_timeout_and_replaced() -> None:
    values = corpus()[:2]
    proc = DecodeProcess(timeout_s=2, restart_backoff_s=0)
    try:
        assert proc.submit(values).result() is not None
        hung = proc.process
        assert hung is not None
        os.kill(hung.pid, signal.SIGSTOP)  # alive, answering nothing
        assert proc.submit(values).result() is None, "given up after the timeout"
        assert proc.process is not hung and hung.poll() is not None, "the hung child was killed and let go"
        assert proc.submit(values).result() is not None and proc.restarts == 1
    finally:
        proc.close()


@pytest.mark.pure
def test_a_child_that_cannot_start_leaves_every_batch_to_the_consumer(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_a: Any, **_k: Any) -> None:
        raise OSError(24, "Too many open files")

    made: list[int] = []
    real_pipe = os.pipe

    def pipe() -> tuple[int, int]:
        fds = real_pipe()
        made.extend(fds)
        return fds

    closed: list[int] = []
    real_close = os.close

    def close(fd: int) -> None:
        closed.append(fd)
        real_close(fd)

    monkeypatch.setattr(os, "pipe", pipe)
    monkeypatch.setattr(os, "close", close)
    monkeypatch.setattr(subprocess, "Popen", refuse)
    proc = DecodeProcess(restart_backoff_s=0)
    proc.start()
    for _ in range(20):
        assert proc.submit(corpus()[:1]).result() is None
    assert len(made) == 4 * 21
    assert set(made) <= set(closed), "no descriptor left behind"
    assert proc.failures == 21

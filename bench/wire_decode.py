"""Where the step events' decode could go, and what it does to "30 % of raw consume" (issue 26).

For 100,000 step events of a 200-host x 8-GPU job, each host's 500 events in one record (as an agent sends
its own, at most 500 a record), one process, each leg repeated and interleaved (the machine is shared:
compare within a run):

* msgspec rows (today): `fastwire.decode_fast` per record, structs then the step column builder;
* pyarrow's JSON reader: the same records, one per line, parsed in C++ against an explicit schema
  (the phases map inferred as a struct: the reader has no map type), flattened to the events'
  columns, the event ids back as Python strings (the recent-id window needs them); one thread, and
  all threads;
* msgspec columnar: the same events as vigil's producers now write steps (`wire.COLUMNAR`: one record per
  host-batch, one JSON array per field), read by `colwire.decode_columnar` into typed column lists with the
  rows' constraints and decode_hot's checks (plain ASCII, no sub-microsecond time, UInt64 bounds, UTC times in
  range), concatenated into the batch's step_timings columns (`columns.FROM_COLUMNS`);
* the ingest's work on one thread, no broker: a 100k batch of each kind of record decoded, staged (in-batch
  repeats, marks, columns: `staging.stage` for row records as the consumer decodes them itself, `offload.decode`
  for columnar ones as the analyzer's `InlineDecode` does), judged by a fresh recent-id window, inserted into a
  migrated store (rollups and all, one token-deduplicated block) and added to the window; and the insert alone
  with the columns ready (the engine's share). The columnar records' columns are checked equal to the rows' first;
* broker raw consume (no decode) of each format's records, lz4-compressed as vigil's producer sends them: does
  the broker's read, the denominator of "30 % of raw consume", grow when the record shrinks?

CPU seconds are the process's (with the threads pyarrow starts); wall seconds shown too.

    python bench/wire_decode.py [--repeats 4] [--no-append]
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
import pyarrow.json as pj  # type: ignore[import-untyped]
from analyzer_common import append_results, machine_info
from confluent_kafka import Producer
from ingest_throughput import make_steps, raw_consume

from vigil.analyzer.ingest.blocks import BlockInserter, Columns
from vigil.analyzer.ingest.columns import BUILDERS, FROM_COLUMNS
from vigil.analyzer.ingest.offload import decode
from vigil.analyzer.ingest.recent import RecentIds
from vigil.analyzer.ingest.staging import stage
from vigil.app.components import migrate_all
from vigil.clickhouse.client import connect, open_client
from vigil.contract import encode_batch
from vigil.contract.colwire import decode_columnar
from vigil.contract.fastwire import decode_fast
from vigil.kafka.admin import ensure_topics
from vigil.kafka.broker import EmbeddedBroker
from vigil.settings import VigilSettings

N, PER_RECORD, HOSTS = 100_000, 500, 200
STORE = f"chdb://{tempfile.mkdtemp(prefix='vigil-bench-w-')}"
_F64 = pa.float64()
_U32 = pa.uint32()
EVENT = pa.struct([("kind", pa.string()), ("schema_version", pa.int64()), ("event_id", pa.string()),
                   ("job_id", pa.string()), ("host", pa.string()), ("ts", pa.timestamp("us", tz="UTC")),
                   ("rank", _U32), ("local_rank", _U32), ("world_size", _U32),
                   ("coords", pa.struct([("dp", _U32), ("tp", _U32), ("pp", _U32)])), ("step", pa.uint64()),
                   ("step_ms", _F64), ("phases", pa.struct([])), ("phase_kinds", pa.struct([])),
                   ("tokens", pa.uint64()), ("samples", pa.uint64()), ("tflops", _F64), ("mfu", _F64),
                   ("failed", pa.bool_()), ("dropped", _U32)])
RECORD = pa.schema([("kind", pa.string()), ("schema_version", pa.int64()), ("events", pa.list_(EVENT))])


def columns_of(records: list[bytes]) -> Columns:
    """A batch of columnar records -> step_timings' columns (every record taken whole by the fast path)."""
    parts = [p for r in records if (p := decode_columnar(r, "step")) is not None]
    assert len(parts) == len(records)
    cols = {n: [v for p in parts for v in p[n]] for n in parts[0]}
    return FROM_COLUMNS["step"][1](cols)


def rows_leg(records: list[bytes]) -> None:
    events = [e for r in records for e in decode_fast(r).events]
    BUILDERS["step"][1](events)


def arrow_leg(blob: bytes, threads: bool) -> None:
    table = pj.read_json(io.BytesIO(blob), read_options=pj.ReadOptions(use_threads=threads, block_size=1 << 26),
                         parse_options=pj.ParseOptions(explicit_schema=RECORD, unexpected_field_behavior="infer"))
    flat = pc.list_flatten(table.column("events")).combine_chunks()
    flat.field("event_id").to_pylist()


def columnar_leg(records: list[bytes]) -> None:
    columns_of(records)


def ingest_rows(records: list[bytes], inserter: BlockInserter) -> None:
    """The writer's work on one batch of row records, on one thread: decode, stage, window, insert, window."""
    events = [e for r in records for e in decode_fast(r).events]
    staged = stage(events)
    window = RecentIds()
    group, marks = staged.groups["step"], staged.marks["step"]
    fresh, unknown, _ = window.split(group, marks)
    assert len(fresh) == len(group) and not unknown
    inserter.insert("step_timings", staged.encoded["step"], uuid.uuid4().hex)  # as the writer inserts a staged group
    window.add_all(group, marks)


def ingest_columnar(records: list[bytes], inserter: BlockInserter) -> None:
    """The same work from columnar records, as the analyzer does it: `offload.decode` (columns, in-batch repeats,
    encoded block, the window's marks) on the consumer's thread, then the window, the insert and the window."""
    group = decode(list(records), marks=True).groups["step"]
    assert group.marks is not None and not group.repeats
    window = RecentIds()
    fresh, unknown, _ = window.split(group.ids, group.marks)
    assert len(fresh) == len(group.ids) and not unknown
    inserter.insert("step_timings", group.block, uuid.uuid4().hex)
    window.add_all((), group.marks)


def check_same(rows: list[bytes], cols: list[bytes]) -> None:
    """The columnar records give step_timings the very columns the rows' path builds (row order aside)."""
    built = BUILDERS["step"][1]([e for r in rows for e in decode_fast(r).events])
    made = columns_of(cols)
    assert built.keys() == made.keys(), built.keys() ^ made.keys()
    for name in built:
        assert dict(zip(built["event_id"], built[name], strict=True)) == dict(
            zip(made["event_id"], made[name], strict=True)), name


def timed(leg: Callable[[], None], repeats: int) -> tuple[float, float]:
    """(best CPU s, best wall s) over `repeats` runs of `leg`."""
    cpu, wall = [], []
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        leg()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return min(cpu), min(wall)


def raw_events_per_s(broker: EmbeddedBroker, records: list[bytes], events: int, copies: int = 6) -> float:
    """Broker raw consume, in events/s, of `records` (holding `events` events) produced `copies` times, lz4-compressed
    as vigil's producer sends them."""
    s = VigilSettings(home=Path(tempfile.mkdtemp()), kafka_bootstrap=broker.bootstrap,
                      topic_prefix=f"w{uuid.uuid4().hex[:6]}.", topic_partitions=4)
    ensure_topics(s, broker.bootstrap)
    topic = s.topic("steps")
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "compression.type": "lz4",
                  "message.max.bytes": 4_000_000})
    for i, payload in enumerate(records * copies):
        while True:
            try:
                p.produce(topic, payload, partition=i % 4)
                break
            except BufferError:
                p.poll(0.1)
    p.flush(60)
    return events * copies / raw_consume(s, broker.bootstrap, topic, len(records) * copies)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--no-append", dest="append", action="store_false")
    args = ap.parse_args()
    by_host: dict[str, list[Any]] = {}
    for e in make_steps(N, hosts=HOSTS):
        by_host.setdefault(e.host, []).append(e)
    rows = [encode_batch(hs[i:i + PER_RECORD], rows=True) for hs in by_host.values()
            for i in range(0, len(hs), PER_RECORD)]
    cols = [encode_batch(hs[i:i + PER_RECORD]) for hs in by_host.values() for i in range(0, len(hs), PER_RECORD)]
    blob = b"\n".join(rows)
    row_b, col_b = sum(map(len, rows)) // N, sum(map(len, cols)) // N
    legs: dict[str, Callable[[], None]] = {
        "msgspec rows (decode_fast + column builder)": lambda: rows_leg(rows),
        "pyarrow JSON reader, 1 thread (+ flatten, ids to Python)": lambda: arrow_leg(blob, False),
        "pyarrow JSON reader, all threads (+ flatten, ids to Python)": lambda: arrow_leg(blob, True),
        "msgspec columnar record (vigil's step records since 2026-12-07)": lambda: columnar_leg(cols)}
    check_same(rows, cols)
    client = connect(STORE, database="wire")
    migrate_all(client, 3650)
    inserter = BlockInserter(open_client(STORE, database="wire"))
    ready = columns_of(cols)
    legs.update({
        "ingest on one thread, row records: decode, stage, window, insert, window": lambda: ingest_rows(rows, inserter),
        "ingest on one thread, columnar records: the same": lambda: ingest_columnar(cols, inserter),
        "insert alone (columns ready): the engine's share": lambda: inserter.insert("step_timings", ready,
                                                                                   uuid.uuid4().hex)})
    best: dict[str, tuple[float, float]] = {}
    for _ in range(args.repeats):  # interleaved: each leg once per round
        for name, leg in legs.items():
            c, w = timed(leg, 1)
            b = best.get(name, (c, w))
            best[name] = (min(b[0], c), min(b[1], w))
    broker = EmbeddedBroker(log_path=Path(tempfile.mkdtemp()) / "tansu.log")
    broker.start()
    try:
        raw = {size: max(raw_events_per_s(broker, records, N) for _ in range(args.repeats // 2 or 1))
               for size, records in ((row_b, rows), (col_b, cols))}
    finally:
        broker.stop()
    lines = [f"| {name} | {c * 1000:.0f} | {w * 1000:.0f} | {N / w:,.0f} |" for name, (c, w) in best.items()]
    body = "\n".join([
        machine_info(), "",
        f"{N:,} step events of a {HOSTS}-host x 8-GPU job, each host's {N // HOSTS} in its own record: {len(rows)} row "
        f"records ({row_b} bytes per event), {len(cols)} columnar ones ({col_b}). Best of {args.repeats}, "
        "legs interleaved. Load average at end: " + "/".join(f"{x:.1f}" for x in os.getloadavg()) + ".", "",
        "| decode | CPU ms per 100k | wall ms per 100k | events/s (wall) |", "| --- | ---: | ---: | ---: |", *lines, "",
        "| broker raw consume (no decode) of these records, lz4 as the producer sends them | events/s | MB/s "
        "uncompressed |", "| --- | ---: | ---: |",
        *[f"| {size} bytes per event | {v:,.0f} | {v * size / 1e6:.0f} |" for size, v in raw.items()], "",
        "Command: `python bench/wire_decode.py" + (f" --repeats {args.repeats}" if args.repeats != 4 else "") + "`."])
    print(body)
    if args.append:
        append_results("Wire decode: msgspec rows vs pyarrow's JSON reader vs the columnar record, and raw consume by "
                       "record size (bench/wire_decode.py)", body)


if __name__ == "__main__":
    main()

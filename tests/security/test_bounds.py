"""Hostile inputs stay bounded: a tiny Flight Recorder pickle that expands to a graph of billions of paths,
log lines with unbounded rank prefixes and tracebacks, and a record of thousands of bad events (its dead letters)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from vigil.collector.flightrec import MAX_TRACE_BYTES, FlightRecorderWatcher
from vigil.collector.logstream import MAX_OPEN_TRACEBACKS, TRACEBACK_HEADER, LogStream
from vigil.collector.rules import load_rules
from vigil.contract.fastwire import decode_fast
from vigil.kafka.deadletter import PER_RECORD, per_record

pytestmark = pytest.mark.pure


def bomb() -> bytes:
    """A pickle of a few hundred KB whose entries, written out as JSON, would take 2**40 list items."""
    level: object = ["x" * 64]
    for _ in range(40):
        level = [level, level]  # memo references: one object, two paths
    entry = {"record_id": 1, "pg_id": 0, "process_group": ["0", "default"], "frames": level, "input_sizes": [[4, 4]],
             "evil": level, "profiling_name": "nccl:all_reduce", "output_sizes": level}
    return pickle.dumps({"rank": 0, "entries": [entry] * 100_000, "pg_status": {"0": {"evil": level}},
                         "vigil": {"stack": level, "trigger": level, "group_ranks": {"g": list(range(10))}}})


def test_a_flight_recorder_bomb_becomes_a_bounded_trace(tmp_path: Path) -> None:
    data = bomb()
    assert len(data) < 1 << 20
    (tmp_path / "nccl_trace_rank_0").write_bytes(data)
    watcher = FlightRecorderWatcher(dirs=[(tmp_path, "nccl_trace_rank_")], job_id="j", host="h")
    traces = watcher.scan() or watcher.scan()
    (trace,) = traces
    shipped = trace.model_dump_json()
    assert len(shipped) < 2 * MAX_TRACE_BYTES
    assert trace.entries and not any("evil" in (e.model_extra or {}) for e in trace.entries)
    assert trace.stack == "" and trace.trigger == "" and trace.group_ranks == {"g": list(range(10))}


def stream() -> LogStream:
    return LogStream(job_id="j", host="h", stream="stderr", rules=load_rules())


def test_a_rank_prefix_of_5000_digits_is_text_and_the_line_is_still_classified() -> None:
    s = stream()
    (event,) = s.feed(f"[rank{'9' * 5000}]: RuntimeError: CUDA error: an illegal memory access was encountered")
    assert event.category != "traceback" and event.rank is None and event.severity in ("error", "critical")


def test_open_tracebacks_per_stream_are_bounded() -> None:
    s = stream()
    out = [e for n in range(10_000) for e in s.feed(f"[rank{n}]: {TRACEBACK_HEADER}")]
    assert len(s._tracebacks) == MAX_OPEN_TRACEBACKS
    assert len(out) == 10_000 - MAX_OPEN_TRACEBACKS  # each further one ended the oldest


def test_a_record_of_many_bad_events_makes_a_bounded_number_of_dead_letters() -> None:
    record = json.dumps({"kind": "step", "schema_version": 1, "events": [{"bogus": n} for n in range(30_000)]}).encode()
    decoded = decode_fast(record)
    assert len(decoded.rejected) == 30_000
    letters = per_record(((r.reason, r.payload) for r in decoded.rejected), topic="t", partition=0, offset=7)
    assert len(letters) == PER_RECORD + 1 and sum(d.count for d in letters) == 30_000
    assert sum(len(d.to_json()) for d in letters) < 64 * 1024 and letters[-1].document()["count"] == 30_000 - PER_RECORD

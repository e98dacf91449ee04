"""The fast decode path makes exactly the per-event pydantic path's decisions, with the same values."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.support.wire_records import BIG, EDITS, RECENT, as_columns, columnar_records, good_record, records
from vigil.analyzer.ingest.processors import process
from vigil.contract import decode_batch, spec_for
from vigil.contract.fastwire import decode_fast, payload_of
from vigil.contract.hotkinds import FastHeartbeat, FastNic, FastStep

pytestmark = [pytest.mark.pure]

FAST = {"step": FastStep, "heartbeat": FastHeartbeat, "nic": FastNic}


def rows(events: list[Any]) -> list[Any]:
    return [(t, {k: v for k, v in r.items() if k != "event_id"}) for e in events for t, r in process(e)]


def same_decisions(kind: str, values: list[bytes]) -> int:
    """Both paths decide each record alike, with the same values; how many events the fast path took."""
    fast_hits = 0
    for value in values:
        slow, fast = decode_batch(value), decode_fast(value)
        assert [r.reason for r in fast.rejected] == [r.reason for r in slow.rejected], value
        assert len(fast.events) == len(slow.events), value
        assert rows(fast.events) == rows(slow.events), value
        for f, s in zip(fast.events, slow.events, strict=True):
            assert f.ts == s.ts and f.ts.tzinfo is UTC, value
            pf, ps = payload_of(f), payload_of(s)
            if b'"event_id"' not in value:  # generated on decode by both paths
                pf.pop("event_id"), ps.pop("event_id")
            assert pf == ps, value
        fast_hits += sum(isinstance(e, FAST[kind]) for e in fast.events)
    return fast_hits


@pytest.mark.parametrize("kind", sorted(EDITS))
def test_fast_path_decides_and_stores_like_pydantic(kind: str) -> None:
    assert same_decisions(kind, records(kind)) >= 6, "the fast path took too few of the plain records: the corpus no longer tests it"


def test_agent_records_take_the_fast_path() -> None:
    from vigil.contract import encode_batch, validate_event

    for kind, cls in FAST.items():
        event = validate_event(kind, {**spec_for(kind).example, "ts": RECENT})
        [got] = decode_fast(encode_batch([event])).events
        assert isinstance(got, cls) and process(got) == process(event)


def test_a_record_flagged_without_cause_still_takes_the_fast_path_and_a_real_cause_does_not() -> None:
    # integers beyond UInt64 are found by their values (an event id of 32 digits is none), a time finer than the
    # microsecond by its 7th fraction digit after HH:MM:SS: either sends the record to pydantic
    from vigil.contract import encode_batch, validate_event

    event = validate_event("step", {**spec_for("step").example, "ts": RECENT, "event_id": "1" * 32})
    [got] = decode_fast(encode_batch([event])).events
    assert isinstance(got, FastStep) and process(got) == process(event)
    for edit in ({"step": BIG}, {"ts": RECENT[:-1] + "1Z"}):  # beyond UInt64; a 7th fraction digit
        value = json.dumps({"kind": "step", "schema_version": 1, "events": [
            {**spec_for("step").example, "ts": RECENT, **edit}]}, separators=(",", ":")).encode()
        assert not any(isinstance(e, FastStep) for e in decode_fast(value).events), edit


@pytest.mark.parametrize("kind", ["nic", "step"])
def test_columnar_records_decide_and_store_like_pydantic(kind: str) -> None:
    assert same_decisions(kind, columnar_records(kind)) >= 6, "the fast path took too few of the columnar records"


@pytest.mark.parametrize("kind", ["nic", "step"])
def test_a_columnar_record_reads_as_its_rows(kind: str) -> None:
    # the same events as rows and as columns: the same events out of both shapes, on both paths; a bad row is
    # refused alone, with the reason its row record gets
    for value in (good_record(kind), records(kind)[1]):
        doc = json.loads(value)
        col = as_columns(kind, [{k: v for k, v in e.items() if k not in ("kind", "schema_version")} for e in doc["events"]])
        assert col is not None
        for decode in (decode_batch, decode_fast):
            a, b = decode(value), decode(col)
            assert [payload_of(e) for e in a.events] == [payload_of(e) for e in b.events]
            assert [(r.reason, r.ahead) for r in a.rejected] == [(r.reason, r.ahead) for r in b.rejected]


def test_producers_write_the_hot_kinds_as_columns_and_others_as_rows() -> None:
    from vigil.contract import encode_batch, validate_event
    from vigil.contract.colwire import is_columnar, rows_claimed

    for kind, cls in FAST.items():
        events = [validate_event(kind, {**spec_for(kind).example, "ts": RECENT, "event_id": f"{kind}-{i:06d}"})
                  for i in range(4)]
        value = encode_batch(events)
        assert (is_columnar(value) == kind) is (kind != "heartbeat")
        assert rows_claimed(value) == (4 if kind != "heartbeat" else 1)
        assert [payload_of(e) for e in decode_batch(value).events] == [payload_of(e) for e in events]
        fast = decode_fast(value).events
        assert [payload_of(e) for e in fast] == [payload_of(e) for e in events]
        assert all(isinstance(e, cls) for e in fast), "what producers write takes the fast path"


def test_a_columnar_record_holds_each_events_json_dump() -> None:
    # the producer reads the models a column at a time and msgspec writes them: each row must be the event's own
    # JSON dump (pydantic's), odd values included
    from vigil.contract import ParallelCoords, encode_batch, validate_event
    from vigil.contract.wire import rows_of

    step = validate_event("step", {**spec_for("step").example, "ts": RECENT})
    odd = [step.model_copy(update={"step": BIG - 1, "tokens": BIG - 1, "step_ms": 0.1 + 0.2, "tflops": 1.7976931348623157e308,
                                   "phases": {'fwd ü"x\\': 1e-300, "b": 5e-324}, "coords": ParallelCoords(dp=2**32 - 1),
                                   "ts": datetime(2026, 12, 7, 1, 2, 3, tzinfo=UTC), "mfu": None, "host": "nœud\u2028"}),
           step, step.model_copy(update={"ts": datetime(2026, 12, 7, 1, 2, 3, 999, tzinfo=UTC), "phase_kinds": {}})]
    nic = validate_event("nic", {**spec_for("nic").example, "ts": RECENT, "extra": {"a": BIG - 1, "ü": 0}})
    for events in (odd, [nic]):
        items = rows_of(json.loads(encode_batch(events)), type(events[0]))
        assert items == [e.model_dump(mode="json", exclude={"kind", "schema_version"}) for e in events]


def test_a_columnar_record_costs_what_it_sends() -> None:
    # a column's name goes once on the wire: one that is no field of the kind is refused with the record, never
    # copied into each of its rows (and each row's reason); the batch estimate is at most what the size can hold
    from vigil.contract.colwire import rows_claimed

    rows_ = 2000
    for name in ("x" * 20_000, "phases.fwd", "coords.x"):
        zeros = ",".join(["0"] * rows_)
        value = f'{{"kind":"step","schema_version":1,"rows":{rows_},"columns":{{"{name}":[{zeros}]}}}}'.encode()
        for got in (decode_batch(value), decode_fast(value)):
            assert not got.events and len(got.rejected) == 1 and len(got.rejected[0].reason) < 120, name
    value = json.loads(good_record("step"))
    cols = as_columns("step", [{k: v for k, v in e.items() if k not in ("kind", "schema_version")}
                               for e in value["events"]])
    assert cols is not None and rows_claimed(cols) == 3
    assert rows_claimed(cols.replace(b'"rows":3', b'"rows": \n3')) == 3, "JSON's whitespace is read as JSON reads it"
    assert rows_claimed(cols.replace(b'"rows":3', b'"rows":1')) == 1, "a claim the decode refuses: the record's fault"
    for head in (b'"rows":"3"', b'"rows":3e0', b'"rows":' + b"9" * 12):
        assert rows_claimed(cols.replace(b'"rows":3', head)) >= 3, "unreadable: the most the record can hold"

"""The fast decode path makes exactly the per-event pydantic path's decisions, with the same values."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from vigil.analyzer.ingest.processors import process
from vigil.contract import decode_batch, spec_for
from vigil.contract.fastwire import decode_fast, payload_of
from vigil.contract.hotkinds import FastHeartbeat, FastNic, FastStep

pytestmark = [pytest.mark.pure]

FUTURE = (datetime.now(UTC) + timedelta(days=2)).isoformat()
SKEWED = (datetime.now(UTC) + timedelta(minutes=10)).isoformat()  # beyond the 300 s clock skew allowance
NEAR = (datetime.now(UTC) + timedelta(seconds=30)).isoformat()
STALE = (datetime.now(UTC) - timedelta(days=31)).isoformat()  # older than the 30-day retention
RECENT = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
BIG = 2**64
EDITS: dict[str, list[dict[str, Any]]] = {
    "step": [
        {}, {"step_ms": -5}, {"step_ms": "5"}, {"step_ms": 5}, {"step_ms": 1e308}, {"rank": "3"}, {"rank": 3.0},
        {"rank": True}, {"rank": -1}, {"rank": 2**64}, {"rank": 2**40}, {"ts": "2026-11-01T12:00:00"},
        {"ts": "2026-11-01T14:00:00+02:00"}, {"ts": 1_793_534_400.5}, {"ts": "1999-12-31T23:59:59Z"}, {"ts": FUTURE},
        {"ts": "2026-11-01T12:00:00.1234567Z"}, {"ts": "2026-11-01T12:00:00.123Z"}, {"ts": "2026-11-01 12:00:00Z"},
        {"ts": "2026-11-01T12:00:00z"}, {"ts": "2026-11-01T23:59:60Z"}, {"ts": "2026-11-01"}, {"ts": "2026-11-01T12:00Z"},
        {"phases": {"": 1.0}}, {"phases": {"x" * 257: 1.0}}, {"phases": {"a": "1"}}, {"phases": {"a": None}},
        {"phases": {"a": 1}}, {"mfu": 1.6}, {"mfu": None}, {"mfu": 1.5}, {"tokens": -1}, {"tokens": 1.5},
        {"failed": "yes"}, {"failed": 1}, {"failed": True}, {"extra": 1}, {"kind": "heartbeat"}, {"schema_version": 2},
        {"event_id": "short"}, {"event_id": None}, {"coords": {"dp": -1}}, {"coords": {"x": 1}}, {"coords": None},
        {"job_id": ""}, {"job_id": "j" * 256}, {"job_id": "ü" * 256}, {"host": "h" * 257}, {"world_size": 0},
        {"dropped": None}, {"samples": 5}, {"local_rank": None}, {"job_id": "\ud800x"},
        {"ts": SKEWED}, {"ts": NEAR}, {"ts": STALE}, {"step_ms": 1e400}, {"step_ms": -1e400}, {"phases": {"a": -1.0}},
        {"phases": {"a": 1e400}}, {"step": BIG - 1}, {"step": BIG}, {"tokens": BIG}, {"rank": 2**32 - 1},
        {"rank": 2**32}, {"world_size": 2**32}, {"dropped": 2**32}, {"coords": {"tp": 2**32}}, {"host": "h\x00"},
        {"host": "node\n7"}, {"job_id": "j\x1b[31m"}, {"job_id": "j\x85"}, {"phases": {"fwd\x00": 1.0}},
        {"event_id": "abcdefgh\n"}, {"mfu": 1e400}, {"tflops": 1e400}, {"host": "h\x7f"}, {"job_id": "j\x7fx"},
    ],
    "heartbeat": [
        {}, {"gpus": [{"index": 0, "util_pct": "97"}]}, {"gpus": [{"index": -1}]}, {"processes": [{"pid": 1}]},
        {"interval_s": 0}, {"uptime_s": -1}, {"gpus": [{"index": 0, "throttle_reasons": ["a", 1]}]},
        {"gpus": [{"index": 0, "ecc_uncorrected": 1.0}]}, {"gpus": [{"index": 0, "util_pct": 50}]},
        {"processes": [{"pid": 1, "status": "running", "local_rank": True}]}, {"gpus": None},
        {"gpus": [{"index": 0, "util_pct": 1e400}]}, {"gpus": [{"index": 0, "ecc_uncorrected": BIG}]},
        {"gpus": [{"index": 0, "ecc_uncorrected": BIG - 1}]}, {"uptime_s": 1e400}, {"interval_s": 1e400},
        {"dropped_events": BIG}, {"processes": [{"pid": 2**32, "status": "running"}]},
        {"processes": [{"pid": 1, "status": "running", "local_rank": -1}]}, {"host": "a\tb"}, {"ts": STALE},
        {"pod": "p\nq"}, {"ip": "1" * 257}, {"agent_version": "0.1\x00"}, {"gpus": [{"index": 0, "name": "H100\r"}]},
        {"gpus": [{"index": 0, "throttle_reasons": ["x"] * 65}]}, {"gpus": [{"index": 0, "throttle_reasons": ["x"] * 64}]},
        {"processes": [{"pid": 1, "status": "run\x07"}]}, {"node": "n" * 256},
    ],
    "nic": [
        {}, {"link": "ib"}, {"tx_bytes": -1}, {"tx_bps": "1"}, {"interval_s": 0}, {"extra": {"a": 1.5}},
        {"port": None}, {"device": ""}, {"tx_bps": 10}, {"rx_bytes": 2**63},
        {"rx_bytes": BIG}, {"rx_bytes": BIG - 1}, {"extra": {"a": BIG}}, {"extra": {"a\x00": 1}}, {"device": "mlx5\n0"},
        {"tx_bps": 1e400}, {"port": 2**32}, {"ts": SKEWED},
    ],
}
FAST = {"step": FastStep, "heartbeat": FastHeartbeat, "nic": FastNic}


def records(kind: str) -> list[bytes]:
    """One record per edit of the contract's example, encoded as producers do (compact: the fast path's prefix),
    its timestamp an hour old (the example's fixed date would age past the wire's 30 days)."""
    base = {k: v for k, v in spec_for(kind).example.items() if k not in ("kind", "schema_version")}
    base["ts"] = RECENT
    out = []
    for i, edit in enumerate(EDITS[kind]):
        event = {**base, "event_id": f"{kind}-edit-{i:04d}", **edit}
        if edit.get("event_id", "") is None:
            event.pop("event_id")
        out.append(json.dumps({"kind": kind, "schema_version": 1, "events": [event]}, separators=(",", ":")).encode())
    ok = [{**base, "event_id": f"{kind}-ok-{i:04d}"} for i in range(3)]
    out.append(json.dumps({"kind": kind, "schema_version": 1, "events": ok}, separators=(",", ":")).encode())
    out.append(b'{"kind":"' + kind.encode() + b'","schema_version":1,"events":[{"step_ms": NaN}]}')
    ok_text = json.dumps({**base, "event_id": f"{kind}-overflow"}, separators=(",", ":"))
    out.append(b'{"kind":"' + kind.encode() + b'","schema_version":1,"events":[' + ok_text[:-1].encode() +
               b',"ts":1e400}]}')  # a number beyond float64: json reads inf, msgspec refuses
    raw = json.dumps({**base, "event_id": f"{kind}-utf8", "host": "nœud-7"}, separators=(",", ":"), ensure_ascii=False)
    out.append(b'{"kind":"' + kind.encode() + b'","schema_version":1,"events":[' + raw.encode() + b']}')
    c1 = json.dumps({**base, "event_id": f"{kind}-c1", "host": "h\x85"}, separators=(",", ":"), ensure_ascii=False)
    out.append(b'{"kind":"' + kind.encode() + b'","schema_version":1,"events":[' + c1.encode() + b']}')
    ok_one = json.dumps({**base, "event_id": f"{kind}-poison"}, separators=(",", ":")).encode()
    for tail in (b"[" * 5000 + b"]" * 5000, b"1" * 5000):  # nested past the recursion limit; digits past int's
        out.append(b'{"kind":"' + kind.encode() + b'","schema_version":1,"events":[' + ok_one + b'],"x":' + tail + b"}")
    dup = json.dumps({**base, "event_id": f"{kind}-dupkey"}, separators=(",", ":"))
    out.append(b'{"kind":"' + kind.encode() + b'","schema_version":1,"events":[' + dup[:-1].encode() +
               b',"job_id":"other-job"}]}')  # a key twice: the last one wins, as with json.loads
    return out


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


NESTED = {"step": {"coords"}, "nic": set()}  # the fields a columnar record writes as `field.sub` columns


def as_columns(kind: str, events: list[dict[str, Any]]) -> bytes | None:
    """Row events as one columnar record (None when their fields differ: columns are all or nothing)."""
    flat = [{f"{k}.{s}": w for k, v in e.items() for s, w in (v.items() if k in NESTED[kind] and isinstance(v, dict)
                                                            else [(None, v)])} for e in events]
    flat = [{k.removesuffix(".None"): v for k, v in f.items()} for f in flat]
    if any(f.keys() != flat[0].keys() for f in flat):
        return None
    doc = {"kind": kind, "schema_version": 1, "rows": len(events), "columns": {k: [f[k] for f in flat] for k in flat[0]}}
    try:
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
    except UnicodeEncodeError:  # a lone surrogate: only as an escape
        return json.dumps(doc, separators=(",", ":")).encode()


def columnar_records(kind: str) -> list[bytes]:
    """The corpus's readable records written as columns, and records odd as columns only."""
    out = []
    for value in records(kind):
        try:
            doc = json.loads(value)
        except (ValueError, RecursionError):
            continue
        events = [{k: v for k, v in e.items() if k not in ("kind", "schema_version")} for e in doc["events"]]
        if (col := as_columns(kind, events)) is not None:
            out.append(col)
    base = json.loads(good_record(kind))["events"]
    good = json.loads(as_columns(kind, base) or b"")
    odd: list[dict[str, Any]] = [
        {**good, "rows": 2}, {**good, "rows": -1}, {**good, "rows": True}, {**good, "rows": "3"}, {**good, "columns": {}},
        {**good, "columns": []}, {**good, "columns": {**good["columns"], "host": "node-1"}},
        {**good, "columns": {**good["columns"], "port" if kind == "nic" else "rank": [1, 2]}},
        {**good, "columns": {k: v for k, v in good["columns"].items() if k != "event_id"}},
        {**good, "columns": {k: v for k, v in good["columns"].items() if k not in ("local_rank", "port", "coords.tp")}},
        {**good, "columns": {**good["columns"], "extra_column": [1, 2, 3]}}, {**good, "events": []},
        {**good, "columns": {**good["columns"], "coords": [{}, {}, {}]}},
        {**good, "columns": {**good["columns"], "ts": [good["columns"]["ts"][0], STALE, FUTURE]}},
        {**good, "columns": {**good["columns"], "event_id": ["a" * 8] * 3}},
        *({**good, "columns": {**good["columns"], name: None}} for name in ("local_rank", "coords.dp", "phases", "port",
                                                                             "extra", "tokens", "rx_bytes")),
        {**good, "columns": {**good["columns"], "phases.a": [1.0] * 3}}, {**good, "columns": {**good["columns"], "kind": [kind] * 3}},
        {**good, "columns": {**good["columns"], "schema_version": [2] * 3}},
    ]
    out += [json.dumps(d, separators=(",", ":")).encode() for d in odd]
    out.append(json.dumps({**good, "columns": {"event_id": ["x" * 8] * 3}}).encode())  # not the producer's prefix
    return out


def good_record(kind: str) -> bytes:
    return next(r for r in records(kind) if f'"{kind}-ok-0000"'.encode() in r)


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

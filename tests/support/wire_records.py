"""Wire records (row and columnar) built from valid events and their edits: what the decode tests feed."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from vigil.contract import spec_for

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

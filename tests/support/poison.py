"""A deterministic poison corpus for the ingest: records that are bad in every way the wire can be, and valid ones.

`corpus()` returns the same cases every time on a given day (seeded generators; times are
yesterday's, so that valid events are fresh and inside ClickHouse's retention), each one
record for the `steps` topic with what the pipeline must make of it: how many dead letters
(`letters`: one per refused event, or one for a refused record) and which event ids must be
stored, once (`stored`). Families: sizes, encodings, numbers, timestamps, identifiers, kinds and
envelopes, plus records mixing one valid event with refused ones, re-deliveries of a valid
event (stored once), and columnar records (the shape producers write steps in). The labels are the contract's (`vigil.contract`); `test_poison.py` checks
them against `wire.decode_batch` so a wrong label fails there, not in the broker test.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

DAY = f"{datetime.now(UTC) - timedelta(days=1):%Y-%m-%d}"  # yesterday: fresh, and inside ClickHouse's retention
TS = f"{DAY}T12:00:00+00:00"
EPOCH = int(datetime.fromisoformat(TS).timestamp())
BASE: dict[str, Any] = {
    "job_id": "poison", "host": "h0000", "ts": TS, "rank": 0, "local_rank": 0, "world_size": 8, "step": 1,
    "step_ms": 900.0, "phases": {"forward": 300.0, "backward": 500.0},
}


@dataclass(frozen=True, kw_only=True)
class Case:
    name: str  # family/what
    value: bytes | None
    letters: int  # dead letters the record must give
    stored: tuple[str, ...] = ()  # event ids that must be stored exactly once

    @property
    def family(self) -> str:
        return self.name.split("/", 1)[0]


def eid(n: int, tag: str = "") -> str:
    return f"poison-{n:04d}{tag}"


def record(*events: Any, kind: Any = "step", version: Any = 1) -> bytes:
    """As `wire.encode_batch` writes it (compact: the ingest's fast path takes it first), odd values included."""
    return json.dumps({"kind": kind, "schema_version": version, "events": list(events)}, ensure_ascii=False,
                      allow_nan=True, separators=(",", ":")).encode("utf-8", "surrogatepass")


def columns(*events: dict[str, Any], rows: Any = None, **extra: Any) -> bytes:
    """Events of the same fields as the columnar record producers write steps as (`wire.COLUMNAR`), odd parts
    included: `rows` claimed instead of the count, `extra` columns added as given."""
    cols = {k: [e[k] for e in events] for k in events[0]} | extra
    return json.dumps({"kind": "step", "schema_version": 1, "rows": len(events) if rows is None else rows,
                       "columns": cols}, separators=(",", ":")).encode()


def event(n: int, **fields: Any) -> dict[str, Any]:
    doc = {**BASE, "event_id": eid(n), "step": n, **fields}
    return {k: v for k, v in doc.items() if v is not _DROP}


_DROP = object()

# (field, value, valid?) — one event each, the rest of it valid
NUMBERS: list[tuple[str, Any, bool]] = [
    ("step_ms", -1.0, False), ("step_ms", -1e-300, False), ("step_ms", 0.0, True), ("step_ms", -0.0, True),
    ("step_ms", 1e308, True), ("step_ms", 1.7976931348623157e308, True), ("step_ms", float("inf"), False),
    ("step_ms", float("-inf"), False), ("step_ms", float("nan"), False), ("step_ms", None, False),
    ("step_ms", [1.0], False), ("step_ms", {"v": 1}, False), ("step_ms", 5, True),
    ("rank", 2**32 - 1, True), ("rank", 2**32, False), ("rank", 2**40, False), ("rank", -1, False),
    ("rank", 1.5, False), ("rank", None, False), ("rank", 2**64, False),
    ("local_rank", -5, False), ("local_rank", 2**32, False), ("world_size", -1, False), ("world_size", 1, True),
    ("world_size", 2**32 - 1, True), ("world_size", 2**32, False), ("step", 2**64 - 1, True), ("step", 2**64, False),
    ("step", -1, False), ("step", 2**63, True), ("step", 10**30, False), ("mfu", 1.5, True), ("mfu", 1.5000001, False),
    ("mfu", -0.1, False), ("mfu", 0.0, True), ("mfu", None, True), ("tflops", -1.0, False), ("tflops", 1e300, True),
    ("tokens", -1, False), ("tokens", 2**64 - 1, True), ("tokens", 2**64, False), ("samples", 0, True),
    ("dropped", 2**32, False), ("dropped", 2**32 - 1, True), ("dropped", -1, False),
    ("phases", {"forward": -1.0}, False), ("phases", {"forward": float("nan")}, False),
    ("phases", {"forward": float("inf")}, False), ("phases", {"forward": 0.0}, True), ("phases", {}, True),
    ("phases", {"forward": None}, False), ("phases", {"forward": [1]}, False),
    ("coords", {"dp": -1}, False), ("coords", {"dp": 2**32}, False), ("coords", {"dp": 3, "tp": 1, "pp": 2}, True),
    ("coords", {"ep": 1}, False), ("coords", None, False), ("failed", True, True), ("failed", None, False),
]

TIMESTAMPS: list[tuple[Any, bool]] = [
    (f"{DAY}T12:00:00Z", True), (f"{DAY}T12:00:00+08:00", True), (f"{DAY}T12:00:00-11:30", True),
    (f"{DAY}T12:00:00.123456Z", True), (f"{DAY} 12:00:00Z", True), (f"{DAY}T12:00:00", False),
    (DAY, False), ("1999-12-31T23:59:59Z", False), ("1970-01-01T00:00:00Z", False), ("2100-01-01T00:00:00Z", False),
    ("9999-12-31T23:59:59Z", False), ("2026-02-30T00:00:00Z", False), ("2026-13-01T00:00:00Z", False),
    (f"{DAY}T25:00:00Z", False), (f"{DAY}T12:60:00Z", False), ("not a date", False), ("", False), (None, False),
    ([], False), ({}, False), (EPOCH, True), (EPOCH + 0.5, True), (-1, False), (0, False), (4102444800, False),
    (10**20, False), (str(EPOCH), True), (f"{DAY}T12:00:00+24:00", False), ("2026-W44-7T12:00:00Z", False),
    (float("nan"), False), (True, False), (f"{DAY}T12:00:00.1234567891Z", True),
]

IDENTIFIERS: list[tuple[str, Any, bool]] = [
    (f, v, ok) for f in ("job_id", "host") for v, ok in [
        ("", False), ("a\nb", False), ("a\x00b", False), ("a\tb", False), ("\x1b[31mred", False), ("a\x7fb", False),
        ("a\x85b", False), ("a\x9fb", False), ("x" * 256, True), ("x" * 257, False), ("h-ü", True), ("节点-1", True),
        ("🚀", True), ("a\u200fb", True), ("a\u2028b", True), (" ", True), (None, False), (123, False), (["h"], False),
        ("a\ud800b", False)]
] + [
    ("event_id", "short", False), ("event_id", "1234567", False), ("event_id", "x" * 65, False),
    ("event_id", "poison-id\n01", False), ("event_id", "poison-id\x0001", False), ("event_id", "", False),
    ("event_id", 12345678, False), ("event_id", None, False),
]

ENVELOPES: list[tuple[str, bytes | None, int]] = [
    ("no value", None, 1), ("empty bytes", b"", 1), ("a space", b" ", 1), ("null", b"null", 1), ("a number", b"42", 1),
    ("a string", b'"step"', 1), ("a list", b"[1, 2, 3]", 1), ("an empty object", b"{}", 1),
    ("events missing", b'{"kind": "step", "schema_version": 1}', 1),
    ("events an object", b'{"kind": "step", "schema_version": 1, "events": {}}', 1),
    ("events a string", b'{"kind": "step", "schema_version": 1, "events": "e"}', 1),
    ("events null", b'{"kind": "step", "schema_version": 1, "events": null}', 1),
    ("events empty", b'{"kind": "step", "schema_version": 1, "events": []}', 0),
    ("version missing", b'{"kind": "step", "events": [{}]}', 1),
    ("kind missing", b'{"schema_version": 1, "events": [{}]}', 1),
    ("trailing garbage", record(event(0))[:-1] + b"]}x", 1), ("two objects", record(event(0)) * 2, 1),
    ("a BOM then JSON", b"\xef\xbb\xbf" + b'{"kind": "step", "schema_version": 1, "events": []}', 0),  # BOM allowed
    ("NUL bytes", b"\x00" * 64, 1), ("0xff bytes", b"\xff" * 64, 1), ("JSON in UTF-16", '{"a": 1}'.encode("utf-16"), 1),
    ("latin-1 in a string", b'{"kind": "step", "schema_version": 1, "events": [{"host": "\xe9"}]}', 1),
    ("overlong UTF-8", b'{"kind": "st\xc0\xafep", "schema_version": 1, "events": []}', 1),
    ("deep nesting", b"[" * 100_000 + b"]" * 100_000, 1), ("a huge number", b"1" + b"0" * 5000, 1),
]

KINDS: list[tuple[Any, Any, int]] = [
    ("gossip", 1, 1), ("", 1, 1), (None, 1, 1), (123, 1, 1), (["step"], 1, 1), ("STEP", 1, 1), ("step ", 1, 1),
    ("step", 2, 1), ("step", 0, 1), ("step", -1, 1), ("step", "1", 1), ("step", 1.5, 1), ("step", None, 1),
    ("heartbeat", 1, 1), ("nic", 1, 1), ("alert", 1, 1), ("incident", 1, 1), ("command", 1, 1),
]


def corpus() -> list[Case]:
    cases: list[Case] = []
    n = 0

    def add(name: str, value: bytes | None, letters: int, stored: tuple[str, ...] = ()) -> None:
        cases.append(Case(name=f"{name} #{len(cases)}", value=value, letters=letters, stored=stored))

    for name, value, letters in ENVELOPES:
        add(f"envelope/{name}", value, letters)
    for kind, version, letters in KINDS:
        n += 1
        add(f"kind/{kind!r} v{version!r}", record(event(n), kind=kind, version=version), letters)
    for i in range(30):  # a valid record cut short, at seeded points
        whole = record(event(1000 + i))
        cut = random.Random(i).randrange(1, len(whole) - 1)
        add(f"encoding/cut at {cut}", whole[:cut], 1)
    for i in range(30):  # random bytes
        add(f"encoding/random {i}", random.Random(100 + i).randbytes(1 + 37 * i), 1)
    for i, bad in enumerate((b"\xff", b"\xc3\x28", b"\xe2\x82", b"\xf0\x28\x8c\xbc", b"\xed\xa0\x80", b"\xc0\x80")):
        whole = record(event(1100 + i, host="HOSTMARK"))
        add(f"encoding/invalid UTF-8 {bad!r}", whole.replace(b"HOSTMARK", bad), 1)
    for field, value, ok in NUMBERS:
        n += 1
        add(f"number/{field}={value!r}", record(event(n, **{field: value})), 0 if ok else 1, (eid(n),) if ok else ())
    for value, ok in TIMESTAMPS:
        n += 1
        add(f"timestamp/{value!r}", record(event(n, ts=value)), 0 if ok else 1, (eid(n),) if ok else ())
    for field, value, ok in IDENTIFIERS:
        n += 1
        doc = event(n, **{field: value})
        stored = (str(value) if field == "event_id" else eid(n),) if ok else ()
        add(f"identifier/{field}={value!r}"[:120], record(doc), 0 if ok else 1, stored)
    for i, (field, value) in enumerate((("phases", {f"p{i:05d}": 1.0 for i in range(5000)}),
                                        ("phases", {"x" * 256: 1.0}), ("phases", {"x" * 257: 1.0}),
                                        ("phases", {"": 1.0}), ("phases", {"a\nb": 1.0}),
                                        ("phase_kinds", {"forward": "compute"}), ("phase_kinds", {"forward": "magic"}),
                                        ("extra_field", "x"), ("step_ms", "9" * 400), ("host", "x" * 100_000))):
        n += 1
        ok = i in (0, 1, 5)
        add(f"size/{field} #{i}", record(event(n, **{field: value})), 0 if ok else 1, (eid(n),) if ok else ())
    n += 1
    huge = {**event(n, step_ms=-1.0), "phases": {f"{'ü' * 200}{k:05d}": 1.0 for k in range(1500)}}
    add("size/a refused event of ~1 MB", record(huge), 1)
    many = [event(n + 1 + k) for k in range(200)]
    n += 201
    add("size/200 valid events in one record", record(*many), 0, tuple(e["event_id"] for e in many))
    for k, (field, value) in enumerate([(f, v) for f, v, ok in NUMBERS if not ok][:40]):  # one valid, two refused
        n += 3
        mixed = record(event(n - 2), event(n - 1, **{field: value}), event(n, **{field: value}))
        add(f"mixed/{field}={value!r} #{k}", mixed, 2, (eid(n - 2),))
    n += 3  # columnar records: refused whole, or row by row with the reasons of rows
    add("columnar/three valid events", columns(event(n - 2), event(n - 1), event(n)), 0, (eid(n - 2), eid(n - 1), eid(n)))
    n += 2
    add("columnar/one refused row", columns(event(n - 1), event(n, step_ms=-1.0)), 1, (eid(n - 1),))
    for name, value in (("rows claimed short", columns(event(n + 1), event(n + 2), rows=1)),
                        ("rows claimed with whitespace", columns(event(n + 3), rows=5000).replace(b'"rows":5000',
                                                                                                   b'"rows": 5000')),
                        ("a null column", columns(event(n + 4), dropped=None)),
                        ("a column of no field, long", columns(event(n + 5), **{"x" * 100_000: [0]})),
                        ("a column not an array", columns(event(n + 6), tokens=5))):
        add(f"columnar/{name}", value, 1)
    n += 6
    add("columnar/an event sent before as a row", columns(many[0]), 0, (many[0]["event_id"],))
    for k in range(5):  # a valid event delivered again in a later record: stored once
        n += 1
        add(f"duplicate/first {k}", record(event(n)), 0, (eid(n),))
        add(f"duplicate/again {k}", record(event(n)), 0, (eid(n),))
    return cases


def valid_ids(cases: list[Case]) -> set[str]:
    return {i for c in cases for i in c.stored}

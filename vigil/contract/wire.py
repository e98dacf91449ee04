"""Wire format: one Kafka record carries a JSON batch of events of one kind, as rows or as columns.

    {"kind": "heartbeat", "schema_version": 1, "events": [{...}, {...}]}
    {"kind": "step", "schema_version": 1, "rows": 2, "columns": {"event_id": ["a", "b"], "coords.dp": [0, 1], ...}}

Batching is what makes the log fast (a broker serves records, not events, per
second). The high-volume flat kinds (`COLUMNAR`: step, nic) are written as columns,
one JSON array per field (a nested object's fields as `field.sub`; a field left out
takes its default in every row): no per-event keys on the wire, and the ingest reads
them a column at a time without an object per event (`vigil.contract.colwire`). Both
shapes are read for every kind, so records written before stay readable.

Decoding is per event: one bad event in a batch is reported on its own and its
neighbours still go through (a columnar record is read as its rows, each judged
alone; a record whose columns are not all arrays of `rows` values, each named after a field of the kind, is
rejected whole). An
event off the wire must also be fresh: a `ts` older than `base.max_age()` (the
retention) is rejected like a bad field.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any

import msgspec
from pydantic import BaseModel, ValidationError

from vigil.contract.base import DatedAhead, Event, max_age
from vigil.contract.registry import spec_for

COLUMNAR = frozenset({"step", "nic"})
"""Kinds `encode_batch` writes as columns: the ones a large job sends thousands of per second, flat but for
small fixed objects (a step's `coords`)."""
_encode_json = msgspec.json.Encoder().encode


@dataclass(frozen=True, kw_only=True)
class Rejected:
    """An event (or a whole record) that could not be accepted, and why.

    `ahead`: the event was refused only because its `ts` is dated ahead of this host's clock
    (more than the contract's skew allowance): a claim to report, not just a malformed record."""

    reason: str
    payload: Any
    ahead: bool = False


@dataclass(frozen=True, kw_only=True)
class Decoded:
    events: list[Event]
    rejected: list[Rejected]


def encode_batch(events: Sequence[Event], rows: bool = False) -> bytes:
    """Serialise events of one kind and version into one record value: columns for the `COLUMNAR` kinds, else rows
    (`rows`: rows whatever the kind, as producers wrote every kind before columns)."""
    if not events:
        raise ValueError("encode_batch needs at least one event")
    first = events[0]
    kind, version = first.kind, first.schema_version
    for e in events:
        if (e.kind, e.schema_version) != (kind, version):
            raise ValueError("a record carries events of one kind and version only")
    if kind in COLUMNAR and not rows:
        return _encode_columns(events)
    body = ",".join(e.model_dump_json() for e in events)
    return f'{{"kind":"{kind}","schema_version":{version},"events":[{body}]}}'.encode()


def _nested(annotation: Any) -> type[BaseModel] | None:
    """The model of a field that holds one (written as `field.sub` columns), else None."""
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _encode_columns(events: Sequence[Event]) -> bytes:
    """Events of one kind and version as one columnar record (the module docstring's second shape): each field read
    a column at a time (`attrgetter` in C) and encoded by msgspec, which writes these models' values (UTC times as
    RFC 3339 with `Z`, strings, numbers, maps) as their JSON dump does."""
    first = events[0]
    cols: dict[str, list[Any]] = {}
    for name, f in type(first).model_fields.items():
        if name in ("kind", "schema_version"):
            continue
        values = list(map(attrgetter(name), events))
        if (nested := _nested(f.annotation)) is not None:
            cols.update({f"{name}.{sub}": list(map(attrgetter(sub), values)) for sub in nested.model_fields})
        else:
            cols[name] = values
    head = f'{{"kind":"{first.kind}","schema_version":{first.schema_version},"rows":{len(events)},"columns":'
    return head.encode() + _encode_json(cols) + b"}"


def rows_of(doc: dict[str, Any], model: type[BaseModel]) -> list[dict[str, Any]] | str:
    """A columnar record's events as rows (each as a row record's event would be), or why the record is refused:
    `columns` must be a non-empty object of arrays of `rows` values each (so the rows never outnumber the values
    sent), each named after a field of `model` (a nested model's field as `field.sub`, not also given whole), so
    what a row holds is bounded by what the record sends (a name sent once never becomes a key of every row)."""
    cols, rows = doc.get("columns"), doc.get("rows")
    if not isinstance(cols, dict) or not cols:
        return "a columnar record needs a non-empty 'columns' object"
    if type(rows) is not int or rows < 0:
        return "a columnar record needs a non-negative integer 'rows'"
    fields = model.model_fields
    for name, values in cols.items():
        head, _, sub = name.partition(".")
        nested = _nested(fields[head].annotation) if head in fields else None
        if not (nested is not None and sub in nested.model_fields if sub else head in fields):
            return f"column {name[:64]!r} is not a field of {doc.get('kind')} events"
        if sub and head in cols:
            return f"column {name!r} is a field of column {head!r}, given as a column of its own"
        if not isinstance(values, list) or len(values) != rows:
            got = f"{len(values)} values" if isinstance(values, list) else "not an array"
            return f"column {name!r}: {got}, the record has {rows} rows"
    items: list[dict[str, Any]] = [{} for _ in range(rows)]
    for name, values in cols.items():
        head, _, sub = name.partition(".")
        if sub:
            for item, v in zip(items, values, strict=True):
                item.setdefault(head, {})[sub] = v
        else:
            for item, v in zip(items, values, strict=True):
                item[name] = v
    return items


def describe(error: ValidationError) -> str:
    """One line naming each failing field, e.g. `step_ms: Input should be >= 0`."""
    parts = []
    for err in error.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "(root)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def validate_event(kind: str, payload: Any, version: int | None = None) -> Event:
    """Validate one event payload; ValueError naming the field when it is bad."""
    spec = spec_for(kind, version)
    try:
        return spec.model.model_validate(payload)
    except ValidationError as exc:
        raise ValueError(f"invalid {kind} v{spec.version} event: {describe(exc)}") from None


def dated_ahead(error: ValidationError) -> bool:
    """True when every failure in `error` is a `ts` dated ahead (`base.DatedAhead`)."""
    errors = error.errors(include_url=False)
    return bool(errors) and all(e["loc"] == ("ts",) and isinstance(e.get("ctx", {}).get("error"), DatedAhead)
                                for e in errors)


def decode_batch(value: bytes | None) -> Decoded:
    """Decode one record value; never raises, bad parts come back in `rejected`."""
    if value is None:
        return Decoded(events=[], rejected=[Rejected(reason="empty record (no value)", payload=None)])
    try:
        doc = json.loads(value)
    except (ValueError, RecursionError) as exc:  # also a number past int's digit limit, nesting past the stack
        text = value[:2048].decode("utf-8", "replace")
        return Decoded(events=[], rejected=[Rejected(reason=f"not JSON: {exc}", payload=text)])
    columnar = isinstance(doc, dict) and "columns" in doc and "events" not in doc
    if not columnar and (not isinstance(doc, dict) or not isinstance(doc.get("events"), list)):
        return Decoded(events=[], rejected=[Rejected(reason="record must be an object with an 'events' list", payload=doc)])
    kind, version = doc.get("kind"), doc.get("schema_version")
    if not isinstance(kind, str) or not isinstance(version, int):
        return Decoded(events=[], rejected=[Rejected(reason="record needs string 'kind' and integer 'schema_version'", payload=doc)])
    try:
        spec = spec_for(kind, version)
    except ValueError as exc:
        return Decoded(events=[], rejected=[Rejected(reason=str(exc), payload=doc)])
    items = rows_of(doc, spec.model) if columnar else doc["events"]
    if isinstance(items, str):
        return Decoded(events=[], rejected=[Rejected(reason=items, payload=doc)])
    events: list[Event] = []
    rejected: list[Rejected] = []
    oldest = datetime.now(UTC) - max_age()
    for item in items:
        if isinstance(item, dict):
            item = {"kind": kind, "schema_version": version, **item}
        try:
            event = spec.model.model_validate(item)
        except ValidationError as exc:
            rejected.append(Rejected(reason=f"invalid {kind} v{spec.version} event: {describe(exc)}", payload=item,
                                     ahead=dated_ahead(exc)))
            continue
        if event.ts < oldest:
            rejected.append(Rejected(reason=f"invalid {kind} v{version} event: ts: timestamp {event.ts.isoformat()} "
                                            f"is older than the retention ({max_age().days} days)", payload=item))
        else:
            events.append(event)
    return Decoded(events=events, rejected=rejected)


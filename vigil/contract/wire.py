"""Wire format: one Kafka record carries a JSON batch of events of one kind.

    {"kind": "step", "schema_version": 1, "events": [{...}, {...}]}

Batching is what makes the log fast (a broker serves records, not events, per
second). Decoding is per event: one bad event in a batch is reported on its own
and its neighbours still go through. An event off the wire must also be fresh: a
`ts` older than `base.max_age()` (the retention) is rejected like a bad field.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from vigil.contract.base import DatedAhead, Event, max_age
from vigil.contract.registry import spec_for


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


def encode_batch(events: Sequence[Event]) -> bytes:
    """Serialise events of one kind and version into one record value."""
    if not events:
        raise ValueError("encode_batch needs at least one event")
    first = events[0]
    kind, version = first.kind, first.schema_version
    for e in events:
        if (e.kind, e.schema_version) != (kind, version):
            raise ValueError("a record carries events of one kind and version only")
    body = ",".join(e.model_dump_json() for e in events)
    return f'{{"kind":"{kind}","schema_version":{version},"events":[{body}]}}'.encode()


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
    if not isinstance(doc, dict) or not isinstance(doc.get("events"), list):
        return Decoded(events=[], rejected=[Rejected(reason="record must be an object with an 'events' list", payload=doc)])
    kind, version = doc.get("kind"), doc.get("schema_version")
    if not isinstance(kind, str) or not isinstance(version, int):
        return Decoded(events=[], rejected=[Rejected(reason="record needs string 'kind' and integer 'schema_version'", payload=doc)])
    try:
        spec = spec_for(kind, version)
    except ValueError as exc:
        return Decoded(events=[], rejected=[Rejected(reason=str(exc), payload=doc)])
    events: list[Event] = []
    rejected: list[Rejected] = []
    oldest = datetime.now(UTC) - max_age()
    for item in doc["events"]:
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

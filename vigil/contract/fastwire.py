"""The ingest's fast path over the wire format: hot kinds decoded straight from JSON in C.

`decode_fast(value)` makes the same accept/reject decisions and the same values as
`wire.decode_batch` (pydantic, per event), ~15x faster for the high-volume kinds
(step, heartbeat, nic). How it stays exact:

* A record of a hot kind is decoded by msgspec into frozen structs that mirror the
  pydantic models field for field (same names, constraints and defaults, strict types,
  unknown fields refused); its timestamps must be UTC, in `base.UtcDatetime`'s range and fresh (`base.max_age`).
* Only a *plain* record takes it: ASCII, without a backslash and without DEL (0x7f). The
  contract's identifiers refuse C0/C1 control characters (`base.NO_CONTROL`); JSON cannot
  carry a raw C0 one (msgspec refuses it as malformed, as json does), so in a plain record
  no string can hold one, and the structs need no per-string pattern (those regexes were
  80 % of the decode: 13 -> 4.5 us per step event on the bench machine). Nor a timestamp
  finer than the microsecond (msgspec rounds it, pydantic truncates: `wirechecks`, one scan in C),
  nor a step's integer beyond UInt64 (`_steps_fit`, a column at a time). Any other record
  (escapes, non-ASCII text) is judged by pydantic.
* Whatever msgspec does not accept (a bad event, a lax coercion pydantic would make such
  as "3" for an int or a unix-seconds timestamp, invalid JSON, other kinds) sends the
  whole record through `decode_batch`. So the fast path only ever accepts a subset of
  what pydantic accepts, with identical values (tests/backbone/test_fastwire.py compares
  the two on a corpus of odd events), and every rejection is pydantic's, with its reason.

The structs are read by the same processors as the models (duck-typed attributes);
`payload_of` turns either into the JSON payload of a dead letter.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from operator import attrgetter
from typing import Any, Literal

import msgspec

from vigil.contract import colwire
from vigil.contract.base import Event
from vigil.contract.hotkinds import (
    HOT_KINDS,
    AwareTs,
    EventId,
    FastEvent,
    FastHeartbeat,
    FastNic,
    FastStep,
    Ingestable,
    record_prefix,
)
from vigil.contract.wire import Rejected, decode_batch
from vigil.contract.wirechecks import doubted, times_ok, u64_fit


@dataclass(frozen=True, kw_only=True)
class FastDecoded:
    events: list[Ingestable]
    rejected: list[Rejected]


def _record(kind: str, model: type[Any]) -> tuple[bytes, msgspec.json.Decoder[Any]]:
    record = msgspec.defstruct(f"{kind}_record", [("kind", Literal[kind]), ("schema_version", Literal[1]),
                                                  ("events", list[model])], frozen=True,  # type: ignore[valid-type]
                              forbid_unknown_fields=True)  # an unknown key is pydantic's to judge, not skipped
    return record_prefix(kind), msgspec.json.Decoder(record)


_HOT = [_record(kind, model) for kind, model in zip(HOT_KINDS, (FastStep, FastHeartbeat, FastNic), strict=True)]


class _GivenStep(FastStep, frozen=True, forbid_unknown_fields=True, kw_only=True, gc=False):
    event_id: EventId
    ts: AwareTs


class _GivenNic(FastNic, frozen=True, forbid_unknown_fields=True, kw_only=True, gc=False):
    event_id: EventId
    ts: AwareTs


_GIVEN = [_record("step", _GivenStep), _HOT[1], _record("nic", _GivenNic)]
"""The hot decoders for events that name their own event_id and ts (`decode_hot(given=True)`): an event that
leaves them to the decoder is refused (its filled-in values would differ between two decodes of the record)."""
_STEP_U64 = [attrgetter(n) for n in ("step", "tokens", "samples")]
_TS = attrgetter("ts")


def _steps_fit(events: list[Any]) -> bool:
    """Every step's UInt64 fields within UInt64 (`wirechecks.u64_fit` over their columns)."""
    return u64_fit(map(get, events) for get in _STEP_U64)


def decode_hot(value: bytes | None, given: bool = False, now: datetime | None = None) -> list[FastEvent] | None:
    """The events of a hot record when every one of them passes the fast path; None where `decode_fast` would hand
    the record to pydantic (another kind, a record that is not plain, an event msgspec refuses or doubts). With
    `given`, also None when a step or NIC event lacks its event_id or ts (the decode process: `offload`); a
    columnar record always names both (`colwire`). `now`: the clock the freshness checks read (default: now)."""
    kind = colwire.is_columnar(value)
    if kind is not None:
        assert value is not None
        cols = colwire.decode_columnar(value, kind, now)
        return None if cols is None else colwire.events_of(kind, cols)
    if value is not None:
        for prefix, decoder in _GIVEN if given else _HOT:
            if value.startswith(prefix):
                if doubted(value):  # scanned only for a hot kind: other records go to pydantic unscanned
                    return None
                try:
                    events = list(decoder.decode(value).events)
                except (msgspec.ValidationError, msgspec.DecodeError, ValueError, RecursionError):
                    return None
                if prefix == _HOT[0][0] and not _steps_fit(events):
                    return None
                return events if times_ok(list(map(_TS, events)), now) else None
    return None


def decode_fast(value: bytes | None) -> FastDecoded:
    """`decode_batch(value)`, with hot kinds as structs when every event of the record passes the fast path."""
    events = decode_hot(value)
    if events is not None:
        return FastDecoded(events=[*events], rejected=[])
    slow = decode_batch(value)
    return FastDecoded(events=list(slow.events), rejected=slow.rejected)


def payload_of(event: Ingestable) -> Any:
    """The event as JSON-able data (a dead letter's payload)."""
    if isinstance(event, Event):
        return event.model_dump(mode="json")
    return msgspec.to_builtins(event)

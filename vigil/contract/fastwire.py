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
  finer than the microsecond (msgspec rounds it, pydantic truncates: `_SUBMICRO`, one scan in C),
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

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import attrgetter
from typing import Annotated, Any, Literal

import msgspec
import re2
from msgspec import Meta, Struct

from vigil.contract.base import EARLIEST, FLOAT_MAX, Event, max_age, max_ahead, new_event_id
from vigil.contract.phases import PhaseKind
from vigil.contract.wire import Rejected, decode_batch

# No `pattern`: a plain record (`_plain`) cannot carry a control character (module docstring).
Name = Annotated[str, Meta(min_length=1, max_length=256)]
EventId = Annotated[str, Meta(min_length=8, max_length=64)]
Text = Annotated[str, Meta(max_length=256)]
U32 = Annotated[int, Meta(ge=0, le=2**32 - 1)]
U64 = Annotated[int, Meta(ge=0)]  # msgspec bounds stop at int64: the upper bound is checked by _fits_u64
Finite = Annotated[float, Meta(ge=-FLOAT_MAX, le=FLOAT_MAX)]  # JSON has no NaN: bounds refuse the infinities
NonNeg = Annotated[float, Meta(ge=0, le=FLOAT_MAX)]
Positive = Annotated[float, Meta(gt=0, le=FLOAT_MAX)]
AwareTs = Annotated[datetime, Meta(tz=True)]


U64_MAX = 2**64 - 1


def _fits_u64(*values: int | None) -> None:
    """Raise (msgspec turns it into a ValidationError) when a UInt64 field is beyond its column."""
    if any(v is not None and v > U64_MAX for v in values):
        raise ValueError("integer beyond UInt64")


class _Envelope(Struct, frozen=True, forbid_unknown_fields=True, kw_only=True, gc=False):
    event_id: EventId = msgspec.field(default_factory=new_event_id)
    job_id: Name
    host: Name
    ts: AwareTs = msgspec.field(default_factory=lambda: datetime.now(UTC))  # UTC and in range: see decode_fast


class FastCoords(Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    dp: U32 = 0
    tp: U32 = 0
    pp: U32 = 0


class FastStep(_Envelope, frozen=True, forbid_unknown_fields=True, kw_only=True, gc=False):
    kind: Literal["step"] = "step"
    schema_version: Literal[1] = 1
    rank: U32
    local_rank: U32 = 0
    world_size: Annotated[int, Meta(ge=1, le=2**32 - 1)]
    coords: FastCoords = FastCoords()
    step: U64
    step_ms: NonNeg
    phases: dict[Name, NonNeg] = msgspec.field(default_factory=dict)
    phase_kinds: dict[Name, PhaseKind] = msgspec.field(default_factory=dict)
    tokens: U64 | None = None
    samples: U64 | None = None
    tflops: NonNeg | None = None
    mfu: Annotated[float, Meta(ge=0, le=1.5)] | None = None
    failed: bool = False
    dropped: U32 = 0
    # step, tokens, samples: beyond UInt64 is checked a column at a time per record (`_steps_fit`), not per event


class FastGpu(Struct, frozen=True, forbid_unknown_fields=True, kw_only=True, gc=False):
    index: U32
    name: Text = ""
    uuid: Text = ""
    util_pct: Finite | None = None
    mem_used_mib: Finite | None = None
    mem_total_mib: Finite | None = None
    temp_c: Finite | None = None
    power_w: Finite | None = None
    sm_clock_mhz: Finite | None = None
    throttle_reasons: Annotated[list[Text], Meta(max_length=64)] = msgspec.field(default_factory=list)
    ecc_uncorrected: U64 | None = None
    retired_pages: U64 | None = None

    def __post_init__(self) -> None:
        _fits_u64(self.ecc_uncorrected, self.retired_pages)


class FastProcess(Struct, frozen=True, forbid_unknown_fields=True, kw_only=True, gc=False):
    pid: U32
    status: Text
    local_rank: U32 | None = None
    cpu_pct: Finite | None = None
    rss_mib: Finite | None = None


class FastHeartbeat(_Envelope, frozen=True, forbid_unknown_fields=True, kw_only=True, gc=False):
    kind: Literal["heartbeat"] = "heartbeat"
    schema_version: Literal[1] = 1
    ip: Text = ""
    pod: Text = ""
    node: Text = ""
    agent_version: Text = ""
    uptime_s: NonNeg = 0.0
    interval_s: Positive = 2.0
    processes: list[FastProcess] = msgspec.field(default_factory=list)
    gpus: list[FastGpu] = msgspec.field(default_factory=list)
    dropped_events: U64 = 0
    spooled_events: U64 = 0

    def __post_init__(self) -> None:
        _fits_u64(self.dropped_events, self.spooled_events)


class FastNic(_Envelope, frozen=True, forbid_unknown_fields=True, kw_only=True, gc=False):
    kind: Literal["nic"] = "nic"
    schema_version: Literal[1] = 1
    device: Name
    port: U32 = 1
    link: Literal["rdma", "ethernet"]
    tx_bytes: U64
    rx_bytes: U64
    tx_bps: NonNeg
    rx_bps: NonNeg
    interval_s: Positive
    extra: dict[Name, U64] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        _fits_u64(self.tx_bytes, self.rx_bytes, *self.extra.values())


FastEvent = FastStep | FastHeartbeat | FastNic
Ingestable = Event | FastStep | FastHeartbeat | FastNic
"""What the ingest consumes: a validated pydantic event or its fast-path mirror."""


@dataclass(frozen=True, kw_only=True)
class FastDecoded:
    events: list[Ingestable]
    rejected: list[Rejected]


def _record(kind: str, model: type[Any]) -> tuple[bytes, msgspec.json.Decoder[Any]]:
    record = msgspec.defstruct(f"{kind}_record", [("kind", Literal[kind]), ("schema_version", Literal[1]),
                                                  ("events", list[model])], frozen=True,  # type: ignore[valid-type]
                              forbid_unknown_fields=True)  # an unknown key is pydantic's to judge, not skipped
    return f'{{"kind":"{kind}","schema_version":1,'.encode(), msgspec.json.Decoder(record)


_HOT = [_record("step", FastStep), _record("heartbeat", FastHeartbeat), _record("nic", FastNic)]


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
_TS, _TZINFO = attrgetter("ts"), attrgetter("tzinfo")
_UTC_ID = {id(UTC)}  # the one UTC object (a zero offset of another tzinfo goes to pydantic, as before)


def _u64_fit(columns: Iterable[Iterable[int | None]]) -> bool:
    """Every value of these integer columns within UInt64, a column at a time in C (`max` over `filter`)."""
    return all(max(filter(None, col), default=0) <= U64_MAX for col in columns)


def _steps_fit(events: list[Any]) -> bool:
    """Every step's UInt64 fields within UInt64 (`_u64_fit` over their columns)."""
    return _u64_fit(map(get, events) for get in _STEP_U64)


_SUBMICRO = re2.compile(rb"(?s):..:\d\d\.\d{7}")
"""A time of day finer than the microsecond, ":SS.fffffff" with another colon 3 bytes before (HH:MM:SS), whatever
separates date and time: msgspec rounds those digits, pydantic truncates them, so such a record goes to pydantic. A
float such as "x":12.34567891 is not one. One linear scan in C, which skips to each colon (~0.3 us of a step event;
it also looked for 20 digits in a row, integers beyond UInt64, at twice the cost: `_steps_fit` checks the values
instead, ~0.1 us)."""


def _plain(value: bytes) -> bool:
    """No string in this record can hold a control character: ASCII, no escape, no DEL."""
    return value.isascii() and b"\\" not in value and b"\x7f" not in value


def _doubted(value: bytes) -> bool:
    """A record the fast path leaves to pydantic before decoding it: not plain, or a time finer than the microsecond."""
    return not _plain(value) or _SUBMICRO.search(value) is not None


def _times_ok(times: list[datetime], now: datetime | None) -> bool:
    """Each time UTC (the one UTC object) and inside the wire's range at `now` (else pydantic says why)."""
    now = now or datetime.now(UTC)
    return not times or (set(map(id, map(_TZINFO, times))) == _UTC_ID and max(EARLIEST, now - max_age()) <= min(times)
                         and max(times) <= now + max_ahead())


HOT_PREFIXES: dict[str, bytes] = {kind: prefix for kind, (prefix, _d) in zip(("step", "heartbeat", "nic"), _HOT, strict=True)}
"""kind -> how a record of that hot kind begins (as the producer writes it): a record is claimed by its first bytes."""


def decode_hot(value: bytes | None, given: bool = False, now: datetime | None = None) -> list[FastEvent] | None:
    """The events of a hot record when every one of them passes the fast path; None where `decode_fast` would hand
    the record to pydantic (another kind, a record that is not plain, an event msgspec refuses or doubts). With
    `given`, also None when a step or NIC event lacks its event_id or ts (the decode process: `offload`); a
    columnar record always names both (`colwire`). `now`: the clock the freshness checks read (default: now)."""
    from vigil.contract import colwire  # built on this module's structs: imported once it is whole

    kind = colwire.is_columnar(value)
    if kind is not None:
        assert value is not None
        cols = colwire.decode_columnar(value, kind, now)
        return None if cols is None else colwire.events_of(kind, cols)
    if value is not None:
        for prefix, decoder in _GIVEN if given else _HOT:
            if value.startswith(prefix):
                if _doubted(value):  # scanned only for a hot kind: other records go to pydantic unscanned
                    return None
                try:
                    events = list(decoder.decode(value).events)
                except (msgspec.ValidationError, msgspec.DecodeError, ValueError, RecursionError):
                    return None
                if prefix == _HOT[0][0] and not _steps_fit(events):
                    return None
                return events if _times_ok(list(map(_TS, events)), now) else None
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

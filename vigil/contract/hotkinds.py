"""The hot kinds (step, heartbeat, nic): the fast path's frozen msgspec mirrors of their pydantic models.

A 10,000-GPU job sends thousands of these per second; the ingest decodes them in C (`fastwire` for row records,
`colwire` for columnar ones) into these structs, which mirror the models field for field (same names, constraints
and defaults, strict types, unknown fields refused; tests/backbone/test_fastwire_schema.py holds them to the models).
`HOT_KINDS` is the one list of those kinds; `HOT_PREFIXES` how a record of each begins as the producer writes it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

import msgspec
from msgspec import Meta, Struct

from vigil.contract.base import FLOAT_MAX, Event, new_event_id
from vigil.contract.phases import PhaseKind

HOT_KINDS: tuple[str, ...] = ("step", "heartbeat", "nic")
"""Kinds a large job sends thousands of per second: decoded by the fast path, their re-sends caught in memory."""


def record_prefix(kind: str) -> bytes:
    """How a record of `kind` begins, as the producer writes it: a record is claimed by its first bytes."""
    return f'{{"kind":"{kind}","schema_version":1,'.encode()


HOT_PREFIXES: dict[str, bytes] = {kind: record_prefix(kind) for kind in HOT_KINDS}

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
    loss: Finite | None = None
    grad_norm: NonNeg | None = None
    nonfinite: U32 | None = None
    update_ratio: NonNeg | None = None
    digest: Annotated[int, Meta(ge=-(2**63), le=2**63 - 1)] | None = None
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


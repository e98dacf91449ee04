"""The envelope every vigil event shares: identity, origin and a UTC timestamp; the bounds of every value.

Every fact and decision carries `schema_version` (bumped on breaking change),
a unique `event_id` (downstream dedups on it), the `job_id` and `host` it is
about, and `ts`, an aware UTC datetime. Unix seconds and ISO strings with an
offset are accepted; naive datetimes are rejected because their zone is a guess,
and so are timestamps before 2000 or more than the clock skew allowance ahead
(`VIGIL_CONTRACT_CLOCK_SKEW_S`, 300 s by default). Events entering through the
wire must also be fresh: not older than `VIGIL_CONTRACT_MAX_AGE_DAYS` (the
ClickHouse retention, 30 days by default; see `wire.decode_batch`).

Values are bounded as the columns that store them are: no NaN or infinity, no
negative durations, integers within UInt32/UInt64/Int32 (`U32`, `U64`, `I32`),
and identifiers (`Name`: job, host, device, phase names...) without control
characters.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
NO_CONTROL = r"^[^\x00-\x1f\x7f-\x9f]*$"
"""An identifier without C0/C1 control characters (NUL, newline, escape, ...)."""
FLOAT_MAX = 1.7976931348623157e308


class ContractSettings(BaseSettings):
    """How far event time may stray from this host's clock (`VIGIL_CONTRACT_...`)."""

    model_config = SettingsConfigDict(env_prefix="VIGIL_CONTRACT_", extra="ignore")

    clock_skew_s: float = Field(default=300.0, ge=0, le=86_400, description="how far ahead an event's ts may be")
    max_age_days: float = Field(default=30.0, gt=0, description="how old an event entering the wire may be")


@cache
def window() -> ContractSettings:
    """The process's time window (read once from the environment)."""
    return ContractSettings()


def max_ahead() -> timedelta:
    return timedelta(seconds=window().clock_skew_s)


def max_age() -> timedelta:
    return timedelta(days=window().max_age_days)


class DatedAhead(ValueError):
    """A timestamp more than the clock skew allowance ahead of this host's clock (a typed cause: a
    consumer tells a future-dated claim from a malformed event by it, never by the message)."""


def _require_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("timestamp must carry a UTC offset (naive datetimes are ambiguous)")
    value = value.astimezone(UTC)
    if not EARLIEST <= value <= datetime.now(UTC) + max_ahead():
        error = DatedAhead if value > EARLIEST else ValueError
        raise error(f"timestamp {value.isoformat()} is out of range (2000-01-01 .. now + "
                    f"{window().clock_skew_s:g} s of clock skew)")
    return value


UtcDatetime = Annotated[datetime, AfterValidator(_require_utc)]
Name = Annotated[str, Field(min_length=1, max_length=256, pattern=NO_CONTROL)]
Text = Annotated[str, Field(max_length=256, pattern=NO_CONTROL)]
"""A short label that may be empty (ip, pod, status...), without control characters."""
U32 = Annotated[int, Field(ge=0, le=2**32 - 1)]
U64 = Annotated[int, Field(ge=0, le=2**64 - 1)]
I32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
VALID_MAX_S = 400 * 86_400
ValidFor = Annotated[float, Field(gt=0, le=VALID_MAX_S, allow_inf_nan=False)]
"""A signed decision's validity after its `ts`, in seconds (`vigil.signing.freshness`)."""
"""A duration, rate or size: finite and not negative."""
MODEL_CONFIG = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
"""Every contract model: unknown fields refused, immutable, no NaN or infinity in any float."""


def new_event_id() -> str:
    return uuid.uuid4().hex


def utcnow() -> datetime:
    return datetime.now(UTC)


class Event(BaseModel):
    """Fields common to every event kind; subclasses pin `kind` and `schema_version`."""

    model_config = MODEL_CONFIG

    kind: str
    schema_version: int
    event_id: str = Field(default_factory=new_event_id, min_length=8, max_length=64, pattern=NO_CONTROL)
    job_id: Name
    host: Name
    ts: UtcDatetime = Field(default_factory=utcnow)


class RankScoped(Event):
    """An event emitted for one training rank; `rank` is the global rank."""

    rank: U32
    local_rank: U32 = 0

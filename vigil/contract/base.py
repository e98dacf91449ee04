"""The envelope every vigil event shares: identity, origin and a UTC timestamp.

Every fact and decision carries `schema_version` (bumped on breaking change),
a unique `event_id` (downstream dedups on it), the `job_id` and `host` it is
about, and `ts`, an aware UTC datetime. Unix seconds and ISO strings with an
offset are accepted; naive datetimes are rejected because their zone is a guess,
and so are timestamps before 2000 or more than a day ahead (a broken clock).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
MAX_AHEAD = timedelta(days=1)  # clock skew allowance; beyond it a timestamp would drag event-time clocks


def _require_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("timestamp must carry a UTC offset (naive datetimes are ambiguous)")
    value = value.astimezone(UTC)
    if not EARLIEST <= value <= datetime.now(UTC) + MAX_AHEAD:
        raise ValueError(f"timestamp {value.isoformat()} is out of range (2000-01-01 .. now + 1 day)")
    return value


UtcDatetime = Annotated[datetime, AfterValidator(_require_utc)]
Name = Annotated[str, Field(min_length=1, max_length=256)]


def new_event_id() -> str:
    return uuid.uuid4().hex


def utcnow() -> datetime:
    return datetime.now(UTC)


class Event(BaseModel):
    """Fields common to every event kind; subclasses pin `kind` and `schema_version`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
    schema_version: int
    event_id: str = Field(default_factory=new_event_id, min_length=8, max_length=64)
    job_id: Name
    host: Name
    ts: UtcDatetime = Field(default_factory=utcnow)


class RankScoped(Event):
    """An event emitted for one training rank; `rank` is the global rank."""

    rank: int = Field(ge=0)
    local_rank: int = Field(default=0, ge=0)

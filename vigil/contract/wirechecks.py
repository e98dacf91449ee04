"""The checks a fast-path decode makes before it may accept a record, shared by the row (`fastwire`) and the
columnar (`colwire`) paths.

Each check sends a record the fast path cannot judge exactly to pydantic (`wire.decode_batch`), which then decides
with its reason: a record that is not plain (non-ASCII, an escape, DEL), a time finer than the microsecond, an
integer beyond UInt64, a time that is not the one UTC object or outside the wire's range at `now`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from operator import attrgetter

import re2

from vigil.contract.base import EARLIEST, max_age, max_ahead
from vigil.contract.hotkinds import U64_MAX

_TZINFO = attrgetter("tzinfo")
_UTC_ID = {id(UTC)}  # the one UTC object (a zero offset of another tzinfo goes to pydantic, as before)


def u64_fit(columns: Iterable[Iterable[int | None]]) -> bool:
    """Every value of these integer columns within UInt64, a column at a time in C (`max` over `filter`)."""
    return all(max(filter(None, col), default=0) <= U64_MAX for col in columns)



_SUBMICRO = re2.compile(rb"(?s):..:\d\d\.\d{7}")
"""A time of day finer than the microsecond, ":SS.fffffff" with another colon 3 bytes before (HH:MM:SS), whatever
separates date and time: msgspec rounds those digits, pydantic truncates them, so such a record goes to pydantic. A
float such as "x":12.34567891 is not one. One linear scan in C, which skips to each colon (~0.3 us of a step event;
it also looked for 20 digits in a row, integers beyond UInt64, at twice the cost: `fastwire`'s step check reads the values
instead, ~0.1 us)."""


def _plain(value: bytes) -> bool:
    """No string in this record can hold a control character: ASCII, no escape, no DEL."""
    return value.isascii() and b"\\" not in value and b"\x7f" not in value


def doubted(value: bytes) -> bool:
    """A record the fast path leaves to pydantic before decoding it: not plain, or a time finer than the microsecond."""
    return not _plain(value) or _SUBMICRO.search(value) is not None


def times_ok(times: list[datetime], now: datetime | None) -> bool:
    """Each time UTC (the one UTC object) and inside the wire's range at `now` (else pydantic says why)."""
    now = now or datetime.now(UTC)
    return not times or (set(map(id, map(_TZINFO, times))) == _UTC_ID and max(EARLIEST, now - max_age()) <= min(times)
                         and max(times) <= now + max_ahead())


"""The one rule for "the latest event of an alert or incident wins", in Python and in SQL.

Every fold of alert and incident events (the analyzer's books and views, `vigil alerts` and `vigil incidents`,
the recovery controller, the notifier, the ClickHouse views `alerts_current` and `incidents_current`) orders two
events of the same alert (or incident) by `order_key`: the later event time wins; at the same time an ended
event (resolved) wins over a running one; at the same time and state the greater `event_id` wins. The order is
total and ignores arrival order, so two readers of the same events agree whatever order their partitions
arrived in, and a duplicate (the same event again) never supersedes itself.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

ENDED = "resolved"
"""The status of an alert or incident that ended."""

SQL_ORDER = f"(ts, status = '{ENDED}', event_id)"
"""`order_key` as a ClickHouse tuple over an event table's columns: `argMax(x, <SQL_ORDER>)`."""


class Versioned(Protocol):
    @property
    def ts(self) -> datetime: ...
    @property
    def status(self) -> str: ...
    @property
    def event_id(self) -> str: ...


def order_key(e: Versioned) -> tuple[datetime, bool, str]:
    return (e.ts, e.status == ENDED, e.event_id)


def supersedes(new: Versioned, held: Versioned | None) -> bool:
    """True when `new` replaces `held` as the latest event of its alert or incident."""
    return held is None or order_key(new) > order_key(held)

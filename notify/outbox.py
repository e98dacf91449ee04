"""Where decisions and deliveries are kept: `notify_deliveries` (delivery log and retry queue), `notify_silences`.

A decision is inserted (revision 0, state `pending`) before anything is sent and before the
consumer commits the offsets of the events behind it; each attempt's outcome is inserted as
the next revision. So after a crash, what was decided is known (the notification log, read
back at start: nothing is decided twice) and what was not delivered yet is queued again, in
the order it was decided. ClickHouse holds it because the dashboard shows it and every
vigil deployment already has one; the volume is what on-call can read, a few rows a minute.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

from vigil.contract import Silence
from vigil.notify.payload import Notification
from vigil.notify.planner import Sent

TABLE = "notify_deliveries"
SILENCES = "notify_silences"
DONE = ("delivered", "failed", "expired", "dropped")


def _utc(t: datetime) -> datetime:
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


@dataclass(kw_only=True)
class Delivery:
    """One notification to one receiver and how its delivery went so far (a row's latest revision)."""

    key: str
    receiver: str
    receiver_kind: str
    group_key: str
    route: str
    seq: int
    job_id: str
    status: str
    reason: str
    severity: str
    title: str
    firing: list[str]
    digest: str
    last_seen: datetime
    created: datetime
    body: str
    rev: int = 0
    state: str = "pending"
    attempts: int = 0
    http_status: int = 0
    error: str = ""
    latency_ms: float = 0.0
    updated: datetime = field(default_factory=lambda: datetime.now(UTC))

    @classmethod
    def of(cls, n: Notification, receiver_kind: str, body: bytes) -> Delivery:
        return cls(key=n.key, receiver=n.receiver, receiver_kind=receiver_kind, group_key=n.group_key, route=n.route,
                   seq=n.seq, job_id=n.job_id, status=n.status, reason=n.reason, severity=n.severity, title=n.title,
                   firing=list(n.firing), digest=n.digest, last_seen=n.last_seen, created=n.created,
                   body=body.decode(), updated=n.created)

    def revise(self, now: datetime, **changes: Any) -> None:
        """The next revision: `changes` applied, stamped `now`."""
        for k, v in changes.items():
            setattr(self, k, v)
        self.rev += 1
        self.updated = now


COLUMNS = [f.name for f in fields(Delivery)]


class Outbox:
    def __init__(self, client: Any) -> None:
        self._client = client
        self._lock = threading.Lock()  # the planner and every lane write; one call at a time

    def save(self, deliveries: Sequence[Delivery]) -> None:
        """Insert the current revision of each; raises while ClickHouse fails (callers retry)."""
        if deliveries:
            rows = [[getattr(d, c) for c in COLUMNS] for d in deliveries]
            with self._lock:
                self._client.insert(TABLE, rows, column_names=COLUMNS)

    def load_log(self) -> list[tuple[str, str, Sent]]:
        """(group key, receiver, last notification) for every group and receiver ever notified."""
        sql = (f"SELECT group_key, receiver, max(seq), argMax(status, seq), argMax(firing, seq), argMax(digest, seq), "
               f"argMax(created, seq), argMax(last_seen, seq), argMax(job_id, seq), argMax(route, seq) "
               f"FROM {TABLE} GROUP BY group_key, receiver")
        out = []
        for g, r, seq, status, firing, digest, created, last_seen, job, route in self._client.query(sql).result_rows:
            out.append((str(g), str(r), Sent(seq=int(seq), status=status, firing=tuple(firing), digest=str(digest),
                                             at=_utc(created).timestamp(), last_seen=_utc(last_seen), job_id=str(job),
                                             route=str(route))))
        return out

    def load_pending(self) -> list[Delivery]:
        """Undelivered notifications, in the order they were decided."""
        sql = f"SELECT {', '.join(COLUMNS)} FROM {TABLE} FINAL WHERE state = 'pending' ORDER BY created, key"
        out = []
        for row in self._client.query(sql).result_rows:
            doc = dict(zip(COLUMNS, row, strict=True))
            for t in ("last_seen", "created", "updated"):
                doc[t] = _utc(doc[t])
            doc["firing"] = list(doc["firing"])
            doc["body"] = doc["body"].decode() if isinstance(doc["body"], bytes) else str(doc["body"])
            out.append(Delivery(**doc))
        return out

    def mirror(self, silences: Sequence[Silence]) -> None:
        if not silences:
            return
        cols = ["silence_id", "ts", "matchers", "starts_at", "ends_at", "created_by", "reason", "status", "event"]
        rows = [[s.silence_id, s.ts, json.dumps(s.matchers, sort_keys=True), s.starts_at, s.ends_at, s.created_by,
                 s.reason, s.status, s.model_dump_json()] for s in silences]
        with self._lock:
            self._client.insert(SILENCES, rows, column_names=cols)

    def load_silences(self) -> list[Silence]:
        rows = self._client.query(f"SELECT event FROM {SILENCES} FINAL").result_rows
        return [Silence.model_validate_json(r[0]) for r in rows]

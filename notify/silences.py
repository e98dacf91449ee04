"""Silences: mute what matches for a while, with a reason; folded from `silence` events.

A silence is a decision like any other, so it is an event on the `silences` topic: `vigil
silence add` publishes one from any machine that reaches Kafka (the CLI needs no write
access to ClickHouse, which the embedded stack holds alone), the notifier folds them (the
latest event of a `silence_id` wins, so `expire` ends one early) and mirrors them into
`notify_silences` for the dashboard and for silences that outlive the topic's retention.
A silence mutes notifications, it does not hide alerts: the dashboard still shows them, and
an alert that was paged before its silence began still gets its resolve.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from vigil.contract import Silence
from vigil.notify.matchers import Labels, matches

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> timedelta:
    """`90s`, `30m`, `2h`, `1.5d`, `1w`; ValueError otherwise."""
    m = _DURATION.match(text)
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"not a duration: {text!r} (e.g. 30m, 2h, 1d)")
    return timedelta(seconds=float(m.group(1)) * _UNIT_S[m.group(2)])


def parse_matchers(specs: Iterable[str]) -> dict[str, str]:
    """`job=llama-*`, `kind=straggler,host=node-07` (comma or repeated) -> {label: glob}."""
    out: dict[str, str] = {}
    for spec in specs:
        for part in spec.split(","):
            name, eq, glob = part.partition("=")
            if not eq or not name.strip() or not glob.strip():
                raise ValueError(f"--match {spec!r}: expected label=glob, e.g. job=llama-* or host=node-0007")
            out[name.strip()] = glob.strip()
    if not out:
        raise ValueError("a silence needs at least one --match label=glob")
    return out


def new_silence(matchers: dict[str, str], duration: timedelta, reason: str, by: str, now: datetime) -> Silence:
    return Silence(job_id=matchers.get("job", "*"), host=matchers.get("host", "*"), ts=now,
                   silence_id=uuid.uuid4().hex[:12], matchers=matchers, starts_at=now, ends_at=now + duration,
                   created_by=by, reason=reason)


def expired(s: Silence, now: datetime) -> Silence:
    """The event that ends `s` now."""
    return s.model_copy(update={"event_id": uuid.uuid4().hex, "ts": max(now, s.ts), "status": "expired",
                                "ends_at": max(min(now, s.ends_at), s.starts_at + timedelta(milliseconds=1))})


def state_of(s: Silence, now: datetime) -> str:
    if s.status == "expired" or s.ends_at <= now:
        return "expired"
    return "pending" if s.starts_at > now else "active"


@dataclass(kw_only=True)
class SilenceBook:
    silences: dict[str, Silence] = field(default_factory=dict)
    version: int = 0  # changes whenever a silence is added or changed

    def apply(self, s: Silence) -> bool:
        """Fold one event; False when it is older than what is known of that silence."""
        held = self.silences.get(s.silence_id)
        if held is not None and (s.ts, s.status == "expired") <= (held.ts, held.status == "expired"):
            return False
        self.silences[s.silence_id] = s
        self.version += 1
        return True

    def active(self, now: datetime) -> list[Silence]:
        return [s for s in self.silences.values() if state_of(s, now) == "active"]

    def active_ids(self, now: datetime) -> set[str]:
        return {s.silence_id for s in self.active(now)}

    def muting(self, labels: Labels, now: datetime) -> Silence | None:
        """The first active silence whose matchers all hold for `labels`."""
        return next((s for s in self.active(now) if matches(s.matchers, labels)), None)

    def listing(self, now: datetime, include_expired: bool = False) -> list[Silence]:
        rows = [s for s in self.silences.values() if include_expired or state_of(s, now) != "expired"]
        return sorted(rows, key=lambda s: (s.starts_at, s.silence_id))

"""The notifier's decisions as one pure object: state, routes and notification log in, notifications out.

    d = Decider(settings=..., links=...)
    d.state.apply(event)            # alerts, incidents, silences (any order, any number of times)
    due = d.decide(now)             # notifications due at wall-clock `now` (seconds)
    ... save them ...
    d.record(due)                   # only once saved: what is not recorded is decided again

The service wraps it with Kafka, ClickHouse and HTTP; tests drive it with a made-up clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from vigil.notify.classify import Classifier
from vigil.notify.grouping import Group, build_groups
from vigil.notify.links import Links
from vigil.notify.payload import Notification, build
from vigil.notify.planner import NotifyLog, plan
from vigil.notify.routing import Router
from vigil.notify.settings import NotifySettings
from vigil.notify.state import NotifyState


@dataclass(kw_only=True)
class Decider:
    settings: NotifySettings
    links: Links
    state: NotifyState = field(default_factory=NotifyState)
    log: NotifyLog = field(default_factory=NotifyLog)
    since: dict[str, float] = field(default_factory=dict)
    groups_firing: int = 0
    alerts_by_state: dict[str, int] = field(default_factory=dict)  # firing alerts: paging, silenced, inhibited

    def __post_init__(self) -> None:
        self.router = Router(self.settings)
        self.classifier = Classifier(self.router)
        self._last_ms = 0

    def decide(self, now: float) -> list[Notification]:
        """Due notifications, ordered as they are to be delivered: by decision time (milliseconds, strictly
        increasing from one call to the next), then by key. The delivery log restores that same order."""
        at = datetime.fromtimestamp(now, UTC)
        outstanding = {fp for sent in self.log.entries.values() if sent.status == "firing" for fp in sent.firing}
        groups = build_groups(self.state, self.router, at, self.classifier, outstanding)
        self.groups_firing = sum(1 for g in groups if g.firing())
        self.alerts_by_state = alert_states(groups)
        decisions = plan(groups, self.log, self.since, now)
        if not decisions:
            return []
        self._last_ms = max(int(now * 1000), self._last_ms + 1)
        created = datetime.fromtimestamp(self._last_ms // 1000, UTC).replace(microsecond=self._last_ms % 1000 * 1000)
        return sorted((build(d, self.state, self.links, created) for d in decisions), key=lambda n: n.key)

    def prune(self, now: float, keep_s: float) -> None:
        """Forget alerts and incidents resolved more than `keep_s` ago."""
        if self.state.prune(datetime.fromtimestamp(now, UTC), timedelta(seconds=keep_s)):
            self.classifier.keep_only(set(self.state.alerts))

    def record(self, notifications: Sequence[Notification]) -> None:
        for n in notifications:
            self.log.record(n.group_key, n.receiver, n.sent())


def alert_states(groups: Sequence[Group]) -> dict[str, int]:
    """Firing alerts by what the notifier does with them: page, hold silenced, or fold into their incident's page."""
    out = dict.fromkeys(("paging", "silenced", "inhibited"), 0)
    for g in groups:
        for m in g.members:
            if m.alert.status != "firing":
                continue
            state = "silenced" if m.muted_by or g.muted_by else "inhibited" if m.role == "victim" else "paging"
            out[state] += 1
    return out

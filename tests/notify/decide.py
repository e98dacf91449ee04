"""The notifier's Decider on a made-up clock, driven the way the service drives it."""

from __future__ import annotations

from typing import Any

from tests.notify.events import T0
from vigil.contract import Event
from vigil.notify.decider import Decider
from vigil.notify.links import Links
from vigil.notify.payload import Notification
from vigil.notify.settings import NotifySettings

HOOK = {"kind": "webhook", "url": "http://127.0.0.1:9/hook", "secret": "s3cret"}


def settings(**kw: Any) -> NotifySettings:
    base: dict[str, Any] = {"receivers": {"oncall": HOOK}, "group_wait_s": 10, "group_interval_s": 60,
                            "repeat_interval_s": 3600, "dashboard_url": "http://dash.example"}
    return NotifySettings(**{**base, **kw})


class Clock:
    """Decider + wall clock in seconds after T0, driven like the service drives it: `feed` folds events and
    decides (a consumed batch), `at(t)` decides (a tick); both record what they decide and return it."""

    def __init__(self, s: NotifySettings | None = None) -> None:
        self.d = Decider(settings=s or settings(), links=Links("http://dash.example"))
        self.sent: list[Notification] = []
        self.now = 0.0

    def feed(self, *events: Event) -> list[Notification]:
        for e in events:
            self.d.state.apply(e)
        return self.at(self.now)

    def at(self, t: float) -> list[Notification]:
        self.now = t
        due = self.d.decide(T0.timestamp() + t)
        self.d.record(due)
        self.sent += due
        return due



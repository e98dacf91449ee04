"""What is worked out once per alert event, not on every tick: labels, routes and group keys, the incident
its evidence names, and which silences' matchers hold for it.

Routes depend only on an alert's labels and the configuration, so they are computed when a new
event of the alert arrives; silence matchers likewise, again whenever the set of silences changes
(`SilenceBook.version`). What depends on the clock (is that silence active now?) is left to the
caller, over the few candidates found here. This keeps a tick over tens of thousands of known
alerts to a few dictionary lookups each.
"""

from __future__ import annotations

from dataclasses import dataclass

from vigil.contract import Alert
from vigil.notify.matchers import Labels, alert_labels, first, matches
from vigil.notify.routing import Match, Router
from vigil.notify.silences import SilenceBook


@dataclass(frozen=True, kw_only=True)
class Placement:
    """One route an alert takes, the key of its group there and that group's labels."""

    match: Match
    key: str
    labels: dict[str, str]


@dataclass(kw_only=True)
class Classified:
    event_id: str
    labels: Labels
    placements: tuple[Placement, ...]
    named_incident: str | None
    silences_version: int = -1
    silences: tuple[str, ...] = ()  # ids of the silences whose matchers hold (active or not)


def group_key(route: str, group_by: tuple[str, ...], labels: Labels) -> str:
    return route + "|" + ",".join(f"{k}={first(labels, k)}" for k in group_by)


class Classifier:
    def __init__(self, router: Router) -> None:
        self._router = router
        self._seen: dict[str, Classified] = {}

    def of(self, a: Alert, book: SilenceBook) -> Classified:
        c = self._seen.get(a.fingerprint)
        if c is None or c.event_id != a.event_id:
            labels = alert_labels(a)
            named = a.evidence.get("incident_id")
            c = Classified(event_id=a.event_id, labels=labels, named_incident=named if isinstance(named, str) and named
                           else None, placements=tuple(
                               Placement(match=m, key=group_key(m.route, m.group_by, labels),
                                         labels={k: first(labels, k) for k in m.group_by})
                               for m in self._router.route(labels)))
            self._seen[a.fingerprint] = c
        if c.silences_version != book.version:
            c.silences = tuple(sid for sid, s in book.silences.items() if matches(s.matchers, c.labels))
            c.silences_version = book.version
        return c

    def keep_only(self, fingerprints: set[str]) -> None:
        """Forget alerts no longer known."""
        for fp in [fp for fp in self._seen if fp not in fingerprints]:
            del self._seen[fp]

"""The routing tree, flattened: which receivers get a notification, grouped how, with what timing.

Routes are tried in order; the first that matches wins, unless it says `continue`, in which
case the ones after it are tried as well. What no route matches goes to the default
receivers (see `NotifySettings.default_route_receivers`). Pure: labels in, matches out.
"""

from __future__ import annotations

from dataclasses import dataclass

from vigil.contract.severity import rank
from vigil.notify.matchers import Labels, first, glob_matches, matches
from vigil.notify.settings import NotifySettings, RouteConfig, Timing

DEFAULT_ROUTE = "default"


@dataclass(frozen=True, kw_only=True)
class Match:
    route: str
    receivers: tuple[str, ...]
    group_by: tuple[str, ...]
    timing: Timing


def route_matches(route: RouteConfig, labels: Labels) -> bool:
    if not (glob_matches(route.job, labels.get("job")) and glob_matches(route.host, labels.get("host"))):
        return False
    if route.kind and not any(glob_matches(k, labels.get("kind")) for k in route.kind):
        return False
    severity = first(labels, "severity")
    if route.severity and severity not in route.severity:
        return False
    if route.min_severity and rank(severity) < rank(route.min_severity):
        return False
    return matches(route.labels, labels)


class Router:
    def __init__(self, settings: NotifySettings) -> None:
        self._routes = [(r.name or f"route-{i}", r) for i, r in enumerate(settings.routes)]
        self._settings = settings
        self._default = Match(route=DEFAULT_ROUTE, receivers=tuple(settings.default_route_receivers()),
                              group_by=tuple(settings.group_by), timing=settings.timing(None))

    def route(self, labels: Labels) -> list[Match]:
        """The routes that take these labels (the default one when none does); empty receivers are left out."""
        out: list[Match] = []
        for name, r in self._routes:
            if not route_matches(r, labels):
                continue
            out.append(Match(route=name, receivers=tuple(r.receivers),
                             group_by=tuple(r.group_by if r.group_by is not None else self._settings.group_by),
                             timing=self._settings.timing(r)))
            if not r.continue_:
                break
        if not out:
            out = [self._default]
        return [m for m in out if m.receivers]

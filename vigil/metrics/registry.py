"""One service's metrics: its own `CollectorRegistry` and the families it declares.

A family is declared once, with its kind, help and label names, and checked against the naming
rules (`naming`): a name that breaks them raises at declaration, so a service's construction (and
its tests) fails, never a scrape. Counters, gauges and histograms are prometheus-client's
(thread-safe; a component's threads update them per batch or per turn, never per event). Figures a
service already keeps (a consumer's event count, a lag sample) are read when scraped instead:
`sampled` registers a callback that yields their families, declared the same way.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import ParamSpec

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from vigil.metrics.naming import problems
from vigil.metrics.settings import MetricsSettings

log = logging.getLogger(__name__)

SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
"""Durations from a detector turn (tenths of a second) to a recovery (minutes)."""


P = ParamSpec("P")


def never_raises(fn: Callable[P, None]) -> Callable[P, None]:
    """A counting hook called from a service's own loop: a failure to count is logged, never raised into it."""

    @functools.wraps(fn)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            fn(*args, **kwargs)
        except Exception as exc:
            log.warning("metrics: %s failed: %s", fn.__name__, exc)

    return guarded


@dataclass(frozen=True)
class Family:
    name: str
    kind: str  # counter | gauge | histogram
    help: str
    labels: tuple[str, ...] = ()


class _Sampled(Collector):
    def __init__(self, sample: Callable[[], Iterable[Metric]]) -> None:
        self._sample = sample

    def collect(self) -> Iterable[Metric]:
        try:
            return list(self._sample())
        except Exception as exc:  # a figure that cannot be read now is missing from this scrape, never a 500
            log.warning("metrics sample failed: %s", exc)
            return []

    def describe(self) -> Iterable[Metric]:
        return []


class Metrics:
    def __init__(self, service: str, settings: MetricsSettings | None = None) -> None:
        self.service = service
        self.settings = settings or MetricsSettings.load()
        self.registry = CollectorRegistry(auto_describe=False)
        self.families: list[Family] = []

    def declare(self, name: str, kind: str, help: str, labels: Sequence[str] = ()) -> Family:
        family = Family(name=name, kind=kind, help=help, labels=tuple(labels))
        bad = problems(family.name, kind, family.labels)
        if any(f.name == name for f in self.families):
            bad.append(f"{name}: declared twice")
        if bad:
            raise ValueError("; ".join(bad))
        self.families.append(family)
        return family

    def counter(self, name: str, help: str, labels: Sequence[str] = ()) -> Counter:
        self.declare(name, "counter", help, labels)
        return Counter(name, help, list(labels), registry=self.registry)

    def gauge(self, name: str, help: str, labels: Sequence[str] = ()) -> Gauge:
        self.declare(name, "gauge", help, labels)
        return Gauge(name, help, list(labels), registry=self.registry)

    def histogram(self, name: str, help: str, labels: Sequence[str] = (),
                  buckets: Sequence[float] = SECONDS_BUCKETS) -> Histogram:
        self.declare(name, "histogram", help, labels)
        return Histogram(name, help, list(labels), registry=self.registry, buckets=tuple(buckets))

    def described(self, name: str) -> str:
        """The help `name` was declared with (for a sampled family)."""
        return next(f.help for f in self.families if f.name == name)

    def sampled(self, sample: Callable[[], Iterable[Metric]]) -> None:
        """Register `sample`, called at each scrape, yielding families declared with `declare`."""
        self.registry.register(_Sampled(sample))

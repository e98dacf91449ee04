"""The analyzer's Prometheus metrics: pipeline health and findings, counted per batch or per turn.

Counted where each fact is made, never per event in Python: the writer reports each stored
batch's `log_lines` columns (`stored`: the Xid counter is a true counter, one per Xid line
stored, `repeats` included, re-sends deduplicated by the writer first); the dead-letter sink
each written batch of letters; the detector loop each turn (its seconds, the firing alerts, the
incidents it published). Figures the ingest already keeps (events, duplicates, consumer lag, the
frontier) are read when scraped. Label values: `host`, `job` and `xid` bounded (`vigil.metrics.caps`);
`topic`, `alert`, `severity`, `category`, `cause` closed or small by construction; a dead
letter's `reason` is its shape (`not_json`: no decodable object; `invalid`: an object refused),
never its message text.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from vigil.contract import Alert, Event, Incident
from vigil.kafka.deadletter import DeadLetter
from vigil.metrics import Metrics, MetricsSettings
from vigil.metrics.caps import LabelCap, top
from vigil.metrics.registry import never_raises

XID_VALUES = 64
"""Distinct Xid codes with a label value of their own (the rest: `other`). A log line is a claim of the job's
output as well as the kernel's: a process printing made-up codes must not grow a series per code."""
COUNTED_INCIDENTS = 10_000
"""Incident ids remembered so that an incident's later events (refined, resolved) are not counted again."""


class AnalyzerMetrics(Metrics):
    def __init__(self, settings: MetricsSettings | None = None) -> None:
        super().__init__("analyzer", settings)
        self.hosts = LabelCap(self.settings.max_hosts)
        self.xids = LabelCap(XID_VALUES)
        self.xid = self.counter("vigil_xid_events_total", "GPU Xid errors in the hosts' logs (kernel or job "
                                "output), each one counted once when stored (a flood summary's repeats included)",
                                ("host", "xid"))
        self.dead_letters = self.counter("vigil_ingest_dead_letters_total", "records and events the ingest refused "
                                         "(kept on the dead-letter topic and table)", ("topic", "reason"))
        self.turn = self.histogram("vigil_detect_turn_seconds", "wall time of one detector turn")
        self.turn_failures = self.counter("vigil_detect_turn_failures_total", "detector turns that raised")
        self.incidents = self.counter("vigil_incidents_total", "incidents opened", ("category", "cause"))
        self.firing = self.gauge("vigil_alerts_firing", "alerts firing now (after each detector turn)",
                                 ("job", "alert", "severity"))
        self.declare("vigil_ingest_events_total", "counter", "events stored by the ingest")
        self.declare("vigil_ingest_duplicates_total", "counter", "re-sent events the ingest recognised and skipped")
        self.declare("vigil_ingest_consumer_lag_records", "gauge", "records not yet ingested, per topic", ("topic",))
        self.declare("vigil_ingest_behind_seconds", "gauge", "wall time since the ingest frontier: everything "
                     "produced before it is stored")
        self.declare("vigil_detect_behind_seconds", "gauge", "event time between the most lagging job's position "
                     "and the newest instant it may be judged at")
        self._counted: OrderedDict[str, None] = OrderedDict()
        self._firing: set[tuple[str, ...]] = set()
        self.ingest: Any = None  # the IngestLoop, read when scraped
        self.behind_s: float | None = None  # None until a detector turn (an ingest-only analyzer has none)
        self.sampled(self._sample)

    # ---- counted where made ------------------------------------------------------------------------
    @never_raises
    def stored(self, tables: Mapping[str, Any]) -> None:
        """A batch was stored: count its Xid lines (`tables`: table -> columns, as the writer inserted them)."""
        cols = tables.get("log_lines")
        if not isinstance(cols, dict) or not cols.get("xid"):
            return
        repeats = cols.get("repeats") or [1] * len(cols["xid"])
        counts: Counter[tuple[str, str]] = Counter()
        for host, xid, n in zip(cols["host"], cols["xid"], repeats, strict=True):
            if xid is not None:
                counts[(self.hosts(str(host)), self.xids(str(xid)))] += int(n or 1)
        for (host, xid), n in counts.items():
            self.xid.labels(host=host, xid=xid).inc(n)

    @never_raises
    def dead_lettered(self, letters: Sequence[DeadLetter]) -> None:
        counts = Counter((d.topic, "invalid" if isinstance(d.payload, dict) else "not_json") for d in letters)
        for (topic, reason), n in counts.items():
            self.dead_letters.labels(topic=topic, reason=reason).inc(n)

    @never_raises
    def turned(self, seconds: float, ok: bool, published: Iterable[Event], firing: Sequence[Alert],
               behind_s: float) -> None:
        """One detector turn: its seconds, the incidents it opened, the alerts firing after it."""
        self.turn.observe(seconds)
        if not ok:
            self.turn_failures.inc()
        for e in published:
            if isinstance(e, Incident) and e.incident_id not in self._counted:
                self._counted[e.incident_id] = None
                if len(self._counted) > COUNTED_INCIDENTS:
                    self._counted.popitem(last=False)
                self.incidents.labels(category=str(e.category), cause=e.cause).inc()
        now: Counter[tuple[str, ...]] = Counter((a.job_id, a.alert, a.severity) for a in firing)
        bounded = top(now, 0, self.settings.max_jobs)
        for labels in self._firing - bounded.keys():
            self.firing.remove(*labels)
        for labels, n in bounded.items():
            self.firing.labels(*labels).set(n)
        self._firing = set(bounded)
        self.behind_s = behind_s

    # ---- read when scraped -------------------------------------------------------------------------
    def _sample(self) -> Iterable[Metric]:
        if self.behind_s is not None:
            yield GaugeMetricFamily("vigil_detect_behind_seconds", self.described("vigil_detect_behind_seconds"),
                                    value=self.behind_s)
        ing = self.ingest
        if ing is None:
            return
        d = self.described
        yield CounterMetricFamily("vigil_ingest_events_total", d("vigil_ingest_events_total"), value=ing.stats.events)
        yield CounterMetricFamily("vigil_ingest_duplicates_total", d("vigil_ingest_duplicates_total"),
                                  value=ing.writer.skipped_duplicates)
        lag = GaugeMetricFamily("vigil_ingest_consumer_lag_records", d("vigil_ingest_consumer_lag_records"),
                                labels=["topic"])
        for topic, n in sorted(ing.lag.items()):
            lag.add_metric([str(topic)], n)
        yield lag
        frontier = ing.probe.frontier
        if frontier is not None:
            yield GaugeMetricFamily("vigil_ingest_behind_seconds", self.described("vigil_ingest_behind_seconds"),
                                    value=max(0.0, time.time() - frontier))

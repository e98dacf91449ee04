"""The notifier's Prometheus metrics: notifications decided, delivered and failed per receiver, alerts silenced
and inhibited.

Delivery figures are the dispatcher's own per-receiver counts (read when scraped: true counters
within a process, never counted twice), labelled by receiver (a configured name: bounded by the
configuration) and channel (its kind: webhook, slack, ...). After each decision round the
`Decider` keeps how many firing alerts page, are silenced, or are inhibited into their incident (a
victim's alert: deduplicated into the culprit's page); they are gauges read when scraped.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from vigil.metrics import Metrics, MetricsSettings

DELIVERY = {  # the dispatcher's ReceiverStats field -> (family, help)
    "delivered": ("vigil_notifications_sent_total", "notifications the receiver accepted"),
    "failed": ("vigil_notifications_failed_total", "notifications the receiver refused for good (not retried)"),
    "expired": ("vigil_notifications_expired_total", "notifications still undelivered after max_age_s"),
    "dropped": ("vigil_notifications_dropped_total", "notifications dropped: queue full, or receiver no longer "
                "configured"),
    "retries": ("vigil_notification_retries_total", "delivery attempts that failed and will be retried"),
}


class NotifyMetrics(Metrics):
    def __init__(self, settings: MetricsSettings | None = None) -> None:
        super().__init__("notify", settings)
        self.declare("vigil_notifications_decided_total", "counter", "notifications decided (firing, resolved, "
                     "repeats), each saved once before it is delivered")
        for name, help in DELIVERY.values():
            self.declare(name, "counter", help, ("receiver", "channel"))
        self.declare("vigil_notify_pending", "gauge", "notifications waiting for delivery, per receiver",
                     ("receiver", "channel"))
        self.declare("vigil_notify_alerts", "gauge", "firing alerts after the last decision round: paging, "
                     "silenced (muted by a silence) or inhibited (a victim's alert, folded into its incident's page)",
                     ("state",))
        self.declare("vigil_notify_silences_active", "gauge", "silences in force")
        self.declare("vigil_security_refusals_total", "counter", "alerts, incidents and silences refused (not "
                     "signed by the role that may make them), by what and why", ("what", "problem"))
        self.source: Any = None  # the NotifyService, read when scraped
        self.sampled(self._sample)

    def _sample(self) -> Iterable[Metric]:
        svc = self.source
        if svc is None:
            return
        yield CounterMetricFamily("vigil_notifications_decided_total",
                                  self.described("vigil_notifications_decided_total"), value=svc.decided)
        stats = {name: svc.dispatcher.stats[name] for name in svc.receivers}
        for field, (name, help) in DELIVERY.items():
            fam = CounterMetricFamily(name, help, labels=["receiver", "channel"])
            for receiver, st in sorted(stats.items()):
                fam.add_metric([receiver, svc.receivers[receiver].kind], getattr(st, field))
            yield fam
        pending = GaugeMetricFamily("vigil_notify_pending", self.described("vigil_notify_pending"),
                                    labels=["receiver", "channel"])
        for receiver in sorted(stats):
            pending.add_metric([receiver, svc.receivers[receiver].kind], svc.dispatcher.pending(receiver))
        yield pending
        alerts = GaugeMetricFamily("vigil_notify_alerts", self.described("vigil_notify_alerts"), labels=["state"])
        for state, n in sorted(svc.decider.alerts_by_state.items()):
            alerts.add_metric([state], n)
        yield alerts
        yield GaugeMetricFamily("vigil_notify_silences_active", self.described("vigil_notify_silences_active"),
                                value=svc.silences_active())
        refused = CounterMetricFamily("vigil_security_refusals_total",
                                      self.described("vigil_security_refusals_total"), labels=["what", "problem"])
        for (what, problem), n in sorted(dict(svc.gate.refusals.kinds).items()):
            refused.add_metric([what, problem], n)
        yield refused

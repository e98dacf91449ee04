"""Prometheus metrics of vigil's services: one registry per service, an HTTP `/metrics`, bounded labels.

The kernel's part (components count their own facts in their own `metrics` module):

* `registry.Metrics`: a service's own `CollectorRegistry` (never the process-global one, so two
  services hosted in one process never mix) and the families it declares, checked against
  Prometheus naming (`naming`) when declared;
* `caps`: label values bounded by a setting (`VIGIL_METRICS_MAX_JOBS`, `..._MAX_HOSTS`): the
  rest aggregated under `other`;
* `server.MetricsServer`: `/metrics` over HTTP, OpenMetrics text when the scraper asks for it;
* `catalog`: docs/metrics.md, rendered from the declared families.
"""

from vigil.metrics.registry import Family, Metrics
from vigil.metrics.settings import MetricsSettings

__all__ = ["Family", "Metrics", "MetricsSettings"]

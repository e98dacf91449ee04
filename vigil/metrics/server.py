"""`/metrics` over HTTP: prometheus-client's exposition of one or several registries.

The scraper's `Accept` header picks the format: OpenMetrics text (`application/openmetrics-text`,
what Prometheus asks for) or the classic text format. `port` 0 takes a free one; `url` says which.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector


class Union(Collector):
    """Several services' registries as one (the embedded stack's control port serves every hosted service)."""

    def __init__(self, registries: Sequence[CollectorRegistry]) -> None:
        self._registries = list(registries)

    def collect(self) -> Iterable[Metric]:
        for registry in self._registries:
            yield from registry.collect()


class MetricsServer:
    def __init__(self, registry: Collector, *, bind: str = "127.0.0.1", port: int = 0) -> None:
        self._registry, self._bind, self._port = registry, bind, port
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        self._server, self._thread = start_http_server(self._port, addr=self._bind, registry=self._registry)
        return self.url

    @property
    def url(self) -> str:
        if self._server is None:
            return ""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/metrics"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

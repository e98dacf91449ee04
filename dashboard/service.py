"""`vigil up` hosts the dashboard: `DashboardService(ctx)` serves pages over the shared ClickHouse client.

    svc = DashboardService(ctx)        # ctx: vigil.service.StackContext (publisher=: the Recovery page may act)
    svc.start()                        # threaded HTTP server on VIGIL_DASHBOARD_HOST:PORT (0 = free port)
    svc.health()                       # {"ok", "urls": {"dashboard": url}, "queries", "query_errors", ...}
    svc.stop()
"""

from __future__ import annotations

from typing import Any

from vigil.clickhouse.query import QueryClient
from vigil.dashboard.actions import Publisher
from vigil.dashboard.app import create_app
from vigil.dashboard.server import ThreadedServer
from vigil.dashboard.settings import DashboardSettings
from vigil.dashboard.store import Store
from vigil.service import StackContext


class DashboardService:
    name = "dashboard"

    def __init__(self, ctx: StackContext | None = None, *, client: QueryClient | None = None,
                 settings: DashboardSettings | None = None, publisher: Publisher | None = None) -> None:
        if client is None:
            if ctx is None:
                raise ValueError("DashboardService needs a StackContext or a query client")
            client = ctx.clickhouse
        self.settings: DashboardSettings = settings or DashboardSettings.load()
        self.store = Store(client=client)
        self.app = create_app(self.store, self.settings, publisher)
        self._server = ThreadedServer(app=self.app.server, host=self.settings.host, port=self.settings.port)
        self.error: str | None = None

    @property
    def url(self) -> str:
        return self._server.url

    @property
    def port(self) -> int:
        """The port it listens on once started (the one chosen where the settings ask for any: 0)."""
        return self._server.port

    def start(self) -> None:
        """Listen; a busy port is reported by `health()` instead of taking the whole stack down."""
        try:
            self._server.start()
        except OSError as exc:
            self.error = f"cannot listen on {self.settings.host}:{self.settings.port} ({exc.strerror or exc})"

    def stop(self) -> None:
        self._server.stop()

    def health(self) -> dict[str, Any]:
        ok = self._server.running
        out: dict[str, Any] = {"ok": ok, "queries": self.store.queries, "query_errors": self.store.errors}
        if ok:
            out["urls"] = {"dashboard": self.url}
        if self.error:
            out["error"] = self.error
        if self.store.last_error:
            out["last_query_error"] = self.store.last_error
        return out

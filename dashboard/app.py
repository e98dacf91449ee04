"""Build the Dash app: shell layout, page renderers, callbacks, over one `Store`.

`create_app(client)` is what `vigil dashboard`, `vigil up` (DashboardService) and the
tests use; any object with `.query(sql, parameters=...)` returning `.result_rows` and
`.column_names` will do as the client.
"""

from __future__ import annotations

from pathlib import Path

from dash import Dash

from vigil.clickhouse.query import QueryClient
from vigil.dashboard import callbacks
from vigil.dashboard.layout import shell
from vigil.dashboard.pages import alerts, heatmap, host, network, notifications, overview, parallel
from vigil.dashboard.settings import DashboardSettings
from vigil.dashboard.store import Store

RENDERERS: dict[str, callbacks.Renderer] = {
    "/overview": overview.render, "/heatmap": heatmap.render, "/host": host.render,
    "/network": network.render, "/alerts": alerts.render, "/parallel": parallel.render,
    "/notifications": notifications.render,
}


def create_app(client: QueryClient | Store, settings: DashboardSettings | None = None) -> Dash:
    settings = settings or DashboardSettings()
    store = client if isinstance(client, Store) else Store(client=client)
    app = Dash(__name__, title="vigil", assets_folder=str(Path(__file__).with_name("assets")),
               suppress_callback_exceptions=True, update_title="")
    app.layout = shell(settings.refresh_s, settings.default_range)
    callbacks.register(app, store, settings, RENDERERS)
    app.server.config["VIGIL_STORE"] = store

    def healthz() -> tuple[str, int]:
        return "ok", 200

    app.server.add_url_rule("/healthz", "healthz", healthz)

    return app

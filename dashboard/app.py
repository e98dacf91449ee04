"""Build the Dash app: shell layout, page renderers, callbacks, over one `Store`.

`create_app(client)` is what `vigil dashboard`, `vigil up` (DashboardService) and the
tests use; any object with `.query(sql, parameters=...)` returning `.result_rows` and
`.column_names` will do as the client.
"""

from __future__ import annotations

from pathlib import Path

from dash import Dash

from vigil.clickhouse.query import QueryClient
from vigil.dashboard import actions_ui, callbacks
from vigil.dashboard.actions import Actions, Publisher
from vigil.dashboard.layout import shell
from vigil.dashboard.pages import (
    alerts,
    goodput,
    heatmap,
    host,
    network,
    notifications,
    overview,
    parallel,
    recovery,
)
from vigil.dashboard.settings import DashboardSettings
from vigil.dashboard.store import Store

RENDERERS: dict[str, callbacks.Renderer] = {
    "/overview": overview.render, "/heatmap": heatmap.render, "/host": host.render,
    "/network": network.render, "/alerts": alerts.render, "/parallel": parallel.render,
    "/notifications": notifications.render, "/recovery": recovery.render, "/goodput": goodput.render,
}


def create_app(client: QueryClient | Store, settings: DashboardSettings | None = None,
               publisher: Publisher | None = None) -> Dash:
    """`publisher` (with `settings.action_token`) lets the Recovery page's buttons act; without both, read-only."""
    settings = settings or DashboardSettings()
    actions = Actions(token=settings.action_token, publisher=publisher, user_header=settings.user_header)
    store = client if isinstance(client, Store) else Store(client=client)
    app = Dash(__name__, title="vigil", assets_folder=str(Path(__file__).with_name("assets")),
               suppress_callback_exceptions=True, update_title="")
    app.layout = shell(settings.refresh_s, settings.default_range, actions.enabled)
    callbacks.register(app, store, settings, RENDERERS, actions=actions.enabled)
    actions_ui.register(app, actions)
    app.server.config["VIGIL_STORE"] = store

    def healthz() -> tuple[str, int]:
        return "ok", 200

    app.server.add_url_rule("/healthz", "healthz", healthz)

    return app

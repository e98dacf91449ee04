"""`vigil dashboard`: serve the dashboard against the configured ClickHouse until Ctrl-C.

A server DSN is queried directly; with the embedded engine (chdb) a running `vigil up`
owns it, so queries go through its query-only control port, else this process opens
the engine itself.
"""

from __future__ import annotations

import argparse
from typing import Any

from vigil.app.cli.serving import serve


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "dashboard", help="serve the dashboard (Overview, Heatmap, Host, Network, Alerts, 3D view)",
        description="Serve the dashboard against the configured ClickHouse (VIGIL_CLICKHOUSE_DSN).")
    p.add_argument("--host", help="address to listen on (VIGIL_DASHBOARD_HOST, default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port, 0 = a free one (VIGIL_DASHBOARD_PORT, default 8050)")
    p.add_argument("--refresh", type=float, dest="refresh_s", help="page refresh interval in seconds")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from vigil.app.stack.access import clickhouse_for_cli
    from vigil.dashboard.service import DashboardService
    from vigil.dashboard.settings import DashboardSettings
    from vigil.settings import VigilSettings

    overrides = {k: getattr(args, k) for k in ("host", "port", "refresh_s") if getattr(args, k, None) is not None}
    settings = DashboardSettings.load(**overrides)
    client = clickhouse_for_cli(VigilSettings.load())
    svc = DashboardService(client=client, settings=settings)
    return serve(svc, name="dashboard", banner=lambda: f"vigil dashboard: {svc.url}  (Ctrl-C stops)")

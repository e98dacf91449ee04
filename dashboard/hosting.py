"""The dashboard as a hostable service of `vigil up`."""

from __future__ import annotations

from vigil.service import Service, ServiceSpec, StackContext


def build(ctx: StackContext) -> Service:
    from vigil.dashboard.service import DashboardService

    return DashboardService(client=ctx.clickhouse)


SPEC = ServiceSpec(name="dashboard", help="the dashboard", factory=build)

"""The dashboard as a hostable service of `vigil up`."""

from __future__ import annotations

from vigil.service import Service, ServiceSpec, StackContext


def build(ctx: StackContext) -> Service:
    from vigil.dashboard.actions import KafkaPublisher
    from vigil.dashboard.service import DashboardService

    # the publisher connects on the first action only, and only a dashboard with an action token acts
    return DashboardService(client=ctx.clickhouse, publisher=KafkaPublisher(settings=ctx.settings,
                                                                            bootstrap=ctx.bootstrap))


SPEC = ServiceSpec(name="dashboard", help="the dashboard", factory=build)

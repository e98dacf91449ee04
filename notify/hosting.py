"""The notifier as a hostable service of `vigil up`, and how `vigil status` sees one running elsewhere.

Against a production cluster the notifier runs in its own process (`vigil notify run`, exactly
one per cluster); `vigil status` then reads its consumer group's lag and commit rate from the
broker. With no receiver configured there is nothing to deliver, and the probe says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vigil.service import Service, ServiceSpec, StackContext
from vigil.settings import VigilSettings


def build(ctx: StackContext, dashboard_base: str = "") -> Service:
    from vigil.notify.service import NotifyService

    return NotifyService(ctx, dashboard_base=dashboard_base)


def progress(settings: VigilSettings, bootstrap: str) -> dict[str, Any]:
    from vigil.kafka.lag import group_progress
    from vigil.notify.service import TOPICS
    from vigil.notify.settings import NotifySettings

    notify = NotifySettings.load()
    receivers = sorted(notify.all_receivers())
    if not receivers:
        return {"ok": True, "receivers": 0, "note": "no receivers configured"}
    return {**group_progress(settings, bootstrap, notify.group_id, TOPICS, consumer="`vigil notify run`"),
            "receivers": len(receivers)}


def spec(dashboard_base: Callable[[], str]) -> ServiceSpec:
    """The notifier's spec; `dashboard_base` gives the links' base URL when `VIGIL_NOTIFY_DASHBOARD_URL` is unset
    (the application passes the dashboard's address: the notifier does not import the dashboard)."""
    return ServiceSpec(name="notify", help="alert and incident webhooks to on-call",
                       factory=lambda ctx: build(ctx, dashboard_base()), probe=progress)

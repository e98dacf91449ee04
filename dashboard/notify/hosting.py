"""The notifier as a hostable service of `vigil up`, and how `vigil status` sees one running elsewhere.

Against a production cluster the notifier runs in its own process (`vigil notify run`, exactly
one per cluster); `vigil status` then reads its consumer group's lag and commit rate from the
broker. With no receiver configured there is nothing to deliver, and the probe says so.
"""

from __future__ import annotations

from typing import Any

from vigil.service import Service, ServiceSpec, StackContext
from vigil.settings import VigilSettings


def build(ctx: StackContext) -> Service:
    from vigil.dashboard.notify.service import NotifyService

    return NotifyService(ctx)


def progress(settings: VigilSettings, bootstrap: str) -> dict[str, Any]:
    from vigil.dashboard.notify.service import TOPICS
    from vigil.dashboard.notify.settings import NotifySettings
    from vigil.kafka.lag import group_progress

    notify = NotifySettings.load()
    receivers = sorted(notify.all_receivers())
    if not receivers:
        return {"ok": True, "receivers": 0, "note": "no receivers configured"}
    return {**group_progress(settings, bootstrap, notify.group_id, TOPICS, consumer="`vigil notify run`"),
            "receivers": len(receivers)}


SPEC = ServiceSpec(name="notify", help="alert and incident webhooks to on-call", factory=build, probe=progress)

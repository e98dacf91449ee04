"""The analyzer as a hostable service: how `vigil up` builds it, and how `vigil status` sees it from outside.

Against a production cluster the analyzer runs in its own process (`vigil analyzer`); its
progress is then read from the broker: the consumer group's lag and commit rate.
"""

from __future__ import annotations

import time
from typing import Any

from vigil.errors import one_line
from vigil.service import Service, ServiceSpec, StackContext
from vigil.settings import VigilSettings


def build(ctx: StackContext) -> Service:
    from vigil.analyzer.service import AnalyzerService

    return AnalyzerService(ctx)


def progress(settings: VigilSettings, bootstrap: str, window_s: float = 2.0) -> dict[str, Any]:
    """The analyzer group's lag and commit rate, from the broker: down when it lags and commits nothing."""
    from vigil.analyzer.ingest.lag import LagProbe
    from vigil.analyzer.ingest.loop import INGEST_TOPICS
    from vigil.analyzer.settings import AnalyzerSettings

    group = AnalyzerSettings.load().group_id
    probe = LagProbe(settings=settings, bootstrap=bootstrap, group_id=group, topics=INGEST_TOPICS)
    try:
        _, before = probe.offsets()
        time.sleep(window_s)
        lag, after = probe.offsets()
    except Exception as exc:
        return {"ok": False, "group": group, "error": f"lag of group {group}: {one_line(exc, 200)}"}
    rate = (after - before) / window_s
    behind = sum(lag.values())
    return {"ok": behind == 0 or rate > 0, "group": group, "lag": behind, "records_per_s": round(rate, 1),
            **({} if behind == 0 or rate > 0 else {"error": "lagging and committing nothing: is an analyzer running?"})}


SPEC = ServiceSpec(name="analyzer", help="ingest + detectors", factory=build, probe=progress)

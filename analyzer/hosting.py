"""The analyzer as a hostable service: how `vigil up` builds it, and how `vigil status` sees it from outside.

Against a production cluster the analyzer runs in its own process (`vigil analyzer`); its
progress is then read from the broker: the consumer group's lag and commit rate.
"""

from __future__ import annotations

from typing import Any

from vigil.service import Service, ServiceSpec, StackContext
from vigil.settings import VigilSettings


def build(ctx: StackContext) -> Service:
    from vigil.analyzer.service import AnalyzerService

    return AnalyzerService(ctx)


def progress(settings: VigilSettings, bootstrap: str) -> dict[str, Any]:
    """The analyzer group's lag and commit rate, from the broker: down when it lags and commits nothing."""
    from vigil.analyzer.ingest.loop import INGEST_TOPICS
    from vigil.analyzer.settings import AnalyzerSettings
    from vigil.kafka.lag import group_progress

    return group_progress(settings, bootstrap, AnalyzerSettings.load().group_id, INGEST_TOPICS,
                          consumer="an analyzer")


SPEC = ServiceSpec(name="analyzer", help="ingest + detectors", factory=build, probe=progress)

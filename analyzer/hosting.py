"""The analyzer as a hostable service: how `vigil up` builds it, and how `vigil status` sees it from outside.

Against a production cluster the analyzer runs in its own process (`vigil analyzer`); its
progress is then read from the broker: the consumer group's lag and commit rate, and, when detection is sharded,
every detect shard's partitions, jobs, last turn and lag from the lease records it keeps there.
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
    from vigil.analyzer.shardreport import read_shards
    from vigil.kafka.lag import group_progress

    part = group_progress(settings, bootstrap, AnalyzerSettings.load().group_id, INGEST_TOPICS, consumer="an analyzer")
    shards = read_shards(settings, bootstrap)  # detect shards, from their lease records ([] when not sharded)
    return {**part, "shards": shards} if shards else part


SPEC = ServiceSpec(name="analyzer", help="ingest + detectors", factory=build, probe=progress)

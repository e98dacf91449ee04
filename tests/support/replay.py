"""The analyzer judging a stream live, and the same stream replayed: what live-equals-replay tests compare."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta

from tests.support.waiting import wait_until
from vigil.analyzer.clock import grid_ceil
from vigil.analyzer.incidents.stage import IncidentStage
from vigil.analyzer.service import AnalyzerService
from vigil.analyzer.settings import AnalyzerSettings
from vigil.analyzer.simulator.faults import parse_fault
from vigil.analyzer.simulator.layout import Layout
from vigil.analyzer.simulator.model import SimConfig, Simulation
from vigil.clickhouse.client import connect
from vigil.contract import Alert
from vigil.service import StackContext
from vigil.settings import VigilSettings

SETTINGS = {"batch_s": 0.3, "detect_interval_s": 0.5}


@contextmanager
def live(topics: VigilSettings, dsn: str, database: str, **overrides: float) -> Iterator[AnalyzerService]:
    ctx = StackContext(settings=topics, bootstrap=str(topics.kafka_bootstrap),
                       clickhouse=connect(dsn, database=database), clickhouse_dsn=dsn)
    service = AnalyzerService(ctx, AnalyzerSettings(group_id=f"g-{database}", **{**SETTINGS, **overrides}))  # type: ignore[arg-type]
    service.start()
    try:
        yield service
    finally:
        service.stop()


def judged_to_the_end(service: AnalyzerService, ends: dict[str, datetime], timeout: float = 180) -> None:
    """Wait until every job is judged up to its last instant (it stopped) and nothing waits."""
    wait_until(lambda: judged_to(service, ends), timeout, f"the live analyzer judging every job to its end ({ends})",
               every=0.5)


def judged_to(service: AnalyzerService, ends: dict[str, datetime]) -> bool:
    """Every job judged up to its last instant, and nothing waiting: the catch-up is over."""
    step = service.settings.eval_step_s
    pos = service.cursor.positions
    return all(pos.get(j, end - timedelta(days=1)) >= grid_ceil(end, step) for j, end in ends.items()) \
        and not service.cursor.backlog


def as_live() -> list[IncidentStage]:
    """The finding stages the live service runs (a fresh one per replay)."""
    return [IncidentStage(AnalyzerSettings())]


def key(alerts: Sequence[Alert]) -> list[tuple[datetime, str, str, str]]:
    """Alert events in instant order (the topic's partitions interleave events of one instant at random)."""
    return sorted((a.ts, a.fingerprint, a.status, a.severity) for a in alerts)


def by_job(alerts: Sequence[Alert], job: str) -> list[Alert]:
    return [a for a in alerts if a.job_id == job]


def simulation(job: str, hosts: int, start: datetime, faults: Sequence[str], *, gpus: int = 1, seed: int = 0,
               step_ms: float = 1000.0, nics: int = 2) -> Simulation:
    return Simulation(SimConfig(job=job, layout=Layout(hosts=hosts, gpus_per_host=gpus), seed=seed, start=start,
                                step_ms=step_ms, nics=nics, faults=[parse_fault(f) for f in faults]))

"""A small simulated job with injected faults, written through the analyzer's real pipeline.

The analyzer's simulator produces the telemetry, the ingest writer stores it (so the
rollup materialised views fill exactly as in production), and a detector replay over
the stored history produces the alert events, which the writer stores too.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

JOB = "dash-sim"
STRAGGLER = "sim-host-0005"
STRAGGLER_PHASE = "backward"
STALL_HOST = "sim-host-0011"
STALL_NIC = "mlx5_1"
XID_HOST = "sim-host-0003"
HOSTS = 16
STEPS = 240


@dataclass(frozen=True, kw_only=True)
class SimRun:
    job: str
    hosts: list[str]
    alerts: list[Any]
    events: int


def _recent() -> datetime:
    """A start an hour ago, on the minute (recent, so the tables' TTL keeps the rows)."""
    return (datetime.now(UTC) - timedelta(hours=1)).replace(second=0, microsecond=0)


def simulate(client: Any, *, job: str, hosts: int, steps: int, faults: list[str], pp: int = 1,
             start: datetime | None = None) -> tuple[list[str], int]:
    """Simulate `job` (fault specs as for `vigil simulate --fault`) into `client`'s database.

    Returns the job's host names and the number of events written."""
    from vigil.analyzer.ingest.writer import ClickHouseWriter
    from vigil.analyzer.simulator.faults import parse_fault
    from vigil.analyzer.simulator.layout import Layout
    from vigil.analyzer.simulator.model import SimConfig, Simulation
    from vigil.analyzer.simulator.runner import run

    layout = Layout(hosts=hosts, gpus_per_host=4, pp=pp)
    sim = Simulation(SimConfig(job=job, layout=layout, faults=[parse_fault(f) for f in faults], seed=7,
                               start=start or _recent()))
    writer = ClickHouseWriter(client=client, check_existing=False)
    pending: list[Any] = []

    def send(batch: Any) -> None:  # few large inserts: each insert fires every rollup view
        pending.extend(batch)
        if len(pending) >= 20_000:
            writer.write(pending)
            pending.clear()

    events = run(sim, steps, send, speed=0)
    writer.write(pending)
    return layout.host_names(), events


def populate(client: Any, *, job: str = JOB, hosts: int = HOSTS, steps: int = STEPS) -> SimRun:
    """Simulate `job` into the database of `client`; returns what was injected and raised."""
    from vigil.analyzer.engine import replay
    from vigil.analyzer.ingest.writer import ClickHouseWriter
    from vigil.analyzer.settings import AnalyzerSettings

    names, events = simulate(client, job=job, hosts=hosts, steps=steps, faults=[
        f"straggler:host={STRAGGLER},phase={STRAGGLER_PHASE},start=40,magnitude=0.2",
        f"traffic_stop:host={STALL_HOST},nic={STALL_NIC},start=120,duration=40",
        f"xid:host={XID_HOST},start=150",
    ])
    alerts = replay(client, AnalyzerSettings(eval_step_s=4.0), job)
    ClickHouseWriter(client=client, check_existing=False).write(alerts)
    return SimRun(job=job, hosts=names, alerts=alerts, events=events)

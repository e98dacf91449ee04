"""A simulated job with faults for the live cursor's tests, and its alerts as a comparable list."""

from __future__ import annotations

from datetime import UTC, datetime

from vigil.analyzer.simulator.faults import parse_fault
from vigil.analyzer.simulator.layout import Layout
from vigil.analyzer.simulator.model import SimConfig, Simulation
from vigil.contract import Alert, Event

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)


FAULTS = ["straggler:host=sim-host-0003,start=40,magnitude=0.08", "nic_drop:host=sim-host-0005,start=30,duration=40",
          "traffic_stop:host=sim-host-0006,start=60", "heartbeat_loss:host=sim-host-0007,start=50",
          "xid:host=sim-host-0001,start=70", "process_exit:host=sim-host-0002,start=80,local_rank=1"]


def simulated(job: str, steps: int, seed: int = 5) -> list[list[Event]]:
    sim = Simulation(SimConfig(job=job, layout=Layout(hosts=8, gpus_per_host=2), seed=seed, start=T0,
                               faults=[parse_fault(f) for f in FAULTS]))
    return [[sim.registration()], *(sim.step(i) for i in range(steps))]


def key(alerts: list[Alert]) -> list[tuple[str, str, str, datetime]]:
    return [(a.fingerprint, a.status, a.severity, a.ts) for a in alerts]

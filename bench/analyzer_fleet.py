"""Several jobs at once through the whole live path, against replay: part of bench/analyzer_detection.py.

`vigil up`'s stack (the real `Stack` with the hosted analyzer, its control port, an embedded
Tansu broker and chdb) ingests `jobs` simulated jobs interleaved by simulated time and
streamed faster than real time (`speed`) by another process (the fleet's agents); one job is resumed at step 4800, one restarts
from a checkpoint a minute after its first run. While it runs, `/health` (what `vigil
status` asks) is polled every 0.25 s. Once every job is judged to its end, each job's
live alert events are compared with `replay` over the same stored data.
"""

from __future__ import annotations

import multiprocessing
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from vigil.analyzer import hosting
from vigil.analyzer.alerts.view import read_alert_events
from vigil.analyzer.clock import grid_ceil
from vigil.analyzer.engine import replay
from vigil.analyzer.incidents.stage import IncidentStage
from vigil.analyzer.service import AnalyzerService
from vigil.analyzer.settings import AnalyzerSettings
from vigil.analyzer.simulator.delivery import Delivery, Run, deliver
from vigil.analyzer.simulator.faults import parse_fault
from vigil.analyzer.simulator.layout import Layout
from vigil.analyzer.simulator.model import SimConfig, Simulation
from vigil.analyzer.simulator.runner import ground_truth
from vigil.app.stack.runner import Stack
from vigil.contract import Alert
from vigil.kafka.broker import EmbeddedBroker
from vigil.kafka.producer import EventProducer
from vigil.settings import VigilSettings

KINDS = ["straggler:host={h},start={s},magnitude=0.06", "nic_drop:host={h},start={s},magnitude=0.6",
         "traffic_stop:host={h},start={s}", "heartbeat_loss:host={h},start={s}", "xid:host={h},start={s}",
         "process_exit:host={h},start={s}"]


@dataclass(kw_only=True)
class Job:
    name: str
    runs: Run  # the first run; a restart is its `then`
    last: Callable[[], Simulation]  # the run whose faults are scored (after a restart: the second)
    steps: int


def job(k: int, hosts: int, steps: int, start: datetime) -> Job:
    """Job k: two faults on distinct hosts (and an MFU decay for every third job); job 0 is resumed at step
    4800, job 1 restarts from its checkpoint at step 80 a minute after its first run's 100 steps."""
    name = f"fleet{k:02d}"
    first = 4800 if k == 0 else 80 if k == 1 else 0
    h = [f"sim-host-{(k * 5 + i * 7) % hosts:04d}" for i in range(2)]
    base = first + max(20, steps // 5)
    faults = [KINDS[k % len(KINDS)].format(h=h[0], s=base), KINDS[(k + 3) % len(KINDS)].format(h=h[1], s=base + 15)]
    if k % 3 == 2:
        faults.append(f"mfu_decay:start={first + steps - 50},magnitude=0.4,ramp=20")

    def sim(at: datetime, with_faults: bool, seed: int) -> Simulation:
        return Simulation(SimConfig(job=name, layout=Layout(hosts=hosts, gpus_per_host=4, pp=2), seed=seed, start=at,
                                    faults=[parse_fault(f) for f in faults] if with_faults else []))

    if k == 1:
        scored: list[Simulation] = []

        def restart(at: datetime) -> Run:
            scored.append(sim(at, True, 100 + k))
            return Run(sim=scored[0], steps=range(first, first + steps))

        return Job(name=name, runs=Run(sim=sim(start, False, k), steps=range(100), then=restart, gap_s=60),
                   last=lambda: scored[0], steps=steps)
    only = sim(start + timedelta(seconds=2 * k), True, k)
    return Job(name=name, runs=Run(sim=only, steps=range(first, first + steps)), last=lambda: only, steps=steps)


def produce(jobs: int, hosts: int, steps: int, speed: float, start: datetime, settings: VigilSettings,
            out: Any) -> None:
    """The fleet's agents, in their own process (as on real nodes): stream every job, then put what was sent."""
    fleet_jobs = [job(k, hosts, steps, start) for k in range(jobs)]
    producer = EventProducer(settings=settings, bootstrap=str(settings.kafka_bootstrap))
    t0 = time.perf_counter()
    events = deliver([j.runs for j in fleet_jobs], producer.send, Delivery(speed=speed))
    producer.flush()
    out.put({"events": events, "streamed_s": time.perf_counter() - t0, "jobs": [
        {"name": j.name, "truth": ground_truth(j.last(), j.steps, 0), "end": j.last().now,
         "step_s": (j.last().now - j.last().cfg.start).total_seconds() / j.steps} for j in fleet_jobs]})


@dataclass(kw_only=True)
class HealthPoll:
    url: str
    headers: dict[str, str] = field(default_factory=dict)  # the control port's token
    latencies: list[float] = field(default_factory=list)
    failures: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with httpx.Client(timeout=10, headers=self.headers) as http:  # one client: httpx.get builds a TLS context (~0.15 s) per call
            while not self.stop.wait(0.25):
                t = time.perf_counter()
                try:
                    http.get(f"{self.url}/health").raise_for_status()
                    self.latencies.append(time.perf_counter() - t)
                except httpx.HTTPError:
                    self.failures += 1


def fleet(jobs: int, hosts: int, steps: int, speed: float, dsn: str) -> dict[str, Any]:
    """Stream the fleet live into ClickHouse `dsn` (chdb: one engine per process, so the caller's); every job's
    live alerts, replay alerts, truth, and the run's figures."""
    broker = EmbeddedBroker()
    bootstrap = broker.start()
    home = tempfile.mkdtemp(prefix="vigil-bench-f-")
    settings = VigilSettings(home=home, kafka_bootstrap=bootstrap, clickhouse_dsn=dsn,
                             topic_prefix="fleet.", topic_partitions=4, control_port=0)
    stack = Stack(settings=settings, services=(hosting.SPEC,))
    try:
        state = stack.start()
        service = stack.hosted[0]
        assert isinstance(service, AnalyzerService) and stack.ctx is not None
        while service.ingest is None or service.ingest.frontier is None:  # the group's first join, a lag sample
            time.sleep(0.5)
        poll = HealthPoll(url=state.control_url, headers=state.control_headers)
        poller = threading.Thread(target=poll.run, daemon=True)
        poller.start()
        start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30)
        spawn = multiprocessing.get_context("spawn")
        sent = spawn.Queue()
        agents = spawn.Process(target=produce, args=(jobs, hosts, steps, speed, start, settings, sent))
        t0 = time.perf_counter()
        agents.start()
        streamed = sent.get()
        agents.join()
        step = service.settings.eval_step_s
        ends = {j["name"]: grid_ceil(j["end"], step) for j in streamed["jobs"]}
        while not (all(service.cursor.positions.get(n, e - timedelta(days=1)) >= e for n, e in ends.items())
                   and not service.cursor.backlog):
            time.sleep(0.5)
        judged_s = time.perf_counter() - t0
        poll.stop.set()
        poller.join()
        health = service.health()
        client = stack.ctx.clickhouse
        stack.stop()
        alerts = read_alert_events(settings, bootstrap, timeout=30)
        t1 = time.perf_counter()
        # with the live service's incident stage (a fresh one per job), as the live == replay tests replay
        replays = {j: replay(client, AnalyzerSettings(), j, stages=[IncidentStage(AnalyzerSettings())]) for j in ends}
        replay_s = time.perf_counter() - t1
    finally:
        stack.stop()
        broker.stop()
    per_job = [{**j, "live": [a for a in alerts if a.job_id == j["name"]], "replay": replays[j["name"]]}
               for j in streamed["jobs"]]
    return {"jobs": per_job, "events": streamed["events"], "streamed_s": streamed["streamed_s"], "judged_s": judged_s,
            "replay_s": replay_s, "health": health, "status_latencies": poll.latencies,
            "status_failures": poll.failures}


def same(live: list[Alert], replayed: list[Alert]) -> bool:
    def key(alerts: list[Alert]) -> list[tuple[datetime, str, str, str]]:
        return sorted((a.ts, a.fingerprint, a.status, a.severity) for a in alerts)
    return key(live) == key(replayed)

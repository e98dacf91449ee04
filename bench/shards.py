"""Sharded detection: 3 detect shards x 30 jobs through the real broker, per shard throughput and turn time (issue 50).

An embedded Tansu broker and a chdb engine; 30 simulated jobs (`--hosts` hosts x 8 GPUs each, `--steps` 1-s steps,
a few faults) are produced at once and stored by an ingest-only analyzer first (detect off), so what is measured
next is detection alone: three `AnalyzerService`s with `detect_shards` on (the `vigil-detect` group over
`detect-jobs`) then split the jobs and judge every job's whole history, as after a restart or an outage. Per shard:
the jobs and GPUs it owns, the instants judged, its turns (wall time: median, max), its detect thread's Python CPU.
In all: the wall time and the process CPU (every thread, the engine's query threads too) from the shards' start to
every job judged to its end, and from them the cost of detection per 1,000 GPUs at real time (CPU seconds per GPU
and second of event time judged) and what 100,000 GPUs would take.

The three shards run in one process (chdb is one engine per process; the shards share it as production shards share
a ClickHouse server): their detect threads share one interpreter, so the per-shard CPU is each detect thread's own,
the engine's is counted once in the total.

    python bench/shards.py [--jobs 30] [--hosts 8] [--steps 120] [--shards 3] [--no-append]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psutil
from analyzer_common import append_results, machine_info

from vigil.analyzer.clock import grid_ceil
from vigil.analyzer.service import AnalyzerService
from vigil.analyzer.settings import AnalyzerSettings
from vigil.analyzer.simulator.delivery import Delivery, Run, deliver
from vigil.analyzer.simulator.faults import parse_fault
from vigil.analyzer.simulator.layout import Layout
from vigil.analyzer.simulator.model import SimConfig, Simulation
from vigil.app.components import migrate_all
from vigil.clickhouse.client import connect
from vigil.contract import Event
from vigil.kafka.admin import ensure_topics
from vigil.kafka.broker import EmbeddedBroker
from vigil.kafka.producer import EventProducer
from vigil.service import StackContext
from vigil.settings import VigilSettings

GPUS = 8
FAULTS = ["straggler:host=sim-host-0002,start=30,magnitude=0.1", "heartbeat_loss:host=sim-host-0003,start=60",
          "nic_drop:host=sim-host-0001,start=40,magnitude=0.6"]
FAST = {"batch_s": 0.3, "detect_interval_s": 0.5}


def sims(jobs: int, hosts: int, start: datetime) -> list[Simulation]:
    return [Simulation(SimConfig(job=f"j{k:02d}", layout=Layout(hosts=hosts, gpus_per_host=GPUS), seed=k,
                                 start=start + timedelta(seconds=k % 5),
                                 faults=[parse_fault(FAULTS[k % 3])] if k % 3 == 0 else []))
            for k in range(jobs)]


class Timed:
    """Wraps a shard's `detect_once`: wall time of each turn and its detect thread's Python CPU."""

    def __init__(self, service: AnalyzerService) -> None:
        self.turns: list[float] = []
        self.cpu = 0.0
        inner = service.detect_once

        def once() -> int:
            wall, cpu = time.monotonic(), time.thread_time()
            try:
                return inner()
            finally:
                self.cpu += time.thread_time() - cpu
                self.turns.append(time.monotonic() - wall)

        service.detect_once = once  # type: ignore[method-assign]


def judged(shards: list[AnalyzerService], ends: dict[str, datetime]) -> bool:
    for job, end in ends.items():
        own = [s for s in shards if s.owner is not None and s.owner.owns(job)]
        if len(own) != 1 or own[0].cursor.positions.get(job, end - timedelta(days=1)) < end or own[0].cursor.backlog:
            return False
    return True


def wait(what: str, cond: Any, timeout: float, show: Any = None) -> None:
    deadline, shown = time.monotonic() + timeout, time.monotonic()
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        if show is not None and time.monotonic() - shown > 30:
            print(show(), file=sys.stderr, flush=True)
            shown = time.monotonic()
        time.sleep(0.5)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=30)
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--shards", type=int, default=3)
    ap.add_argument("--no-append", dest="append", action="store_false")
    args = ap.parse_args()
    broker = EmbeddedBroker()
    bootstrap = broker.start()
    try:
        settings = VigilSettings(kafka_bootstrap=bootstrap, topic_prefix="shards.", topic_partitions=4)
        ensure_topics(settings, bootstrap)
        dsn = f"chdb://{tempfile.mkdtemp(prefix='vigil-bench-s-')}"
        client = connect(dsn, database="vigil")
        migrate_all(client, 30)
        ctx = StackContext(settings=settings, bootstrap=bootstrap, clickhouse=client, clickhouse_dsn=dsn)
        start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)
        sent: list[Event] = []
        deliver([Run(sim=s, steps=range(args.steps)) for s in sims(args.jobs, args.hosts, start)], sent.extend,
                Delivery())
        producer = EventProducer(settings=settings, bootstrap=bootstrap)
        producer.send(sent)
        producer.flush()
        produced = datetime.now(UTC)
        step = AnalyzerSettings().eval_step_s
        ends = {j: grid_ceil(max(e.ts for e in sent if e.job_id == j), step) for j in {e.job_id for e in sent}}
        firsts = {j: min(e.ts for e in sent if e.job_id == j) for j in ends}
        t0 = time.monotonic()
        ingest = AnalyzerService(ctx, AnalyzerSettings(group_id="g-shards", detect=False, **FAST))  # type: ignore[arg-type]
        ingest.start()
        def stored() -> bool:  # everything produced before `produced` is in ClickHouse
            front = ingest.ingest.frontier if ingest.ingest is not None else None
            return front is not None and front >= produced

        wait("the ingest", stored, 1800)
        print(f"stored in {time.monotonic() - t0:.0f} s; judging", file=sys.stderr, flush=True)
        ingest_s = time.monotonic() - t0
        ingest.stop()
        shards = [AnalyzerService(ctx, AnalyzerSettings(group_id="g-shards", detect_shards=True, **FAST))  # type: ignore[arg-type]
                  for _ in range(args.shards)]
        timers = [Timed(s) for s in shards]
        proc = psutil.Process()
        cpu0, t0 = sum(proc.cpu_times()[:2]), time.monotonic()
        for s in shards:
            s.start()
        def progress() -> str:
            own = {j: [s for s in shards if s.owner is not None and s.owner.owns(j)] for j in ends}
            return " ".join(f"{j}:{(o[0].cursor.positions.get(j, firsts[j]) - ends[j]).total_seconds():+.0f}"
                            if len(o) == 1 else f"{j}:owners {len(o)}" for j, o in sorted(own.items())) + \
                f" backlog {[s.cursor.backlog for s in shards]} errors {[s.cursor.errors[-1:] for s in shards]}"

        wait("every job judged by its owner", lambda: judged(shards, ends), 3600, progress)
        wall, cpu = time.monotonic() - t0, sum(proc.cpu_times()[:2]) - cpu0
        rows = [shard_row(i, s, t, ends, firsts, args.hosts) for i, (s, t) in enumerate(zip(shards, timers, strict=True))]
        stop = [threading.Thread(target=s.stop) for s in shards]
        for t in stop:
            t.start()
        for t in stop:
            t.join()
    finally:
        broker.stop()
    print(report(args, rows, wall, cpu, ingest_s, len(sent), ends, firsts))


def shard_row(i: int, s: AnalyzerService, t: Timed, ends: dict[str, datetime], firsts: dict[str, datetime],
              hosts: int) -> dict[str, Any]:
    jobs = [j for j in ends if s.owner is not None and s.owner.owns(j)]
    event_s = sum((ends[j] - firsts[j]).total_seconds() for j in jobs)
    return {"shard": i, "jobs": len(jobs), "gpus": len(jobs) * hosts * GPUS, "instants": s.cursor.instants_judged,
            "turns": len(t.turns), "median": statistics.median(t.turns) if t.turns else 0.0,
            "max": max(t.turns, default=0.0), "cpu": t.cpu, "gpu_event_s": event_s * hosts * GPUS}


def report(args: argparse.Namespace, rows: list[dict[str, Any]], wall: float, cpu: float, ingest_s: float, events: int,
           ends: dict[str, datetime], firsts: dict[str, datetime]) -> str:
    lines = ["| shard | jobs | GPUs | instants judged | instants/s | turns | median turn s | max turn s | "
             "detect thread CPU s | its CPU s per 1,000 GPU-hours of event time |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        per = r["cpu"] / r["gpu_event_s"] * 1000 * 3600 if r["gpu_event_s"] else 0.0
        lines.append(f"| {r['shard']} | {r['jobs']} | {r['gpus']:,} | {r['instants']:,} | {r['instants'] / wall:.1f} | "
                     f"{r['turns']} | {r['median']:.2f} | {r['max']:.2f} | {r['cpu']:.1f} | {per:.0f} |")
    gpus = args.jobs * args.hosts * GPUS
    gpu_event_s = sum(r["gpu_event_s"] for r in rows)
    cores_per_k = cpu / gpu_event_s * 1000  # CPU s per (GPU x event s), x 1000 GPUs: cores at real time
    python_per_k = sum(r["cpu"] for r in rows) / gpu_event_s * 1000
    need = cores_per_k * 100
    shards = math.ceil(need / 0.5)
    event_s = statistics.mean((ends[j] - firsts[j]).total_seconds() for j in ends)
    head = (f"{args.jobs} jobs x {args.hosts} hosts x {GPUS} GPUs ({gpus:,} GPUs), {args.steps} 1-s steps each "
            f"(~{event_s:.0f} s of event time per job), {events:,} events, stored first by an ingest-only analyzer in "
            f"{ingest_s:.0f} s; then {args.shards} detect shards (one process, one chdb engine) judged every job's "
            f"whole history in {wall:.0f} s wall, process CPU {cpu:.0f} s (all threads, engine included).")
    tail = (f"Detection cost at real time: **{cores_per_k:.3f} cores per 1,000 GPUs** (process CPU / GPU-seconds of "
            f"event time judged; the shards' Python detect threads alone {python_per_k:.3f}): a shard's cost is "
            f"this figure times the GPUs it owns (its own column above, per GPU-hour). On paper, 100,000 GPUs: {need:.1f} cores of detection; at most half a core per shard (so a dead "
            f"shard's share fits on the others, and its Python stays clear of one core), **{shards} shards**, "
            f"with ingest and broker on top (bench/scale.py: 0.108 cores per 1,000 GPUs for analyzer and broker "
            f"at 10,000 GPUs, detection included).")
    text = head + "\n\n" + "\n".join(lines) + "\n\n" + tail
    if args.append:
        load = " ".join(f"{x:.1f}" for x in psutil.getloadavg())
        append_results("Sharded detection: 3 shards x 30 jobs (bench/shards.py, issue 50)",
                       machine_info() + f"\nLoad average at the end {load} (2 cores shared with other helpers' test "
                       "runs: CPU figures are this process's own, wall times are stretched by the others).\n\n"
                       + text + f"\n\nCommand: `python bench/shards.py --jobs {args.jobs} --hosts {args.hosts} "
                       f"--steps {args.steps} --shards {args.shards}`.")
    return text


if __name__ == "__main__":
    main()

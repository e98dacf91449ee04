"""A 10,000-GPU job at real step rate through the real broker into the analyzer, detectors running.

A producer process streams what 1,250 hosts x 8 GPUs send: one step event per rank per second,
4 NIC samples per host per second, a heartbeat (8 GPUs) per host every 2 s, as the agent's
records (one host's events per record, keyed by host; steps and NICs as columnar records, as vigil's producers
write them since 2026-12-07, or as row records with `--rows`). The analyzer runs in this process as
`vigil up` hosts it (ingest + detectors on the embedded ClickHouse engine). Every 10 s the run
samples the ingest rate, the consumer lag (records and seconds of event time behind), the
detector turns (wall time of each `LiveCursor.turn`, which must stay under `detect_interval_s`),
the ClickHouse size and the CPU of the analyzer and of the broker, and the analyzer's RSS. Each detector's
`detect` is timed (the seconds of its queries and judging, per call), so a long turn can be told apart.

A hard fault: at `--fault-at-s` (minute 8 of a 10-minute run; 80 % of a shorter one) one host
(`node-00100`) falls silent, steps, NICs and heartbeats at once, as a host that lost power does.
The run reports when the detectors first returned its `heartbeat_loss` alert, in wall seconds
after the fault (the goal: within 15 s, detection physics included: silence is a loss after
`heartbeat.miss_intervals` x its 2 s interval).

    python bench/scale.py [--minutes 10] [--hosts 1250] [--partitions 8] [--fault-at-s S] [--rows] [--no-append]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from typing import Any

import msgspec
import psutil
from analyzer_common import append_results, machine_info

PHASES = ("forward", "backward", "optimizer", "comm")


FAULT_HOST = 100
FAULT_LINE = "fault: node-{:05d} silent from "
THREADS = {"python": "Python (ingest, detectors)", "MergeMutate": "engine merges"}
"""The analyzer's threads by what they run: Python's keep the interpreter's name; the engine's (chdb) are named by
their pool, and the query and insert pools rename their threads as they go (counted as 'engine queries, inserts')."""


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """CPU seconds (user + system) of each thread of `pid`, with the thread's name now."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[str, float]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:  # the thread ended
            continue
        name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        out[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return out


def by_class(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds between two `thread_cpu` samples per class of thread (a thread counts as its name at `after`;
    one that ended in between is not counted)."""
    out = dict.fromkeys([*THREADS.values(), "engine queries, inserts"], 0.0)
    for tid, (name, secs) in after.items():
        cls = next((c for prefix, c in THREADS.items() if name.startswith(prefix)), "engine queries, inserts")
        out[cls] += secs - before.get(tid, (name, 0.0))[1]
    return out


def produce(bootstrap: str, prefix: str, hosts: int, gpus: int, nics: int, seconds: int, fault_at: int,
            rows: bool = False) -> None:
    """The producer process: paced at one simulated step per wall second; host FAULT_HOST silent from `fault_at`."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "lz4",
                  "queue.buffering.max.kbytes": 512 * 1024, "enable.idempotence": True, "acks": "all"})
    enc = msgspec.json.Encoder()

    def record(kind: str, events: list[dict[str, Any]]) -> bytes:
        """One host's events of one kind as the agent's record: columns (`wire.COLUMNAR`), or rows with `rows`."""
        if rows:
            return b'{"kind":"%s","schema_version":1,"events":' % kind.encode() + enc.encode(events) + b"}"
        cols: dict[str, list[Any]] = {}
        for name, first in events[0].items():
            if name == "coords":
                cols.update({f"coords.{sub}": [e["coords"][sub] for e in events] for sub in first})
            else:
                cols[name] = [e[name] for e in events]
        return (b'{"kind":"%s","schema_version":1,"rows":%d,"columns":' % (kind.encode(), len(events)) +
                enc.encode(cols) + b"}")
    job, world = "scale-10k", hosts * gpus
    start = time.time()
    for step in range(seconds):
        target = start + step
        if (delay := target - time.time()) > 0:
            time.sleep(delay)
        ts = datetime.fromtimestamp(target, UTC).isoformat().replace("+00:00", "Z")
        if step == fault_at:
            print(FAULT_LINE.format(FAULT_HOST) + f"{target:.3f}", flush=True)
        for h in range(hosts):
            if h == FAULT_HOST and step >= fault_at:
                continue
            host = f"node-{h:05d}"
            key = host.encode()
            slow = 1.08 if h == 7 and step > 120 else 1.0  # one straggler for the detectors to find
            ev = [{"event_id": f"{host}-s{step}-{g}", "job_id": job, "host": host, "ts": ts, "rank": h * gpus + g,
                   "local_rank": g, "world_size": world, "coords": {"dp": h, "tp": g, "pp": 0}, "step": step,
                   "step_ms": 1000.0 * slow, "phases": {"forward": 300.0 * slow, "backward": 520.0, "optimizer": 60.0,
                                                        "comm": 120.0}, "mfu": 0.42} for g in range(gpus)]
            p.produce(f"{prefix}steps", key=key, value=record("step", ev))
            nic = [{"event_id": f"{host}-n{step}-{n}", "job_id": job, "host": host, "ts": ts, "device": f"mlx5_{n}",
                    "link": "rdma", "tx_bytes": step * 10**10, "rx_bytes": step * 10**10, "tx_bps": 1e10, "rx_bps": 1e10,
                    "interval_s": 1.0} for n in range(nics)]
            p.produce(f"{prefix}nic", key=key, value=record("nic", nic))
            if step % 2 == h % 2:
                hb = [{"event_id": f"{host}-h{step}", "job_id": job, "host": host, "ts": ts, "interval_s": 2.0,
                       "processes": [{"pid": 100 + g, "status": "running", "local_rank": g} for g in range(gpus)],
                       "gpus": [{"index": g, "name": "H100", "util_pct": 97.0, "temp_c": 60.0} for g in range(gpus)]}]
                p.produce(f"{prefix}heartbeats", key=key,
                          value=b'{"kind":"heartbeat","schema_version":1,"events":' + enc.encode(hb) + b"}")
            p.poll(0)
        print(f"produced step {step} in {time.time() - target:.2f} s", flush=True)
    p.flush(60)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--hosts", type=int, default=1250)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--nics", type=int, default=4)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--drain-s", type=float, default=180.0, help="after the producer ends, wait this long for lag 0")
    ap.add_argument("--fault-at-s", type=int, default=None, help="when host node-00100 falls silent (default: "
                    "minute 8, or 80 %% of a run shorter than 10 minutes)")
    ap.add_argument("--produce", nargs=2, metavar=("BOOTSTRAP", "PREFIX"), help=argparse.SUPPRESS)
    ap.add_argument("--rows", action="store_true", help="steps and NICs as row records (as agents wrote them before "
                    "2026-12-07)")
    ap.add_argument("--no-append", dest="append", action="store_false")
    args = ap.parse_args()
    seconds = int(args.minutes * 60)
    fault_at = args.fault_at_s if args.fault_at_s is not None else min(480, int(seconds * 0.8))
    if args.produce:
        produce(args.produce[0], args.produce[1], args.hosts, args.gpus, args.nics, seconds, fault_at, args.rows)
        return

    from vigil.analyzer import engine
    from vigil.analyzer.clock import job_clocks as real_clocks
    from vigil.analyzer.service import AnalyzerService
    from vigil.analyzer.settings import AnalyzerSettings
    from vigil.app.stack.runner import prepare
    from vigil.kafka.broker import EmbeddedBroker
    from vigil.runtime import tune_gc
    from vigil.settings import VigilSettings

    load0 = os.getloadavg()
    broker = EmbeddedBroker()
    bootstrap = broker.start()
    home = tempfile.mkdtemp(prefix="vigil-scale-")
    settings = VigilSettings(home=home, kafka_bootstrap=bootstrap, clickhouse_dsn=f"chdb://{home}/ch",
                             topic_prefix="scale.", topic_partitions=args.partitions)
    ctx = prepare(settings, bootstrap)
    service = AnalyzerService(ctx, AnalyzerSettings())
    turns: list[tuple[float, float, int]] = []  # (end time, seconds, instants judged: more than one is a catch-up)
    fired: dict[str, float] = {}  # "alert:subject" -> wall time a turn first returned it firing
    real_turn = service.cursor.turn

    def seen(alerts: list[Any]) -> None:
        for e in alerts:  # alert events
            if e.status == "firing":
                fired.setdefault(f"{e.alert}:{e.subject}", time.time())

    def timed_turn(client: Any, frontier: datetime | None = None, publish: Any = None, topics: Any = None) -> list[Any]:
        t, judged = time.perf_counter(), service.cursor.instants_judged

        def early(alerts: list[Any]) -> None:  # a catch-up turn's first rounds: published at once
            publish(alerts)
            seen(alerts)

        try:
            out = list(real_turn(client, frontier, publish=early if publish is not None else None, topics=topics))
            seen(out)
            return out
        finally:
            turns.append((time.monotonic(), time.perf_counter() - t, service.cursor.instants_judged - judged))

    service.cursor.turn = timed_turn  # type: ignore[method-assign]
    detector_s: dict[str, list[float]] = {d.name: [] for d in engine.DETECTORS}  # each detect() call's seconds

    def timed(detector: Any) -> Any:
        real = detector.detect

        def detect(ctx: Any) -> Any:
            t = time.perf_counter()
            try:
                return real(ctx)
            finally:
                detector_s[detector.name].append(time.perf_counter() - t)
        return detect

    for d in engine.DETECTORS:  # instances shared by the engine's walks; frozen dataclasses among them
        object.__setattr__(d, "detect", timed(d))
    let_go: list[float] = []  # wall times of the clock reads that found the fault host's sources all let go

    def watched_clocks(*a: Any, **kw: Any) -> list[Any]:
        clocks = real_clocks(*a, **kw)
        for c in clocks:  # once its sources are let go, the watermark is past its last event (clock.py)
            mine = [sc.alive for (h, _s), sc in c.sources.items() if h == f"node-{FAULT_HOST:05d}"]
            if mine and not any(mine):
                let_go.append(time.time())
        return clocks

    setattr(engine, "job_clocks", watched_clocks)  # noqa: B010 (the turn reads it from the engine's module)
    service.start()
    tune_gc()  # as `vigil up` and `vigil analyzer` run it
    producer = subprocess.Popen([sys.executable, __file__, "--produce", bootstrap, "scale.", "--minutes", str(args.minutes),
                                 "--hosts", str(args.hosts), "--gpus", str(args.gpus), "--nics", str(args.nics),
                                 "--fault-at-s", str(fault_at), *(["--rows"] if args.rows else [])],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    produced: list[str] = []
    threading.Thread(target=lambda: produced.extend(producer.stdout or []), daemon=True).start()
    proc = psutil.Process()
    proc.cpu_percent()
    broker_proc = psutil.Process(broker.pid) if broker.pid else None
    if broker_proc is not None:
        broker_proc.cpu_percent()

    decode_cpu: dict[int, float] = {}  # the analyzer's decode process (each one, if it was restarted): CPU seconds

    def decode_seconds() -> float:
        ing = service.ingest
        pid = ing.decoder.pid if ing is not None and ing.decoder is not None else None
        if pid is not None:
            with contextlib.suppress(psutil.Error):
                decode_cpu[pid] = sum(psutil.Process(pid).cpu_times()[:2])
        return sum(decode_cpu.values())

    def cpu_seconds() -> float:  # user + system of the analyzer (with its decode process) and the broker
        return sum(sum(p.cpu_times()[:2]) for p in (proc, broker_proc) if p is not None) + decode_seconds()

    cpu_s0 = cpu_seconds()
    decode_last = decode_seconds()
    threads0 = thread_cpu(os.getpid())
    rows: list[list[Any]] = []
    t0 = time.monotonic()
    last_n, last_t = 0, t0
    try:
        while True:
            time.sleep(10)
            now = time.monotonic()
            h = service.health()
            ing = service.ingest
            assert ing is not None
            n = ing.stats.events
            lag = sum(h["lag"].values())
            recent = [d for end, d, _n in turns if end > last_t]
            newest = ctx.clickhouse.query("SELECT max(last_ts) FROM job_clock").result_rows[0][0]
            behind = (datetime.now(UTC) - newest.replace(tzinfo=UTC)).total_seconds() if newest else float("nan")
            decode_now = decode_seconds()
            rows.append([round(now - t0), n, round((n - last_n) / (now - last_t)), lag, round(behind, 1), len(recent),
                         round(max(recent), 2) if recent else None, round(statistics.median(recent), 2) if recent else None,
                         round(proc.cpu_percent(), 0), round(100 * (decode_now - decode_last) / (now - last_t), 0),
                         round(broker_proc.cpu_percent(), 0) if broker_proc else None,
                         round(proc.memory_info().rss / 2**20), h["ingest"]])
            print(rows[-1], h["last_error"][:120], flush=True)
            last_n, last_t, decode_last = n, now, decode_now
            if service.failed or (producer.poll() is not None and lag == 0):
                break
            if now - t0 > seconds + args.drain_s:  # the producer is done; lag is reported as it stands
                break
        size = ctx.clickhouse.query("SELECT formatReadableSize(sum(bytes_on_disk)), sum(rows) FROM system.parts "
                                    "WHERE active AND database = currentDatabase()").result_rows[0]
        stored = ctx.clickhouse.query("SELECT count() FROM step_timings").result_rows[0][0]
        alerts = service.alerts_published
        cpu_s = cpu_seconds() - cpu_s0
        threads = by_class(threads0, thread_cpu(os.getpid()))
        wall_s = time.monotonic() - t0
    finally:
        producer.kill()
        service.stop()
        broker.stop()
    load1 = os.getloadavg()
    every = [d for _, d, _n in turns]
    single = [d for _, d, n in turns if n <= 1]  # one instant (or none): a catch-up turn judges several in one
    longest = max(turns, key=lambda t: t[1], default=(0.0, 0.0, 0))
    fault_wall = next((float(line.rsplit(" ", 1)[1]) for line in produced if line.startswith("fault: ")), None)
    key = f"heartbeat_loss:node-{FAULT_HOST:05d}"
    fault = ("not injected (the run ended first)" if fault_wall is None else
             f"alerted {fired[key] - fault_wall:.1f} s after it (heartbeat_loss, critical)" if key in fired else
             "NOT alerted before the run ended")
    released = min((t for t in let_go if fault_wall is not None and t >= fault_wall), default=None)
    if fault_wall is not None and released is not None:  # the alert's path: the idle rules, then the turns
        fault += f"; its sources let go by the watermark after {released - fault_wall:.1f} s"
    gpus = args.hosts * args.gpus
    lines = [
        f"{args.hosts:,} hosts x {args.gpus} GPUs ({gpus:,} ranks), 1 step/s, {args.nics} NICs/host at 1 Hz, "
        f"heartbeats every 2 s: ~{args.hosts * (args.gpus + args.nics + 0.5):,.0f} events/s for {args.minutes:g} min, "
        f"{args.partitions} partitions per topic, steps and NICs as {'row' if args.rows else 'columnar'} records; "
        "analyzer (ingest + detectors, detect_interval_s=2) in one process.",
        f"Load average (1/5/15 min) at start {load0[0]:.1f}/{load0[1]:.1f}/{load0[2]:.1f}, at end "
        f"{load1[0]:.1f}/{load1[1]:.1f}/{load1[2]:.1f} (2 cores shared with other sessions' test runs).",
        "", "| t s | events stored | events/s | lag records | event time behind s | detector turns | max turn s | "
        "median turn s | analyzer CPU % | its decode process CPU % | broker CPU % | RSS MiB | ingest |",
        "| " + " | ".join(["---"] * 13) + " |",
        *("| " + " | ".join("-" if v is None else f"{v:,}" if isinstance(v, int) else str(v) for v in r) + " |" for r in rows),
        "", f"Stored: {stored:,} step rows; ClickHouse {size[0]} on disk ({size[1]:,} rows in all tables); "
        f"{alerts} alert events published; detector turns: {len(every)}, median {statistics.median(every) if every else 0:.2f} s, "
        f"max {max(every) if every else 0:.2f} s (it judged {longest[2]} instant(s)); turns of one instant: "
        f"{len(single)}, max {max(single) if single else 0:.2f} s; over the 2 s interval: "
        f"{sum(d > 2.0 for d in every)} ({sum(d > 2.0 for d in single)} of one instant).",
        f"Hard fault: node-{FAULT_HOST:05d} silent from t = {fault_at} s: {fault}. Event time behind: max "
        f"{max((r[4] for r in rows if r[0] <= seconds and r[4] == r[4]), default=float('nan')):.1f} s while producing.",
        "Detectors, seconds of their queries and judging over the run (calls, mean ms, max ms): " + ", ".join(
            f"{name} {sum(xs):.1f} ({len(xs)}, {1000 * sum(xs) / len(xs):.0f}, {1000 * max(xs):.0f})"
            for name, xs in sorted(detector_s.items(), key=lambda kv: -sum(kv[1])) if xs) + ".",
        f"Cost: {gpus / 1000:g} k GPUs, {cpu_s / wall_s:.2f} cores (analyzer with its decode process + broker) over "
        f"{wall_s:.0f} s, "
        f"{cpu_s / wall_s / (gpus / 1000):.3f} cores per 1,000 GPUs. The analyzer's threads: "
        + ", ".join(f"{name} {secs / wall_s:.2f}" for name, secs in threads.items()) + " cores.",
    ]
    text = "\n".join(lines)
    print(text)
    if args.append:
        append_results(f"Scale: a {gpus:,}-GPU job through broker + analyzer (bench/scale.py)",
                       machine_info() + "\n\n" + text + "\n\nCommand: `python bench/scale.py " + " ".join(sys.argv[1:]) + "`.")


if __name__ == "__main__":
    main()

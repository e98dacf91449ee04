"""Detection quality: simulator scenarios with every fault kind -> precision, recall, latency per kind.

Each scenario is one simulated job with all seven fault kinds on different hosts. The
simulator's events go through the ingest processors and the idempotent writer straight
into ClickHouse (no broker: the broker path is covered by tests/analyzer/test_scenario.py
and bench/ingest_throughput.py), then the detectors run over the stored history at
every `eval_step_s` of event time exactly as the live loop does (`engine.replay`).

Latency = alert event time (the evaluation instant that published it) - fault onset,
in seconds and in steps; for a traffic stop, its first *critical* alert (the warning for
the drop comes earlier). Precision/recall count distinct alert fingerprints against
the ground truth of `vigil simulate --json`; alerts of warning or worse count (an info event
such as the job-level "the whole job is quiet" of a restart gap pages no one). A verdict line
checks the issue's targets: precision and recall >= 0.97, hard faults <= 15 s, a 5 %-slow host within 30 steps.
Wall-clock latency through the live path is bench/analyzer_live_latency.py.

Resumed jobs (`--resumed-seeds`): the same 64-host scenarios, once started at step 4800 (as
every job is after a restart from a checkpoint) and once restarted: a healthy first run of
150 steps, then a minute later a second run from the checkpoint at step 120 carrying the
faults (a fresh registration, steps going back). Fleet (`--fleet-jobs`, analyzer_fleet.py):
that many jobs interleaved and streamed faster than real time through the broker into the
live analyzer hosted by the real stack; live alerts vs replay per job, `/health` latency.

    python bench/analyzer_detection.py [--seeds 3] [--big-seeds 3] [--resumed-seeds 2] [--fleet-jobs 10] [--no-append]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

from analyzer_common import SEVERE, append_results, machine_info

from vigil.analyzer.engine import replay
from vigil.analyzer.ingest.writer import ClickHouseWriter
from vigil.analyzer.settings import AnalyzerSettings
from vigil.analyzer.simulator.faults import parse_fault
from vigil.analyzer.simulator.layout import Layout
from vigil.analyzer.simulator.model import SimConfig, Simulation
from vigil.analyzer.simulator.runner import ground_truth
from vigil.app.components import migrate_all
from vigil.clickhouse.client import connect
from vigil.contract import Event


def faults_for(hosts: int, seed: int, steps: int, first: int = 0) -> list[str]:
    """Seven faults on distinct hosts chosen by the seed; onsets spread over the run (which begins at step `first`)."""
    import random

    rng = random.Random(seed)
    picks = rng.sample(range(hosts), 6)
    h = [f"sim-host-{i:04d}" for i in picks]
    base = first + max(20, steps // 6)
    return [
        f"straggler:host={h[0]},start={base},magnitude=0.05",
        f"nic_drop:host={h[1]},start={base + 5},duration={steps // 3}",
        f"traffic_stop:host={h[2]},start={base + 10}",
        f"mfu_decay:start={first + max(90, steps - 60)},magnitude=0.4,ramp=30",
        f"heartbeat_loss:host={h[3]},start={base + 15}",
        f"xid:host={h[4]},start={base + 20}",
        f"process_exit:host={h[5]},start={base + 25}",
    ]


def scenario(client: Any, hosts: int, steps: int, seed: int, mode: str = "fresh") -> dict[str, Any]:
    """mode: fresh (steps from 0), resumed (from step 4800), restarted (a healthy run, then a restart with faults)."""
    job = f"q{hosts}-{seed}" + ("" if mode == "fresh" else f"-{mode}")
    first = {"fresh": 0, "resumed": 4800, "restarted": 120}[mode]
    start = datetime(2026, 11, 1, tzinfo=UTC)
    writer = ClickHouseWriter(client=client)
    t0 = time.perf_counter()
    n = 0
    if mode == "restarted":  # a healthy first run; the faulty run restarts from its checkpoint a minute later
        healthy = Simulation(SimConfig(job=job, layout=Layout(hosts=hosts, pp=4), seed=seed + 1000, start=start))
        n += write_run(writer, healthy, range(150))
        start = healthy.now + timedelta(seconds=60)
    specs = faults_for(hosts, seed, steps, first)
    sim = Simulation(SimConfig(job=job, layout=Layout(hosts=hosts, pp=4), faults=[parse_fault(s) for s in specs],
                               seed=seed, start=start))
    n += write_run(writer, sim, range(first, first + steps))
    ingest_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    alerts = replay(client, AnalyzerSettings(), job)
    replay_s = time.perf_counter() - t0
    truth = ground_truth(sim, steps, n)
    step_s = (sim.now - sim.cfg.start).total_seconds() / steps
    return {"truth": truth, "alerts": alerts, "step_s": step_s, "events": n, "ingest_s": ingest_s, "replay_s": replay_s}


def write_run(writer: ClickHouseWriter, sim: Simulation, numbers: range) -> int:
    buf: list[Event] = [sim.registration()]
    n = 0
    for i in numbers:
        buf += sim.step(i)
        if len(buf) >= 50_000:
            writer.write(buf)
            n += len(buf)
            buf = []
    writer.write(buf)
    return n + len(buf)


def score(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    per: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"faults": 0, "hit": 0, "lat_s": [], "lat_steps": [], "fp": 0, "which": []})
    for r in results:
        firing = [a for a in r["alerts"] if a.status == "firing" and a.severity in SEVERE]
        first: dict[str, Any] = {}
        critical: dict[str, Any] = {}
        for a in firing:
            first.setdefault(a.fingerprint, a)
            if a.severity == "critical":
                critical.setdefault(a.fingerprint, a)
        expected = {}
        for f in r["truth"]["faults"]:
            fp = f["expected"]["fingerprint"]
            expected[fp] = f
            k = per[f["kind"]]
            k["faults"] += 1
            hit = (critical if f["kind"] == "traffic_stop" else first).get(fp)
            if hit is not None and f["onset"]:
                k["hit"] += 1
                lat = (hit.ts - datetime.fromisoformat(f["onset"])).total_seconds()
                k["lat_s"].append(lat)
                k["lat_steps"].append(lat / r["step_s"])
        for fp, a in first.items():
            if fp not in expected:
                per[f"(false) {a.alert}"]["fp"] += 1
                per[f"(false) {a.alert}"]["which"].append(f"{a.fingerprint} at {a.ts:%H:%M:%S}")
    return per


def table(per: dict[str, dict[str, Any]]) -> str:
    lines = ["| fault kind | faults | detected | recall | latency s (mean / max) | latency steps (mean / max) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for kind, k in sorted(per.items()):
        if kind.startswith("(false)"):
            continue
        rec = k["hit"] / k["faults"] if k["faults"] else 0.0
        ls, st = k["lat_s"], k["lat_steps"]
        lat = f"{sum(ls) / len(ls):.1f} / {max(ls):.1f}" if ls else "-"
        lst = f"{sum(st) / len(st):.1f} / {max(st):.1f}" if st else "-"
        lines.append(f"| {kind} | {k['faults']} | {k['hit']} | {rec:.2f} | {lat} | {lst} |")
    tp = sum(k["hit"] for k in per.values())
    fp = sum(k["fp"] for k in per.values())
    total = sum(k["faults"] for k in per.values())
    prec = tp / (tp + fp) if tp + fp else 1.0
    rec = tp / total if total else 0.0
    falses = ", ".join(f"{k[8:]}: {v['fp']} ({'; '.join(v['which'][:3])}{'; ...' if v['fp'] > 3 else ''})"
                       for k, v in per.items() if k.startswith("(false)")) or "none"
    lines.append("")
    lines.append(f"**precision {prec:.3f}, recall {rec:.3f}** ({tp} of {total} faults, {fp} false alerts: {falses})")
    lines.append("")
    lines.append(verdict(per, prec, rec))
    return "\n".join(lines)


HARD = ("heartbeat_loss", "process_exit", "traffic_stop", "xid")


def verdict(per: dict[str, dict[str, Any]], prec: float, rec: float) -> str:
    worst_hard = max((max(k["lat_s"]) for kind, k in per.items() if kind in HARD and k["lat_s"]), default=0.0)
    straggler = max(per["straggler"]["lat_steps"], default=float("inf")) if "straggler" in per else float("inf")
    checks = [("precision >= 0.97", prec >= 0.97), ("recall >= 0.97", rec >= 0.97),
              (f"hard faults <= 15 s (worst {worst_hard:.1f} s)", worst_hard <= 15),
              (f"5 % straggler <= 30 steps (worst {straggler:.1f})", straggler <= 30)]
    return "Targets: " + "; ".join(f"{name}: {'met' if ok else 'NOT met'}" for name, ok in checks) + "."


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3, help="64-host scenarios")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--big-seeds", type=int, default=3, help="1024-host scenarios")
    ap.add_argument("--big-steps", type=int, default=150)
    ap.add_argument("--resumed-seeds", type=int, default=2, help="64-host scenarios resumed at 4800, and restarted")
    ap.add_argument("--fleet-jobs", type=int, default=10, help="jobs streamed interleaved through the live path")
    ap.add_argument("--fleet-hosts", type=int, default=16)
    ap.add_argument("--fleet-steps", type=int, default=150)
    ap.add_argument("--speed", type=float, default=10.0, help="fleet: simulated seconds per wall second")
    ap.add_argument("--no-append", dest="append", action="store_false", help="print only; do not add to bench/RESULTS.md")
    args = ap.parse_args()
    dsn = f"chdb://{tempfile.mkdtemp(prefix='vigil-bench-d-')}"
    client = connect(dsn, database="vigil")
    migrate_all(client, 3650)
    sections = []
    plans = [(64, args.seeds, args.steps, "fresh"), (1024, args.big_seeds, args.big_steps, "fresh"),
             (64, args.resumed_seeds, args.steps, "resumed"), (64, args.resumed_seeds, args.steps, "restarted")]
    for hosts, seeds, steps, mode in plans:
        if seeds <= 0:
            continue
        results = []
        for seed in range(seeds):
            r = scenario(client, hosts, steps, seed, mode)
            print(f"{hosts} hosts seed {seed} {mode}: {r['events']:,} events, ingest {r['ingest_s']:.1f} s, "
                  f"replay {r['replay_s']:.1f} s, {len(r['alerts'])} alert events", flush=True)
            results.append(r)
        step_s = sum(r["step_s"] for r in results) / len(results)
        what = {"fresh": "", "resumed": ", **resumed at step 4800**",
                "restarted": ", **restarted**: 150 healthy steps, then a minute later from the checkpoint at step 120 "
                             "with the faults"}[mode]
        head = (f"### {hosts} hosts x 8 GPUs (pp=4), {steps} steps (~{step_s:.2f} s each){what}, {seeds} seed(s), "
                f"all 7 fault kinds per job; straggler magnitude 5%")
        sections.append(head + "\n\n" + table(score(results)))
        print(sections[-1], flush=True)
    if args.fleet_jobs > 0:
        sections.append(fleet_section(args, dsn))
        print(sections[-1], flush=True)
    if args.append:
        append_results("Analyzer detection quality (simulator scenarios)", machine_info() + "\n\n" +
                       "Detectors fed through the ingest processors straight into chdb (no broker), evaluated at "
                       "every 2 s of event time as live (replay); the fleet section goes through the broker and the "
                       "live analyzer. Latency = alert event time - fault onset.\n\n"
                       + "\n\n".join(sections) + "\n\nCommand: `python bench/analyzer_detection.py` "
                       f"(seeds {args.seeds} x 64 hosts x {args.steps} steps, {args.big_seeds} x 1024 hosts x "
                       f"{args.big_steps} steps, {args.resumed_seeds} resumed + restarted, fleet of {args.fleet_jobs} "
                       f"x {args.fleet_hosts} hosts x {args.fleet_steps} steps at {args.speed:g}x).")


def fleet_section(args: argparse.Namespace, dsn: str) -> str:
    from analyzer_fleet import fleet, same

    f = fleet(args.fleet_jobs, args.fleet_hosts, args.fleet_steps, args.speed, dsn)
    rows = {"live": [], "replay": []}  # type: dict[str, list[dict[str, Any]]]
    for j in f["jobs"]:
        for mode in rows:
            rows[mode].append({"truth": j["truth"], "alerts": j[mode], "step_s": j["step_s"]})
    equal = [j["name"] for j in f["jobs"] if same(j["live"], j["replay"])]
    differ = [j["name"] for j in f["jobs"] if j["name"] not in equal]
    lat = sorted(f["status_latencies"])
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else float("nan")
    h = f["health"]
    head = (f"### Fleet: {args.fleet_jobs} jobs x {args.fleet_hosts} hosts x 4 GPUs (pp=2), {args.fleet_steps} steps, "
            f"interleaved, streamed at {args.speed:g}x real time through the broker into the live analyzer "
            f"(`vigil up`'s stack, default settings)\n\n"
            f"fleet00 starts at step 4800; fleet01 runs 100 healthy steps, then restarts a minute later from step 80 "
            f"with its faults; every job has two fault kinds (every third also an MFU decay).\n\n"
            f"{f['events']:,} events streamed in {f['streamed_s']:.0f} s; every job judged to its end "
            f"{f['judged_s']:.0f} s after the stream began ({h['instants_judged']:,} instants in {h['detect_turns']} "
            f"turns); replaying the {args.fleet_jobs} jobs took {f['replay_s']:.0f} s.\n\n"
            f"**Live alert events == replay's (instant, fingerprint, status, severity) for {len(equal)} of "
            f"{len(f['jobs'])} jobs**" + (f" (differ: {', '.join(differ)})" if differ else "") + ".\n\n"
            f"`/health` (what `vigil status` asks) polled every 0.25 s while it ran: {len(lat)} answers, "
            f"{f['status_failures']} failures, p99 {p99 * 1000:.0f} ms, max {max(lat, default=0) * 1000:.0f} ms.")
    return (head + "\n\n#### Live\n\n" + table(score(rows["live"])) + "\n\n#### Replay\n\n"
            + table(score(rows["replay"])))


if __name__ == "__main__":
    main()

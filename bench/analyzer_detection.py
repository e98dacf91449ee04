"""Detection quality: simulator scenarios with every fault kind -> precision, recall, latency per kind.

Each scenario is one simulated job with all seven fault kinds on different hosts. The
simulator's events go through the ingest processors and the idempotent writer straight
into ClickHouse (no broker: the broker path is covered by tests/analyzer/test_scenario.py
and bench/ingest_throughput.py), then the detectors run over the stored history at
every `eval_step_s` of event time exactly as the live loop does (`engine.replay`).

Latency = alert event time (the evaluation instant that published it) - fault onset,
in seconds and in steps; for a traffic stop, its first *critical* alert (the warning for
the drop comes earlier). Precision/recall count distinct alert fingerprints against
the ground truth of `vigil simulate --json`. A verdict line checks the issue's targets:
precision and recall >= 0.97, hard faults <= 15 s, a 5 %-slow host within 30 steps.
Wall-clock latency through the live path is bench/analyzer_live_latency.py.

    python bench/analyzer_detection.py [--seeds 3] [--big-seeds 3] [--no-append]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from analyzer_common import append_results, machine_info

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


def faults_for(hosts: int, seed: int, steps: int) -> list[str]:
    """Seven faults on distinct hosts chosen by the seed; onsets spread over the run."""
    import random

    rng = random.Random(seed)
    picks = rng.sample(range(hosts), 6)
    h = [f"sim-host-{i:04d}" for i in picks]
    base = max(20, steps // 6)
    return [
        f"straggler:host={h[0]},start={base},magnitude=0.05",
        f"nic_drop:host={h[1]},start={base + 5},duration={steps // 3}",
        f"traffic_stop:host={h[2]},start={base + 10}",
        f"mfu_decay:start={max(90, steps - 60)},magnitude=0.4,ramp=30",
        f"heartbeat_loss:host={h[3]},start={base + 15}",
        f"xid:host={h[4]},start={base + 20}",
        f"process_exit:host={h[5]},start={base + 25}",
    ]


def scenario(client: Any, hosts: int, steps: int, seed: int) -> dict[str, Any]:
    job = f"q{hosts}-{seed}"
    specs = faults_for(hosts, seed, steps)
    sim = Simulation(SimConfig(job=job, layout=Layout(hosts=hosts, pp=4), faults=[parse_fault(s) for s in specs],
                               seed=seed, start=datetime(2026, 11, 1, tzinfo=UTC)))
    writer = ClickHouseWriter(client=client)
    t0 = time.perf_counter()
    buf: list[Event] = [sim.registration()]
    n = 1
    for i in range(steps):
        buf += sim.step(i)
        if len(buf) >= 50_000:
            writer.write(buf)
            n += len(buf)
            buf = []
    writer.write(buf)
    n += len(buf)
    ingest_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    alerts = replay(client, AnalyzerSettings(), job)
    replay_s = time.perf_counter() - t0
    truth = ground_truth(sim, steps, n)
    step_s = (sim.now - sim.cfg.start).total_seconds() / steps
    return {"truth": truth, "alerts": alerts, "step_s": step_s, "events": n, "ingest_s": ingest_s, "replay_s": replay_s}


def score(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    per: dict[str, dict[str, Any]] = defaultdict(lambda: {"faults": 0, "hit": 0, "lat_s": [], "lat_steps": [], "fp": 0})
    for r in results:
        firing = [a for a in r["alerts"] if a.status == "firing"]
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
    falses = ", ".join(f"{k[8:]}: {v['fp']}" for k, v in per.items() if k.startswith("(false)")) or "none"
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
    ap.add_argument("--no-append", dest="append", action="store_false", help="print only; do not add to bench/RESULTS.md")
    args = ap.parse_args()
    client = connect(f"chdb://{tempfile.mkdtemp(prefix='vigil-bench-d-')}", database="vigil")
    migrate_all(client, 3650)
    sections = []
    for hosts, seeds, steps in ((64, args.seeds, args.steps), (1024, args.big_seeds, args.big_steps)):
        if seeds <= 0:
            continue
        results = []
        for seed in range(seeds):
            r = scenario(client, hosts, steps, seed)
            print(f"{hosts} hosts seed {seed}: {r['events']:,} events, ingest {r['ingest_s']:.1f} s, "
                  f"replay {r['replay_s']:.1f} s, {len(r['alerts'])} alert events", flush=True)
            results.append(r)
        step_s = sum(r["step_s"] for r in results) / len(results)
        head = (f"### {hosts} hosts x 8 GPUs (pp=4), {steps} steps (~{step_s:.2f} s each), {seeds} seed(s), "
                f"all 7 fault kinds per job; straggler magnitude 5%")
        sections.append(head + "\n\n" + table(score(results)))
        print(sections[-1], flush=True)
    if args.append:
        append_results("Analyzer detection quality (simulator scenarios)", machine_info() + "\n\n" +
                       "Detectors fed through the ingest processors straight into chdb (no broker), evaluated every "
                       "2 s of event time as live; latency = alert event time - fault onset.\n\n"
                       + "\n\n".join(sections) + "\n\nCommand: `python bench/analyzer_detection.py` "
                       f"(seeds {args.seeds} x 64 hosts x {args.steps} steps, {args.big_seeds} x 1024 hosts x "
                       f"{args.big_steps} steps).")


if __name__ == "__main__":
    main()

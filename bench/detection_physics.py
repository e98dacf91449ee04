"""The physics of synchronous training, scored: one fault per job, live and replay side by side.

Issue 15's benchmark, beside bench/analyzer_detection.py (all seven classic fault kinds in
one job). Each class below is a simulated
job (48 hosts x 8 GPUs, pp 4 unless the class says otherwise; evaluation pauses, checkpoints
and a stopped tail like a real run) with one fault, or none for the long healthy control.
The job's events are written through the ingest processors into chdb twice:

* replay: all at once, then `engine.replay` (the detectors at every instant);
* live: step by step in event-time order, a `LiveCursor` turn every few simulated seconds,
  as the live analyzer sees a job arrive.

Scoring counts alerts of severity warning or worse (info is a note, e.g. "the job is
paused"). A fault is detected when its expected fingerprint fires (named right: a hang's
job-level alert must name the hung host); every other warning-or-worse fingerprint of
that job is a false alert of that class, save a hang's own `collective_hang` (the hang
detector's "the job hangs" beside the traffic detector's job-level finding: one fault,
named by both; only the latter names the host without Flight Recorder dumps). Latency =
alert event time - fault onset. A verdict line checks the goal: precision and recall >= 0.97
per class, live and replay, and no alert on the healthy control.

    python bench/detection_physics.py [--seeds 1] [--classes SUBSTRING] [--no-live] [--no-append]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from analyzer_common import SEVERE, append_results, machine_info

from vigil.analyzer.alerts.book import AlertBook
from vigil.analyzer.engine import DETECTORS, LiveCursor, replay
from vigil.analyzer.ingest.writer import ClickHouseWriter
from vigil.analyzer.settings import AnalyzerSettings
from vigil.analyzer.simulator.faults import parse_fault
from vigil.analyzer.simulator.layout import Layout
from vigil.analyzer.simulator.model import SimConfig, Simulation
from vigil.analyzer.simulator.runner import ground_truth
from vigil.app.components import migrate_all
from vigil.clickhouse.client import connect
from vigil.contract import Alert, Event


@dataclass(frozen=True, kw_only=True)
class PhysicsClass:
    name: str
    spec: str  # fault spec with {host} and {start}; "" for the healthy control
    tp: int | None = None  # tensor-parallel size (None: the host)
    steps: int = 240
    hosts: int = 48
    extra: dict[str, Any] = field(default_factory=dict)
    stream: bool = False  # written as simulated, never held (a 512-host job is ~10 M events); replay only


CLASSES: tuple[PhysicsClass, ...] = (
    PhysicsClass(name="straggler 5% (host)", spec="straggler:host={host},start={start},magnitude=0.05"),
    PhysicsClass(name="intermittent 20% on 25% of steps", spec="intermittent:host={host},start={start},magnitude=0.2,fraction=0.25"),
    PhysicsClass(name="gpu_straggler 8% (tp=8)", spec="gpu_straggler:host={host},start={start},gpu=3,magnitude=0.08"),
    PhysicsClass(name="gpu_straggler 12% (tp=8)", spec="gpu_straggler:host={host},start={start},gpu=6,magnitude=0.12,reason=hw_thermal_slowdown"),
    PhysicsClass(name="gpu_straggler 8% (tp=2)", spec="gpu_straggler:host={host},start={start},gpu=5,magnitude=0.08", tp=2),
    PhysicsClass(name="nic_drop 60%", spec="nic_drop:host={host},start={start},magnitude=0.6"),
    PhysicsClass(name="traffic_stop", spec="traffic_stop:host={host},start={start},nic=mlx5_1"),
    PhysicsClass(name="nic_flap 3 s / 20 s", spec="nic_flap:host={host},start={start},nic=mlx5_1,down=3,period=20"),
    PhysicsClass(name="hang (one host first)", spec="hang:host={host},start={start}"),
    PhysicsClass(name="heartbeat_loss", spec="heartbeat_loss:host={host},start={start}"),
    PhysicsClass(name="process_exit", spec="process_exit:host={host},start={start},local_rank=3"),
    # issue 51: numerical faults (slow drift, spike and recover, non-finite, a job-wide loss spike) and silent data
    # corruption (a replica's digest off its replicas', every 50 steps: persistent, and transient as after a rollback)
    PhysicsClass(name="grad_drift 0.5%/step (slow)", spec="grad_drift:host={host},start={start},local_rank=2,magnitude=0.005"),
    PhysicsClass(name="grad_spike x2 for 4 steps", spec="grad_spike:host={host},start={start},local_rank=5,duration=4"),
    PhysicsClass(name="nan (one rank, then all 2 steps)", spec="nan:host={host},start={start},local_rank=1,duration=3"),
    PhysicsClass(name="loss_spike +100% over 8 steps", spec="loss_spike:start={start},magnitude=1.0,duration=8"),
    PhysicsClass(name="sdc (persistent)", spec="sdc:host={host},start={start},local_rank=6"),
    PhysicsClass(name="sdc_transient", spec="sdc_transient:host={host},start={start},local_rank=3"),
    PhysicsClass(name="healthy control (long)", spec="", steps=900, hosts=64),
    # the false-alarm budget at scale: 4,096 GPUs, >= 30 min of job time (1,700 steps of ~1 s, evaluation pauses
    # and checkpoints): <= 1 false alert per healthy job-hour
    PhysicsClass(name="healthy 512 hosts (30 min)", spec="", steps=1700, hosts=512, stream=True),
)


def simulation(cls: PhysicsClass, seed: int) -> Simulation:
    rng = random.Random(f"{cls.name}/{seed}")
    host = f"sim-host-{rng.randrange(cls.hosts):04d}"
    start = rng.randrange(cls.steps // 4, cls.steps // 3)
    faults = [parse_fault(cls.spec.format(host=host, start=start))] if cls.spec else []
    job = f"ph-{seed}-" + "".join(c if c.isalnum() else "-" for c in cls.name)[:40].strip("-")
    return Simulation(SimConfig(
        job=job, layout=Layout(hosts=cls.hosts, pp=4, tp_size=cls.tp), faults=faults, seed=seed,
        start=datetime(2026, 11, 2, tzinfo=UTC), eval_every=150, eval_s=40.0, tail_s=40.0, **cls.extra))


def run_class(client: Any, cls: PhysicsClass, seed: int, *, live: bool = True) -> dict[str, Any]:
    """One job of `cls`: its ground truth, replay alerts and (with `live`) live alerts, timings."""
    sim = simulation(cls, seed)
    if cls.stream:
        return _run_streamed(client, cls, sim)
    chunks: list[list[Event]] = [[sim.registration()]]
    for i in range(cls.steps):
        chunks.append(sim.step(i))
    chunks.append(sim.tail(sim.cfg.tail_s))
    events = sum(len(c) for c in chunks)
    truth = ground_truth(sim, cls.steps, events)
    out: dict[str, Any] = {"class": cls.name, "truth": truth, "events": events,
                           "job_s": (sim.now - sim.cfg.start).total_seconds(),
                           "step_s": (sim.step_starts[cls.steps - 1] - sim.cfg.start).total_seconds() / cls.steps}
    if live:
        t0 = time.perf_counter()
        out["live"] = live_alerts(client, sim.cfg.job + "-live", chunks)
        out["live_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    writer = ClickHouseWriter(client=client, check_existing=False)
    batch: list[Event] = []
    for c in chunks:
        batch += c
        if len(batch) >= 50_000:
            writer.write(batch)
            batch = []
    writer.write(batch)
    out["replay"] = replay(client, AnalyzerSettings(), sim.cfg.job)
    out["replay_s"] = time.perf_counter() - t0
    return out


def _run_streamed(client: Any, cls: PhysicsClass, sim: Simulation) -> dict[str, Any]:
    """`run_class` for a job too large to hold: each step written as simulated, then replayed."""
    t0 = time.perf_counter()
    writer = ClickHouseWriter(client=client, check_existing=False)
    batch: list[Event] = [sim.registration()]
    events = 0
    for i in range(cls.steps):
        batch += sim.step(i)
        if len(batch) >= 50_000:
            writer.write(batch)
            events += len(batch)
            batch = []
    batch += sim.tail(sim.cfg.tail_s)
    writer.write(batch)
    events += len(batch)
    written_s = time.perf_counter() - t0
    truth = ground_truth(sim, cls.steps, events)
    alerts = replay(client, AnalyzerSettings(), sim.cfg.job)
    return {"class": cls.name, "truth": truth, "events": events, "replay": alerts, "write_s": written_s,
            "replay_s": time.perf_counter() - t0, "job_s": (sim.now - sim.cfg.start).total_seconds(),
            "step_s": (sim.step_starts[cls.steps - 1] - sim.cfg.start).total_seconds() / cls.steps}


def live_alerts(client: Any, job: str, chunks: list[list[Event]], turn_every_s: float = 10.0) -> list[Alert]:
    """Write the job step by step (as `job`), turning a live cursor every `turn_every_s` of event time."""
    writer = ClickHouseWriter(client=client, check_existing=False)  # a fresh job: nothing stored twice
    cursor = LiveCursor(settings=AnalyzerSettings(), book=AlertBook())
    out: list[Alert] = []
    pending: list[Event] = []
    last_turn = None
    for chunk in chunks:
        pending += [e.model_copy(update={"job_id": job}) for e in chunk]
        newest = max((e.ts for e in chunk), default=None)
        if newest is not None and (last_turn is None or (newest - last_turn).total_seconds() >= turn_every_s):
            writer.write(pending)
            pending = []
            out += [a for a in cursor.turn(client) if a.job_id == job]
            last_turn = newest
    writer.write(pending)
    end = max(e.ts for c in chunks for e in c).replace(microsecond=0)
    for _ in range(1000):  # catch up to the end (at most max_catchup instants per turn)
        out += [a for a in cursor.turn(client) if a.job_id == job]
        if cursor.positions.get(job, end) >= end:
            break
    return out


def about_a_hang(faults: list[dict[str, Any]], job: str, alerts: list[Alert]) -> set[str]:
    """A hang's own alert is no false alert of it: the hang detector's `collective_hang` of a job whose steps
    stopped (subject `job` when, without Flight Recorder dumps, it cannot name the culprit; then the job-level
    traffic finding is what names the host, and it is what detection is scored on)."""
    if not any(f["kind"] == "hang" for f in faults):
        return set()
    return {a.fingerprint for a in alerts if a.fingerprint.startswith(f"{job}/collective_hang/")}


def score(results: list[dict[str, Any]], mode: str) -> dict[str, dict[str, Any]]:
    """Per class: faults, detected (named right), false alerts (fingerprints), latencies."""
    per: dict[str, dict[str, Any]] = defaultdict(lambda: {"faults": 0, "hit": 0, "fp": 0, "lat_s": [], "falses": []})
    for r in results:
        if mode not in r:
            continue
        k = per[r["class"]]
        k["job_h"] = k.get("job_h", 0.0) + r["job_s"] / 3600
        job = r["truth"]["job_id"] + ("-live" if mode == "live" else "")
        severe = [a for a in r[mode] if a.status == "firing" and a.severity in SEVERE]
        expected: dict[str, dict[str, Any]] = {}
        for f in r["truth"]["faults"]:
            fp = f["expected"]["fingerprint"].replace(r["truth"]["job_id"] + "/", job + "/", 1)
            expected[fp] = f
            k["faults"] += 1
            hit = next((a for a in severe if a.fingerprint == fp
                        and (f["kind"] != "hang" or a.host == f["host"])), None)
            if hit is not None and f["onset"]:
                k["hit"] += 1
                k["lat_s"].append((hit.ts - datetime.fromisoformat(f["onset"])).total_seconds())
        for fp in sorted({a.fingerprint for a in severe} - set(expected) - about_a_hang(r["truth"]["faults"], job, severe)):
            k["fp"] += 1
            k["falses"].append(fp.split("/", 1)[1])
    return per


def table(per_replay: dict[str, dict[str, Any]], per_live: dict[str, dict[str, Any]]) -> str:
    lines = ["| class | faults | replay: detected / false | replay latency s (mean / max) | "
             "live: detected / false | live latency s (mean / max) |",
             "| --- | --- | --- | --- | --- | --- |"]
    tot = {"replay": [0, 0, 0], "live": [0, 0, 0]}
    for name in [c.name for c in CLASSES if c.name in per_replay]:
        cells = []
        for mode, per in (("replay", per_replay), ("live", per_live)):
            k = per.get(name)
            if k is None:
                cells += ["-", "-"]
                continue
            ls = k["lat_s"]
            lat = f"{sum(ls) / len(ls):.1f} / {max(ls):.1f}" if ls else "-"
            cells += [f"{k['hit']} / {k['fp']}", lat]
            tot[mode][0] += k["faults"]
            tot[mode][1] += k["hit"]
            tot[mode][2] += k["fp"]
        faults = per_replay[name]["faults"] or "(none)"
        lines.append(f"| {name} | {faults} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} |")
    lines.append("")
    for name, k in per_replay.items():
        if not k["faults"]:
            lines.append(f"- {name}: {k['fp']} false alerts in {k['job_h']:.2f} h of job time (replay) = "
                         f"{k['fp'] / k['job_h']:.2f} per job-hour" if k["job_h"] else "")
            if k["job_h"]:
                lines.append("  - by alert, per job-hour against its detectors' budget: " + ", ".join(
                    f"{alert} {n / k['job_h']:.2f} / {budget:g}" for alert, budget in _budgets().items()
                    for n in [sum(1 for f in k["falses"] if f.split("/", 1)[0] == alert)]))
    lines.append("")
    for mode, per in (("replay", per_replay), ("live", per_live)):
        faults, hits, fps = tot[mode]
        if not faults and not fps:
            continue
        prec = hits / (hits + fps) if hits + fps else 1.0
        rec = hits / faults if faults else 1.0
        worst = _worst_class(per)
        falses = sorted({f for k in per.values() for f in k["falses"]})
        lines.append(f"**{mode}: precision {prec:.3f}, recall {rec:.3f}** ({hits} of {faults} faults, {fps} false "
                     f"alerts{': ' + ', '.join(falses[:8]) if falses else ''}); worst class: {worst}")
    return "\n".join(lines)


def _budgets() -> dict[str, float]:
    """False alerts per healthy job-hour each alert name may raise: its detectors' budgets (a flap is a
    `traffic_stall` alert with `pattern: flap`, so the flap detector's budget is traffic_stall's too)."""
    out = {d.name: d.false_alarms_per_hour for d in DETECTORS}
    out["traffic_stall"] = out.get("traffic_stall", 0.0) + out.pop("nic_flap", 0.0)
    return out


def _worst_class(per: dict[str, dict[str, Any]]) -> str:
    worst, value = "-", 2.0
    for name, k in per.items():
        rec = k["hit"] / k["faults"] if k["faults"] else 1.0
        prec = k["hit"] / (k["hit"] + k["fp"]) if k["hit"] + k["fp"] else (1.0 if not k["fp"] else 0.0)
        if min(rec, prec) < value:
            worst, value = f"{name} (precision {prec:.2f}, recall {rec:.2f})", min(rec, prec)
    return worst


def verdict(per_replay: dict[str, dict[str, Any]], per_live: dict[str, dict[str, Any]]) -> str:
    checks = []
    for mode, per in (("replay", per_replay), ("live", per_live)):
        if not per:
            continue
        ok = all(
            (k["hit"] / k["faults"] if k["faults"] else 1.0) >= 0.97
            and (k["hit"] / (k["hit"] + k["fp"]) if k["hit"] + k["fp"] else float(not k["fp"])) >= 0.97
            for k in per.values())
        checks.append((f"{mode}: precision and recall >= 0.97 per class", ok))
    healthy = [k for name, k in per_replay.items() if not k["faults"]] + \
              [k for name, k in per_live.items() if not k["faults"]]
    if healthy:  # a run of some classes only (--classes) has no control to judge
        checks.append(("<= 1 false alert per healthy job-hour", all(k["fp"] <= k["job_h"] for k in healthy)))
    return "Targets: " + "; ".join(f"{name}: {'met' if ok else 'NOT met'}" for name, ok in checks) + (
        "" if healthy else "; the healthy control: not run") + "."


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=1, help="jobs per class")
    ap.add_argument("--classes", default="", help="only classes whose name contains this (or one of these, comma-separated)")
    ap.add_argument("--no-live", dest="live", action="store_false", help="replay only")
    ap.add_argument("--no-append", dest="append", action="store_false", help="print only; do not add to bench/RESULTS.md")
    args = ap.parse_args()
    client = connect(f"chdb://{tempfile.mkdtemp(prefix='vigil-bench-ph-')}", database="vigil")
    migrate_all(client, 3650)
    classes = [c for c in CLASSES if any(part in c.name for part in args.classes.split(","))]
    results = []
    t0 = time.perf_counter()
    for seed in range(args.seeds):
        for cls in classes:
            r = run_class(client, cls, seed, live=args.live)
            print(f"{cls.name} seed {seed}: {r['events']:,} events, {r['job_s'] / 60:.0f} min of job time, "
                  f"replay {r['replay_s']:.1f} s" + (f", live {r['live_s']:.1f} s" if "live_s" in r else ""), flush=True)
            for mode in ("replay", "live") if "live" in r else ("replay",):  # as it goes: a cut-short run keeps these
                fired = sorted({a.fingerprint for a in r[mode] if a.status == "firing" and a.severity in SEVERE})
                print(f"  {mode}: {', '.join(fired) or 'no alert'}", flush=True)
            results.append(r)
    per_replay, per_live = score(results, "replay"), score(results, "live")
    body = (table(per_replay, per_live) + "\n\n" + verdict(per_replay, per_live))
    print(body, flush=True)
    if args.append:
        append_results("Analyzer detection: the physics of synchronous training (one fault per job)",
                       machine_info() + "\n\n"
                       "One simulated job per class and seed (48 hosts x 8 GPUs, pp=4, 240 steps with evaluation "
                       "pauses, checkpoints and a stopped tail; the healthy controls 64 hosts x 900 steps and 512 hosts x 1,700 "
                       "steps; every rank's step record carries the health signals and, every 50 steps, its replica digest), written "
                       "through the ingest processors into chdb. Replay: every instant over the stored job; live: "
                       "the job arriving step by step, a live cursor turn every 10 s of event time. Alerts of "
                       "warning or worse count; latency = alert event time - fault onset.\n\n" + body
                       + f"\n\nCommand: `python bench/detection_physics.py --seeds {args.seeds}"
                       + (f" --classes {args.classes!r}" if args.classes else "") + ("" if args.live else " --no-live")
                       + f"` ({time.perf_counter() - t0:.0f} s).")


if __name__ == "__main__":
    main()

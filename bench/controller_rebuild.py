"""Controller rebuild: time and peak memory to fold a long `recovery` log, bounded vs unbounded state.

The simulated log is what 1,000 node agents (10 jobs of 100 hosts) write: a `member` keep-alive
each every 10 s, and every `--recovery-min` (10) minutes per job a recovery (incident, plan, pause
and restart steps, a stop and a start command per host, each acknowledged by its agent, the
outcome) — about 400 events each. Keep-alives are copies of a per-host template with new times
(building 4 M pydantic models would time the generator, not the fold). It is streamed into `ClusterState.apply` in chunks of 500 (what `Follower.poll`
hands over), as a restarted controller folds the retained log, never held whole in memory.
Each variant runs in its own process, so peak RSS is its own:

* **bounded**: the controller's retention (`recovery/controller/compaction.py`) with `keep` shortened
  to `--keep-hours` (2; the default is a day) so that a log of hours shows what a week would;
* **unbounded**: retention of ten years, as the fold behaved before (nothing forgotten).

Separately it times `decode_batch` of member records as agents send them (one event a record),
since the rebuild reads wire records. The broker's own read rate is not measured here
(../shared/FACTS.md: ~4.3 k records/s of 100 bytes from the embedded broker).

    python bench/controller_rebuild.py [--agents 1000] [--hours 12] [--keep-hours 2] [--no-append]
"""

from __future__ import annotations

import argparse
import copy
import json
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from analyzer_common import append_results, machine_info  # noqa: E402

from vigil.contract import Command, Event, Incident, Member, Outcome, RecoveryAction  # noqa: E402
from vigil.contract.wire import decode_batch, encode_batch  # noqa: E402
from vigil.recovery.controller.compaction import Retention  # noqa: E402
from vigil.recovery.controller.state import ClusterState  # noqa: E402

HOSTS_PER_JOB = 100
_TEMPLATES: dict[tuple[str, int], Member] = {}


def members(job: str, hosts: int, ts: datetime, gen: int) -> list[Event]:
    out: list[Event] = []
    for h in range(hosts):
        t = _TEMPLATES.get((job, h))
        if t is None or t.generation != gen:
            t = _TEMPLATES[(job, h)] = Member(job_id=job, host=f"{job}-h{h:03d}", ts=ts, state="training", since=ts,
                                              generation=gen, node_rank=h, nodes_min=hosts, nodes_max=hosts,
                                              ip="10.0.0.1", ports=[30000], last_step=0, steps=10)
        m = copy.copy(t)
        m.__dict__.update(ts=ts, event_id=f"{job}-{h}-{ts.timestamp():.0f}", last_step=int(ts.timestamp()))
        out.append(m)
    return out


def recovery(job: str, hosts: int, ts: datetime, gen: int, n: int) -> list[Event]:
    cid = f"{job}/crash/{n}"
    names = [f"{job}-h{h:03d}" for h in range(hosts)]
    act = {"job_id": job, "host": "controller", "actor": "controller", "incident_id": cid}
    out: list[Event] = [Incident.model_construct(job_id=job, host=names[0], ts=ts, incident_id=cid, category="crash",
                                                 cause="software", status="open", severity="critical", summary="x",
                                                 culprits=[], confidence="strong", first_sign=ts, detected=ts),
                        RecoveryAction.model_construct(**act, ts=ts, action="plan", target=job, status="planned",
                                                       details={"class": "software", "steps": ["pause", "restart"]})]
    for i, (step, action) in enumerate((("pause", "stop"), ("restart", "start"))):
        at = ts + timedelta(seconds=1 + 10 * i)
        out.append(RecoveryAction.model_construct(**act, ts=at, action=step, target=job, status="started",
                                                  generation=gen + 1 if step == "restart" else None,
                                                  details={"generation": gen + 1, "hosts": names}))
        for h in names:
            command_id = f"{cid}/{action}/{h}"
            out.append(Command.model_construct(job_id=job, host=h, ts=at, command_id=command_id, action=action,
                                               incident_id=cid, generation=gen + 1))
            out.append(RecoveryAction.model_construct(job_id=job, host=h, ts=at, action=action, target=h,
                                                      status="succeeded", actor=f"agent:{h}", command_id=command_id,
                                                      incident_id=cid))
        out.append(RecoveryAction.model_construct(**act, ts=at + timedelta(seconds=5), action=step, target=job,
                                                  status="succeeded", generation=gen + 1 if step == "restart" else None))
    out.append(Outcome.model_construct(job_id=job, host="controller", ts=ts + timedelta(seconds=30), incident_id=cid,
                                       result="resumed", generation=gen + 1, hosts=names))
    return out


def log(agents: int, hours: float, every_s: float, start: datetime, recovery_s: float) -> Iterator[list[Event]]:
    """The simulated log in chunks of about 500 events, in time order."""
    jobs = [f"job{j:02d}" for j in range(max(1, agents // HOSTS_PER_JOB))]
    hosts = min(agents, HOSTS_PER_JOB)
    gens = dict.fromkeys(jobs, 1)
    done = dict.fromkeys(jobs, 0)
    t = 0.0
    while t < hours * 3600:
        ts = start + timedelta(seconds=t)
        for k, job in enumerate(jobs):
            chunk = members(job, hosts, ts, gens[job])
            due = (t + k * recovery_s / len(jobs)) // recovery_s
            if due > done[job]:
                chunk += recovery(job, hosts, ts, gens[job], done[job])
                done[job], gens[job] = int(due), gens[job] + 1
            for i in range(0, len(chunk), 500):
                yield chunk[i:i + 500]
        t += every_s


def child(variant: str, agents: int, hours: float, keep_h: float, recovery_s: float) -> dict[str, object]:
    state = ClusterState(retention=Retention(keep=timedelta(hours=keep_h)))
    if variant == "unbounded":
        state.retention = Retention(keep=timedelta(days=3650), keep_cases=10**9)
    start = datetime.now(UTC) - timedelta(hours=hours, minutes=10)
    n, fold_s, cpu_s = 0, 0.0, 0.0
    for chunk in log(agents, hours, 10.0, start, recovery_s):  # generating the log is not timed
        t0, c0 = time.perf_counter(), time.process_time()
        state.apply(chunk)
        fold_s += time.perf_counter() - t0
        cpu_s += time.process_time() - c0
        n += len(chunk)
    state.compact()
    return {"variant": variant, "events": n, "fold_s": fold_s, "cpu_s": cpu_s, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "cases": len(state.cases), "commands": len(state.commands), "acks": len(state.acks),
            "incidents": len(state.incidents), "seen": state.remembered,
            "members": sum(len(j.members) for j in state.jobs.values()),
            "open": sum(1 for c in state.cases.values() if c.open)}


def decode_us(n: int = 20_000) -> float:
    ts = datetime.now(UTC) - timedelta(minutes=1)
    records = [encode_batch([Member(job_id="job00", host=f"h{i % 1000:03d}", ts=ts, state="training", since=ts,
                                    generation=3, node_rank=i % 100, nodes_min=100, nodes_max=100, ip="10.0.0.1",
                                    ports=[30000], last_step=i, steps=10)]) for i in range(n)]
    t0 = time.perf_counter()
    for r in records:
        decode_batch(r)
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--hours", type=float, default=12.0, help="simulated hours of log")
    ap.add_argument("--keep-hours", type=float, default=2.0, help="the bounded variant's retention")
    ap.add_argument("--recovery-min", type=float, default=10.0, help="minutes between two recoveries of a job")
    ap.add_argument("--variants", default="bounded,unbounded")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    ap.add_argument("--no-append", dest="append", action="store_false")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.agents, args.hours, args.keep_hours, args.recovery_min * 60)))
        return
    rows = []
    for variant in args.variants.split(","):
        out = subprocess.run([sys.executable, __file__, "--child", variant, "--agents", str(args.agents),
                              "--hours", str(args.hours), "--keep-hours", str(args.keep_hours),
                              "--recovery-min", str(args.recovery_min)], capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    dec = decode_us()
    week = 7 * 24 * 3600 / 10 * args.agents
    lines = ["| state | simulated log | events folded | fold wall (CPU) | fold rate (CPU) | peak RSS | held after: cases / "
             "commands / acks / incidents / event ids / members | a week of it (x agents, 10 s keep-alives): fold + decode, CPU |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        rate = float(r["events"]) / float(r["cpu_s"])  # type: ignore[arg-type]
        est = week * (1 / rate + dec / 1e6)
        keep = f"keep {args.keep_hours:g} h" if r["variant"] == "bounded" else "keep all"
        lines.append(f"| {r['variant']} ({keep}) | {args.agents} agents x {args.hours:g} h, a recovery per job every "
                     f"{args.recovery_min:g} min | {r['events']:,} "
                     f"| {float(r['fold_s']):.1f} s ({float(r['cpu_s']):.1f} s) "  # type: ignore[arg-type]
                     f"| {rate / 1000:.0f} k/s | {float(r['rss_mib']):.0f} MiB | {r['cases']} / {r['commands']} / "  # type: ignore[arg-type]
                     f"{r['acks']} / {r['incidents']} / {r['seen']} / {r['members']} | {est / 60:.0f} min |")
    body = "\n".join(lines) + (
        f"\n\nPeak RSS is the whole process's (the interpreter and imports are ~40 MiB). "
        f"Decode of a member record (one event, as an agent sends it): {dec:.1f} us. A week of keep-alives of "
        f"{args.agents} agents is {week / 1e6:.1f} M records: at the embedded broker's ~4.3 k records/s "
        f"(../shared/FACTS.md) reading them alone takes ~{week / 4300 / 3600:.1f} h; the fold is not the bound.\n\n"
        + machine_info())
    print(body)
    if args.append:
        append_results("Controller rebuild (bench/controller_rebuild.py)", body)


if __name__ == "__main__":
    main()

"""Recovery time: fault onset -> training resumed (the first step after the restart), per kind of fault.

For each fault a fresh real job runs on 3 hosts: `vigil run --nodes 2:3` agents launching
torchrun with tests/recovery/job_worker.py (DDP over gloo, a checkpoint every 5 steps, 100 ms
steps), under a `vigil recovery run` controller, on the embedded broker. At step 12 host h2
(rank 2) faults:

* **crash**: a ValueError in user code -> software: pause, restart on the same 3 hosts;
* **xid**: an Xid 79 line and a CUDA error -> hardware: pause, diagnose, cordon h2, restart on 2;
* **hang**: the rank stops mid-step, its peers wait in the all-reduce -> hang: dump, pause,
  diagnose, restart (nobody is cordoned: the diagnostics pass).

To time the controller and the job apart from the analyzer's own detection latency (measured by
bench/analyzer_*.py), this script plays the analyzer and **detection is measured from its own
trigger**: the incident is published as soon as the
agent's classified Xid line or the failing rank's exit reaches Kafka (crash, xid), or once the
agents' progress reports (every 2 s) showed no new step for `--stall-s` seconds (hang). The split comes from the controller's `outcome`
event: detect (first sign -> incident published), decide, pause, diagnose, restart (start
commands -> first step, which includes torchrun's start, the process group, the checkpoint load
and the first step), the checkpoint load alone (the ranks' `restored` events) and the total (first
sign -> first step after the restart). Goal (issue 12): a hardware fault to training resumed in
<= 60 s plus the checkpoint load.

    python bench/recovery_time.py [--faults crash,xid,hang] [--no-append]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "recovery"))

from analyzer_common import append_results, machine_info  # noqa: E402

FAULT_STEP = 12


def run_fault(fault: str, bootstrap: str, work: Path, stall_s: float) -> dict[str, Any]:
    from live import Live, worker  # tests/recovery/live.py: controller + agents as processes

    from vigil.contract import Incident, LogLine, Outcome, ProcessExit, RankRef
    from vigil.kafka.admin import ensure_topics
    from vigil.settings import VigilSettings

    settings = VigilSettings(home=work / "home", kafka_bootstrap=bootstrap, topic_prefix=f"b{uuid.uuid4().hex[:8]}.",
                             topic_partitions=2)
    ensure_topics(settings, bootstrap)
    env = {"VIGIL_RECOVERY_POLICY_CORDON_SLOW": "false", "VIGIL_RECOVERY_DIAGNOSTICS_ROUND_TIMEOUT_S": "90"}
    live = Live(settings=settings, bootstrap=bootstrap, tmp=work, recovery_env=env)
    job = f"bench-{fault}"
    args = ["--ckpt", str(work / "ckpt"), "--fault", fault, "--fault-host", "h2", "--fault-step", str(FAULT_STEP),
            "--once", str(work / "fault.once")]
    try:
        for h in ("h0", "h1", "h2"):
            live.start_agent(h, worker(*args), nodes="2:3", job=job)
        live.start_controller()
        live.wait_for(lambda s: s.job(job).generation == 1 and len(s.job(job).world) == 3, 300, "the job to start")
        incident: Incident | None = None
        deadline = time.monotonic() + 400
        while incident is None and time.monotonic() < deadline:
            state = live.fold()
            steps = [m.last_step_at for m in state.job(job).members.values() if m.last_step_at is not None]
            last_step = max(steps) if steps else None  # the agents' progress reports (every 2 s)
            first, category, cause = None, "", ""
            if fault == "xid":
                lines = [e for e in live.events if isinstance(e, LogLine) and e.category == "xid" and e.job_id == job]
                if lines:
                    first, category, cause = lines[0].ts, "host_fault", "hardware"
            elif fault == "crash":
                exits = [e for e in live.events if isinstance(e, ProcessExit) and e.job_id == job
                         and "ValueError" in e.summary]
                if exits:  # the first sign: its traceback line when it came first, else the exit
                    tb = [e.ts for e in live.events if isinstance(e, LogLine) and e.job_id == job and e.host == "h2"
                          and e.category == "traceback"]
                    first, category, cause = min([exits[0].ts, *tb]), "crash_cascade", "software"
            elif last_step is not None and datetime.now(UTC) - last_step > timedelta(seconds=stall_s):
                first, category, cause = last_step, "collective_hang", "unknown"
            if first is not None:
                incident = Incident(job_id=job, host="h2", incident_id=f"{job}/{category}/h2", category=category,
                                    cause=cause, status="open", severity="critical", summary=f"bench {fault} on h2",
                                    culprits=[RankRef(host="h2", rank=2)], confidence="strong" if fault == "xid" else "weak",
                                    first_sign=first, detected=datetime.now(UTC))
                live.publish([incident])
        assert incident is not None, f"{fault}: the fault never showed"
        live.wait_for(lambda s: (c := s.cases.get(incident.incident_id)) is not None and c.outcome is not None, 400,
                      "the recovery to end")
        out = live.state.cases[incident.incident_id].outcome
        assert isinstance(out, Outcome)
        return {"fault": fault, **out.model_dump(mode="json")}
    finally:
        live.close()


def table(rows: list[dict[str, Any]]) -> str:
    def s(v: Any) -> str:
        return "-" if v is None else f"{float(v):.1f}"

    lines = ["| fault | result | detect s | decide s | pause s | diagnose s | restart s | of which checkpoint load s "
             "| total s (onset -> first step) | resumed at step (checkpoint) | steps lost | cordoned |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---|"]
    for r in rows:
        lines.append(f"| {r['fault']} | {r['result']} | {s(r['detect_s'])} | {s(r['decide_s'])} | {s(r['pause_s'])} | "
                     f"{s(r['diagnose_s'])} | {s(r['restart_s'])} | {s(r['checkpoint_load_s'])} | {s(r['total_s'])} | "
                     f"{r['first_step']} ({r['checkpoint_step']}) | {r['steps_lost']} | "
                     f"{', '.join(r['cordoned']) or '-'} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--faults", default="crash,xid,hang")
    ap.add_argument("--stall-s", type=float, default=5.0, help="hang: no step for this long is the trigger")
    ap.add_argument("--no-append", dest="append", action="store_false", help="print only; do not add to bench/RESULTS.md")
    args = ap.parse_args()
    from vigil.kafka.broker import EmbeddedBroker

    rows = []
    with tempfile.TemporaryDirectory(prefix="vigil-recovery-bench-") as tmp:
        broker = EmbeddedBroker(log_path=Path(tmp) / "tansu.log")
        broker.start()
        try:
            for fault in args.faults.split(","):
                work = Path(tmp) / fault
                work.mkdir()
                rows.append(run_fault(fault, broker.bootstrap, work, args.stall_s))
                print(table(rows[-1:]), flush=True)
        finally:
            broker.stop()
    with open("/proc/loadavg") as fh:
        load = fh.read().split()[:3]
    body = "\n\n".join([
        machine_info() + f"; load average during the run {', '.join(load)}",
        "3 hosts (`vigil run --nodes 2:3` agents, 1 rank each), job_worker.py (DDP/gloo, checkpoint every 5 steps, "
        f"100 ms steps), fault on h2 at step {FAULT_STEP}. Detection is this script's stand-in for the analyzer "
        f"(the Xid line / the failing rank's exit on Kafka; no step for {args.stall_s:g} s for the hang), not the "
        "analyzer's incidents (their latency is in the analyzer benches).",
        table(rows),
        "Goal: hardware fault (xid) -> resumed in <= 60 s + checkpoint load: "
        + ", ".join(f"{r['fault']} {r['total_s']} s" for r in rows if r["fault"] == "xid"),
    ])
    print("\n" + body)
    if args.append:
        append_results("recovery_time.py", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

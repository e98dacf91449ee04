"""One real job under recovery control, faulted three times; where each recovery's time went (for recovery_time.py).

`run_job(n, ...)` starts `n` `vigil run --nodes n:n` agents and one spare on the embedded broker,
under a `vigil recovery run` controller, running tests/recovery/snap_worker.py (gloo, CPU, a tiny
model; an in-memory snapshot every step, replicated to the buddy host; a persisted checkpoint every
10 steps). Host h1's rank faults three times, each once (the worker writes the onset's Unix time
into a file) and each armed only once the previous fault was recovered (the worker fires it at its
first step from then on, from step 15): a **crash** (ValueError), a **hang** (stops after its
backward, its peers wait in the all-reduce), an **Xid** (Xid 79, CUDA error: the host is cordoned
and the spare takes its place). This script plays the analyzer: it publishes the incident when the
failing rank's exit (crash) or the Xid line (xid) reaches Kafka, or once no host reported a step for
`stall_s` (hang), with the worker's onset as the first sign.

Per fault a row, onset -> first step after the restart: detect (onset -> the trigger the controller
acted on), decide, pause, diagnose (the controller's `outcome`), launch (start commands -> the
slowest rank's `restored` event, less the load: torchrun, imports, process group), restore (the
load), first step (restored -> the first step), total; steps lost and the restore source. If the
controller opened its case on the agents' own facts before the incident came, that case is the one
timed; a case that failed first (`failed then resumed`) is counted in the total. The hosts' memory
is a tmpfs (/dev/shm); `memory` sums what each host holds there (own snapshots and buddy copies)
once the job stopped.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

FAULTS = (("crash", 15), ("hang", 16), ("xid", 17))  # each from this step on, once armed
CLASS = {"crash": ("crash_cascade", "software"), "hang": ("collective_hang", "unknown"),
         "xid": ("host_fault", "hardware")}  # fmt: skip


def run_job(n: int, bootstrap: str, work: Path, stall_s: float, faults: list[str],
            rows: list[dict[str, Any]], gap_s: float = 20.0) -> dict[str, dict[str, int]]:
    """Fault the job; each fault's row is appended to `rows` as it is measured; the memory each host held.

    A fault is armed `gap_s` after the previous one was recovered (faults minutes apart are the common case;
    one within seconds of a restart finds the next generation's warm interpreters still importing: the agents
    start them `warm_refill_delay_s` after a start, so as not to slow it)."""
    from tests.support.live import HERE, PY, Live  # tests/support/live.py: controller + agents as processes
    from vigil.kafka.admin import ensure_topics
    from vigil.settings import VigilSettings

    settings = VigilSettings(home=work / "home", kafka_bootstrap=bootstrap, topic_prefix=f"b{uuid.uuid4().hex[:8]}.",
                             topic_partitions=2)  # fmt: skip
    ensure_topics(settings, bootstrap)
    env = {"VIGIL_RECOVERY_POLICY_CORDON_SLOW": "false", "VIGIL_RECOVERY_DIAGNOSTICS_ROUND_TIMEOUT_S": "90"}
    live = Live(settings=settings, bootstrap=bootstrap, tmp=work, recovery_env=env)
    job = f"bench-{n}"
    shm = Path(tempfile.mkdtemp(prefix="vigil-bench-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    argv = [PY, "-m", "torch.distributed.run", "--nproc-per-node", "1", str(HERE / "snap_worker.py"),
            "--steps", "100000", "--ckpt", str(work / "ckpt"), "--out", str(work / "final"), "--once-dir", str(work), "--armed",
            *(a for kind, step in FAULTS if kind in faults for a in ("--fault", f"{kind}:h1:{step}"))]  # fmt: skip
    memory = {"VIGIL_SNAPSHOT_ROOT": str(shm)}
    try:
        try:
            for i in range(n):
                live.start_agent(f"h{i}", argv, nodes=f"{n}:{n}", job=job, env=memory)
            live.start_agent(f"h{n}", argv, nodes=f"{n}:{n}", job=job, env=memory, spare=True)
            live.start_controller()
            live.wait_for(lambda s: s.job(job).generation == 1 and len(s.job(job).world) == n
                          and all(s.job(job).members[h].state == "training" for h in s.job(job).world), 600,
                          "the job to train")  # fmt: skip
            for i, (kind, step) in enumerate((k, at) for k, at in FAULTS if k in faults):
                if i:
                    time.sleep(gap_s)  # the workload's spacing of faults, not a wait for a condition
                (work / f"{kind}-h1-{step}.arm").touch()  # the previous fault was recovered: this one may fire
                rows.append({"hosts": n, "fault": kind,
                             **one_fault(live, job, kind, work / f"{kind}-h1-{step}.once", stall_s)})
                print(json.dumps(rows[-1]), flush=True)
        finally:
            live.close()
        return held(shm, job)
    finally:
        shutil.rmtree(shm, ignore_errors=True)


def one_fault(live: Any, job: str, kind: str, fired: Path, stall_s: float) -> dict[str, Any]:
    from vigil.contract import Checkpoint, Incident, LogLine, Outcome, ProcessExit, RankRef

    seen, incident, onset = len(live.events), None, None
    deadline = time.monotonic() + 600
    outcome: Outcome | None = None
    while outcome is None and time.monotonic() < deadline:
        state = live.fold()
        if onset is None and fired.exists() and fired.read_text():
            onset = datetime.fromtimestamp(float(fired.read_text()), UTC)
        new = live.events[seen:]
        if onset is not None and incident is None:
            steps = [m.last_step_at for m in state.job(job).members.values() if m.last_step_at is not None]
            sign = (any(isinstance(e, ProcessExit) and "ValueError" in e.summary for e in new) if kind == "crash"
                    else any(isinstance(e, LogLine) and e.category == "xid" for e in new) if kind == "xid"
                    else bool(steps) and datetime.now(UTC) - max(steps) > timedelta(seconds=stall_s))  # fmt: skip
            if sign:
                category, cause = CLASS[kind]
                incident = Incident(job_id=job, host="h1", incident_id=f"{job}/{category}/h1", category=category,
                                    cause=cause, status="open", severity="critical", summary=f"bench {kind} on h1",
                                    culprits=[RankRef(host="h1", rank=1)], first_sign=onset, detected=datetime.now(UTC),
                                    confidence="strong" if kind == "xid" else "weak")  # fmt: skip
                live.publish([incident])
        if onset is not None:  # the case that resumed the job after the onset: ours, or one the controller opened first
            ended = [e for e in live.events[seen:] if isinstance(e, Outcome) and e.job_id == job and e.ts > onset
                     and (e.resumed_at is None or e.resumed_at > onset)]  # fmt: skip
            done = [e for e in ended if e.resumed_at is not None]
            outcome = done[0] if done else None
        time.sleep(0.2)
    assert outcome is not None and onset is not None, f"{kind}: no recovery within 600 s"
    restored = [e for e in live.events[seen:] if isinstance(e, Checkpoint) and e.phase == "restored"]
    restored_at = max(e.ts for e in restored) if restored else None
    rst = live.state.cases[outcome.incident_id].step("restart", job)
    started = rst.started_at if rst is not None else None
    load = outcome.checkpoint_load_s or 0.0

    def secs(a: datetime | None, b: datetime | None) -> float | None:
        return None if a is None or b is None else (b - a).total_seconds()

    launch = secs(started, restored_at)
    return {"detect_s": secs(onset, outcome.detected), "decide_s": outcome.decide_s, "pause_s": outcome.pause_s,
            "diagnose_s": outcome.diagnose_s, "launch_s": None if launch is None else launch - load, "restore_s": load,
            "first_step_s": secs(restored_at, outcome.resumed_at), "total_s": secs(onset, outcome.resumed_at),
            "steps_lost": outcome.steps_lost, "checkpoint_step": outcome.checkpoint_step,
            "source": outcome.restore_source, "cordoned": outcome.cordoned,
            "result": " then ".join(e.result for e in ended[: ended.index(outcome) + 1]),
            "case": outcome.incident_id}  # fmt: skip


def held(shm: Path, job: str) -> dict[str, dict[str, int]]:
    """Bytes each host holds (after the job stopped): its ranks' own snapshots and the copies it keeps for peers."""

    def size(d: Path) -> int:
        return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)

    hosts = sorted(p for p in shm.iterdir() if (p / job).is_dir()) if shm.is_dir() else []
    return {h.name: {"own": size(h / job) - size(h / job / "peer"), "peer": size(h / job / "peer")} for h in hosts}

"""Running a simulation: stream its events through the real broker, or feed a sink directly.

`run(sim, steps, send, speed)` calls `send(events)` once per simulated step (plus the
job registration first). With `speed` > 0 it paces itself so simulated time runs
`speed` times faster than the wall clock; 0 means as fast as possible. A configured
`tail_s` follows the last step (the job stopped, the agents still report), unpaced.
`ground_truth(sim)` is what `vigil simulate --json` prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from vigil.analyzer.simulator.model import Simulation
from vigil.contract import Event

Send = Callable[[Sequence[Event]], Any]


def run(sim: Simulation, steps: int, send: Send, speed: float = 1.0,
        progress: Callable[[int], None] | None = None) -> int:
    """Produce `steps` steps of telemetry; returns the number of events."""
    if steps < 1:
        raise ValueError("--steps must be >= 1")
    if speed < 0:
        raise ValueError("--speed must be >= 0 (0 = as fast as possible)")
    send([sim.registration()])
    count = 1
    wall0, sim0 = time.monotonic(), sim.now
    for i in range(steps):
        events = sim.step(i)
        if speed > 0:
            target = wall0 + (sim.now - sim0).total_seconds() / speed
            delay = target - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        send(events)
        count += len(events)
        if progress is not None:
            progress(i)
    if sim.cfg.tail_s > 0:  # the job has stopped; its agents keep reporting
        events = sim.tail(sim.cfg.tail_s)
        send(events)
        count += len(events)
    return count


def ground_truth(sim: Simulation, steps: int, events: int) -> dict[str, Any]:
    cfg, lay = sim.cfg, sim.cfg.layout
    faults = []
    for k, f in enumerate(cfg.faults):
        idx = lay.host_index(f.host) if f.host != "all" else 0
        alert, subject = f.expected(cfg.job, lay.gpus_per_host, idx)
        onset = sim.onsets.get(k)
        faults.append({
            "kind": f.kind, "host": f.host, "start": f.start, "duration": f.duration, "magnitude": f.magnitude,
            "options": dict(f.options), "onset": onset.isoformat() if onset else None,
            "expected": {"alert": alert, "subject": subject, "fingerprint": f"{cfg.job}/{alert}/{subject}"},
        })
    return {
        "job_id": cfg.job, "seed": cfg.seed, "steps": steps, "events": events,
        "layout": {"hosts": lay.hosts, "gpus_per_host": lay.gpus_per_host, "tp": lay.tp, "pp": lay.pp, "dp": lay.dp,
                   "world_size": lay.world_size},
        "started": cfg.start.isoformat(), "ended": sim.now.isoformat(),
        "hosts": lay.host_names(), "faults": faults,
    }

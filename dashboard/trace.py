"""A step window as a Chrome trace (the JSON ui.perfetto.dev and chrome://tracing open): one track per rank.

Each data-parallel replica is a process (`DP replica d`), each rank a thread of it sorted by
(pipeline stage, tensor rank) and named `pp p · tp t · rank r (host)`, so a replica's
pipeline reads top to bottom and its bubbles line up. Per step, a `step N` span from its
start (end time minus its duration) to its end, and the step's phases as spans inside it,
back to back in the order the timer reported them (the timer records durations, not
starts; nested phases such as `backward/allreduce` start with their parent). A rank that
waits for a slow one shows the wait inside its communication phase; a rank whose step
started late shows a gap. Timestamps are microseconds since the window's first step start.
Pure: rows in, a JSON-ready dict out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vigil.dashboard.queries.timeline import RankStep


def _phase_spans(s: RankStep, start_us: float) -> list[tuple[str, float, float]]:
    """(name, start µs, duration µs) of each phase of the step, laid out from `start_us`."""
    spans: list[tuple[str, float, float]] = []
    cursor = {"": start_us}
    for name, ms in s.phases.items():
        if name.startswith("_") or ms <= 0:
            continue
        parent = name.rsplit("/", 1)[0] if "/" in name else ""
        at = cursor.get(parent, start_us)
        spans.append((name, at, ms * 1000))
        cursor[parent] = at + ms * 1000
        cursor[name] = at  # children of this phase start where it starts
    return spans


def chrome_trace(steps: Sequence[RankStep], *, job: str) -> dict[str, Any]:
    """The Chrome trace JSON object of these rank-steps (empty `traceEvents` when there are none)."""
    if not steps:
        return {"traceEvents": [], "displayTimeUnit": "ms", "otherData": {"job": job, "steps": []}}
    origin = min(s.end_us - s.step_ms * 1000 for s in steps)
    events: list[dict[str, Any]] = []
    ranks: dict[int, RankStep] = {}
    for s in steps:
        ranks.setdefault(s.rank, s)
    tp_size = max(r.tp for r in ranks.values()) + 1
    for dp in sorted({r.dp for r in ranks.values()}):
        events.append({"name": "process_name", "ph": "M", "pid": dp, "tid": 0, "args": {"name": f"DP replica {dp}"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": dp, "tid": 0, "args": {"sort_index": dp}})
    for r in sorted(ranks.values(), key=lambda r: r.rank):
        events.append({"name": "thread_name", "ph": "M", "pid": r.dp, "tid": r.rank,
                       "args": {"name": f"pp {r.pp} · tp {r.tp} · rank {r.rank} ({r.host})"}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": r.dp, "tid": r.rank,
                       "args": {"sort_index": r.pp * tp_size + r.tp}})
    for s in steps:
        start = s.end_us - s.step_ms * 1000 - origin
        events.append({"name": f"step {s.step}", "cat": "step" + (",failed" if s.failed else ""), "ph": "X",
                       "ts": round(start, 3), "dur": round(s.step_ms * 1000, 3), "pid": s.dp, "tid": s.rank,
                       "args": {"step": s.step, "host": s.host, "step_ms": s.step_ms, "failed": s.failed}})
        for name, at, dur in _phase_spans(s, start):
            events.append({"name": name, "cat": "phase", "ph": "X", "ts": round(at, 3), "dur": round(dur, 3),
                           "pid": s.dp, "tid": s.rank, "args": {"step": s.step, "ms": round(dur / 1000, 4)}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"job": job, "steps": [min(s.step for s in steps), max(s.step for s in steps)],
                          "ranks": len(ranks), "origin_unix_us": origin}}

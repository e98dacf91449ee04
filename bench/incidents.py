"""Cost of naming a hang's culprit at scale, and of the trace export.

A job of N ranks (8 per host, data-parallel subgroups of 8) hangs: every rank's Flight
Recorder dump (500 entries, what the agent keeps) arrives as a `collective` event; rank 777
is one collective behind (the last rank, in a smaller job). Measured: the ingest's per-dump compaction (`pg_tail`), the
cross-rank match alone, the whole `collective_hang` detector at one instant against chdb
(traces + roster queries + match), one evaluation with the incident stage, and the Chrome
trace of 20 steps x N ranks (query + build). Prints a table and appends it to RESULTS.md
(`--no-append`: print only).

    python bench/incidents.py [--ranks 1024 4096] [--no-append]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from analyzer_common import append_results, machine_info

from vigil.analyzer.alerts.book import AlertBook
from vigil.analyzer.detect.base import EvalContext
from vigil.analyzer.detect.hang import HangDetector
from vigil.analyzer.engine import evaluate
from vigil.analyzer.incidents.flightrec import tail_of
from vigil.analyzer.incidents.match import match
from vigil.analyzer.incidents.stage import IncidentStage
from vigil.analyzer.ingest.processors import process
from vigil.analyzer.ingest.writer import ClickHouseWriter
from vigil.analyzer.settings import AnalyzerSettings
from vigil.app.components import migrate_all
from vigil.clickhouse.client import connect
from vigil.contract import CollectiveEntry, CollectiveTrace, ParallelCoords, StepTiming
from vigil.dashboard.queries.timeline import step_window
from vigil.dashboard.store import Store
from vigil.dashboard.trace import chrome_trace

T0 = datetime(2026, 11, 1, tzinfo=UTC)
CULPRIT, ENTRIES, GPUS = 777, 500, 8


def culprit(ranks: int) -> int:
    return min(CULPRIT, ranks - 1)


def dump(rank: int, ranks: int) -> CollectiveTrace:
    """Rank's dump: alternating world / dp-group all-reduces; the culprit is one collective behind (the last rank, in a smaller job)."""
    entries = []
    top = ENTRIES // 2 + 1 - (rank == culprit(ranks))
    for seq in range(top - ENTRIES // 2 + 1, top + 1):
        for name, desc in (("0", "default_pg"), (str(1 + rank % GPUS), f"dp_{rank % GPUS}")):
            entries.append(CollectiveEntry.model_validate({
                "record_id": len(entries), "pg_id": 0 if name == "0" else 1, "process_group": [name, desc],
                "collective_seq_id": seq, "profiling_name": "nccl:all_reduce", "input_sizes": [[4096]],
                "output_sizes": [[4096]], "input_dtypes": ["BFloat16"], "retired": seq < top, "timeout_ms": 600000}))
    groups = {"0": list(range(ranks)), str(1 + rank % GPUS): list(range(rank % GPUS, ranks, GPUS))}
    return CollectiveTrace(job_id="bench", host=f"h{rank // GPUS:04d}", rank=rank, local_rank=rank % GPUS,
                           entries=entries, group_ranks=groups, step=99, trigger="watchdog",
                           ts=T0 + timedelta(seconds=130), dumped_at=T0 + timedelta(seconds=130))


def steps(ranks: int, n: int) -> list[StepTiming]:
    return [StepTiming(job_id="bench", host=f"h{r // GPUS:04d}", rank=r, local_rank=r % GPUS, world_size=ranks,
                       coords=ParallelCoords(tp=r % GPUS, dp=r // GPUS), step=s, step_ms=1000.0,
                       phases={"forward": 300.0, "backward": 500.0, "optimizer": 100.0},
                       ts=T0 + timedelta(seconds=s + 1)) for s in range(100 - n, 100) for r in range(ranks)]


def timed(fn: Callable[[], Any], repeat: int = 3) -> tuple[float, Any]:
    out, times = None, []
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def run(ranks: int, engine: str) -> dict[str, Any]:
    traces = [dump(r, ranks) for r in range(ranks)]
    per_dump, _ = timed(lambda: [process(t) for t in traces[:64]], repeat=1)
    tails = {t.rank: tail_of(e.model_dump(mode="json") for e in t.entries) for t in traces}
    match_s, verdict = timed(lambda: match(tails, {}, set(range(ranks))))
    assert verdict.culprits == [culprit(ranks)], verdict.culprits
    # one chdb engine per process: each size gets a database of its own
    client = connect(f"chdb://{engine}", database=f"bench{ranks}")
    migrate_all(client, 30)
    writer = ClickHouseWriter(client=client)
    for i in range(0, len(traces), 256):
        writer.write(traces[i:i + 256])
    writer.write(steps(ranks, 20))
    settings = AnalyzerSettings()
    at = T0 + timedelta(seconds=140)
    ctx = EvalContext(client=client, settings=settings, job="bench", at=at)
    detector = HangDetector()
    cold_s, findings = timed(lambda: detector.detect(ctx), repeat=1)  # reads and matches every dump
    warm_s, _ = timed(lambda: detector.detect(ctx))  # the same episode at a later instant: remembered
    c = culprit(ranks)
    assert findings and findings[0].subject == f"h{c // GPUS:04d}/rank{c}", findings
    stage = IncidentStage(settings)
    eval_s, _ = timed(lambda: evaluate(client, settings, AlertBook(), "bench", at, stages=[stage]), repeat=1)
    assert stage.drain()
    store = Store(client=client)
    query_s, rows = timed(lambda: step_window(store, "bench", 80, 99))
    build_s, doc = timed(lambda: chrome_trace(rows, job="bench"))
    return {"ranks": ranks, "tail_ms": 1000 * per_dump / 64, "match_s": match_s, "cold_s": cold_s, "warm_s": warm_s,
            "eval_s": eval_s, "trace_query_s": query_s, "trace_build_s": build_s, "trace_events": len(doc["traceEvents"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--no-append", action="store_true")
    args = ap.parse_args()
    lines = ["| ranks | ingest of one dump (ms) | match (s) | collective_hang detect, first (s) | ... again (s) | "
             "evaluate + incidents (s) | trace query (s) | trace build (s) | trace events |",
             "|---|---|---|---|---|---|---|---|---|"]
    engine = tempfile.mkdtemp(prefix="vigil-bench-incidents-")
    for n in args.ranks:
        r = run(n, engine)
        lines.append(f"| {r['ranks']} | {r['tail_ms']:.2f} | {r['match_s']:.3f} | {r['cold_s']:.3f} | {r['warm_s']:.3f} | "
                     f"{r['eval_s']:.3f} | {r['trace_query_s']:.3f} | {r['trace_build_s']:.3f} | {r['trace_events']} |")
        print(lines[-1], flush=True)
    body = "\n".join([machine_info(), "", f"Every rank dumps {ENTRIES} entries (2 groups); 20 steps in the trace; "
                      "detect = reading the traces and the roster and matching at one instant (first: every dump read and matched; "
                      "again: the same hang at a later instant, its verdict remembered); evaluate = every detector and "
                      "the incident stage at that instant.", "", *lines])
    print(body)
    if not args.no_append:
        append_results("Incidents: naming a hang's culprit, trace export", body)


if __name__ == "__main__":
    main()

"""How a decoded batch of hot events should reach ClickHouse: per-event rows vs columns, three insert formats.

For 20,000 decoded events of each hot kind (step, nic, heartbeat), back to back in one process
and interleaved over several repeats (the machine is shared: only a comparison within one run
means anything), into the migrated tables with all their rollups:

* rows + Native: `processors` dicts, transposed, clickhouse-connect's Python Native serialisation
  (the writer before issue 26);
* columns + JSONColumns: `columns` builders (heartbeats: the processors' rows transposed), msgspec
  encodes, the engine parses (the writer now);
* columns + Arrow: the same columns as a pyarrow table (`insert_arrow`; types inferred, maps and
  timestamps given; pyarrow comes with chdb), the engine reads Arrow.

CPU seconds are the process's (Python and the engine's threads), the figure least disturbed by
other load; wall seconds are shown too.

    python bench/ingest_formats.py [--repeats 5] [--no-append]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from analyzer_common import append_results, machine_info
from clickhouse_connect.driver.client import Client

from vigil.analyzer.ingest.blocks import BlockInserter, Columns, columns
from vigil.analyzer.ingest.columns import BUILDERS
from vigil.analyzer.ingest.processors import process
from vigil.app.components import migrate_all
from vigil.clickhouse.client import connect, open_client
from vigil.contract import encode_batch
from vigil.contract.fastwire import decode_fast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.crafted import heartbeats, nic, steps  # type: ignore[import-not-found]

N = 20_000
ARROW = {"ts": pa.timestamp("ms", tz="UTC"), "phases": pa.map_(pa.string(), pa.float64()),
         "phase_kinds": pa.map_(pa.string(), pa.string())}


def batch(kind: str, job: str) -> list[Any]:
    start = datetime.now(UTC) - timedelta(hours=2)
    made: list[Any] = {"step": lambda: steps(job, 500, 40, gpus=1, start=start),
                       "nic": lambda: nic(job, 1000, 20),
                       "heartbeat": lambda: heartbeats(job, 1000, 40, interval=2.0)}[kind]()
    made = [e.model_copy(update={"ts": start + (e.ts - made[0].ts)}) for e in made[:N]]
    return [e for i in range(0, len(made), 500) for e in decode_fast(encode_batch(made[i:i + 500])).events]


def tables_of(kind: str, events: list[Any], as_rows: bool) -> dict[str, Any]:
    if not as_rows and kind in BUILDERS:
        table, build = BUILDERS[kind]
        return {table: build(events)}
    rows: dict[str, list[Any]] = {}
    for e in events:
        for t, r in process(e):
            rows.setdefault(t, []).append(r)
    return rows if as_rows else {t: columns(rs) for t, rs in rows.items()}


def native(client: Client, kind: str, events: list[Any]) -> None:
    for table, rows in tables_of(kind, events, True).items():
        names = list(rows[0])
        client.insert(table, [[r[n] for r in rows] for n in names], column_names=names, column_oriented=True)


def json_columns(client: Client, kind: str, events: list[Any]) -> None:
    inserter = BlockInserter(client)
    for table, cols in tables_of(kind, events, False).items():
        inserter.insert(table, cols, None)


def arrow(client: Client, kind: str, events: list[Any]) -> None:
    for table, cols in tables_of(kind, events, False).items():
        fixed: Columns = {n: [list(m.items()) for m in v] if n in ("phases", "phase_kinds") else v for n, v in cols.items()}
        client.insert_arrow(table, pa.table({n: pa.array(v, type=ARROW.get(n)) for n, v in fixed.items()}))


CANDIDATES: dict[str, Callable[[Client, str, list[Any]], None]] = {
    "rows + Native (before)": native, "columns + JSONColumns (now)": json_columns, "columns + Arrow": arrow}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-append", dest="append", action="store_false")
    args = ap.parse_args()
    dsn = f"chdb://{tempfile.mkdtemp(prefix='vigil-bench-f-')}"
    migrate_all(connect(dsn, database="vigil"), 3650)
    client = open_client(dsn)
    lines = [f"{N:,} decoded events per batch and kind; best and median of {args.repeats} interleaved repeats; "
             "CPU = the process's CPU seconds (Python + engine threads).", "",
             "| kind | candidate | CPU ms per batch (best / median) | wall ms (best) | events/s by CPU (best) |",
             "| --- | --- | --- | --- | --- |"]
    for kind in ("step", "nic", "heartbeat"):
        sets = {name: [batch(kind, f"{kind}-{i}-{r}") for r in range(args.repeats + 1)]
                for i, name in enumerate(CANDIDATES)}
        cpu: dict[str, list[float]] = {n: [] for n in CANDIDATES}
        wall: dict[str, list[float]] = {n: [] for n in CANDIDATES}
        for r in range(args.repeats + 1):
            for name, fn in CANDIDATES.items():
                c0, w0 = time.process_time(), time.perf_counter()
                fn(client, kind, sets[name][r])
                if r:  # the first round warms up
                    cpu[name].append(time.process_time() - c0)
                    wall[name].append(time.perf_counter() - w0)
        for name in CANDIDATES:
            c = sorted(cpu[name])
            lines.append(f"| {kind} | {name} | {c[0] * 1000:.0f} / {c[len(c) // 2] * 1000:.0f} | "
                         f"{min(wall[name]) * 1000:.0f} | {N / c[0]:,.0f} |")
        print("\n".join(lines[-3:]), flush=True)
    text = "\n".join(lines)
    print(text)
    if args.append:
        append_results("Ingest formats: per-event rows vs column arrays (issue 26)",
                       machine_info() + "\n\n" + text + "\n\nCommand: `python bench/ingest_formats.py`.")


if __name__ == "__main__":
    main()

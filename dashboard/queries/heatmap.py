"""Heatmap: each host's phase time against the median of its peers, in ClickHouse.

Peers are the hosts of the same pipeline stage(s) (from `job_ranks`; first and last
stages legitimately do more work), which is the whole fleet when pp = 1. Deviation =
(host mean - peer median) / peer median. The peer median is the lower median
(`quantileExactLow`): in an even group it is the faster of the two middle hosts, so a
group split in half shows its slow half as slower. With two hosts (a small DDP job) the
slow one reads +x% against the healthy one, which reads 0%; the upper median would
instead show the slow host at 0% and the healthy one below it. Rows are ranked by their
largest |deviation| (window functions, one scan of `phase_host_windows`) so the worst
hosts come first and a 1024-host job can be cut to its top rows without losing the outlier.

Waiting is attributed to whoever caused it. In a waiting phase (communication, bubble:
kinds from `job_phase_kinds` and the names, `vigil.contract.phases`) the hosts that wait
for a slow peer are *longer* and the slow host shorter, so there the deviation is turned
round: (peer median - host mean) / peer median, against the upper median. The slow host
reads +x% (it made the others wait x% longer), the hosts that waited read 0%.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vigil.contract.phases import is_waiting, resolve
from vigil.dashboard.queries.window import Window
from vigil.dashboard.store import Row, Store
from vigil.dashboard.tables import JOB_PHASE_KINDS, JOB_RANKS, PHASE_HOST_WINDOWS

ROLLUP_STEPS = 5  # steps per window of phase_host_windows (migration 0100)

_IN_RANGE = ("job_id = {job:String} AND last_ts >= fromUnixTimestamp64Milli({t0:Int64}, 'UTC') "
             "AND first_ts <= fromUnixTimestamp64Milli({t1:Int64}, 'UTC')")

_PEERS = f"""(SELECT host, arrayStringConcat(arraySort(groupUniqArray(toString(pp))), ',') AS stages
             FROM {JOB_RANKS} FINAL WHERE job_id = {{job:String}} GROUP BY host)"""


def _ranked(per_cell: str, phase: str) -> str:
    """Wrap per-(host, col) means with peer medians, deviations, host scores and ranks.

    `phase` is the SQL for a cell's phase (its column, or the one phase of a window view);
    phases in `{waits:Array(String)}` are waiting phases, their deviation turned round.
    """
    return f"""
SELECT host, col, mean_ms, max_ms, n, median_ms, dev, score, waiting,
       dense_rank() OVER (ORDER BY score DESC, host) AS worst_rank
FROM (
    SELECT *, max(abs(dev)) OVER (PARTITION BY host) AS score
    FROM (
        SELECT *, if(waiting, high_ms, low_ms) AS median_ms,
               if(median_ms > 0, if(waiting, median_ms - mean_ms, mean_ms - median_ms) / median_ms, 0) AS dev
        FROM (
            SELECT c.host AS host, c.col AS col, c.mean_ms AS mean_ms, c.peak_ms AS max_ms, c.samples AS n,
                   has({{waits:Array(String)}}, {phase}) AS waiting,
                   quantileExactLow(0.5)(c.mean_ms) OVER (PARTITION BY c.col, if(p.stages = '', '-', p.stages))
                       AS low_ms,
                   quantileExactHigh(0.5)(c.mean_ms) OVER (PARTITION BY c.col, if(p.stages = '', '-', p.stages))
                       AS high_ms
            FROM ({per_cell}) AS c LEFT JOIN {_PEERS} AS p ON p.host = c.host)))
"""


_PHASE_CELLS = f"""
SELECT host, phase AS col, sum(sum_ms) / sum(n) AS mean_ms, max(max_ms) AS peak_ms, sum(n) AS samples
FROM {PHASE_HOST_WINDOWS} WHERE {_IN_RANGE} GROUP BY host, col
"""

_WINDOW_CELLS = f"""
SELECT host, intDiv(window - {{w0:UInt64}}, {{k:UInt64}}) AS col, sum(sum_ms) / sum(n) AS mean_ms,
       max(max_ms) AS peak_ms, sum(n) AS samples
FROM {PHASE_HOST_WINDOWS} WHERE {_IN_RANGE} AND phase = {{phase:String}} GROUP BY host, col
"""

_BOUNDS = (f"SELECT min(window) AS w0, max(window) AS w1, count() AS n FROM {PHASE_HOST_WINDOWS} "
           f"WHERE {_IN_RANGE} AND phase = {{phase:String}}")


def _select(inner: str, phase: str) -> str:
    return (f"SELECT * FROM ({_ranked(inner, phase)}) WHERE {{all:UInt8}} OR worst_rank <= {{rows:UInt32}} "
            "ORDER BY if({by_name:UInt8}, 0, worst_rank), host, col")


@dataclass(frozen=True, kw_only=True)
class Cell:
    host: str
    col: str  # phase name, or the first step of a step-window column
    mean_ms: float
    max_ms: float
    n: int
    median_ms: float
    dev: float  # fraction: +0.1 = 10% slower than the peer median (waiting: the others wait 10% longer)
    waiting: bool = False  # a waiting phase: deviation turned round (attributed to who caused it)


@dataclass(frozen=True, kw_only=True)
class Matrix:
    hosts: list[str]  # row order: worst first (or by name)
    cols: list[str]
    cells: list[Cell]
    hosts_total: int
    steps_per_col: int = 0  # window view: steps per column


def _matrix(rows: list[Row], label: Callable[[Any], str], hosts_total: int, steps_per_col: int = 0) -> Matrix:
    """Rows come ordered by host rank; columns are sorted by their raw value (phase name or index)."""
    hosts: list[str] = []
    raw_cols: set[Any] = set()
    cells = []
    for r in rows:
        host = str(r["host"])
        if not hosts or hosts[-1] != host:
            hosts.append(host)
        raw_cols.add(r["col"])
        cells.append(Cell(host=host, col=label(r["col"]), mean_ms=float(r["mean_ms"]), max_ms=float(r["max_ms"]),
                          n=int(r["n"]), median_ms=float(r["median_ms"]), dev=float(r["dev"]),
                          waiting=bool(r.get("waiting", False))))
    return Matrix(hosts=hosts, cols=[label(c) for c in sorted(raw_cols)], cells=cells, hosts_total=hosts_total,
                  steps_per_col=steps_per_col)


def _count_hosts(store: Store, win: Window) -> int:
    row = store.one("host count", f"SELECT uniqExact(host) AS n FROM {PHASE_HOST_WINDOWS} WHERE {_IN_RANGE}",
                    win.params())
    return int(row["n"]) if row else 0


def _mode_params(store: Store, win: Window, rows: int, mode: str, **extra: Any) -> dict[str, Any]:
    return win.params(all=int(mode != "worst"), rows=rows, by_name=int(mode == "name"),
                      waits=waiting_phases(store, win), **extra)


def phase_kinds(store: Store, win: Window) -> dict[str, str]:
    """Each phase of the job's range and its kind (compute / comm / wait): declared, else by name."""
    declared = store.rows("phase kinds", f"SELECT phase, source, argMax(phase_kind, ts) AS kind FROM {JOB_PHASE_KINDS} "
                                         "WHERE job_id = {job:String} GROUP BY phase, source", win.params())
    step = {str(r["phase"]): str(r["kind"]) for r in declared if r["source"] == "step"}
    job = {str(r["phase"]): str(r["kind"]) for r in declared if r["source"] != "step"}
    return dict(resolve(phases(store, win), step, job))


def waiting_phases(store: Store, win: Window) -> list[str]:
    return sorted(p for p, k in phase_kinds(store, win).items() if is_waiting(k))


def phase_matrix(store: Store, win: Window, *, rows: int, mode: str) -> Matrix:
    """Hosts x phases; `mode` worst (top `rows` hosts), all (worst first) or name (all, by name)."""
    data = store.rows("phase times per host", _select(_PHASE_CELLS, "c.col"), _mode_params(store, win, rows, mode))
    return _matrix(data, str, _count_hosts(store, win))


def window_matrix(store: Store, win: Window, *, phase: str, rows: int, mode: str, max_cols: int = 90) -> Matrix:
    """Hosts x step windows of one phase; columns merge 5-step windows so there are <= `max_cols`."""
    b = store.one("step windows", _BOUNDS, win.params(phase=phase))
    if not b or not int(b["n"]):
        return Matrix(hosts=[], cols=[], cells=[], hosts_total=0)
    w0, w1 = int(b["w0"]), int(b["w1"])
    k = max(1, -(-(w1 - w0 + 1) // max_cols))
    data = store.rows(f"'{phase}' time per host and step window", _select(_WINDOW_CELLS, "{phase:String}"),
                      _mode_params(store, win, rows, mode, w0=w0, k=k, phase=phase))
    return _matrix(data, lambda c: f"step {(w0 + int(c) * k) * ROLLUP_STEPS}", _count_hosts(store, win),
                   steps_per_col=ROLLUP_STEPS * k)


def host_phases(store: Store, win: Window, host: str) -> list[Cell]:
    """One host's row of the phase heatmap (its deviation from its peers, per phase)."""
    sql = f"SELECT * FROM ({_ranked(_PHASE_CELLS, 'c.col')}) WHERE host = {{host:String}} ORDER BY col"
    m = _matrix(store.rows("the host's phase times", sql, win.params(host=host, waits=waiting_phases(store, win))),
                str, 0)
    return m.cells


def phases(store: Store, win: Window) -> list[str]:
    rows = store.rows("phases", f"SELECT DISTINCT phase FROM {PHASE_HOST_WINDOWS} WHERE {_IN_RANGE} ORDER BY phase",
                      win.params())
    return [str(r["phase"]) for r in rows]

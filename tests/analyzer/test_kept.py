"""Windows kept across a walk (analyzer/detect/kept.py): read once, read again when they change, judged as a fresh read."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.support.crafted import T0, steps
from vigil.analyzer.alerts.book import AlertBook
from vigil.analyzer.detect import hostcells, kept
from vigil.analyzer.detect.base import EvalContext, Walk, due
from vigil.analyzer.engine import DETECTORS, evaluate
from vigil.analyzer.ingest.writer import ClickHouseWriter
from vigil.analyzer.settings import AnalyzerSettings
from vigil.clickhouse.client import connect


class _Ctx:
    """What kept_windows uses of an EvalContext: the step counts per window (`job_step_runs`), the rollup's rows per
    window (`rolled`, the counts where absent), the instant's memo, the walk's state."""

    def __init__(self, state: dict[str, Any], counts: dict[int, int], rolled: dict[int, int] | None = None) -> None:
        self.state, self.memo, self.counts, self.rolled = state, {}, counts, rolled or {}

    def rows(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        if "job_step_runs" in sql:
            lo, hi = params["s0"] // 5, params["s1"] // 5
            return [{"window": w, "n": n, "phase_n": {"fwd": n}} for w, n in self.counts.items() if lo <= w <= hi]
        assert "FROM phase_rank_windows" in sql and params["phases"] == ["fwd"]
        return [{"window": w, "phase": "fwd", "n": self.rolled.get(w, n)} for w, n in self.counts.items()
                if params["lo"] <= w <= params["hi"]]


SOURCE = kept.Source(rollup="phase_rank_windows", phases=["fwd"])


def test_a_window_is_read_once_again_when_its_count_changes_and_kept_once_complete() -> None:
    state: dict[str, Any] = {}
    counts = {w: 100 for w in range(20)}
    reads: list[tuple[int, int]] = []
    now = [0.0]

    def call(lo: int, hi: int, key: str = "k") -> dict[int, str]:
        def read(a: int, b: int) -> dict[int, str]:
            reads.append((a, b))
            return {w: f"{w}@{counts[w]}" for w in range(a, b + 1) if w % 7}  # every 7th window: nothing
        return kept.kept_windows(_Ctx(state, counts), "t", key, lo, hi, read, "-", source=SOURCE,  # type: ignore[arg-type]
                                 clock=lambda: now[0])

    assert call(0, 9) == {w: (f"{w}@100" if w % 7 else "-") for w in range(10)} and reads == [(0, 9)]
    now[0] += 1
    assert call(2, 11)[11] == "11@100" and reads[-1] == (10, 11)  # only the windows new to the range
    assert set(state["t"][1]) == set(range(2, 12))  # windows left behind are dropped
    counts[5] = 101  # a late host's rows landed in window 5
    now[0] += 1
    assert call(2, 11)[5] == "5@101" and reads[-1] == (5, 5)
    n = len(reads)
    now[0] += 10 * kept.SETTLE_S  # complete reads are kept however long
    call(2, 11)
    assert len(reads) == n
    call(2, 11, key="other run")  # another run (epoch, phases, peers, settings): everything again
    assert reads[-1] == (2, 11)


def test_a_read_that_missed_rows_the_count_holds_is_read_again_at_the_next_call() -> None:
    # window 3's count (job_step_runs) already holds 100 rows, its rollup 92: the insert's rollup view has not landed
    state: dict[str, Any] = {}
    counts, rolled = {w: 100 for w in range(6)}, {3: 92}
    reads: list[tuple[int, int]] = []
    now = [0.0]

    def call() -> dict[int, str]:
        def read(a: int, b: int) -> dict[int, str]:
            reads.append((a, b))
            return {w: f"{w}@{rolled.get(w, counts[w])}" for w in range(a, b + 1)}
        return kept.kept_windows(_Ctx(state, counts, rolled), "t", "k", 0, 5, read, "-", source=SOURCE,  # type: ignore[arg-type]
                                 clock=lambda: now[0])

    assert call()[3] == "3@92" and reads == [(0, 5)]
    now[0] += 1
    assert call()[3] == "3@92" and reads[-1] == (3, 3)  # still incomplete: read again, the count unchanged
    rolled.pop(3)  # the view landed
    now[0] += 1
    assert call()[3] == "3@100" and reads[-1] == (3, 3)
    n = len(reads)
    assert call()[3] == "3@100" and len(reads) == n  # complete: kept
    rolled[4] = 90  # a rollup that never matches (backfilled otherwise) is kept once SETTLE_S passed at its count
    counts[4] = 101
    call()
    call()
    assert reads[-2:] == [(4, 4), (4, 4)]
    now[0] += kept.SETTLE_S
    call()
    n = len(reads)
    call()
    assert len(reads) == n


def _walk(client: Any, job: str, instants: list[Any], walk: Walk | None) -> list[list[tuple[str, str, str]]]:
    straggler = [d for d in DETECTORS if d.name == "straggler"]
    out = []
    for at in instants:
        alerts = evaluate(client, AnalyzerSettings(), AlertBook(), job, at, detectors=straggler, walk=walk)
        out.append(sorted((a.fingerprint, a.status, repr(sorted(a.evidence.items()))) for a in alerts))
    return out


def _due(first_s: int, last_s: int) -> list[Any]:
    """The instants of the 2 s grid between T0 + first_s and T0 + last_s at which a walk runs the straggler."""
    straggler = next(d for d in DETECTORS if d.name == "straggler")
    return [at for at in (T0 + timedelta(seconds=s) for s in range(first_s, last_s + 1, 2)) if due(straggler, at, 2.0)]


def _cells_read(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The (lo, hi) windows of every cells read from here on (no wall-clock re-read: SETTLE_S is out of reach)."""
    monkeypatch.setattr(kept, "SETTLE_S", 1e9)
    cells: list[tuple[int, int]] = []
    real = EvalContext.columns

    def columns(self: EvalContext, sql: str, **params: Any) -> dict[str, Any]:
        cells.append((params["lo"], params["hi"]))
        return real(self, sql, **params)

    monkeypatch.setattr(EvalContext, "columns", columns)
    return cells


@pytest.mark.clickhouse
def test_a_walk_reads_each_window_once_and_judges_as_every_window_read_afresh(
        clickhouse_dsn: str, database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # 64 hosts with a speed lottery and jitter; h0005 turns 6 % slower at step 70 (its own level: the self rule),
    # h0009 is 12 % slower from step 40 (against its peers). h0020's steps 80-99 arrive late (after the walk
    # judged them once), so the windows they land in are read again.
    evs = steps("keep", 64, 130, jitter=0.02, host_bias=0.01, seed=11, slow={"h0005": 1.06}, slow_from=70)
    slow9 = steps("keep", 64, 130, jitter=0.02, host_bias=0.01, seed=12, slow={"h0009": 1.12}, slow_from=40)
    evs = [e for e in evs if e.host != "h0009"] + [e for e in slow9 if e.host == "h0009"]
    late = [e for e in evs if e.host == "h0020" and 80 <= e.step < 100]
    late_ids = {e.event_id for e in late}
    w = ClickHouseWriter(client=connect(clickhouse_dsn, database=database))
    w.write([e for e in evs if e.event_id not in late_ids])
    client = connect(clickhouse_dsn, database=database)
    cells = _cells_read(monkeypatch)
    early = _due(60, 130)
    walk = Walk()
    kept_early = _walk(client, "keep", early, walk)
    read_once = sorted(w for lo, hi in cells for w in range(lo, hi + 1))
    assert len(read_once) == len(set(read_once))  # no window read twice
    assert _walk(client, "keep", early, None) == kept_early  # each instant read afresh: the same judgement
    w.write(late)
    cells.clear()
    later = _due(140, 156)
    kept_later = _walk(client, "keep", later, walk)
    reread = {w for lo, hi in cells for w in range(lo, hi + 1)}
    assert set(range(80 // 5, 100 // 5)) <= reread  # the windows the late rows landed in
    assert _walk(client, "keep", later, None) == kept_later
    fired = {fp for instant in kept_early + kept_later for fp, status, _ev in instant if status == "firing"}
    assert {"keep/straggler/h0005/forward", "keep/straggler/h0009/forward"} <= fired


@pytest.mark.parametrize("kinds", [
    {"forward": "compute", "backward": "compute", "comm": "comm"},  # the usual case: per-rank windows
    {"forward": "compute", "forward/wait": "wait", "backward": "compute", "comm": "comm"},  # a nested wait
])
def test_a_cells_read_is_checked_against_the_rollup_and_phases_it_reads(kinds: dict[str, Any]) -> None:
    from vigil.analyzer.detect.phases import JobPhases, cells_source, cells_sql

    phases = JobPhases(kinds=kinds)
    for rollup in ("phase_host_windows", "phase_rank_windows"):
        for compute, waiting in ((True, False), (True, True), (False, True)):
            sql, params = cells_sql(rollup, "host", phases, compute=compute, waiting=waiting)
            source = cells_source(rollup, phases, compute=compute, waiting=waiting)
            assert f"FROM {source.rollup}" in sql and all(f"FROM {r}" not in sql for r in kept.ROLLUPS
                                                           if r != source.rollup)
            assert sorted(source.phases) == sorted([*params["judged"], *params.get("subs", [])])


@pytest.mark.clickhouse
def test_a_host_leaving_the_peer_groups_rejudges_the_kept_cells_without_reading_them_again(
        clickhouse_dsn: str, database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # h0030 is lost at step 60: once its last window leaves the judged range the peer groups change, and the windows
    # that still hold it are judged again (hostcells.windows) from the cells kept for them, none read again; as a
    # fresh walk judges.
    evs = steps("leave", 64, 160, jitter=0.02, host_bias=0.01, seed=5, slow={"h0005": 1.12}, slow_from=40)
    w = ClickHouseWriter(client=connect(clickhouse_dsn, database=database))
    w.write([e for e in evs if e.host != "h0030" or e.step < 60])
    client = connect(clickhouse_dsn, database=database)
    cells = _cells_read(monkeypatch)
    judged: list[frozenset[str]] = []
    real_window = hostcells.judge_window

    def window(c: hostcells.Cells, at: int, peers: Any, s: Any) -> hostcells.Window:
        judged.append(frozenset(peers))
        return real_window(c, at, peers, s)

    monkeypatch.setattr(hostcells, "judge_window", window)
    instants = _due(60, 160)
    walk = Walk()
    kept_walk = _walk(client, "leave", instants, walk)
    read = sorted(w for lo, hi in cells for w in range(lo, hi + 1))
    assert len(read) == len(set(read))  # no window read twice
    assert len({p for p in judged if "h0030" in p}) == 1 and any("h0030" not in p for p in judged)  # it left them
    assert len(judged) > len(read)  # ... and the kept windows were judged again without it
    monkeypatch.setattr(hostcells, "judge_window", real_window)
    assert _walk(client, "leave", instants, None) == kept_walk
    fired = {fp for instant in kept_walk for fp, status, _ev in instant if status == "firing"}
    assert "leave/straggler/h0005/forward" in fired

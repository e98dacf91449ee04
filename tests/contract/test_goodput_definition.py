"""The one ETTR definition: its SQL (per_job_sql, ettr_sql) and its Python (ideal_step_ms, ettr) agree on
the same steps through the real engine, and the median + 3 MAD rule keeps slowed steps out of the ideal."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from vigil.contract.goodput import ettr, ettr_sql, ideal_step_ms, per_job_sql

# (job, step times in ms); a redone step's second record is a duplicate row and counts once (one row per step here)
JOBS = {
    "even": [100.0, 101.0, 99.0, 100.5, 400.0, 98.0],  # one step slowed 4x: not the ideal
    "odd": [50.0, 52.0, 51.0, 53.0, 49.0, 500.0, 51.5],
    "one": [80.0],
}
GAP_MS = 1000  # wall clock beyond the steps: a stall


@pytest.mark.pure
def test_the_rule_keeps_slowed_steps_out() -> None:
    assert ideal_step_ms([100.0, 101.0, 99.0, 100.5, 400.0, 98.0]) == 100.0
    assert ideal_step_ms([]) is None
    assert ettr(0, 100.0, 0, 1000) is None and ettr(10, 100.0, 100, 900) == 1.0


@pytest.mark.clickhouse
def test_sql_and_python_agree(clickhouse_dsn: str) -> None:
    from vigil.clickhouse.client import connect

    client: Any = connect(clickhouse_dsn, database=f"t_ettr_{uuid.uuid4().hex[:8]}")
    rows = []
    for job, times in JOBS.items():
        t = 1_700_000_000_000
        for step, ms in enumerate(times):
            t += int(ms)
            rows.append(f"('{job}', {step}, {ms}, fromUnixTimestamp64Milli(toInt64({t - int(ms)})), "
                        f"fromUnixTimestamp64Milli(toInt64({t})))")
    steps = f"(SELECT * FROM (SELECT c1 AS job_id, c2 AS step, c3 AS step_ms, c4 AS s_first_ts, c5 AS s_last_ts " \
            f"FROM values({', '.join(rows)})))"
    sql = f"""WITH s AS ({per_job_sql(steps)})
SELECT job_id, steps, ideal_step_ms, first_ms, last_ms,
       {ettr_sql("steps", "ideal_step_ms", "first_ms", f"last_ms + {GAP_MS}")} AS ratio FROM s ORDER BY job_id"""
    got = {r[0]: r[1:] for r in client.query(sql).result_rows}
    assert set(got) == set(JOBS)
    for job, times in JOBS.items():
        n, ideal, first_ms, last_ms, ratio = got[job]
        assert n == len(times) and ideal == pytest.approx(ideal_step_ms(times), abs=1e-9), job
        assert ratio == pytest.approx(ettr(n, ideal_step_ms(times), first_ms, last_ms + GAP_MS), abs=1e-12), job
    assert got["even"][1] == 100.0 and got["even"][4] < 0.5  # slowed step and stall are both lost time

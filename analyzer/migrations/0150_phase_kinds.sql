-- Phase kinds (compute / comm / wait, see vigil/contract/phases.py) and per-rank phase windows.
--
-- step_timings.phase_kinds holds the kinds a step declared (usually none: undeclared phases
-- are classified by name when read). `job_phase_kinds` collects every declaration of a job,
-- from its steps (materialised view) and from its registration (written by the ingest), so a
-- reader resolves a job's kinds with one small query: the step's declaration wins over the
-- job's, the newest over older ones.
ALTER TABLE step_timings ADD COLUMN IF NOT EXISTS phase_kinds Map(LowCardinality(String), LowCardinality(String)) AFTER phases;

CREATE TABLE IF NOT EXISTS job_phase_kinds (
    job_id LowCardinality(String),
    phase LowCardinality(String),
    source LowCardinality(String),
    phase_kind LowCardinality(String),
    ts DateTime64(3, 'UTC')
) ENGINE = ReplacingMergeTree(ts)
ORDER BY (job_id, phase, source);

CREATE MATERIALIZED VIEW IF NOT EXISTS job_phase_kinds_mv TO job_phase_kinds AS
SELECT job_id, phase, 'step' AS source, argMax(kind, t) AS phase_kind, max(t) AS ts
FROM (SELECT job_id, phase, kind, ts AS t FROM step_timings
      ARRAY JOIN mapKeys(phase_kinds) AS phase, mapValues(phase_kinds) AS kind)
GROUP BY job_id, phase;

-- Per job, phase, 5-step window and rank: the per-GPU straggler detector compares each rank
-- with the other ranks of its host (same pipeline stage), which a per-host mean hides
-- (one slow GPU of 8 moves its host's mean by an eighth).
CREATE TABLE IF NOT EXISTS phase_rank_windows (
    job_id LowCardinality(String),
    phase LowCardinality(String),
    window UInt64,
    host LowCardinality(String),
    rank UInt32,
    local_rank UInt32,
    pp UInt32,
    day Date,
    sum_ms SimpleAggregateFunction(sum, Float64),
    n SimpleAggregateFunction(sum, UInt64),
    max_ms SimpleAggregateFunction(max, Float64),
    last_ts SimpleAggregateFunction(max, DateTime64(3, 'UTC'))
) ENGINE = AggregatingMergeTree
PARTITION BY day
ORDER BY (job_id, phase, window, host, rank, local_rank, pp, day)
TTL day + INTERVAL {ttl_days} DAY;

CREATE MATERIALIZED VIEW IF NOT EXISTS phase_rank_windows_mv TO phase_rank_windows AS
SELECT job_id, phase, intDiv(step, 5) AS window, host, rank, local_rank, pp, toDate(ts) AS day,
       sum(ms) AS sum_ms, count() AS n, max(ms) AS max_ms, max(ts) AS last_ts
FROM step_timings
ARRAY JOIN mapKeys(phases) AS phase, mapValues(phases) AS ms
GROUP BY job_id, phase, window, host, rank, local_rank, pp, day;

-- A sum() rollup of step_timings: a batch written again must be dropped here too (see 0140).
ALTER TABLE phase_rank_windows MODIFY SETTING non_replicated_deduplication_window = 10000;

-- Backfill the per-rank windows of what is already stored, only into an empty rollup (a re-run
-- after a failure part-way must not count anything twice).
INSERT INTO phase_rank_windows
SELECT job_id, phase, intDiv(step, 5), host, rank, local_rank, pp, toDate(ts), sum(ms), count(), max(ms), max(ts)
FROM step_timings FINAL
ARRAY JOIN mapKeys(phases) AS phase, mapValues(phases) AS ms
WHERE (SELECT count() FROM phase_rank_windows) = 0
GROUP BY job_id, phase, intDiv(step, 5), host, rank, local_rank, pp, toDate(ts);

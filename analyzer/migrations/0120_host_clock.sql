-- Per job, host and source (step, heartbeat, nic): event-time and wall-clock ingest marks.
-- The analyzer's event-time watermark of a job is the earliest `last_ts` among the sources
-- still being ingested: hosts sit on different partitions and catch up at different rates,
-- so the job's newest timestamp alone would let detectors judge moments that some hosts
-- have not been ingested up to yet.
CREATE TABLE IF NOT EXISTS host_clock (
    job_id LowCardinality(String),
    host LowCardinality(String),
    source LowCardinality(String),
    first_ts SimpleAggregateFunction(min, DateTime64(3, 'UTC')),
    last_ts SimpleAggregateFunction(max, DateTime64(3, 'UTC')),
    last_ingested SimpleAggregateFunction(max, DateTime64(3, 'UTC'))
) ENGINE = AggregatingMergeTree
ORDER BY (job_id, host, source);

CREATE MATERIALIZED VIEW IF NOT EXISTS host_clock_steps_mv TO host_clock AS
SELECT job_id, host, 'step' AS source, min(ts) AS first_ts, max(ts) AS last_ts, max(ingested_at) AS last_ingested
FROM step_timings GROUP BY job_id, host;

CREATE MATERIALIZED VIEW IF NOT EXISTS host_clock_hb_mv TO host_clock AS
SELECT job_id, host, 'heartbeat' AS source, min(ts) AS first_ts, max(ts) AS last_ts, max(ingested_at) AS last_ingested
FROM heartbeats GROUP BY job_id, host;

CREATE MATERIALIZED VIEW IF NOT EXISTS host_clock_nic_mv TO host_clock AS
SELECT job_id, host, 'nic' AS source, min(ts) AS first_ts, max(ts) AS last_ts, max(ingested_at) AS last_ingested
FROM nic_counters GROUP BY job_id, host;

-- Backfill from what is already stored (min/max aggregates: re-running adds nothing).
INSERT INTO host_clock SELECT job_id, host, 'step', min(ts), max(ts), max(ingested_at) FROM step_timings GROUP BY job_id, host;
INSERT INTO host_clock SELECT job_id, host, 'heartbeat', min(ts), max(ts), max(ingested_at) FROM heartbeats GROUP BY job_id, host;
INSERT INTO host_clock SELECT job_id, host, 'nic', min(ts), max(ts), max(ingested_at) FROM nic_counters GROUP BY job_id, host;

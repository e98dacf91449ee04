-- Rollups maintained by materialised views on the raw tables (analyzer). Each answers one
-- question without touching raw rows: see analyzer/README.md. Sums are exact because the
-- ingest writer never inserts an event_id twice; max/min columns are idempotent anyway.

-- Per job, phase, 5-step window and host: mean/max phase time (straggler detector, heatmaps).
CREATE TABLE IF NOT EXISTS phase_host_windows (
    job_id LowCardinality(String),
    phase LowCardinality(String),
    window UInt64,
    host LowCardinality(String),
    day Date,
    sum_ms SimpleAggregateFunction(sum, Float64),
    n SimpleAggregateFunction(sum, UInt64),
    max_ms SimpleAggregateFunction(max, Float64),
    min_ms SimpleAggregateFunction(min, Float64),
    first_ts SimpleAggregateFunction(min, DateTime64(3, 'UTC')),
    last_ts SimpleAggregateFunction(max, DateTime64(3, 'UTC'))
) ENGINE = AggregatingMergeTree
PARTITION BY day
ORDER BY (job_id, phase, window, host, day)
TTL day + INTERVAL {ttl_days} DAY;

CREATE MATERIALIZED VIEW IF NOT EXISTS phase_host_windows_mv TO phase_host_windows AS
SELECT job_id, phase, intDiv(step, 5) AS window, host, toDate(ts) AS day,
       sum(ms) AS sum_ms, count() AS n, max(ms) AS max_ms, min(ms) AS min_ms,
       min(ts) AS first_ts, max(ts) AS last_ts
FROM step_timings
ARRAY JOIN mapKeys(phases) AS phase, mapValues(phases) AS ms
GROUP BY job_id, phase, window, host, day;

-- Per job, phase and step: fleet mean/max phase time (MFU drift attribution, timelines).
CREATE TABLE IF NOT EXISTS job_phase_steps (
    job_id LowCardinality(String),
    phase LowCardinality(String),
    step UInt64,
    day Date,
    sum_ms SimpleAggregateFunction(sum, Float64),
    n SimpleAggregateFunction(sum, UInt64),
    max_ms SimpleAggregateFunction(max, Float64),
    last_ts SimpleAggregateFunction(max, DateTime64(3, 'UTC'))
) ENGINE = AggregatingMergeTree
PARTITION BY day
ORDER BY (job_id, phase, step, day)
TTL day + INTERVAL {ttl_days} DAY;

CREATE MATERIALIZED VIEW IF NOT EXISTS job_phase_steps_mv TO job_phase_steps AS
SELECT job_id, phase, step, toDate(ts) AS day,
       sum(ms) AS sum_ms, count() AS n, max(ms) AS max_ms, max(ts) AS last_ts
FROM step_timings
ARRAY JOIN mapKeys(phases) AS phase, mapValues(phases) AS ms
GROUP BY job_id, phase, step, day;

-- Per job and step: step time, MFU, throughput (MFU drift, job timeline).
CREATE TABLE IF NOT EXISTS job_steps (
    job_id LowCardinality(String),
    step UInt64,
    day Date,
    ranks SimpleAggregateFunction(sum, UInt64),
    sum_step_ms SimpleAggregateFunction(sum, Float64),
    max_step_ms SimpleAggregateFunction(max, Float64),
    sum_mfu SimpleAggregateFunction(sum, Float64),
    n_mfu SimpleAggregateFunction(sum, UInt64),
    sum_tflops SimpleAggregateFunction(sum, Float64),
    sum_tokens SimpleAggregateFunction(sum, UInt64),
    failed SimpleAggregateFunction(sum, UInt64),
    first_ts SimpleAggregateFunction(min, DateTime64(3, 'UTC')),
    last_ts SimpleAggregateFunction(max, DateTime64(3, 'UTC'))
) ENGINE = AggregatingMergeTree
PARTITION BY day
ORDER BY (job_id, step, day)
TTL day + INTERVAL {ttl_days} DAY;

CREATE MATERIALIZED VIEW IF NOT EXISTS job_steps_mv TO job_steps AS
SELECT job_id, step, toDate(ts) AS day, count() AS ranks,
       sum(step_ms) AS sum_step_ms, max(step_ms) AS max_step_ms,
       sum(ifNull(mfu, 0)) AS sum_mfu, countIf(mfu IS NOT NULL) AS n_mfu,
       sum(ifNull(tflops, 0)) AS sum_tflops, sum(ifNull(tokens, 0)) AS sum_tokens,
       sum(failed) AS failed, min(ts) AS first_ts, max(ts) AS last_ts
FROM step_timings
GROUP BY job_id, step, day;

-- Per job, host, NIC and 10-second bucket: throughput (traffic panels, heatmaps).
CREATE TABLE IF NOT EXISTS nic_windows (
    job_id LowCardinality(String),
    bucket DateTime('UTC'),
    host LowCardinality(String),
    device LowCardinality(String),
    sum_bps SimpleAggregateFunction(sum, Float64),
    n SimpleAggregateFunction(sum, UInt64),
    max_bps SimpleAggregateFunction(max, Float64),
    min_bps SimpleAggregateFunction(min, Float64)
) ENGINE = AggregatingMergeTree
PARTITION BY toDate(bucket)
ORDER BY (job_id, bucket, host, device)
TTL bucket + INTERVAL {ttl_days} DAY;

CREATE MATERIALIZED VIEW IF NOT EXISTS nic_windows_mv TO nic_windows AS
SELECT job_id, toStartOfInterval(toDateTime(ts), INTERVAL 10 SECOND) AS bucket, host, device,
       sum(tx_bps + rx_bps) AS sum_bps, count() AS n,
       max(tx_bps + rx_bps) AS max_bps, min(tx_bps + rx_bps) AS min_bps
FROM nic_counters
GROUP BY job_id, bucket, host, device;

-- Per job and host: first and last heartbeat (membership for the heartbeat detector).
CREATE TABLE IF NOT EXISTS host_presence (
    job_id LowCardinality(String),
    host LowCardinality(String),
    first_ts SimpleAggregateFunction(min, DateTime64(3, 'UTC')),
    last_ts SimpleAggregateFunction(max, DateTime64(3, 'UTC')),
    interval_s SimpleAggregateFunction(max, Float64)
) ENGINE = AggregatingMergeTree
ORDER BY (job_id, host);

CREATE MATERIALIZED VIEW IF NOT EXISTS host_presence_mv TO host_presence AS
SELECT job_id, host, min(ts) AS first_ts, max(ts) AS last_ts, max(interval_s) AS interval_s
FROM heartbeats
GROUP BY job_id, host;

-- Per job: event-time clock and wall-clock ingest time (active jobs, detector clock, replay range).
CREATE TABLE IF NOT EXISTS job_clock (
    job_id LowCardinality(String),
    first_ts SimpleAggregateFunction(min, DateTime64(3, 'UTC')),
    last_ts SimpleAggregateFunction(max, DateTime64(3, 'UTC')),
    last_ingested SimpleAggregateFunction(max, DateTime64(3, 'UTC'))
) ENGINE = AggregatingMergeTree
ORDER BY job_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS job_clock_hb_mv TO job_clock AS
SELECT job_id, min(ts) AS first_ts, max(ts) AS last_ts, max(ingested_at) AS last_ingested
FROM heartbeats GROUP BY job_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS job_clock_steps_mv TO job_clock AS
SELECT job_id, min(ts) AS first_ts, max(ts) AS last_ts, max(ingested_at) AS last_ingested
FROM step_timings GROUP BY job_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS job_clock_nic_mv TO job_clock AS
SELECT job_id, min(ts) AS first_ts, max(ts) AS last_ts, max(ingested_at) AS last_ingested
FROM nic_counters GROUP BY job_id;

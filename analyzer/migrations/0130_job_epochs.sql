-- What the analyzer needs to tell a job's runs apart (its epochs: the first run, and every
-- restart from a checkpoint, re-registration, or resumption after a long pause), and to
-- judge a job's last events when it ends. See analyzer/README.md ("Epochs", "Time").

-- Per job, step and 10-second bucket of event time: like `job_steps`, but a step re-run after
-- a restart from a checkpoint lands in other buckets than its first run, so the detectors can
-- read one run's steps (bucket >= the epoch's start) and judge "as of" an instant exactly
-- (bucket <= the instant) instead of mixing both runs of a step number.
CREATE TABLE IF NOT EXISTS job_step_runs (
    job_id LowCardinality(String),
    step UInt64,
    bucket DateTime('UTC'),
    ranks SimpleAggregateFunction(sum, UInt64),
    sum_step_ms SimpleAggregateFunction(sum, Float64),
    max_step_ms SimpleAggregateFunction(max, Float64),
    sum_mfu SimpleAggregateFunction(sum, Float64),
    n_mfu SimpleAggregateFunction(sum, UInt64),
    phase_ms SimpleAggregateFunction(sumMap, Map(String, Float64)),
    phase_n SimpleAggregateFunction(sumMap, Map(String, UInt64)),
    first_ts SimpleAggregateFunction(min, DateTime64(3, 'UTC')),
    last_ts SimpleAggregateFunction(max, DateTime64(3, 'UTC'))
) ENGINE = AggregatingMergeTree
PARTITION BY toDate(bucket)
ORDER BY (job_id, step, bucket)
TTL bucket + INTERVAL {ttl_days} DAY;

CREATE MATERIALIZED VIEW IF NOT EXISTS job_step_runs_mv TO job_step_runs AS
SELECT job_id, step, toStartOfInterval(toDateTime(ts), INTERVAL 10 SECOND) AS bucket, count() AS ranks,
       sum(step_ms) AS sum_step_ms, max(step_ms) AS max_step_ms,
       sum(ifNull(mfu, 0)) AS sum_mfu, countIf(mfu IS NOT NULL) AS n_mfu,
       sumMap(CAST(phases, 'Map(String, Float64)')) AS phase_ms,
       sumMap(CAST(mapApply((k, v) -> (k, toUInt64(1)), phases), 'Map(String, UInt64)')) AS phase_n,
       min(ts) AS first_ts, max(ts) AS last_ts
FROM step_timings
GROUP BY job_id, step, bucket;

-- Per job and 10-second bucket: the step numbers reported in it. The analyzer reads these in
-- time order to find where a run begins (steps that go back or jump, a long gap) in a few
-- rows per minute of history, whatever the job's size.
CREATE TABLE IF NOT EXISTS job_step_spans (
    job_id LowCardinality(String),
    bucket DateTime('UTC'),
    min_step SimpleAggregateFunction(min, UInt64),
    max_step SimpleAggregateFunction(max, UInt64),
    first_ts SimpleAggregateFunction(min, DateTime64(3, 'UTC')),
    last_ts SimpleAggregateFunction(max, DateTime64(3, 'UTC')),
    rows SimpleAggregateFunction(sum, UInt64)
) ENGINE = AggregatingMergeTree
PARTITION BY toDate(bucket)
ORDER BY (job_id, bucket)
TTL bucket + INTERVAL {ttl_days} DAY;

CREATE MATERIALIZED VIEW IF NOT EXISTS job_step_spans_mv TO job_step_spans AS
SELECT job_id, toStartOfInterval(toDateTime(ts), INTERVAL 10 SECOND) AS bucket, min(step) AS min_step,
       max(step) AS max_step, min(ts) AS first_ts, max(ts) AS last_ts, count() AS rows
FROM step_timings
GROUP BY job_id, bucket;

-- Every registration of a job (`jobs` keeps only the latest): a new registration is a restart.
CREATE TABLE IF NOT EXISTS job_registrations (
    job_id LowCardinality(String),
    ts DateTime64(3, 'UTC'),
    event_id String,
    hosts Array(String)
) ENGINE = ReplacingMergeTree
ORDER BY (job_id, ts, event_id);

CREATE MATERIALIZED VIEW IF NOT EXISTS job_registrations_mv TO job_registrations AS
SELECT job_id, ts, event_id, hosts FROM jobs;

-- Sparse sources of the job's clock: log lines, process exits and Flight Recorder dumps. They do
-- not hold the watermark back (a host may log nothing for hours), but a job's clock runs to
-- their newest timestamp once its dense sources (steps, heartbeats, NIC samples) have all
-- stopped, so the exits that end a job are judged live exactly as replay judges them.
CREATE MATERIALIZED VIEW IF NOT EXISTS host_clock_logs_mv TO host_clock AS
SELECT job_id, host, 'log' AS source, min(ts) AS first_ts, max(ts) AS last_ts, now64(3) AS last_ingested
FROM log_lines GROUP BY job_id, host;

CREATE MATERIALIZED VIEW IF NOT EXISTS host_clock_exits_mv TO host_clock AS
SELECT job_id, host, 'exit' AS source, min(ts) AS first_ts, max(ts) AS last_ts, now64(3) AS last_ingested
FROM process_exits GROUP BY job_id, host;

CREATE MATERIALIZED VIEW IF NOT EXISTS host_clock_collectives_mv TO host_clock AS
SELECT job_id, host, 'collective' AS source, min(ts) AS first_ts, max(ts) AS last_ts, now64(3) AS last_ingested
FROM collective_traces GROUP BY job_id, host;

-- Backfill from what is already stored.
INSERT INTO job_step_runs
SELECT job_id, step, toStartOfInterval(toDateTime(ts), INTERVAL 10 SECOND) AS bucket, count(), sum(step_ms),
       max(step_ms), sum(ifNull(mfu, 0)), countIf(mfu IS NOT NULL), sumMap(CAST(phases, 'Map(String, Float64)')),
       sumMap(CAST(mapApply((k, v) -> (k, toUInt64(1)), phases), 'Map(String, UInt64)')), min(ts), max(ts)
FROM step_timings FINAL WHERE (job_id, step, bucket) NOT IN (SELECT job_id, step, bucket FROM job_step_runs)
GROUP BY job_id, step, bucket;

INSERT INTO job_step_spans
SELECT job_id, toStartOfInterval(toDateTime(ts), INTERVAL 10 SECOND) AS bucket, min(step), max(step), min(ts),
       max(ts), count()
FROM step_timings FINAL WHERE (job_id, bucket) NOT IN (SELECT job_id, bucket FROM job_step_spans)
GROUP BY job_id, bucket;

INSERT INTO job_registrations SELECT job_id, ts, event_id, hosts FROM jobs;

-- (stamped as ingested at 1970: a backfill makes no job look active)
INSERT INTO host_clock SELECT job_id, host, 'log', min(ts), max(ts), toDateTime64(0, 3, 'UTC')
FROM log_lines GROUP BY job_id, host;
INSERT INTO host_clock SELECT job_id, host, 'exit', min(ts), max(ts), toDateTime64(0, 3, 'UTC')
FROM process_exits GROUP BY job_id, host;
INSERT INTO host_clock SELECT job_id, host, 'collective', min(ts), max(ts), toDateTime64(0, 3, 'UTC')
FROM collective_traces GROUP BY job_id, host;

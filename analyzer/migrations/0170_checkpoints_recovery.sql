-- Decisions and checkpoints from the `recovery` topic, stored by the ingest like any event.
-- `checkpoints`: every checkpoint event of every rank (staged / persisted / committed / failed /
-- skipped). A job's latest complete checkpoint is its latest `committed` row; the time a save
-- blocked training is the largest `blocked_ms` among that step's `staged` rows.
CREATE TABLE IF NOT EXISTS checkpoints (
    event_id String,
    ts DateTime64(3, 'UTC'),
    job_id LowCardinality(String),
    host LowCardinality(String),
    rank Nullable(UInt32),
    step UInt64,
    phase LowCardinality(String),
    path String,
    blocked_ms Float64,
    duration_ms Float64,
    bytes UInt64,
    error String,
    dropped UInt32,
    ingested_at DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (job_id, step, ts, event_id)
TTL toDateTime(ts) + INTERVAL {ttl_days} DAY;

-- What the recovery controller decided and did, with its reason (details as JSON).
CREATE TABLE IF NOT EXISTS recovery_actions (
    event_id String,
    ts DateTime64(3, 'UTC'),
    job_id LowCardinality(String),
    host LowCardinality(String),
    action LowCardinality(String),
    target String,
    status LowCardinality(String),
    reason String,
    alert_fingerprint String,
    details String,
    ingested_at DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (job_id, ts, event_id)
TTL toDateTime(ts) + INTERVAL {ttl_days} DAY;

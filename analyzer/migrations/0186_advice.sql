-- The resource advisor's recommendations (`advice` events, topic `recovery`): one row per advice,
-- with its curve and the score of the job's previous advice (JSON), for `vigil advise` (which
-- scores the latest advice against what the job measured after it) and the dashboard.
CREATE TABLE IF NOT EXISTS advice_events (
    event_id String,
    ts DateTime64(3, 'UTC'),
    job_id LowCardinality(String),
    advice_id String,
    nodes Nullable(UInt32),
    current Nullable(UInt32),
    predicted Nullable(Float64),
    still_scaling UInt8,
    curve String,
    hot Array(String),
    starved Array(String),
    data_share Nullable(Float64),
    reasons Array(String),
    scored String,
    score_error_pct Nullable(Float64),
    ingested_at DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = ReplacingMergeTree(ts)
PARTITION BY toYYYYMM(ts)
ORDER BY (job_id, advice_id)
TTL toDateTime(ts) + INTERVAL {ttl_days} DAY;

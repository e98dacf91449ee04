-- Alert events (every state transition) as published on the alerts topic, ingested back by
-- the analyzer. `alerts_current` folds them into one row per fingerprint (its latest event).
CREATE TABLE IF NOT EXISTS alert_events (
    event_id String,
    ts DateTime64(3, 'UTC'),
    job_id LowCardinality(String),
    host LowCardinality(String),
    fingerprint String,
    alert LowCardinality(String),
    subject String,
    status LowCardinality(String),
    severity LowCardinality(String),
    summary String,
    first_seen DateTime64(3, 'UTC'),
    last_seen DateTime64(3, 'UTC'),
    evidence String,
    ingested_at DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (job_id, fingerprint, ts, event_id)
TTL toDateTime(ts) + INTERVAL {ttl_days} DAY;

CREATE VIEW IF NOT EXISTS alerts_current AS
SELECT job_id, fingerprint,
       argMax(alert, ts) AS alert, argMax(subject, ts) AS subject, argMax(host, ts) AS host,
       argMax(status, ts) AS status, argMax(severity, ts) AS severity, argMax(summary, ts) AS summary,
       min(first_seen) AS first_seen, max(last_seen) AS last_seen, argMax(evidence, ts) AS evidence,
       max(ts) AS updated
FROM alert_events
GROUP BY job_id, fingerprint;

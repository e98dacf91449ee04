-- Silences as the notifier folded them from the silences topic (the latest event of each
-- silence_id), for the dashboard, and so that a silence outlives the topic's retention.
CREATE TABLE IF NOT EXISTS notify_silences (
    silence_id String,
    ts DateTime64(3, 'UTC'),
    matchers String,
    starts_at DateTime64(3, 'UTC'),
    ends_at DateTime64(3, 'UTC'),
    created_by String,
    reason String,
    status LowCardinality(String),
    event String
) ENGINE = ReplacingMergeTree(ts)
ORDER BY silence_id
TTL toDateTime(ends_at) + INTERVAL {ttl_days} DAY;

-- The notifier's delivery log and retry queue: every notification it decided to send, one row
-- per (idempotency key, revision). Revision 0 is the decision (what, to whom, for which group,
-- the exact body, which holds no secret); each later revision records the delivery so far
-- (state pending -> delivered | failed | expired | dropped, attempts, last HTTP status and
-- error, latency from decision to delivery). The latest revision of a key is its state (FINAL);
-- the decision columns are the same in every revision, so the notification log (the last
-- notification of each group to each receiver) is read without FINAL.
CREATE TABLE IF NOT EXISTS notify_deliveries (
    key String,
    rev UInt32,
    receiver LowCardinality(String),
    receiver_kind LowCardinality(String),
    group_key String,
    route LowCardinality(String),
    seq UInt32,
    job_id String,
    status LowCardinality(String),
    reason LowCardinality(String),
    severity LowCardinality(String),
    title String,
    firing Array(String),
    digest String,
    last_seen DateTime64(3, 'UTC'),
    created DateTime64(3, 'UTC'),
    body String CODEC(ZSTD(1)),
    state LowCardinality(String),
    attempts UInt16,
    http_status UInt16,
    error String,
    latency_ms Float64,
    updated DateTime64(3, 'UTC')
) ENGINE = ReplacingMergeTree(rev)
ORDER BY key
TTL toDateTime(created) + INTERVAL {ttl_days} DAY;

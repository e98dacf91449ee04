-- Dead letters seen by the ingest, for inspection next to the data (the topic stays the source of truth).
CREATE TABLE IF NOT EXISTS dead_letters (
    ts DateTime64(3, 'UTC'),
    topic LowCardinality(String),
    partition UInt32,
    offset UInt64,
    reason String,
    payload String
) ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (topic, partition, offset, reason)
TTL toDateTime(ts) + INTERVAL {ttl_days} DAY;

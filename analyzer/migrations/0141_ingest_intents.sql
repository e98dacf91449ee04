-- The ingest's intent ledger: before a batch is written, one row per Kafka partition it covers, with
-- the batch's full offset ranges and insert token. A consumer that (re)gains a partition whose latest
-- intent is not committed yet re-cuts that exact batch and writes it under the same token (a no-op
-- where the first attempt got through), or, when it cannot own all of the batch's partitions,
-- re-checks those offsets against stored event_ids. Latest intent per partition wins.
CREATE TABLE IF NOT EXISTS ingest_intents (
    group_id LowCardinality(String),
    topic LowCardinality(String),
    partition UInt32,
    token String,
    ranges String,
    ts DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = ReplacingMergeTree(ts)
ORDER BY (group_id, topic, partition)
TTL toDateTime(ts) + INTERVAL 7 DAY;

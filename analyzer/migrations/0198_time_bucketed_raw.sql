-- nic_counters and heartbeats sort by the minute first (issue 26: a detector's turn must not grow with the job).
-- Sorted (job_id, host, [device,] ts), a window read (the last 60-600 s of every NIC or host of a job, each detector
-- turn) could skip a granule only where one series filled it: a series shorter than a granule (8192 rows, 2.3 h of a
-- NIC at 1 Hz) shares it with its neighbours, so a read selected every granule of the job's day so far, and later
-- about one granule per series (~40 M rows at 5,000 NICs). With the minute first it selects the minutes it spans,
-- whatever the job's age, when its condition names the minute (the engine does not derive it from a bound on a
-- DateTime64 `ts`): the detectors write it as `analyzer/detect/base.py` RAW_SINCE. Measured: bench/long_job_reads.py.
-- A host's series over a range (the dashboard's host page) reads about a granule per minute of the range.
--
-- The rows are copied into a table of the same columns under the new key, which then takes the old one's name
-- (EXCHANGE is atomic). The rollup views are bound to the name: they feed the new table and the copy feeds none.
-- Run it with every ingest stopped and one migrator (`vigil up` and the services migrate before they ingest; on
-- Kubernetes scale the analyzer and ingest Deployments to 0, run the migrate Job, scale back): rows another writer
-- stores while the copy runs are copied by the catch-up just before the exchange, but not those stored between it
-- and the exchange. Safe to run again after a crash at any point: a leftover copy is dropped first and the copy reads
-- whichever table holds the name (every row, before or after the exchange), so a rerun ends with the new key and
-- every row. It reads and writes each table once (minutes per billion rows).
-- The new tables' insert-token logs start empty: a batch re-cut after this ran is judged against every row stored
-- (analyzer/ingest/writer.py reads `token_log_starts`).
DROP TABLE IF EXISTS nic_counters_0198;
CREATE TABLE nic_counters_0198 AS nic_counters
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (job_id, toStartOfMinute(ts), host, device, ts, event_id)
TTL toDateTime(ts) + INTERVAL {ttl_days} DAY
SETTINGS non_replicated_deduplication_window = 10000;
-- the copy, then the catch-up of rows stored meanwhile
INSERT INTO nic_counters_0198 SELECT * FROM nic_counters;
INSERT INTO nic_counters_0198 SELECT * FROM nic_counters
WHERE ingested_at >= (SELECT max(ingested_at) - INTERVAL 5 MINUTE FROM nic_counters_0198)
  AND event_id NOT IN (SELECT event_id FROM nic_counters_0198
                       WHERE ingested_at >= (SELECT max(ingested_at) - INTERVAL 5 MINUTE FROM nic_counters_0198));
EXCHANGE TABLES nic_counters AND nic_counters_0198;
DROP TABLE nic_counters_0198;

DROP TABLE IF EXISTS heartbeats_0198;
CREATE TABLE heartbeats_0198 AS heartbeats
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (job_id, toStartOfMinute(ts), host, ts, event_id)
TTL toDateTime(ts) + INTERVAL {ttl_days} DAY
SETTINGS non_replicated_deduplication_window = 10000;
INSERT INTO heartbeats_0198 SELECT * FROM heartbeats;
INSERT INTO heartbeats_0198 SELECT * FROM heartbeats
WHERE ingested_at >= (SELECT max(ingested_at) - INTERVAL 5 MINUTE FROM heartbeats_0198)
  AND event_id NOT IN (SELECT event_id FROM heartbeats_0198
                       WHERE ingested_at >= (SELECT max(ingested_at) - INTERVAL 5 MINUTE FROM heartbeats_0198));
EXCHANGE TABLES heartbeats AND heartbeats_0198;
DROP TABLE heartbeats_0198;

-- When each rebuilt table's insert-token log started empty (analyzer/ingest/writer.py reads the latest per table).
CREATE TABLE IF NOT EXISTS token_log_starts (
    table_name LowCardinality(String),
    at DateTime64(3, 'UTC')
) ENGINE = MergeTree
ORDER BY table_name;
INSERT INTO token_log_starts VALUES ('nic_counters', now64(3)), ('heartbeats', now64(3));

-- nic_counters and heartbeats sort by the minute first (issue 26: a detector's turn must not grow with the job).
-- Sorted (job_id, host, [device,] ts), a window read (the last 60-600 s of every NIC or host of a job, each detector
-- turn) could skip a granule only where one series filled it: a series shorter than a granule (8192 rows, 2.3 h of a
-- NIC at 1 Hz) shares it with its neighbours, so a read selected every granule of the job's day so far, and later
-- about one granule per series (~40 M rows at 5,000 NICs). With the minute first it selects the minutes it spans,
-- whatever the job's age, when its condition names them (the engine does not derive a bound on the minute from one on
-- a DateTime64 `ts`): analyzer/schema.py `window` / `minutes`. Measured: bench/long_job_reads.py. One host's series over
-- a range (the dashboard's host page) selects about a granule per minute of the range at 1,000+ hosts.
--
-- rebuilds: nic_counters heartbeats
-- The rows are copied into a table of the same columns under the new key, which then takes the old one's name
-- (EXCHANGE: an Atomic database, ClickHouse's default), and the table's rollup views are made again on it. It must run
-- with every writer of the two tables stopped and one migrator: a service migrating at start refuses it while they
-- hold rows (vigil/clickhouse/migrations.py), `vigil migrate` and `vigil up` (before it hosts anything) apply it. Rows
-- a writer stores anyway while a table is copied are copied by the catch-up before the exchange. Safe to run again
-- after a crash at any point: a leftover copy is dropped first and the copy reads whichever table holds the name
-- (every row, before or after the exchange), so a rerun ends with the new key, its views and every row. It reads and
-- writes each table once (minutes per billion rows). The rebuilt tables' insert-token logs start empty:
-- `token_log_starts` says when, and the writer judges a batch re-cut across the rebuild against every row stored.
CREATE TABLE IF NOT EXISTS token_log_starts (
    table_name LowCardinality(String),
    at DateTime64(3, 'UTC')
) ENGINE = MergeTree
ORDER BY table_name;

DROP TABLE IF EXISTS nic_counters_0198;
CREATE TABLE nic_counters_0198 AS nic_counters
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (job_id, toStartOfMinute(ts), host, device, ts, event_id)
TTL toDateTime(ts) + INTERVAL {ttl_days} DAY
SETTINGS non_replicated_deduplication_window = 10000;
-- when the copy began; then the copy, and the catch-up of what was stored meanwhile (a block in flight as it began
-- took its ingested_at less than a minute before)
INSERT INTO token_log_starts VALUES ('nic_counters_0198', now64(3));
INSERT INTO nic_counters_0198 SELECT * FROM nic_counters SETTINGS max_partitions_per_insert_block = 0;
INSERT INTO nic_counters_0198 SELECT * FROM nic_counters
WHERE ingested_at >= (SELECT max(at) - INTERVAL 1 MINUTE FROM token_log_starts WHERE table_name = 'nic_counters_0198')
  AND event_id NOT IN (SELECT event_id FROM nic_counters_0198 WHERE ingested_at >= (
      SELECT max(at) - INTERVAL 1 MINUTE FROM token_log_starts WHERE table_name = 'nic_counters_0198'))
SETTINGS max_partitions_per_insert_block = 0;
EXCHANGE TABLES nic_counters AND nic_counters_0198;
DROP VIEW IF EXISTS nic_windows_mv;
CREATE MATERIALIZED VIEW IF NOT EXISTS nic_windows_mv TO nic_windows AS
SELECT job_id, toStartOfInterval(toDateTime(ts), INTERVAL 10 SECOND) AS bucket, host, device,
       sum(tx_bps + rx_bps) AS sum_bps, count() AS n,
       max(tx_bps + rx_bps) AS max_bps, min(tx_bps + rx_bps) AS min_bps
FROM nic_counters
GROUP BY job_id, bucket, host, device;
DROP VIEW IF EXISTS host_clock_nic_mv;
CREATE MATERIALIZED VIEW IF NOT EXISTS host_clock_nic_mv TO host_clock AS
SELECT job_id, host, 'nic' AS source, min(ts) AS first_ts, max(ts) AS last_ts, max(ingested_at) AS last_ingested
FROM nic_counters GROUP BY job_id, host;
INSERT INTO token_log_starts VALUES ('nic_counters', now64(3));
DROP TABLE nic_counters_0198;

DROP TABLE IF EXISTS heartbeats_0198;
CREATE TABLE heartbeats_0198 AS heartbeats
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (job_id, toStartOfMinute(ts), host, ts, event_id)
TTL toDateTime(ts) + INTERVAL {ttl_days} DAY
SETTINGS non_replicated_deduplication_window = 10000;
INSERT INTO token_log_starts VALUES ('heartbeats_0198', now64(3));
INSERT INTO heartbeats_0198 SELECT * FROM heartbeats SETTINGS max_partitions_per_insert_block = 0;
INSERT INTO heartbeats_0198 SELECT * FROM heartbeats
WHERE ingested_at >= (SELECT max(at) - INTERVAL 1 MINUTE FROM token_log_starts WHERE table_name = 'heartbeats_0198')
  AND event_id NOT IN (SELECT event_id FROM heartbeats_0198 WHERE ingested_at >= (
      SELECT max(at) - INTERVAL 1 MINUTE FROM token_log_starts WHERE table_name = 'heartbeats_0198'))
SETTINGS max_partitions_per_insert_block = 0;
EXCHANGE TABLES heartbeats AND heartbeats_0198;
DROP VIEW IF EXISTS host_presence_mv;
CREATE MATERIALIZED VIEW IF NOT EXISTS host_presence_mv TO host_presence AS
SELECT job_id, host, min(ts) AS first_ts, max(ts) AS last_ts, max(interval_s) AS interval_s
FROM heartbeats
GROUP BY job_id, host;
DROP VIEW IF EXISTS host_clock_hb_mv;
CREATE MATERIALIZED VIEW IF NOT EXISTS host_clock_hb_mv TO host_clock AS
SELECT job_id, host, 'heartbeat' AS source, min(ts) AS first_ts, max(ts) AS last_ts, max(ingested_at) AS last_ingested
FROM heartbeats GROUP BY job_id, host;
INSERT INTO token_log_starts VALUES ('heartbeats', now64(3));
DROP TABLE heartbeats_0198;

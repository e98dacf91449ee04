-- Exactly-once ingest at constant cost (issue 14). The writer inserts each table's rows of a batch
-- as one block with an insert_deduplication_token derived from the batch's Kafka offsets; a batch
-- written again (a retry, or a re-read after a crash between write and commit) is then dropped by
-- ClickHouse itself, in the raw table and -- through deduplicate_blocks_in_dependent_materialized_views
-- -- in every rollup; a retry after a partial write fills exactly the views that were missed.
-- Non-replicated MergeTrees ignore tokens unless they keep a deduplication window (default 0): set it
-- on every raw table the writer inserts into and on every sum() rollup those tables feed. The window
-- counts inserts (blocks) per table, not time. host_presence, job_clock and host_clock hold min/max
-- only (a repeat changes nothing) and keep no window: a window also drops token-less repeats by data hash.
-- checkpoints and recovery_actions (0170, created after this migration on a fresh database) have no
-- window and no rollups: the writer checks a re-read batch's rows against everything they hold instead.
ALTER TABLE jobs MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE job_ranks MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE step_timings MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE heartbeats MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE gpu_stats MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE nic_counters MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE log_lines MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE process_exits MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE collective_traces MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE alert_events MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE phase_host_windows MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE job_phase_steps MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE job_steps MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE nic_windows MODIFY SETTING non_replicated_deduplication_window = 10000;

-- When each row was ingested: a batch re-read after a crash is judged against what was stored
-- *before* its first attempt (ingested_at < the attempt's intent), so it is cut into the same rows
-- and its token covers exactly what the first attempt wrote. (The other raw tables have it already.)
ALTER TABLE gpu_stats ADD COLUMN IF NOT EXISTS ingested_at DateTime64(3, 'UTC') DEFAULT now64(3);
ALTER TABLE log_lines ADD COLUMN IF NOT EXISTS ingested_at DateTime64(3, 'UTC') DEFAULT now64(3);
ALTER TABLE process_exits ADD COLUMN IF NOT EXISTS ingested_at DateTime64(3, 'UTC') DEFAULT now64(3);
ALTER TABLE collective_traces ADD COLUMN IF NOT EXISTS ingested_at DateTime64(3, 'UTC') DEFAULT now64(3);

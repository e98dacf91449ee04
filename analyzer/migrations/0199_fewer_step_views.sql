-- Two materialised views fewer on step_timings (issue 26): each cost every step insert a pass over its
-- rows and a block of its own, 30-80 ms of a 100k-row insert of ~480 ms with all eight (bench/RESULTS.md,
-- 2026-12-02).
--
-- job_phase_steps goes: nothing reads it. The MFU drift attribution and the job timelines take each
-- phase's time per step from job_step_runs (phase_ms, phase_n; 0130), which also keeps a re-run step's
-- runs apart.
--
-- job_step_spans becomes a view over job_step_runs, as job_clock became one over host_clock (0196): per
-- job and 10-second bucket, the least and greatest step, the first and last timestamp and the rows are
-- the same min / max / sum over that bucket's job_step_runs rows (one per step in it). The epoch fold
-- reads a job's buckets of a time range: the engine pushes `job_id` and `bucket` into the view, the
-- partition (the bucket's day) bounds the parts it reads, and a minmax index on `bucket` the granules
-- within them (job_step_runs sorts by job, step, bucket: a job's steps and buckets rise together, so a
-- granule holds a short span of buckets; without the index a read of the last minutes would read every
-- row of the job's day). Folding a job from its first bucket (a restart, a replay) reads every
-- job_step_runs row of the job, one per step and bucket, where the rollup held one per bucket.
--
-- Idempotent, and safe beside a running ingest and detectors: the dropped views' targets go after them,
-- and the table is replaced by the view in one step (CREATE OR REPLACE), so a reader of job_step_spans
-- finds one or the other. The rollups that stay keep their deduplication (a view's block token names
-- the view, not its neighbours).
DROP VIEW IF EXISTS job_phase_steps_mv;
DROP TABLE IF EXISTS job_phase_steps;
ALTER TABLE job_step_runs ADD INDEX IF NOT EXISTS bucket_minmax bucket TYPE minmax GRANULARITY 1;
ALTER TABLE job_step_runs MATERIALIZE INDEX bucket_minmax;
DROP VIEW IF EXISTS job_step_spans_mv;
CREATE OR REPLACE VIEW job_step_spans AS
SELECT job_id, bucket, min(step) AS min_step, max(step) AS max_step, min(first_ts) AS first_ts,
       max(last_ts) AS last_ts, sum(ranks) AS rows
FROM job_step_runs
GROUP BY job_id, bucket;

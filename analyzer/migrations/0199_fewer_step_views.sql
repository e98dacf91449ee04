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
-- reads a job's buckets of a time range; the engine pushes `job_id` and `bucket` into the view, and the
-- partition of job_step_runs (the bucket's day) bounds the rows it reads to that day's.
--
-- Idempotent; an ingest may run meanwhile (an insert either feeds the dropped views or finds them gone;
-- job_step_runs holds every row the view reads, exactly once: 0197).
DROP VIEW IF EXISTS job_phase_steps_mv;
DROP TABLE IF EXISTS job_phase_steps;
DROP VIEW IF EXISTS job_step_spans_mv;
DROP TABLE IF EXISTS job_step_spans;
CREATE VIEW IF NOT EXISTS job_step_spans AS
SELECT job_id, bucket, min(step) AS min_step, max(step) AS max_step, min(first_ts) AS first_ts,
       max(last_ts) AS last_ts, sum(ranks) AS rows
FROM job_step_runs
GROUP BY job_id, bucket;

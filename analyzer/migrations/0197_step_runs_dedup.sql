-- job_step_runs and job_step_spans (0130) sum their rows, but 0140 gave the deduplication window
-- only to the rollups that existed then: a batch written again under its token (a retry of an
-- insert that had landed, a re-cut after a crash) was dropped from step_timings and still summed
-- into these two, so a window's step count (analyzer/detect/kept.py), a run's rows and its MFU
-- sums counted that batch twice. With the window, a repeated block is dropped here too.
ALTER TABLE job_step_runs MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE job_step_spans MODIFY SETTING non_replicated_deduplication_window = 10000;

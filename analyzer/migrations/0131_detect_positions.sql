-- How far the live detector loop has judged each job (the last evaluated instant of event
-- time), so an analyzer that restarts resumes where it stopped and judges every instant it
-- missed instead of jumping to the newest data. Written after the turn's alerts are published.
CREATE TABLE IF NOT EXISTS detect_positions (
    job_id LowCardinality(String),
    position DateTime64(3, 'UTC'),
    updated DateTime64(3, 'UTC')
) ENGINE = ReplacingMergeTree(updated)
ORDER BY job_id;

-- job_clock becomes a view over host_clock (issue 26: fewer rollup views on the hot tables). Its three
-- materialised views (one on each of step_timings, heartbeats, nic_counters) computed per insert what
-- host_clock already holds per host and source: the job's min / max over those three sources is the same
-- min / max over host_clock's rows of them. Each view costs every insert into its table a block of its own
-- (~50 ms of a 100k-row step insert, bench/RESULTS.md); reading job_clock now groups host_clock's rows of
-- the job (a few per host). Idempotent: a rerun drops and recreates the view.
DROP VIEW IF EXISTS job_clock_hb_mv;
DROP VIEW IF EXISTS job_clock_steps_mv;
DROP VIEW IF EXISTS job_clock_nic_mv;
DROP TABLE IF EXISTS job_clock;
CREATE VIEW IF NOT EXISTS job_clock AS
SELECT job_id, min(first_ts) AS first_ts, max(last_ts) AS last_ts, max(last_ingested) AS last_ingested
FROM host_clock
WHERE source IN ('step', 'heartbeat', 'nic')
GROUP BY job_id;

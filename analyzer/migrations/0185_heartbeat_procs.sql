-- The training processes' CPU and memory on a host, per heartbeat (sums over the processes the
-- agent tracks): what the resource advisor (analyzer/advisor) reads to flag hot hosts.
ALTER TABLE heartbeats ADD COLUMN IF NOT EXISTS procs_cpu_pct Nullable(Float64) AFTER procs_running;
ALTER TABLE heartbeats ADD COLUMN IF NOT EXISTS procs_rss_mib Nullable(Float64) AFTER procs_cpu_pct;

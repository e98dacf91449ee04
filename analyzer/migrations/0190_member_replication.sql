-- What each node agent's latest `member` report says of its in-memory snapshot replication (the
-- counters since the agent started: copies pushed to its buddy and staged from peers, their bytes,
-- the copies refused by reason, the newest step its buddy holds) and, for a failed command, the
-- hardware error its ranks printed (`fault`): the Recovery page's agents table reads them.
ALTER TABLE recovery_members ADD COLUMN IF NOT EXISTS fault LowCardinality(String) DEFAULT '' AFTER reason;
ALTER TABLE recovery_members ADD COLUMN IF NOT EXISTS repl_buddy LowCardinality(String) DEFAULT '' AFTER fault;
ALTER TABLE recovery_members ADD COLUMN IF NOT EXISTS repl_pushed UInt64 DEFAULT 0 AFTER repl_buddy;
ALTER TABLE recovery_members ADD COLUMN IF NOT EXISTS repl_staged UInt64 DEFAULT 0 AFTER repl_pushed;
ALTER TABLE recovery_members ADD COLUMN IF NOT EXISTS repl_pushed_bytes UInt64 DEFAULT 0 AFTER repl_staged;
ALTER TABLE recovery_members ADD COLUMN IF NOT EXISTS repl_staged_bytes UInt64 DEFAULT 0 AFTER repl_pushed_bytes;
ALTER TABLE recovery_members ADD COLUMN IF NOT EXISTS repl_refused Map(LowCardinality(String), UInt64) AFTER repl_staged_bytes;
ALTER TABLE recovery_members ADD COLUMN IF NOT EXISTS repl_last_step Nullable(UInt64) AFTER repl_refused;

-- What the Recovery page needs beyond 0170, from the same `recovery` topic.
-- `recovery_actions` gains the fields that tie a step to its recovery and time it: the
-- incident (the recovery's id), who acted (controller, agent:<host>, user:<name>), the agent
-- command, the generation, when the step started and how long it took, dry-run.
ALTER TABLE recovery_actions ADD COLUMN IF NOT EXISTS incident_id String DEFAULT '';
ALTER TABLE recovery_actions ADD COLUMN IF NOT EXISTS actor LowCardinality(String) DEFAULT '';
ALTER TABLE recovery_actions ADD COLUMN IF NOT EXISTS command_id String DEFAULT '';
ALTER TABLE recovery_actions ADD COLUMN IF NOT EXISTS generation Nullable(UInt32);
ALTER TABLE recovery_actions ADD COLUMN IF NOT EXISTS started_at Nullable(DateTime64(3, 'UTC'));
ALTER TABLE recovery_actions ADD COLUMN IF NOT EXISTS duration_ms Nullable(Float64);
ALTER TABLE recovery_actions ADD COLUMN IF NOT EXISTS dry_run UInt8 DEFAULT 0;

-- How each recovery ended (`outcome` events): where its time went and what it cost.
-- One row per incident (the latest outcome wins on merge; readers take argMax by ts).
CREATE TABLE IF NOT EXISTS recovery_outcomes (
    event_id String,
    ts DateTime64(3, 'UTC'),
    job_id LowCardinality(String),
    incident_id String,
    result LowCardinality(String),
    category LowCardinality(String),
    cause LowCardinality(String),
    first_sign Nullable(DateTime64(3, 'UTC')),
    detected Nullable(DateTime64(3, 'UTC')),
    resumed_at Nullable(DateTime64(3, 'UTC')),
    detect_s Nullable(Float64),
    decide_s Nullable(Float64),
    pause_s Nullable(Float64),
    diagnose_s Nullable(Float64),
    restart_s Nullable(Float64),
    checkpoint_load_s Nullable(Float64),
    total_s Nullable(Float64),
    checkpoint_step Nullable(UInt64),
    last_step Nullable(UInt64),
    steps_lost Nullable(UInt64),
    first_step Nullable(UInt64),
    generation Nullable(UInt32),
    cordoned Array(String),
    hosts Array(String),
    reason String,
    ingested_at DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = ReplacingMergeTree(ts)
PARTITION BY toYYYYMM(ts)
ORDER BY (job_id, incident_id)
TTL toDateTime(ts) + INTERVAL {ttl_days} DAY;

-- The latest `member` report of each node agent of a recovery-controlled job (state, progress,
-- median step time). Agents re-announce every few seconds: ReplacingMergeTree(ts) keyed by
-- (job, host) keeps one row per agent, so reading it costs the number of agents, not history.
CREATE TABLE IF NOT EXISTS recovery_members (
    event_id String,
    ts DateTime64(3, 'UTC'),
    job_id LowCardinality(String),
    host LowCardinality(String),
    state LowCardinality(String),
    since Nullable(DateTime64(3, 'UTC')),
    generation UInt32,
    node_rank Nullable(UInt32),
    spare UInt8,
    started_at Nullable(DateTime64(3, 'UTC')),
    first_step Nullable(UInt64),
    first_step_at Nullable(DateTime64(3, 'UTC')),
    last_step Nullable(UInt64),
    last_step_at Nullable(DateTime64(3, 'UTC')),
    steps UInt64,
    step_ms Nullable(Float64),
    reason String,
    ingested_at DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = ReplacingMergeTree(ts)
PARTITION BY tuple()
ORDER BY (job_id, host)
TTL toDateTime(ts) + INTERVAL {ttl_days} DAY;

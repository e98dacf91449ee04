-- Issue 10: per-rank exits, the hang watchdog's Flight Recorder extras, and incidents.
-- process_exits: when the rank's own fatal error was printed, and the launcher's own exit (not a rank).
ALTER TABLE process_exits ADD COLUMN IF NOT EXISTS failed_at Nullable(DateTime64(3, 'UTC'));
ALTER TABLE process_exits ADD COLUMN IF NOT EXISTS launcher UInt8 DEFAULT 0;

-- collective_traces: the rank's process groups (name -> global ranks), its last step, what triggered
-- the dump, where its training thread was, and `pg_tail`: per process group the newest few
-- collectives in a compact JSON (what the hang detector reads instead of every entry).
ALTER TABLE collective_traces ADD COLUMN IF NOT EXISTS group_ranks Map(String, Array(UInt32));
ALTER TABLE collective_traces ADD COLUMN IF NOT EXISTS trigger LowCardinality(String) DEFAULT '';
ALTER TABLE collective_traces ADD COLUMN IF NOT EXISTS step Nullable(UInt64);
ALTER TABLE collective_traces ADD COLUMN IF NOT EXISTS stack String DEFAULT '';
ALTER TABLE collective_traces ADD COLUMN IF NOT EXISTS pg_tail String DEFAULT '';

-- Incident events (every open/update/resolve) as published on the incidents topic, ingested back.
-- `incidents_current` folds them into one row per incident (its latest event).
CREATE TABLE IF NOT EXISTS incident_events (
    event_id String,
    ts DateTime64(3, 'UTC'),
    job_id LowCardinality(String),
    host LowCardinality(String),
    incident_id String,
    category LowCardinality(String),
    cause LowCardinality(String),
    status LowCardinality(String),
    severity LowCardinality(String),
    confidence LowCardinality(String),
    summary String,
    culprit_host String,
    culprit_rank Nullable(UInt32),
    culprits String,
    victims String,
    victim_ranks Array(UInt32),
    alerts Array(String),
    first_sign DateTime64(3, 'UTC'),
    detected DateTime64(3, 'UTC'),
    evidence String,
    ingested_at DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (job_id, incident_id, ts, event_id)
TTL toDateTime(ts) + INTERVAL {ttl_days} DAY;

CREATE VIEW IF NOT EXISTS incidents_current AS
SELECT job_id, incident_id,
       argMax(category, ts) AS category, argMax(cause, ts) AS cause, argMax(status, ts) AS status,
       argMax(severity, ts) AS severity, argMax(confidence, ts) AS confidence, argMax(summary, ts) AS summary,
       argMax(host, ts) AS host, argMax(culprit_host, ts) AS culprit_host, argMax(culprit_rank, ts) AS culprit_rank,
       argMax(culprits, ts) AS culprits, argMax(victims, ts) AS victims, argMax(victim_ranks, ts) AS victim_ranks,
       argMax(alerts, ts) AS alerts, argMax(first_sign, ts) AS first_sign, min(detected) AS detected,
       argMax(evidence, ts) AS evidence, max(ts) AS updated
FROM incident_events
GROUP BY job_id, incident_id;

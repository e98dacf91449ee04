-- The read side verifies (issue 48): every decision the ingest stores says whether its signature passed the same
-- gate the controller and the notifier run (`vigil.signing.policy.check`), and keeps the signature. A forged
-- decision (unsigned, or signed by a role that may not make it) is stored, flagged `verified = 0`, so it can be
-- shown as an unverified claim and investigated; detectors, views and the dashboard read verified rows only
-- (a forged `pause ... started` no longer hides a job's crashes). Rows stored before this migration were never
-- checked: they default to verified, as they were read until now. Metadata only: no stored part is rewritten.
ALTER TABLE alert_events ADD COLUMN IF NOT EXISTS verified UInt8 DEFAULT 1;
ALTER TABLE alert_events ADD COLUMN IF NOT EXISTS signature String DEFAULT '';
ALTER TABLE incident_events ADD COLUMN IF NOT EXISTS verified UInt8 DEFAULT 1;
ALTER TABLE incident_events ADD COLUMN IF NOT EXISTS signature String DEFAULT '';
ALTER TABLE recovery_actions ADD COLUMN IF NOT EXISTS verified UInt8 DEFAULT 1;
ALTER TABLE recovery_actions ADD COLUMN IF NOT EXISTS signature String DEFAULT '';
ALTER TABLE recovery_outcomes ADD COLUMN IF NOT EXISTS verified UInt8 DEFAULT 1;
ALTER TABLE recovery_outcomes ADD COLUMN IF NOT EXISTS signature String DEFAULT '';
ALTER TABLE advice_events ADD COLUMN IF NOT EXISTS verified UInt8 DEFAULT 1;
ALTER TABLE advice_events ADD COLUMN IF NOT EXISTS signature String DEFAULT '';
-- The current alerts and incidents are the verified ones.
CREATE OR REPLACE VIEW alerts_current AS
SELECT job_id, fingerprint,
       argMax(alert, ts) AS alert, argMax(subject, ts) AS subject, argMax(host, ts) AS host,
       argMax(status, ts) AS status, argMax(severity, ts) AS severity, argMax(summary, ts) AS summary,
       min(first_seen) AS first_seen, max(last_seen) AS last_seen, argMax(evidence, ts) AS evidence,
       max(ts) AS updated
FROM alert_events
WHERE verified = 1
GROUP BY job_id, fingerprint;
CREATE OR REPLACE VIEW incidents_current AS
SELECT job_id, incident_id,
       argMax(category, ts) AS category, argMax(cause, ts) AS cause, argMax(status, ts) AS status,
       argMax(severity, ts) AS severity, argMax(confidence, ts) AS confidence, argMax(summary, ts) AS summary,
       argMax(host, ts) AS host, argMax(culprit_host, ts) AS culprit_host, argMax(culprit_rank, ts) AS culprit_rank,
       argMax(culprits, ts) AS culprits, argMax(victims, ts) AS victims, argMax(victim_ranks, ts) AS victim_ranks,
       argMax(alerts, ts) AS alerts, argMax(first_sign, ts) AS first_sign, min(detected) AS detected,
       argMax(evidence, ts) AS evidence, max(ts) AS updated
FROM incident_events
WHERE verified = 1
GROUP BY job_id, incident_id;
-- The agents' member reports are attested facts: stored with whether the gate verified them, like decisions.
ALTER TABLE recovery_members ADD COLUMN IF NOT EXISTS verified UInt8 DEFAULT 1;
ALTER TABLE recovery_members ADD COLUMN IF NOT EXISTS signature String DEFAULT '';

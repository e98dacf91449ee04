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
-- The current alerts and incidents are the verified ones, each its latest event by the one rule every fold uses
-- (vigil.contract.latest.SQL_ORDER, the key `k`): the later event time, then an ended event over a running one, then
-- the greater event_id. argMax(x, ts) left a firing and a resolved event at the same time to chance, where the
-- notifier took the resolved one (issue 47).
CREATE OR REPLACE VIEW alerts_current AS
SELECT job_id, fingerprint,
       argMax(alert, k) AS alert,
       argMax(subject, k) AS subject,
       argMax(host, k) AS host,
       argMax(status, k) AS status,
       argMax(severity, k) AS severity,
       argMax(summary, k) AS summary,
       min(first_seen) AS first_seen, max(last_seen) AS last_seen,
       argMax(evidence, k) AS evidence,
       max(ts) AS updated
FROM (SELECT *, (ts, status = 'resolved', event_id) AS k FROM alert_events WHERE verified = 1)
GROUP BY job_id, fingerprint;

CREATE OR REPLACE VIEW incidents_current AS
SELECT job_id, incident_id,
       argMax(category, k) AS category,
       argMax(cause, k) AS cause,
       argMax(status, k) AS status,
       argMax(severity, k) AS severity,
       argMax(confidence, k) AS confidence,
       argMax(summary, k) AS summary,
       argMax(host, k) AS host,
       argMax(culprit_host, k) AS culprit_host,
       argMax(culprit_rank, k) AS culprit_rank,
       argMax(culprits, k) AS culprits,
       argMax(victims, k) AS victims,
       argMax(victim_ranks, k) AS victim_ranks,
       argMax(alerts, k) AS alerts,
       argMax(first_sign, k) AS first_sign,
       min(detected) AS detected,
       argMax(evidence, k) AS evidence,
       max(ts) AS updated
FROM (SELECT *, (ts, status = 'resolved', event_id) AS k FROM incident_events WHERE verified = 1)
GROUP BY job_id, incident_id;
-- The agents' member reports are attested facts: stored with whether the gate verified them, like decisions.
ALTER TABLE recovery_members ADD COLUMN IF NOT EXISTS verified UInt8 DEFAULT 1;
ALTER TABLE recovery_members ADD COLUMN IF NOT EXISTS signature String DEFAULT '';

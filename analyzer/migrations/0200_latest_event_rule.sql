-- alerts_current and incidents_current take each alert's (incident's) latest event by the one rule every fold
-- uses (vigil.contract.latest.SQL_ORDER): the later event time, then an ended event over a running one, then
-- the greater event_id (the key `k`). argMax(x, ts) left a firing and a resolved event at the same time to chance, where the
-- notifier took the resolved one (issue 47). Idempotent: a rerun replaces the views.
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
FROM (SELECT *, (ts, status = 'resolved', event_id) AS k FROM alert_events)
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
FROM (SELECT *, (ts, status = 'resolved', event_id) AS k FROM incident_events)
GROUP BY job_id, incident_id;

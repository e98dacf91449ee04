"""On-call notifications: alerts and incidents become webhooks that arrive once, signed, in order.

The pipeline, one module each:

    settings    receivers (secrets from settings or files), routes, grouping times, retries
    state       fold of the alerts, incidents and silences topics (what fires, what is muted)
    matchers    labels of alerts and incidents, glob matchers over them (routes and silences share them)
    routing     the routes of the config file: first match wins unless `continue`; a default route
    classify    per alert event, once: labels, routes and group keys, candidate silences
    grouping    incidents with their alerts (victims inhibited into them); other alerts by route + group key
    silences    matchers with a time window and a reason, from `vigil silence add`
    planner     what is due for each (group, receiver) against the notification log
    decider     state + grouping + planner + payload as one pure object (what the tests drive)
    payload     the versioned notification document (links.py: the dashboard page that explains it)
    formats     the document as webhook, Slack, PagerDuty Events v2 or Alertmanager payload
    outbox      decisions and delivery states in ClickHouse (the delivery log is the retry queue)
    dispatch    per-receiver lanes: in order, retried with backoff, bounded
    sender      one HTTP attempt, signed (signing.py); its verdict
    service     the above as one service (`vigil notify run`; hosting.py: hosted by `vigil up`)
    selftest    what `vigil notify test RECEIVER` sends

Errors: settings problems raise `vigil.settings.SettingsError` (naming the setting, never a
secret); delivery problems are never raised out of the service: they are recorded in the
delivery log and shown by `vigil notify status` and the dashboard's Notifications page. The
one error of its own, raised by `vigil notify test` when a receiver refuses:

    VigilError
    └── NotificationRefused    a receiver answered a test notification with an error
"""

from vigil.errors import VigilError


class NotificationRefused(VigilError):
    """A receiver did not accept a notification; the message names the receiver and the answer."""

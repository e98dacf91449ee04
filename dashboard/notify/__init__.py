"""On-call notifications: alerts and incidents become webhooks that arrive once, signed, in order.

The pipeline, one module each:

    state       fold of the alerts, incidents and silences topics (what fires, what is muted)
    grouping    incidents with their alerts (victims inhibited into them); other alerts by route + group key
    routing     the routes of the config file: first match wins unless `continue`; a default route
    silences    matchers with a time window and a reason, from `vigil silence add`
    planner     what is due for each (group, receiver) against the notification log
    payload     the versioned notification document; formats: webhook, Slack, PagerDuty, Alertmanager
    outbox      decisions and delivery states in ClickHouse (the delivery log is the retry queue)
    dispatch    per-receiver lanes: in order, retried with backoff, bounded
    sender      one HTTP attempt, signed (signing.py); its verdict
    service     the above as one service (`vigil notify run`, hosted by `vigil up`)

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

"""The error tree of vigil, drawn whole: every error vigil raises on purpose derives from `VigilError`.

    VigilError
    ├── SettingsError (also ValueError)    a bad setting value; names the setting (vigil.settings)
    ├── Unreachable                        a broker / ClickHouse / service did not answer
    │   ├── OffloadLost                    the ingest's decode child died with a batch (vigil.kafka.failures)
    │   └── ReadIncomplete                 a topic could not be read to its end in time (vigil.kafka.reader)
    ├── DeliveryError                      Kafka did not accept events in time
    ├── MigrationError                     a ClickHouse migration failed
    ├── StackError                         the embedded stack could not start or stop
    ├── ConsumerFailed                     a non-transient error stopped a consumer; nothing committed (vigil.kafka.failures)
    ├── KeyStoreError                      a signing key is missing, unreadable or malformed (vigil.signing.keys)
    ├── RegistryError                      the local cordon registry could not be read or written (vigil.cordons)
    ├── RecoveryError                      the recovery controller's errors (vigil.recovery.errors)
    │   ├── BackendError                   a node backend call failed; names the host and backend
    │   │   └── BackendTimeout             the backend did not answer in time: the outcome is unknown
    │   │       └── CliTimeout             a Slurm command ran past its timeout (vigil.recovery.backends.slurm.cli)
    │   └── NotFound                       no such host, job or recovery
    ├── StoreError                         a dashboard query failed; says what could not load (vigil.dashboard.store)
    ├── ActionRefused                      a dashboard action was not allowed; nothing published (vigil.dashboard.actions)
    └── NotificationRefused                a receiver did not accept a notification (vigil.notify)

The training side (timer, data, checkpoint) imports nothing of vigil's kernel, so its errors form their own small
tree (`vigil.recovery.checkpoint.errors`). tests/backbone/test_errors.py fails when this drawing and the classes
differ. Messages are one line that names the setting or address involved, so the CLI can print them as they are,
without a traceback; `one_line` makes such a line of any exception (a driver's multi-line error, an empty message).
"""

from __future__ import annotations


class VigilError(Exception):
    """Base of every error vigil raises on purpose."""


class Unreachable(VigilError):
    """A dependency (Kafka, ClickHouse, the `vigil up` control port) did not answer."""


class DeliveryError(VigilError):
    """Events could not be handed to Kafka (buffer full too long, or delivery failed)."""


class MigrationError(VigilError):
    """A ClickHouse migration failed; the message names it."""


class StackError(VigilError):
    """The embedded stack could not start, or is not running when it should be."""


def one_line(exc: BaseException, limit: int = 300) -> str:
    """The first non-empty line of `exc`'s message (cut to `limit`), or its type name when it has none."""
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()[:limit]
    return type(exc).__name__

"""The error tree shared by vigil's services.

    VigilError
    ├── SettingsError (also ValueError)   bad setting value (vigil.settings)
    ├── Unreachable                       a broker / ClickHouse / service did not answer
    ├── DeliveryError                     Kafka did not accept events in time
    ├── MigrationError                    a ClickHouse migration failed
    └── StackError                        the embedded stack could not start or stop

Messages are one line that names the setting or address involved, so the CLI can
print them as they are, without a traceback; `one_line` makes such a line of any
exception (a driver's multi-line error, an empty message).
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

"""How a consumer's failures are told apart: transient ones are retried, anything else stops it.

`is_transient` is the one rule: the store or the broker unreachable or busy, a timeout. Every other failure of a
write, dead-letter write or commit raises `ConsumerFailed` (the cause chained) and nothing more is committed.
"""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from vigil.errors import DeliveryError, Unreachable, VigilError


class ConsumerFailed(VigilError):
    """A non-transient error stopped the consumer; nothing of the failed batch was committed."""


class OffloadLost(Unreachable):
    """The offload that decoded a batch's records can no longer give them as objects (its process is gone): the
    batch is retried with every record decoded here."""


_TRANSIENT_KAFKA = {KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN,
                    KafkaError.REQUEST_TIMED_OUT, KafkaError.COORDINATOR_NOT_AVAILABLE,
                    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                    KafkaError.NETWORK_EXCEPTION, KafkaError.REBALANCE_IN_PROGRESS}


def is_transient(exc: BaseException) -> bool:
    """A failure that retrying later can cure: the store or the broker unreachable or busy, a timeout."""
    if isinstance(exc, Unreachable | DeliveryError | ConnectionError | TimeoutError):
        return True
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        err: KafkaError = exc.args[0]
        return bool(err.retriable()) or err.code() in _TRANSIENT_KAFKA
    return False

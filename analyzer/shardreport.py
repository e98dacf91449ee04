"""What each detect shard says of itself on the broker, and how `vigil status` reads every shard back from there.

A detect shard writes a lease record to each `detect-jobs` partition it owns (who it is, the partitions and jobs it
owns, when its last turn ended, how far behind its most lagging job is) and commits, in the `vigil-detect` group,
that partition's offset as the record's own: the group's committed offsets are then a pointer, per partition, to the
latest word of the shard that held it. It does so when its assignment changed and every `every_s` otherwise, so a
record is small and the reader fetches exactly one per partition (never the log).

`read_shards` follows the pointers: one record per partition, the latest holder of each. A shard killed without
leaving keeps its partitions in the records until a survivor is assigned them and writes its own; its `age_s` grows
meanwhile, which is what tells an operator it is gone. Nothing here decides: it is a view for people.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from vigil.analyzer.shard import DETECT_GROUP, DETECT_TOPIC
from vigil.kafka.admin import client_config
from vigil.settings import VigilSettings

SHOWN_JOBS = 50  # a record names at most this many jobs (and counts the rest)


@dataclass(frozen=True, kw_only=True)
class ShardReport:
    shard: str  # host:pid of the analyzer
    partitions: list[int]
    jobs: list[str]
    jobs_total: int
    turn_at: float  # wall time the last detect turn ended (0: none yet)
    behind_s: float  # event time its most lagging job waits behind its judgeable end
    backlog: int  # instants waiting after that turn
    at: float  # wall time of this record

    def encode(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> ShardReport:
        doc = json.loads(raw)
        return cls(shard=str(doc["shard"]), partitions=[int(p) for p in doc["partitions"]],
                   jobs=[str(j) for j in doc["jobs"]], jobs_total=int(doc["jobs_total"]),
                   turn_at=float(doc["turn_at"]), behind_s=float(doc["behind_s"]), backlog=int(doc["backlog"]),
                   at=float(doc["at"]))


def read_shards(settings: VigilSettings, bootstrap: str, timeout: float = 10.0,
                now: float | None = None) -> list[dict[str, Any]]:
    """Every shard holding a partition by the latest records, with the partitions it held last and its figures."""
    topic = settings.topic(DETECT_TOPIC)
    consumer = Consumer({**client_config(settings, bootstrap), "group.id": settings.topic(DETECT_GROUP),
                         "enable.auto.commit": False, "client.id": f"vigil-status-{uuid.uuid4().hex[:6]}"})
    try:
        meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if meta is None or meta.error is not None:
            return []
        committed = consumer.committed([TopicPartition(topic, p) for p in meta.partitions], timeout=timeout)
        pointers = {tp.partition: tp.offset for tp in committed if tp.offset >= 0 and tp.error is None}
        latest: dict[int, ShardReport] = {}
        if pointers:
            consumer.assign([TopicPartition(topic, p, off) for p, off in pointers.items()])
            deadline = time.monotonic() + timeout
            while len(latest) < len(pointers) and time.monotonic() < deadline:
                for msg in consumer.consume(num_messages=len(pointers), timeout=0.5):
                    part = int(msg.partition() or 0)
                    if msg.error() is None and part not in latest and msg.offset() == pointers.get(part):
                        try:
                            latest[part] = ShardReport.decode(msg.value() or b"")
                        except (ValueError, KeyError, TypeError):
                            pointers.pop(part, None)  # not a lease record: shown as nobody's
    except KafkaException:
        return []
    finally:
        consumer.close()
    return summarise(latest, time.time() if now is None else now)


def summarise(latest: dict[int, ShardReport], now: float) -> list[dict[str, Any]]:
    """Per shard: the partitions whose latest record is its own, and its own latest figures."""
    newest: dict[str, ShardReport] = {}
    held: dict[str, list[int]] = {}
    for part, rep in sorted(latest.items()):
        held.setdefault(rep.shard, []).append(part)
        if rep.shard not in newest or rep.at > newest[rep.shard].at:
            newest[rep.shard] = rep
    return [{"shard": name, "partitions": held[name], "jobs": rep.jobs, "jobs_total": rep.jobs_total,
             "last_turn_s_ago": round(now - rep.turn_at, 1) if rep.turn_at else None,
             "behind_s": rep.behind_s, "backlog": rep.backlog, "age_s": round(now - rep.at, 1)}
            for name, rep in sorted(newest.items())]

"""Ingest throughput in one run: broker raw consume vs the analyzer ingest, at 0 and 2M events stored.

Every leg reads step-timing events, 500 per record, as `vigil simulate` and the node agent
produce them, from the embedded broker (Tansu):

* raw consume: a plain confluent-kafka consumer counting records (no decoding): the broker's read, without
  librdkafka's 1 s queue backoff (`QUEUE_BACKOFF`), and with librdkafka's defaults as the earlier runs read it;
* engine insert: the same kind of events, decoded and built into columns beforehand (untimed), inserted
  into a migrated store as the writer inserts them (one token-deduplicated JSONColumns block per batch,
  rollups and all): the engine's own share with no per-event Python (the encode of the columns is in it),
  the ceiling of any decode path;
* analyzer ingest: BatchingConsumer -> fast decode -> ClickHouseWriter (intent, recent-id
  window, one token-deduplicated block per table) -> raw table + materialised rollups, commit
  after write; first into an empty store (600k stored at the end), then the same number of
  new events after the store was grown to 2M rows (history loaded in-engine, rollups and all):
  the cost per batch must not grow with what is stored;
* ClickHouse Kafka table engine (inside chdb): records as RawBLOB -> materialised view that
  counts events with JSONExtractArrayRaw (no validation, no dedup, no rollups).

    python bench/ingest_throughput.py [--events 600000] [--stored 2000000] [--decode-process auto|on|off] [--no-append]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import psutil
from analyzer_common import append_results, machine_info
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from vigil.analyzer.ingest import loop as ingest_loop
from vigil.analyzer.ingest.blocks import BlockInserter
from vigil.analyzer.ingest.columns import BUILDERS
from vigil.analyzer.ingest.loop import IngestLoop
from vigil.analyzer.settings import AnalyzerSettings
from vigil.app.components import migrate_all
from vigil.clickhouse.client import connect, open_client
from vigil.contract import ParallelCoords, StepTiming, encode_batch
from vigil.contract.fastwire import decode_fast
from vigil.errors import one_line
from vigil.kafka.admin import ensure_topics
from vigil.kafka.broker import EmbeddedBroker
from vigil.kafka.producer import EventProducer
from vigil.runtime import tune_gc
from vigil.settings import VigilSettings

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)  # inside the wire's 30 days, whenever it runs


def make_steps(n: int, hosts: int = 64, gpus: int = 8, first_step: int = 0) -> list[StepTiming]:
    ranks = hosts * gpus
    return [StepTiming(job_id="ingest", host=f"h{(i % ranks) // gpus:04d}", rank=i % ranks, local_rank=i % gpus,
                       world_size=ranks, coords=ParallelCoords(tp=i % gpus), step=first_step + i // ranks,
                       ts=T0 + timedelta(seconds=first_step + i // ranks), step_ms=1000.0,
                       phases={"forward": 300.0, "backward": 520.0, "optimizer": 60.0, "comm": 120.0}, mfu=0.42)
            for i in range(n)]


QUEUE_BACKOFF = {"fetch.queue.backoff.ms": 10}
"""The raw read's consumer without librdkafka's queue backoff: after a fetch that leaves more than
`queued.max.messages.kbytes` (64 MiB) in its local queue, the fetcher waits `fetch.queue.backoff.ms` (1 s by default)
before the next. One fetch of 500-event records (lz4, ~30 KB each) passes 64 MiB once decompressed (~210 KB
each), and a consumer that only counts drains that in milliseconds, then waits out the second: with the defaults
the "raw consume" of 600k events measured ~0.5 s of every call but the first (calls returning 394 and 322 records
after their 0.5 s timeout), 340-500 k events/s, the denominator of every earlier "share of raw consume"
(bench/RESULTS.md 2026-12-07)."""


def raw_consume(settings: VigilSettings, bootstrap: str, topic: str, records: int,
                conf: dict[str, int] | None = None) -> float:
    """Seconds for a plain consumer to read `records` records of `topic` (no decoding): the broker's read, unless
    `conf` gives it other settings (`{}`: librdkafka's defaults). Each call asks for at most the records still to
    come, so the last one returns with the last record instead of waiting out its timeout."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"raw-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
                  **(QUEUE_BACKOFF if conf is None else conf)})
    meta = c.list_topics(topic, timeout=10)
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.topics[topic].partitions])
    seen = 0
    start = time.perf_counter()
    while seen < records:
        for m in c.consume(min(500, records - seen), timeout=0.5):
            if m.error() is None:
                seen += 1
    elapsed = time.perf_counter() - start
    c.close()
    return elapsed


CHDB = f"chdb://{tempfile.mkdtemp(prefix='vigil-bench-i-')}"  # one engine per process: one path, two databases


def cpu_s(broker: psutil.Process | None) -> tuple[float, float]:
    """CPU seconds (user + system) so far of the analyzer (this process: the ingest's threads and the in-process
    engine's, and its decode child) and of the broker."""
    t = os.times()
    others = [p for p in psutil.Process().children() if broker is None or p.pid != broker.pid]
    own = t.user + t.system + sum(sum(p.cpu_times()[:2]) for p in others if p.is_running())
    return own, sum(broker.cpu_times()[:2]) if broker is not None else float("nan")


def analyzer_ingest(settings: VigilSettings, bootstrap: str, events: int, group: str, write_thread: bool = True,
                    broker: psutil.Process | None = None,
                    decode_process: bool | None = None) -> tuple[float, float, int, int, tuple[float, float]]:
    """(seconds in all, events/s after the first batch's commit, rows stored after, batches, CPU seconds per 100k
    events after that commit: this process, the broker) to ingest `events` new events of the topic with a fresh
    group: the first figure includes joining the group (seconds on the embedded broker), the others are steady."""
    client = connect(CHDB, database="vigil")
    migrate_all(client, 3650)
    loop = IngestLoop(settings=settings, analyzer=AnalyzerSettings(group_id=group, write_thread=write_thread,
                                                                  decode_process=decode_process),
                      bootstrap=bootstrap, client=open_client(CHDB),
                      producer=EventProducer(settings=settings, bootstrap=bootstrap))
    stop = threading.Event()
    t = threading.Thread(target=loop.run, args=(stop,))
    start = time.perf_counter()
    t.start()
    first: tuple[float, int] | None = None
    cpu0 = (0.0, 0.0)
    while loop.stats.events < events and not loop.failed:
        time.sleep(0.01)
        if first is None and loop.stats.events:
            first, cpu0 = (time.perf_counter(), loop.stats.events), cpu_s(broker)
    end, cpu1 = time.perf_counter(), cpu_s(broker)
    elapsed = end - start
    steady = (loop.stats.events - first[1]) / (end - first[0]) if first and end > first[0] else 0.0
    done = max(1, loop.stats.events - first[1]) if first else 1
    cpu = ((cpu1[0] - cpu0[0]) * 100_000 / done, (cpu1[1] - cpu0[1]) * 100_000 / done)
    stop.set()
    t.join(30)
    if loop.failed:
        raise SystemExit(loop.failed)
    rows = int(client.query("SELECT count() FROM step_timings").result_rows[0][0])
    st, w = loop.stats, loop.writer.seconds
    decoded = st.decode_s + getattr(loop.consumer.offload, "decode_s", 0.0)  # records decoded here, and into columns
    print(f"  {group}: {st.batches} batches, seconds: decode {decoded:.2f}, stage {w['stage']:.2f}, intent {w['intent']:.2f}, "
          f"prepare {w['prepare']:.2f}, insert {w['insert']:.2f}, commit {st.commit_s:.2f}; total {elapsed:.2f}", flush=True)
    return elapsed, steady, rows, loop.stats.batches, cpu


def engine_insert(events: int, block: int) -> tuple[float, float]:
    """(events/s, CPU s per 100k events of this process) inserting `events` step events in blocks of `block`, their
    columns built beforehand from fast-decoded events as the writer builds them: no per-event Python is timed."""
    client = connect(CHDB, database="engine_only")
    migrate_all(client, 3650)
    inserter = BlockInserter(open_client(CHDB, database="engine_only"))
    table, build = BUILDERS["step"]
    blocks = []
    for lo in range(0, events, block):
        made = make_steps(min(block, events - lo), first_step=lo // 512)
        blocks.append(build([e for i in range(0, len(made), 500) for e in decode_fast(encode_batch(made[i:i + 500])).events]))
    cpu0, start = time.process_time(), time.perf_counter()
    for i, cols in enumerate(blocks):
        inserter.insert(table, cols, f"engine-only-{uuid.uuid4().hex}-{i}")
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
    return events / wall, cpu * 100_000 / events


def grow_history(rows: int) -> float:
    """Store `rows` older step rows in-engine (through the rollups), as a long-running job's history."""
    client = connect(CHDB, database="vigil")
    start = time.perf_counter()
    for lo in range(0, rows, 500_000):
        n = min(500_000, rows - lo)
        client.command(f"""INSERT INTO step_timings (event_id, job_id, host, rank, local_rank, world_size, dp, tp, pp,
            step, ts, step_ms, phases, tokens, tflops, mfu, failed, dropped)
            SELECT concat('hist-', toString(number)), 'history', concat('h', leftPad(toString(intDiv(number % 512, 8)), 4, '0')),
                   number % 512, number % 8, 512, 0, number % 8, 0, intDiv(number, 512),
                   toDateTime64('2026-10-25 00:00:00', 3, 'UTC') + toIntervalSecond(intDiv(number, 512)), 1000.0,
                   map('forward', 300.0, 'backward', 520.0, 'optimizer', 60.0, 'comm', 120.0), NULL, NULL, 0.42, 0, 0
            FROM numbers({lo}, {n})""")
    return time.perf_counter() - start


def settle(timeout_s: float = 120.0) -> float:
    """Seconds until the engine runs no merge in the store (at most `timeout_s`): the history's own inserts leave
    merges behind that would otherwise share the 2 cores with the next leg, which is about history, not them."""
    client = connect(CHDB, database="vigil")
    start = time.perf_counter()
    while time.perf_counter() - start < timeout_s:
        if not int(client.query("SELECT count() FROM system.merges WHERE database = 'vigil'").result_rows[0][0]):
            break
        time.sleep(0.5)
    return time.perf_counter() - start


def kafka_engine(dsn: str, bootstrap: str, topic: str, records: int, wait_s: float = 30.0) -> tuple[float, int, str]:
    """(seconds, events seen, problem); chdb 4.4 fails to start the engine's consumers (see RESULTS.md),
    so `--engine-dsn http://...` points this leg at a ClickHouse server that can reach the broker."""
    client = connect(dsn, database=f"kbench_{uuid.uuid4().hex[:6]}", explicit=not dsn.startswith("chdb://"))
    client.command("CREATE TABLE sink (events UInt32, bytes UInt64) ENGINE = MergeTree ORDER BY tuple()")
    start = time.perf_counter()
    problem = ""
    try:
        client.command(f"""CREATE TABLE kq (raw String) ENGINE = Kafka SETTINGS kafka_broker_list = '{bootstrap}',
            kafka_topic_list = '{topic}', kafka_group_name = 'ch-{uuid.uuid4().hex[:6]}', kafka_format = 'RawBLOB',
            kafka_num_consumers = 1, kafka_max_block_size = 1000, kafka_flush_interval_ms = 200""")
    except Exception as exc:  # the table is created, but its background consumer is not
        problem = f"CREATE ... ENGINE = Kafka: {one_line(exc, 120)}"
    client.command("""CREATE MATERIALIZED VIEW kmv TO sink AS
        SELECT length(JSONExtractArrayRaw(raw, 'events')) AS events, length(raw) AS bytes FROM kq""")
    deadline = time.monotonic() + wait_s
    got = 0
    while got < records and time.monotonic() < deadline:
        time.sleep(0.1)
        got = int(client.query("SELECT count() FROM sink").result_rows[0][0])
    elapsed = time.perf_counter() - start
    events = int(client.query("SELECT sum(events) FROM sink").result_rows[0][0])
    if got < records:
        problem = (problem + "; " if problem else "") + f"{got} of {records} records after {wait_s:.0f} s"
    return elapsed, events, problem


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=600_000)
    ap.add_argument("--stored", type=int, default=2_000_000, help="rows stored before the second ingest leg")
    ap.add_argument("--no-write-thread", dest="write_thread", action="store_false",
                    help="write batches on the consumer's thread (no decode/insert overlap)")
    ap.add_argument("--decode-process", choices=("auto", "on", "off"), default="auto",
                    help="the ingest's decode child: as the analyzer decides by its CPUs (auto: on with 3 or more), "
                    "always, or never")
    ap.add_argument("--no-decode-process", dest="decode_process", action="store_const", const="off",
                    help="the same as --decode-process off")
    ap.add_argument("--no-append", dest="append", action="store_false", help="print only; do not add to bench/RESULTS.md")
    ap.add_argument("--engine-dsn", default=CHDB, help="ClickHouse for the Kafka-engine leg (default: the in-process "
                    "chdb, whose Kafka engine does not run); e.g. http://user:pass@localhost:8123")
    ap.add_argument("--engine-bootstrap", default=None,
                    help="the broker as the ClickHouse server reaches it (default: the embedded broker's address)")
    args = ap.parse_args()

    def share(rate: float, raw_seconds: float, defaults_seconds: float) -> str:
        return (f"{rate * raw_seconds / n * 100:.0f} % of raw consume ({rate * defaults_seconds / n * 100:.0f} % of the "
                "defaults' reading)")

    args.decode_process = {"auto": None, "on": True, "off": False}[args.decode_process]
    child = ingest_loop.decode_process(args.decode_process)
    load0 = os.getloadavg()
    broker = EmbeddedBroker()
    bootstrap = broker.start()
    n = args.events
    try:
        first = VigilSettings(kafka_bootstrap=bootstrap, topic_prefix="bench.", topic_partitions=4)
        second = VigilSettings(kafka_bootstrap=bootstrap, topic_prefix="bench2.", topic_partitions=4)
        for s in (first, second):
            ensure_topics(s, bootstrap)
        producer = EventProducer(settings=first, bootstrap=bootstrap, batch_events=500)
        evs = make_steps(n)
        start = time.perf_counter()
        records = producer.send(evs)
        producer.flush(120)
        produce_s = time.perf_counter() - start
        del evs  # the analyzer's process holds no producer's events
        later = EventProducer(settings=second, bootstrap=bootstrap, batch_events=500)
        later.send(make_steps(n, first_step=n // 512 + 10))
        later.flush(120)
        topic = first.topic("steps")
        raw_s = raw_consume(first, bootstrap, topic, records)
        raw_defaults_s = raw_consume(first, bootstrap, topic, records, {})
        tune_gc()  # as `vigil up` and `vigil analyzer` run it
        eng_rate, eng_cpu = engine_insert(min(n, 300_000), AnalyzerSettings().batch_events)
        bproc = psutil.Process(broker.pid) if broker.pid else None
        ing_s, steady, rows, batches, cpu = analyzer_ingest(first, bootstrap, n, f"ing-{uuid.uuid4().hex[:6]}",
                                                            args.write_thread, bproc, args.decode_process)
        grow_s = grow_history(max(0, args.stored - rows))
        settle_s = settle()
        raw2_s = raw_consume(second, bootstrap, second.topic("steps"), records)
        raw2_defaults_s = raw_consume(second, bootstrap, second.topic("steps"), records, {})
        ing2_s, steady2, rows2, batches2, cpu2 = analyzer_ingest(second, bootstrap, n, f"ing-{uuid.uuid4().hex[:6]}",
                                                                 args.write_thread, bproc, args.decode_process)
        ke_s, ke_events, ke_problem = kafka_engine(args.engine_dsn, args.engine_bootstrap or bootstrap, topic, records)
    finally:
        broker.stop()
    load1 = os.getloadavg()
    per_batch = AnalyzerSettings().batch_events * 1000  # ms per batch = this / events per second
    lines = [f"{n:,} step events per leg in {records:,} columnar records (as EventProducer writes steps) of <= 500 "
             f"events (~{n / records:.0f} per record), "
             f"4 partitions, batches of <= {AnalyzerSettings().batch_events:,} events, "
             f"{'decoded by the decode process' if child else 'decoded on the consumer thread (no decode process)'}. Load average (1/5/15 min) at start "
             f"{load0[0]:.1f}/{load0[1]:.1f}/{load0[2]:.1f}, at end {load1[0]:.1f}/{load1[1]:.1f}/{load1[2]:.1f} "
             "(2 cores shared with other sessions' test runs).",
             "", "| path | stored before -> after | seconds (incl. group join) | events/s | steady events/s | "
             "ms per batch (steady) | CPU s per 100k events (steady): analyzer (with its decode process) / broker | notes |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |",
             f"| produce (EventProducer, encode + send) | | {produce_s:.2f} | {n / produce_s:,.0f} | | | | |",
             f"| broker raw consume (no decode) | | {raw_s:.2f} | {n / raw_s:,.0f} | | | | ceiling |",
             f"| broker raw consume, librdkafka's defaults (its 1 s queue backoff) | | {raw_defaults_s:.2f} | "
             f"{n / raw_defaults_s:,.0f} | | | | as the runs before 2026-12-07 read the ceiling |",
             f"| engine insert of columns built beforehand (no per-event Python) | | | | {eng_rate:,.0f} | "
             f"{per_batch / max(1.0, eng_rate):,.0f} | {eng_cpu:.2f} / - | {share(eng_rate, raw_s, raw_defaults_s)}: "
             f"the ceiling of any decode path |",
             f"| analyzer ingest -> ClickHouse | 0 -> {rows:,} | {ing_s:.2f} | {n / ing_s:,.0f} | {steady:,.0f} | "
             f"{per_batch / max(1.0, steady):,.0f} | {cpu[0]:.2f} / {cpu[1]:.2f} | fast decode, window dedup, token inserts, rollups; {batches} batches; "
             f"{share(steady, raw_s, raw_defaults_s)} |",
             f"| broker raw consume (no decode), again | | {raw2_s:.2f} | {n / raw2_s:,.0f} | | | | ceiling |",
             f"| broker raw consume, librdkafka's defaults, again | | {raw2_defaults_s:.2f} | {n / raw2_defaults_s:,.0f} | | | | |",
             f"| analyzer ingest -> ClickHouse | {rows2 - n:,} -> {rows2:,} | {ing2_s:.2f} | {n / ing2_s:,.0f} | "
             f"{steady2:,.0f} | {per_batch / max(1.0, steady2):,.0f} | {cpu2[0]:.2f} / {cpu2[1]:.2f} | same, after {rows2 - n - rows:,} rows of history "
             f"were stored in-engine ({grow_s:.0f} s, their merges done {settle_s:.0f} s later); {batches2} batches; {share(steady2, raw2_s, raw2_defaults_s)} |",
             (f"| ClickHouse Kafka engine -> MV | | {ke_s:.2f} | {ke_events / ke_s:,.0f} | | | | "
              f"counts events only; {ke_events:,} events seen |" if not ke_problem else
              f"| ClickHouse Kafka engine -> MV ({args.engine_dsn.split(':')[0]}) | | - | - | | | | not usable: {ke_problem} |")]
    text = "\n".join(lines)
    print(text)
    if args.append:
        append_results("Ingest throughput: raw consume vs analyzer ingest at 200k and 2M stored",
                       machine_info() + "\n\n" + text + "\n\nCommand: `python bench/ingest_throughput.py`.")


if __name__ == "__main__":
    main()

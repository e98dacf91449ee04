"""Reliability: faults against the real pipeline, counted event by event (issue 23's table).

Each row starts a fresh embedded broker topic set and a fresh ClickHouse (chdb) directory, runs
the analyzer as a process (`vigil analyzer --ingest-only`), offers events, injects the fault, and
once the ingest group has committed every record offered stops the analyzer and counts what
ClickHouse holds by event id (in a separate process: chdb opens one engine per process).

"Every record offered" is the log's true end, found by reading the topic back record by record:
the embedded Tansu 0.6.0 answers ListOffsets(latest) (the high watermark, what `LagProbe` and
`get_watermark_offsets` report) with an offset that can stay below the last record for good
(1,553 for a partition whose last offset is 1,599), so a lag computed from it reads 0 while
records are still unread, and a run stopped then counted them as lost:

* **poison corpus**: the 308 cases of tests/support/poison.py, then 20,000 valid step events;
* **analyzer SIGKILLed mid-batch**: 20,000 valid step events in records of 100; the analyzer is
  killed (-9) twice while it is storing them, restarted each time;
* **controller SIGKILLed mid-recovery** and **notifier SIGKILLed mid-batch with its receiver down**:
  bench/reliability_services.py (`--rows controller,notify`), a table of their own.

Columns: events offered (valid + refused), stored (distinct valid ids), dead-lettered (letters on
the topic), lost (valid ids not stored: must be 0), duplicated (rows beyond one per id: must be
0), time to recover (restart -> lag 0; for the corpus, last record offered -> lag 0), the
analyzer's peak RSS (VmHWM). Rows not measured here are stated with their reason in the output.

    python bench/reliability.py [--events 20000] [--rows poison,kill,controller,notify] [--receiver-down-s 300]
                                [--no-append]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, ConsumerGroupTopicPartitions, TopicPartition

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from analyzer_common import append_results, machine_info  # noqa: E402
from reliability_services import controller_row, notifier_row  # noqa: E402

from tests.support.poison import corpus  # noqa: E402
from vigil.contract import StepTiming  # noqa: E402
from vigil.kafka.admin import admin_client, ensure_topics  # noqa: E402
from vigil.kafka.broker import EmbeddedBroker  # noqa: E402
from vigil.kafka.producer import EventProducer  # noqa: E402
from vigil.kafka.reader import read_topics  # noqa: E402
from vigil.settings import VigilSettings  # noqa: E402
from vigil.signing import KeyStore  # noqa: E402

COUNT = """
import json, sys
from vigil.clickhouse.client import connect
c = connect(sys.argv[1])
ids = c.query("SELECT count(), uniqExact(event_id) FROM step_timings").result_rows[0]
print(json.dumps({"rows": int(ids[0]), "ids": int(ids[1])}))
"""


class Run:
    def __init__(self, bootstrap: str, tmp: Path) -> None:
        self.tmp = tmp
        self.home = tmp / "home"
        KeyStore(self.home / "keys").ensure()
        self.dsn = f"chdb://{tmp / 'chdb'}"
        self.settings = VigilSettings(home=self.home, kafka_bootstrap=bootstrap, topic_prefix=f"r{uuid.uuid4().hex[:8]}.",
                                      topic_partitions=2, clickhouse_dsn=self.dsn)
        ensure_topics(self.settings, bootstrap)
        self.bootstrap = bootstrap
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("VIGIL_")},
                    "VIGIL_HOME": str(self.home), "VIGIL_KAFKA_BOOTSTRAP": bootstrap, "VIGIL_CLICKHOUSE_DSN": self.dsn,
                    "VIGIL_TOPIC_PREFIX": self.settings.topic_prefix, "VIGIL_TOPIC_PARTITIONS": "2",
                    "PYTHONPATH": str(ROOT), "VIGIL_ANALYZER_BATCH_EVENTS": "1000"}  # many batches: kills land mid-batch
        self.proc: subprocess.Popen[bytes] | None = None
        self.peak_kib = 0
        self.records = 0  # records offered to the steps topic
        self.ends: dict[int, int] = {}  # partition -> offset after its last record, read back (not the watermark)

    def start(self) -> None:
        """Start the analyzer and wait until it runs (its start, migrations included, is not a recovery's)."""
        path = self.tmp / "analyzer.log"
        before = path.read_text().count("analyzer running") if path.exists() else 0
        log = open(path, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen([sys.executable, "-m", "vigil", "analyzer", "--ingest-only"], env=self.env,
                                     stdout=log, stderr=subprocess.STDOUT)
        log.close()
        t0 = time.monotonic()
        while path.read_text().count("analyzer running") <= before:
            if self.proc.poll() is not None or time.monotonic() - t0 > 300:
                raise SystemExit(f"the analyzer did not start; see {path}")
            time.sleep(0.2)

    def _sample_rss(self) -> None:
        if self.proc is None:
            return
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    self.peak_kib = max(self.peak_kib, int(line.split()[1]))
        except OSError:
            pass

    def kill(self) -> None:
        assert self.proc is not None
        self._sample_rss()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        assert self.proc is not None
        self._sample_rss()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)

    def read_ends(self, timeout: float = 300) -> None:
        """The steps topic's true end offsets: every offered record read back (the watermark may stay below)."""
        topic = self.settings.topic("steps")
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"ends-{uuid.uuid4().hex[:8]}",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(2)])
        seen, t0 = 0, time.monotonic()
        ends: dict[int, int] = {}
        try:
            while seen < self.records:
                if time.monotonic() - t0 > timeout:
                    raise SystemExit(f"read back {seen} of {self.records} records after {timeout} s")
                for msg in consumer.consume(500, timeout=1):
                    if msg.error() is None:
                        seen += 1
                        ends[int(msg.partition() or 0)] = max(ends.get(int(msg.partition() or 0), 0),
                                                              int(msg.offset() or 0) + 1)
        finally:
            consumer.close()
        self.ends = ends

    def lag(self) -> int:
        """Records offered and not committed by the ingest group (-1 when it cannot be read)."""
        self._sample_rss()
        topic = self.settings.topic("steps")
        try:
            admin = admin_client(self.settings, self.bootstrap)  # held while its future is pending
            req = [ConsumerGroupTopicPartitions("vigil-analyzer", [TopicPartition(topic, p) for p in self.ends])]
            got = admin.list_consumer_group_offsets(req, request_timeout=10)["vigil-analyzer"].result(timeout=30)
            done = {tp.partition: max(tp.offset, 0) for tp in got.topic_partitions}
        except Exception:
            return -1
        return sum(max(0, end - done.get(p, 0)) for p, end in self.ends.items())

    def wait_lag(self, what: str, at_most: int = 0, timeout: float = 900) -> float:
        t0 = time.monotonic()
        while (lag := self.lag()) < 0 or lag > at_most:
            if time.monotonic() - t0 > timeout:
                raise SystemExit(f"{what}: lag {lag} after {timeout} s; see {self.tmp / 'analyzer.log'}")
            time.sleep(0.5)
        return time.monotonic() - t0

    def counts(self) -> dict[str, int]:
        out = subprocess.run([sys.executable, "-c", COUNT, self.dsn], env=self.env, capture_output=True, text=True,
                             check=True)
        letters = list(read_topics(self.settings, self.bootstrap, [self.settings.topic("deadletter")]))
        return {**json.loads(out.stdout.strip().splitlines()[-1]), "letters": len(letters)}


def valid_events(n: int, job: str) -> list[StepTiming]:
    start = datetime.now(UTC) - timedelta(hours=1)
    return [StepTiming(job_id=job, host=f"h{i % 16:04d}", rank=i % 16, world_size=16, step=i // 16,
                       step_ms=900.0, phases={"forward": 300.0}, ts=start + timedelta(seconds=i / 16))
            for i in range(n)]


def offer(run: Run, events: list[StepTiming], per_record: int = 100, kill_at: tuple[float, ...] = ()) -> list[float]:
    """Produce `events` in sends of `per_record` (a record per host each), read the log's ends back,
    start the analyzer if it is not running; SIGKILL and restart it once the group has committed
    `kill_at` fractions of the records (its batches are 1,000 events, so a kill lands while one is
    being written); the SIGKILL -> lag 0 times, the restart included."""
    producer = EventProducer(settings=run.settings, bootstrap=run.bootstrap, batch_events=per_record)
    for i in range(0, len(events), per_record):
        run.records += producer.send(events[i:i + per_record])
    producer.flush(60)
    run.read_ends()
    if run.proc is None:  # started once everything is offered: the kills land while it is storing
        run.start()
    records = run.records  # the wait below counts records (a send of 100 events is one record per host)
    recovered = []
    for fraction in kill_at:
        run.wait_lag(f"{fraction:.0%} stored", at_most=int(records * (1 - fraction)))
        t0 = time.monotonic()
        run.kill()
        run.start()
        recovered.append(time.monotonic() - t0 + run.wait_lag("recovery after SIGKILL"))
    return recovered


def row(name: str, offered: int, valid: int, c: dict[str, int], recover: str, peak_kib: int) -> str:
    lost = valid - c["ids"]
    dup = c["rows"] - c["ids"]
    return (f"| {name} | {offered:,} | {c['ids']:,} | {c['letters']:,} | {lost} | {dup} | {recover} | "
            f"{peak_kib / 1024:.0f} MiB |")


def poison_row(bootstrap: str, tmp: Path, events: int) -> str:
    """The corpus, then valid events."""
    run = Run(bootstrap, tmp)
    run.start()
    cases = corpus()
    producer = EventProducer(settings=run.settings, bootstrap=bootstrap)
    for case in cases:
        producer.produce_raw(run.settings.topic("steps"), case.value)
    producer.flush(60)
    run.records += len(cases)
    good = valid_events(events, "rel-poison")
    offer(run, good)
    t = run.wait_lag("the corpus")
    run.stop()
    c = run.counts()
    valid = len({i for case in cases for i in case.stored}) + len(good)
    bad = sum(case.letters for case in cases)
    out = row(f"poison corpus ({len(cases)} records, {bad} refused)", valid + bad, valid, c,
              f"{t:.1f} s after the last record", run.peak_kib)
    print(out, flush=True)
    return out


def kill_row(bootstrap: str, tmp: Path, events: int) -> str:
    """The analyzer killed twice while storing."""
    run = Run(bootstrap, tmp)
    times = offer(run, valid_events(events, "rel-kill"), kill_at=(0.25, 0.6))
    run.stop()
    c = run.counts()
    out = row("analyzer SIGKILLed mid-batch (x2)", events, events, c,
              " / ".join(f"{x:.1f} s" for x in times) + " (SIGKILL -> lag 0, the restart included)", run.peak_kib)
    print(out, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--rows", default="poison,kill", help="which rows: poison, kill, controller, notify")
    ap.add_argument("--receiver-down-s", type=float, default=300.0, help="notify row: how long the receiver is down")
    ap.add_argument("--keep", default="", help="keep the runs' directories (logs, chdb) under this one")
    ap.add_argument("--no-append", dest="append", action="store_false")
    args = ap.parse_args()
    analyzer_rows = [r for r in args.rows.split(",") if r in ("poison", "kill")]
    service_rows = [r for r in args.rows.split(",") if r in ("controller", "notify")]
    with tempfile.TemporaryDirectory(prefix="vigil-rel-") as scratch:
        tmp = Path(args.keep or scratch)
        broker = EmbeddedBroker(log_path=tmp / "tansu.log")
        broker.start()
        try:
            if analyzer_rows:
                analyzer_table(broker.bootstrap, tmp, args, analyzer_rows)
            if service_rows:
                services_table(broker.bootstrap, tmp, args, service_rows)
        finally:
            broker.stop()


def analyzer_table(bootstrap: str, tmp: Path, args: argparse.Namespace, which: list[str]) -> None:
    rows = ["| fault | events offered | stored | dead-lettered | lost | duplicated | time to recover | peak RSS (analyzer) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    if "poison" in which:
        rows.append(poison_row(bootstrap, tmp / "poison", args.events))
    if "kill" in which:
        rows.append(kill_row(bootstrap, tmp / "kill", args.events))
    body = "\n".join(rows) + (
        "\n\nNot measured here (see README, Reliability): the broker down 60 s — the embedded Tansu broker keeps its "
        "log in memory only, so a restart loses the log (a real Kafka keeps it; not faked); the controller and the "
        "notifier: `--rows controller,notify`. The 1,000-agent controller rebuild: bench/controller_rebuild.py.\n\n"
        + machine_info())
    print(body)
    if args.append:
        append_results("Reliability (bench/reliability.py)", body)


def services_table(bootstrap: str, tmp: Path, args: argparse.Namespace, which: list[str]) -> None:
    rows = ["| fault | offered | stored (recoveries ended / delivered) | dead-lettered | lost | duplicated | time to recover | peak RSS |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    notes = []
    if "controller" in which:
        row_, extra = controller_row(bootstrap, tmp / "controller")
        print(row_, extra, flush=True)
        rows.append(row_)
        notes.append(f"controller: {extra['decisions']} distinct decisions recorded, each once")
    if "notify" in which:
        row_, extra = notifier_row(bootstrap, tmp / "notify", down_s=args.receiver_down_s)
        print(row_, extra, flush=True)
        rows.append(row_)
        notes.append(f"notifier: {extra['at_kill']} notifications delivered before the SIGKILL, "
                     f"{extra['requests']} requests in all (refused connections are not requests)")
    body = "\n".join(rows) + "\n\n" + "; ".join(notes) + ". See bench/reliability_services.py for what each " \
        "column counts.\n\n" + machine_info()
    print(body)
    if args.append:
        append_results("Reliability: controller and notifier (bench/reliability.py)", body)


if __name__ == "__main__":
    main()

"""`vigil notify run` as a real process, SIGKILLed while it retries a receiver that answers 503: after a
restart everything is delivered, and nothing twice (the retries carry the same idempotency key)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.notify.events import alert, straggler, xid
from tests.support.notifier import SECRET
from tests.support.receiver import Receiver, signed_by
from tests.support.signed import sealed
from tests.support.waiting import wait_until
from vigil.kafka.producer import EventProducer
from vigil.settings import VigilSettings

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


class Notifier:
    """`python -m vigil notify run` with its own home and ClickHouse files, logging to a file."""

    def __init__(self, topics: VigilSettings, receiver: Receiver, home: Path) -> None:
        self.log = home / "notify.log"
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("VIGIL_")},
                    "VIGIL_HOME": str(home), "VIGIL_KAFKA_BOOTSTRAP": str(topics.kafka_bootstrap),
                    "VIGIL_TOPIC_PREFIX": topics.topic_prefix, "VIGIL_TOPIC_PARTITIONS": "2",
                    "VIGIL_CLICKHOUSE_DSN": f"chdb://{home / 'clickhouse'}",
                    "VIGIL_NOTIFY_WEBHOOK_URL": receiver.url, "VIGIL_NOTIFY_WEBHOOK_SECRET": SECRET,
                    "VIGIL_NOTIFY_GROUP_WAIT_S": "0.5", "VIGIL_NOTIFY_GROUP_INTERVAL_S": "0.5",
                    "VIGIL_NOTIFY_TICK_S": "0.1", "VIGIL_NOTIFY_RETRY_BASE_S": "0.1", "VIGIL_NOTIFY_RETRY_MAX_S": "0.5"}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "vigil", "notify", "run"], env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def lines(self, text: str) -> int:
        return self.log.read_text(errors="replace").count(text) if self.log.exists() else 0

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def stop(self) -> None:
        """SIGTERM: the notifier finishes recording what it delivered, then exits."""
        assert self.proc is not None
        self.proc.terminate()
        assert self.proc.wait(60) == 0


@pytest.fixture
def run_notifier(topics: VigilSettings, receiver: Receiver, tmp_path: Path) -> Iterator[Notifier]:
    n = Notifier(topics, receiver, tmp_path)
    yield n
    n.kill()


def test_sigkilled_mid_retry_then_delivered_after_restart_without_duplicates(
        topics: VigilSettings, receiver: Receiver, run_notifier: Notifier) -> None:
    producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap))
    receiver.status = 503
    run_notifier.start()
    home = Path(run_notifier.env["VIGIL_HOME"])  # the notifier's key set: the test signs as the analyzer
    producer.send(sealed(home, [straggler("j", "h1"), xid("j", "h2")]))
    producer.flush()
    wait_until(lambda: run_notifier.lines("notify: firing") == 2, 120, "two notifications decided")
    wait_until(lambda: len(receiver.all()) >= 3, 60, "the first refused and retried")
    run_notifier.kill()  # SIGKILL, mid-retry: nothing was delivered
    first_run = len(receiver.all())
    assert receiver.delivered() == [] and first_run >= 3

    receiver.status = 200
    run_notifier.start()
    wait_until(lambda: len(receiver.delivered()) == 2, 120, "both delivered after the restart")
    producer.send(sealed(home, [alert("j", "heartbeat_loss", "h3", severity="critical")]))  # a newer one, queued behind any duplicate
    producer.flush()
    wait_until(lambda: len(receiver.delivered()) >= 3, 60, "a later notification")

    delivered = receiver.delivered()
    assert len(delivered) == 3 and len({r.key for r in delivered}) == 3, "no notification delivered twice"
    assert [r.json()["alerts"][0]["alert"] for r in delivered][-1] == "heartbeat_loss"
    # one lane, in order: the first run retried its oldest notification only, under one key, delivered first now
    assert {r.key for r in receiver.all()[:first_run]} == {delivered[0].key}, "the retries kept their key"
    assert all(r.body == delivered[0].body for r in receiver.all()[:first_run]), "and their body"
    assert all(signed_by(SECRET.encode(), r) for r in receiver.all())
    assert run_notifier.lines("notify: firing") == 3, "nothing was decided again after the restart"

    # a clean stop, not a SIGKILL between the receiver's 2xx and the log's "delivered" (that one would be re-sent
    # under the same key at the next start); `vigil notify status` then reads the log it left (its ClickHouse files)
    run_notifier.stop()
    status = subprocess.run([sys.executable, "-m", "vigil", "notify", "status", "--json"], env=run_notifier.env,
                            capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stderr
    (webhook,) = json.loads(status.stdout)["receivers"]
    assert {k: webhook[k] for k in ("receiver", "delivered", "pending", "failed", "signed", "ok")} == {
        "receiver": "webhook", "delivered": 3, "pending": 0, "failed": 0, "signed": True, "ok": True}
    # attempts counts outcomes the notifier saved: the SIGKILL may land between the receiver's 503 and the save of
    # that attempt (one lane, saved synchronously, so at most the one in flight is lost); the restart then adds the
    # retried one's delivery and the two later notifications' single attempts
    assert webhook["attempts"] in (first_run + 2, first_run + 3), (webhook["attempts"], first_run)
    assert webhook["last_error"] == ""  # delivered: no error stands

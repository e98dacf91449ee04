"""A real 3-host torch job finishes under recovery control while every part of the pipeline fails in turn.

Three `vigil run --nodes 2:3` agents run tests/chaos/chaos_worker.py (gloo, CPU, a checkpoint every
5 steps); the analyzer and the notifier (with a loopback webhook receiver) run as `vigil` processes,
the controller as `vigil recovery run`, on a broker of the test's own. While the job trains the
harness, in turn:

1. makes the broker unavailable until the ranks wrote 30 more step records: SIGSTOP, then SIGCONT.
   The embedded Tansu keeps its log in memory only, so a restart would lose the log (a real Kafka
   keeps it); a stopped broker is what an unreachable one looks like to every client;
2. streams the poison corpus (tests/support/poison.py, >= 300 records: sizes, encodings, numbers,
   timestamps, identifiers, kinds, duplicates) into the `steps` topic and at once SIGKILLs the
   analyzer and starts it again; then the notifier;
3. SIGKILLs host h2 (its agent and its training) and starts its agent again: the fault;
4. SIGKILLs the controller once that recovery has started, and starts it again.

Then it lets the job end. Asserted: every host exits 0 and the controller records `finish`; each
recovery has one outcome and every decision (a step's start and end) is taken once; every step
record the ranks wrote (their spool, by event id) and every valid event of the corpus is stored in
ClickHouse exactly once; every bad record of the corpus is in `dead_letters` with exactly the
letters it must give (and on the dead-letter topic, where a letter produced again after the kill
may repeat: the table's key makes it one); the
analyzer's and the notifier's consumer groups end with lag 0 (measured against each partition's
confirmed end), and no notification was delivered under two keys' worth of the same content.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.live import Live
from tests.support.poison import corpus, valid_ids
from tests.support.poison_feed import produce
from tests.support.receiver import Receiver
from tests.support.services import (
    Service,
    analyzer_service,
    chaos_job,
    spooled_steps,
    stored_letters,
    stored_steps,
)
from tests.support.waiting import wait_until
from vigil.analyzer.ingest.loop import INGEST_TOPICS
from vigil.app.demo.run import kill_tree
from vigil.contract import Outcome, RecoveryAction
from vigil.kafka.admin import ensure_topics
from vigil.kafka.broker import EmbeddedBroker
from vigil.kafka.lag import LagProbe
from vigil.kafka.reader import read_topics
from vigil.notify.service import TOPICS as NOTIFY_TOPICS
from vigil.recovery.controller.state import ClusterState
from vigil.settings import VigilSettings

pytestmark = [pytest.mark.chaos, pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(600)]
JOB, HOSTS = "job-chaos", ("h0", "h1", "h2")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    """The test's own broker: it is stopped mid-test, which the session's must never be."""
    b = EmbeddedBroker(log_path=tmp_path / "tansu.log")
    b.start()
    yield b
    if b.pid is not None:
        os.kill(b.pid, signal.SIGCONT)
    b.stop()


def lag_zero(settings: VigilSettings, group: str, topics: tuple[str, ...]) -> bool:
    probe = LagProbe(settings=settings, bootstrap=str(settings.kafka_bootstrap), group_id=group, topics=topics)
    return all(n == 0 for n in probe.sample().values())


def training_again(s: ClusterState) -> bool:
    """Restarted after the fault, no recovery open, every host of the world training."""
    j = s.jobs.get(JOB)
    return (j is not None and j.generation >= 2 and len(j.world) >= 2
            and not any(c.job_id == JOB and c.open for c in s.cases.values())
            and all((m := j.members.get(h)) is not None and m.state == "training" for h in j.world))


def test_a_real_job_finishes_losing_nothing_while_broker_services_and_a_host_fail_in_turn(
        tmp_path: Path, broker: EmbeddedBroker) -> None:
    bootstrap, home = broker.bootstrap, tmp_path / "home"
    settings = VigilSettings(home=home, kafka_bootstrap=bootstrap, topic_prefix=f"c{uuid.uuid4().hex[:8]}.",
                             topic_partitions=2)
    ensure_topics(settings, bootstrap)
    live = Live(settings=settings, bootstrap=bootstrap, tmp=tmp_path, recovery_env={
        "VIGIL_RECOVERY_POLICY_DIAGNOSE_HANG": "false", "VIGIL_RECOVERY_POLICY_DIAGNOSE_HARDWARE": "false"})
    receiver = Receiver()
    receiver.up()
    analyzer, dsn = analyzer_service(live.env, tmp_path)
    notifier = Service(name="notifier", argv=["notify", "run"], log=tmp_path / "notify.log", running="notifier running",
                       env={**live.env, "VIGIL_CLICKHOUSE_DSN": f"chdb://{tmp_path / 'notify-ch'}",
                            "VIGIL_NOTIFY_WEBHOOK_URL": receiver.url, "VIGIL_NOTIFY_GROUP_WAIT_S": "0.5",
                            "VIGIL_NOTIFY_GROUP_INTERVAL_S": "0.5", "VIGIL_NOTIFY_TICK_S": "0.2"})
    command, stop = chaos_job(tmp_path)
    try:
        analyzer.start()
        notifier.start()  # both running before the job starts: on 2 busy cores the starts would slow each other
        wait_until(lambda: analyzer.ready() and notifier.ready(), 300, "the analyzer and the notifier to run")
        live.start_job(JOB, HOSTS, command, nodes="2:3")

        # 1. the broker unavailable while the ranks write 30 more step records
        assert broker.pid is not None
        written = len(spooled_steps(home / "spool"))
        os.kill(broker.pid, signal.SIGSTOP)
        try:
            wait_until(lambda: len(spooled_steps(home / "spool")) >= written + 30, 120,
                       "training to go on with the broker stopped")
        finally:
            os.kill(broker.pid, signal.SIGCONT)
        # 2. the poison corpus streamed while the analyzer is SIGKILLed and started again; then the notifier
        cases = corpus()
        where = produce(settings, cases)
        for service in (analyzer, notifier):
            service.kill()
            service.start()
            wait_until(service.ready, 300, f"the {service.name} to run again")
        # 3. host h2 dies (its agent and its training) and its agent comes back: the fault to recover from
        kill_tree(live.agents["h2"])
        live.start_agent("h2", command, nodes="2:3", job=JOB)
        # 4. the controller SIGKILLed in the middle of that recovery
        live.wait_for(lambda s: any(c.job_id == JOB and c.open and c.steps for c in s.cases.values()), 180,
                      "the recovery to start")
        live.kill_controller()
        live.start_controller()
        live.wait_for(training_again, 300, "the job to train again after its recovery")
        stop.touch()

        wait_until(lambda: all(p.poll() is not None for p in live.agents.values()), 180, "every agent to exit")
        assert {h: p.returncode for h, p in live.agents.items()} == {h: 0 for h in HOSTS}
        live.wait_for(lambda s: s.job(JOB).finished is not None, 60, "the controller to record the job finished")

        recoveries = {cid: c for cid, c in live.state.cases.items() if c.job_id == JOB and not c.skipped}
        assert any(c.outcome is not None and c.outcome.result == "resumed" and c.opened_at is not None
                   and c.outcome.hosts for c in recoveries.values())
        outcomes = Counter(e.incident_id for e in live.events if isinstance(e, Outcome) and e.job_id == JOB)
        assert outcomes == Counter(dict.fromkeys(recoveries, 1)), "one outcome per recovery, every recovery ended"
        decisions = Counter((a.incident_id, a.action, a.target, a.status) for a in live.events
                            if isinstance(a, RecoveryAction) and a.actor == "controller" and a.job_id == JOB
                            and a.status in ("planned", "started", "succeeded", "failed"))
        assert [d for d, n in decisions.items() if n > 1] == [], "a decision taken twice"

        group = "vigil-analyzer"
        wait_until(lambda: lag_zero(settings, group, INGEST_TOPICS), 180, "the analyzer's lag to return to zero")
        wait_until(lambda: lag_zero(settings, "vigil-notify", NOTIFY_TOPICS), 120, "the notifier's lag to return to 0")
        assert analyzer.stop() == 0
        written_ids = spooled_steps(home / "spool")
        stored = stored_steps(dsn, analyzer.env)
        assert len(written_ids) == len(set(written_ids)) > 100
        missing = set(written_ids) - stored.keys()
        assert not missing, f"{len(missing)} of {len(written_ids)} step events written and never stored"
        assert [i for i, n in stored.items() if n != 1] == [], "a step event stored twice"
        assert valid_ids(cases) <= stored.keys(), "a valid event of the poison corpus never stored"
        due = {at: c.letters for at, c in where.items() if c.letters}
        letters = stored_letters(dsn, analyzer.env, settings.topic("steps"))
        assert letters == due, sorted(where[at].name for at in set(letters) ^ set(due))[:10]
        on_topic = Counter((int(x["partition"]), int(x["offset"])) for r in read_topics(
            settings, bootstrap, [settings.topic("deadletter")]) if (x := json.loads(r.value or b"{}"))
            and x.get("topic") == settings.topic("steps"))
        assert on_topic.keys() == due.keys() and all(on_topic[at] >= n for at, n in due.items())
        bodies: dict[str, set[bytes]] = {}
        for r in receiver.delivered():
            bodies.setdefault(r.key, set()).add(r.body)
        assert all(len(b) == 1 for b in bodies.values()), "a notification re-sent with other content"
        print(f"\nchaos: {len(written_ids)} step events written and stored once; {len(recoveries)} recoveries; "
              f"{len(cases)} poison records, {sum(due.values())} letters stored once "
              f"({sum(on_topic.values()) - sum(due.values())} produced again on the topic); "
              f"{len(bodies)} notifications delivered ({len(receiver.delivered())} requests); restarted after a slow "
              f"broker at start: analyzer {analyzer.supervised}, notifier {notifier.supervised}")
    finally:
        live.close()
        analyzer.stop()
        notifier.stop()
        receiver.down()

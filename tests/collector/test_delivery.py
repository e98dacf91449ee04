"""Delivery under failure: broker outage, agent SIGKILL, unwritable spool. Every event arrives."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.agent_harness import agent_env, read_events, start_agent, step_line
from tests.support.waiting import wait_until
from vigil.collector.agent import Agent
from vigil.collector.settings import CollectorSettings, resolve_paths
from vigil.collector.sink import MemorySink
from vigil.contract import Heartbeat, LogLine, StepTiming
from vigil.kafka.broker import EmbeddedBroker, free_port
from vigil.settings import VigilSettings


class SpoolWriter(threading.Thread):
    """Writes timer-format step lines for a few ranks, rotating files like the timer, until stopped.
    Lines are sometimes written in two parts, so the agent sees partial last lines. Every
    `log_every` lines it also appends a classified error line with a unique marker to
    `logs/train.log`: those reach Kafka through the agent's own outbox, not the timer spool."""

    def __init__(self, spool: Path, *, host: str, ranks: int = 4, per_file: int = 150, every_s: float = 0.02,
                 log_every: int = 25) -> None:
        super().__init__(daemon=True)
        self.spool, self.host, self.ranks, self.per_file, self.every_s = spool / "job-d", host, ranks, per_file, every_s
        self.log_file, self.log_every = spool.parent / "logs" / "train.log", log_every
        self.ids: list[str] = []
        self.markers: list[str] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        self.spool.mkdir(parents=True, exist_ok=True)
        step = 0
        while not self.stop_event.is_set():
            rank = step % self.ranks
            seq = (step // self.ranks) // self.per_file
            doc = step_line(job="job-d", host=self.host, rank=rank, step=step // self.ranks)
            data = (json.dumps(doc) + "\n").encode()
            with open(self.spool / f"{self.host}-rank{rank}.{seq:06d}.jsonl", "ab") as fh:
                if step % 7 == 0:
                    fh.write(data[:20])
                    fh.flush()
                    time.sleep(0.005)
                    fh.write(data[20:])
                else:
                    fh.write(data)
            self.ids.append(doc["event_id"])
            if step % self.log_every == 0:
                marker = f"marker-{step:06d}"
                with open(self.log_file, "a") as fh:
                    fh.write(f"NCCL error: unhandled system error ({marker})\n")
                self.markers.append(marker)
            step += 1
            time.sleep(self.every_s)

    def start(self) -> None:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        super().start()

    def more(self, n: int = 50) -> None:
        """Wait until this writer has written `n` more step lines (the scenario goes on meanwhile)."""
        start = len(self.ids)
        wait_until(lambda: len(self.ids) >= start + n, 60, f"{n} more step lines written")

    def finish(self) -> set[str]:
        self.stop_event.set()
        self.join()
        return set(self.ids)


def settled(read: Callable[[], set[str]]) -> set[str]:
    """What `read` returns once two reads in a row agree (a frozen producer's last deliveries have landed)."""
    last: list[set[str]] = [read()]

    def same() -> bool:
        now = read()
        done, last[0] = now == last[0], now
        return done

    wait_until(same, 30, "the topic to stop growing")
    return last[0]


def step_ids(settings: VigilSettings, bootstrap: str) -> set[str]:
    return {e.event_id for e in read_events(settings, bootstrap, ["steps"]) if isinstance(e, StepTiming)}


def markers(settings: VigilSettings, bootstrap: str) -> set[str]:
    return {m.group(0) for e in read_events(settings, bootstrap, ["logs"]) if isinstance(e, LogLine)
            if (m := re.search(r"marker-\d+", e.message))}


@pytest.mark.kafka
@pytest.mark.slow
def test_broker_outage_of_20s_loses_nothing(settings: VigilSettings, tmp_path: Path) -> None:
    port = free_port()
    broker = EmbeddedBroker(port=port, log_path=tmp_path / "broker.log")
    bootstrap = broker.start()
    own = settings.model_copy(update={"kafka_bootstrap": bootstrap})
    spool = tmp_path / "spool"
    writer = SpoolWriter(spool, host="h-out")
    env = agent_env(own, bootstrap, tmp_path / "home", VIGIL_HEARTBEAT_INTERVAL="0.5", VIGIL_FLOOD_BURST="100000")
    agent = start_agent(["collector", "--host", "h-out", "--job", "job-d", "--spool-dir", str(spool),
                         "--log-dir", str(writer.log_file.parent), "--delivery-timeout", "2"], env, tmp_path / "agent.log")
    try:
        writer.start()
        wait_until(lambda: len(step_ids(own, bootstrap)) >= 50, 60, "steps flowing")
        os.kill(agent.pid, signal.SIGSTOP)  # freeze the agent: nothing it delivers now goes unread
        before = settled(lambda: step_ids(own, bootstrap))
        before_markers = markers(own, bootstrap)
        broker.stop()  # the embedded broker is memory-only: what it held is gone
        os.kill(agent.pid, signal.SIGCONT)
        time.sleep(20.0)  # the outage; the writer keeps writing
        assert agent.poll() is None, "the agent must survive the outage"
        broker = EmbeddedBroker(port=port, log_path=tmp_path / "broker2.log")
        broker.start()
        writer.more()  # lines written while the agent reconnects
        written = writer.finish()
        wait_until(lambda: written <= before | step_ids(own, bootstrap), 120, "every step after the outage")
        assert len(writer.markers) >= 20
        wait_until(lambda: set(writer.markers) <= before_markers | markers(own, bootstrap), 60,
                 "every classified log line (the agent's outbox) after the outage")
        beats = [e for e in read_events(own, bootstrap, ["heartbeats"]) if isinstance(e, Heartbeat)]
        assert any(b.spooled_events > 0 for b in beats), "heartbeats written during the outage report the backlog"
        assert all(b.dropped_events == 0 for b in beats)
    finally:
        writer.stop_event.set()
        agent.terminate()
        agent.wait(timeout=60)
        broker.stop()


@pytest.mark.kafka
@pytest.mark.slow
def test_agent_sigkill_and_restart_loses_nothing(topics: VigilSettings, broker_bootstrap: str, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    writer = SpoolWriter(spool, host="h-kill")
    env = agent_env(topics, broker_bootstrap, tmp_path / "home", VIGIL_FLOOD_BURST="100000")
    args = ["collector", "--host", "h-kill", "--job", "job-d", "--spool-dir", str(spool),
            "--log-dir", str(writer.log_file.parent)]
    first = start_agent(args, env, tmp_path / "agent1.log")
    second = None
    try:
        writer.start()
        wait_until(lambda: len(step_ids(topics, broker_bootstrap)) >= 100, 60, "steps flowing")
        first.kill()
        first.wait()
        (spool / "job-d" / "h-kill-rank0.999999.jsonl").write_text('{"kind": "step", "broken\n[1, 2]\n')
        writer.more()  # the writer goes on while no agent runs
        second = start_agent(args, env, tmp_path / "agent2.log")
        writer.more()  # and after the new agent started
        written = writer.finish()
        wait_until(lambda: written <= step_ids(topics, broker_bootstrap), 120, "every step after the restart")
        wait_until(lambda: set(writer.markers) <= markers(topics, broker_bootstrap), 60,
                 "every classified log line (the agent's outbox) after the restart")
        assert "skipping malformed line" in (tmp_path / "agent2.log").read_text()
        assert second.poll() is None
    finally:
        writer.stop_event.set()
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.terminate()
                p.wait(timeout=60)


@pytest.mark.pure
def test_unwritable_spool_keeps_running_and_counts_drops(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    settings = CollectorSettings(host="h-full", job_id="j", state_dir=blocker / "state", heartbeat_interval=0.02,
                                 nic_interval=0.02, memory_buffer_events=5, poll_interval=0.05,
                                 sysfs_root=tmp_path / "none", procfs_root=tmp_path / "none",
                                 kmsg_path="")  # not this machine's kernel log
    sink = MemorySink(down=True)
    agent = Agent(settings=settings, paths=resolve_paths(settings, tmp_path), sink=sink, spool_roots=[])
    agent.start()
    try:
        wait_until(lambda: agent.outbox.dropped > 20, 30, "drops while the sink is down and the disk refuses", 0.05)
        assert agent.outbox.write_errors > 0
        sink.down = False
        wait_until(lambda: any(isinstance(e, Heartbeat) and e.dropped_events > 0 for e in list(sink.events)), 30,
                 "a delivered heartbeat reporting the drops", 0.05)
        assert all(t.is_alive() for t in agent._threads)
    finally:
        agent.stop(drain_timeout_s=5)
    assert agent.stats()["dropped"] > 20


@pytest.mark.pure
def test_sink_outage_in_process_keeps_order_and_everything(tmp_path: Path) -> None:
    settings = CollectorSettings(host="h-mem", job_id="j", heartbeat_interval=3600, nic_interval=3600,
                                 poll_interval=0.05, sysfs_root=tmp_path / "none", procfs_root=tmp_path / "none",
                                 kmsg_path="")  # not this machine's kernel log
    sink = MemorySink(down=True)
    agent = Agent(settings=settings, paths=resolve_paths(settings, tmp_path), sink=sink, spool_roots=[])
    agent.start()
    sent = [Heartbeat(job_id="j", host="h-mem", uptime_s=float(i), event_id=uuid.uuid4().hex) for i in range(300)]
    for i in range(0, 300, 30):
        agent.emit(sent[i:i + 30])
    wait_until(lambda: agent.shipper.failures >= 2, 30, "failed deliveries", 0.05)
    sink.down = False
    wait_until(lambda: {e.event_id for e in sent} <= {e.event_id for e in list(sink.events)}, 30, "the backlog", 0.05)
    agent.stop(drain_timeout_s=5)
    mine = [e.uptime_s for e in sink.events if isinstance(e, Heartbeat) and e.uptime_s < 1000 and e.event_id in
            {s.event_id for s in sent}]
    assert mine[:300] == sorted(mine[:300])  # in order

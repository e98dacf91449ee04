"""A job that ends, ends: the agent reports its final progress, then exits 0 when the controller says so."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from tests.support.waiting import wait_until
from vigil.collector.agent import Agent
from vigil.collector.control.launcher import Launcher
from vigil.collector.control.rendezvous import NodeRange
from vigil.collector.control.supervisor import Supervisor
from vigil.collector.settings import CollectorSettings, resolve_paths
from vigil.collector.sink import MemorySink, ObservedSink
from vigil.contract import Command, Member, RecoveryAction, World

pytestmark = pytest.mark.pure

STEPS = 149
TRAIN = """
import json, sys, time, uuid
path, job, host, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with open(path, "a") as fh:
    for step in range(n):
        fh.write(json.dumps({"kind": "step", "schema_version": 1, "event_id": uuid.uuid4().hex, "job_id": job,
                             "host": host, "ts": time.time(), "rank": 0, "local_rank": 0, "world_size": 1,
                             "step": step, "step_ms": 1.0}) + "\\n")
print("last step", n - 1, flush=True)
"""


class Feed:
    """The controller's side: start generation 1, and `finish` once this host reported it exited."""

    def __init__(self, sink: MemorySink, world: World) -> None:
        self.sink, self.world, self.sent = sink, world, 0

    def poll(self, timeout: float = 0.5) -> list[Command]:
        threading.Event().wait(min(timeout, 0.05))
        if self.sent == 0:
            self.sent = 1
            return [Command(job_id="j", host="h0", command_id="j/g1/start/h0", action="start", generation=1,
                            world=self.world)]
        exited = [e for e in list(self.sink.events) if isinstance(e, Member) and e.state == "exited"]
        if self.sent == 1 and exited:
            self.sent = 2
            return [Command(job_id="j", host="h0", command_id="j/g1/finish/h0", action="finish", generation=1)]
        return []


def test_the_agent_reports_its_last_step_and_exits_0_when_the_job_finishes(tmp_path: Path) -> None:
    settings = CollectorSettings(host="h0", job_id="j", heartbeat_interval=3600, nic_interval=3600,
                                 poll_interval=0.05, sysfs_root=tmp_path / "none", procfs_root=tmp_path / "none")
    paths = resolve_paths(settings, tmp_path)
    spool = tmp_path / "spool"
    spool.mkdir()
    memory = MemorySink()
    agent = Agent(settings=settings, paths=paths, sink=memory, spool_roots=[spool])
    world = World(generation=1, hosts=["h0"], node_rank=0, master_addr="127.0.0.1", master_port=29500)
    feed = Feed(memory, world)
    argv = [sys.executable, "-c", TRAIN, str(spool / "rank0.jsonl"), "j", "h0", str(STEPS)]

    def launcher_for(cmd: list[str], env: dict[str, str]) -> Launcher:
        return Launcher(argv=cmd, env=env, agent=agent, output_dir=tmp_path / "out", echo=False, attribute=False)

    supervisor = Supervisor(agent=agent, argv=argv, env={}, nodes=NodeRange(min=1, max=1), make_launcher=launcher_for,
                            feed=lambda: feed, registry=None, address="127.0.0.1",  # type: ignore[arg-type,return-value]
                            keepalive_s=3600)
    agent.sink = ObservedSink(inner=memory, observe=supervisor.progress.observe)
    agent.shipper.sink = agent.sink
    agent.start()
    try:
        status = supervisor.run()
    finally:
        agent.stop(drain_timeout_s=5)
    assert status == 0
    members = [e for e in memory.events if isinstance(e, Member)]
    [exited] = [m for m in members if m.state == "exited"]
    assert exited.exit_code == 0 and exited.last_step == STEPS - 1 and exited.steps == STEPS
    assert members[-1].state == "left" and members[-1].reason == "the job finished"
    acks = [e for e in memory.events if isinstance(e, RecoveryAction) and e.command_id == "j/g1/finish/h0"]
    assert [a.status for a in acks] == ["succeeded"]


XID_THEN_EXIT = """
import sys, time
with open(sys.argv[1], "a") as fh:  # the driver's record, stamped now on the boot clock
    fh.write(f"3,1,{time.monotonic_ns() // 1000},-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the "
             "bus.\\n")
print("CUDA error: unspecified launch failure", file=sys.stderr, flush=True)
sys.exit(1)
"""


def test_a_rank_that_dies_right_after_its_xid_is_reported_with_the_kernel_fault(tmp_path: Path) -> None:
    """The driver logs an Xid and the rank dies at once, while the kernel log thread waits out its interval (30 s
    here): the agent reads its kernel log past the exit before reporting it, so the exit names the hardware fault
    (the controller cordons) instead of reading as a software failure (it would restart on the bad GPU)."""
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    settings = CollectorSettings(host="h0", job_id="j", heartbeat_interval=3600, nic_interval=3600,
                                 poll_interval=0.05, sysfs_root=tmp_path / "none", procfs_root=tmp_path / "none",
                                 kmsg_path=kmsg, kernel_log="kmsg", dcgm=False)
    memory = MemorySink()
    agent = Agent(settings=settings, paths=resolve_paths(settings, tmp_path), sink=memory, spool_roots=[])
    assert agent.kernel is not None
    agent.kernel.poll_s = 30.0
    world = World(generation=1, hosts=["h0"], node_rank=0, master_addr="127.0.0.1", master_port=29500)
    feed = Feed(memory, world)

    def launcher_for(cmd: list[str], env: dict[str, str]) -> Launcher:
        return Launcher(argv=cmd, env=env, agent=agent, output_dir=tmp_path / "out", echo=False, attribute=False)

    supervisor = Supervisor(agent=agent, argv=[sys.executable, "-c", XID_THEN_EXIT, str(kmsg)], env={},
                            nodes=NodeRange(min=1, max=1), make_launcher=launcher_for, feed=lambda: feed,
                            registry=None, address="127.0.0.1", keepalive_s=3600)  # type: ignore[arg-type]
    agent.start()
    try:
        wait_until(lambda: agent.kernel is not None and agent.kernel.following, timeout=10,
                   what="the agent follows its kernel log")
        supervisor.run()
    finally:
        agent.stop(drain_timeout_s=5)
    exited = next(e for e in memory.events if isinstance(e, Member) and e.state == "exited")
    assert exited.exit_code == 1 and exited.fault == "xid", exited
    assert "Xid" in exited.reason and exited.fault_action is not None

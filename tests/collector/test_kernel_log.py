"""The kernel log through the real agent and broker: each hardware line class becomes its fact, source=kernel,
with its GPU, its rank and its catalog action; an agent restart re-reads nothing and loses nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.agent_harness import agent_env, read_events, start_agent
from tests.support.kmsg_lines import (
    AER,
    EDAC_CE,
    EDAC_UE,
    LINK_DOWN,
    NOISE,
    OOM,
    OOM_KILL,
    SXID,
    XID,
    FakeKmsg,
)
from tests.support.waiting import wait_until
from vigil.contract import Heartbeat, LogLine
from vigil.contract.xid import XidAction
from vigil.settings import VigilSettings

pytestmark = [pytest.mark.kafka]
HOST = "h-kmsg"


def kernel_facts(settings: VigilSettings, bootstrap: str) -> list[LogLine]:
    return [e for e in read_events(settings, bootstrap, ["logs"]) if isinstance(e, LogLine) and e.host == HOST
            and e.source == "kernel"]


def test_kernel_facts_through_the_agent_and_a_restart(topics: VigilSettings, broker_bootstrap: str,
                                                      tmp_path: Path) -> None:
    sysfs = tmp_path / "sysfs"
    for address in ("0000:3b:00.0", "0000:86:00.0"):  # GPU 0 and GPU 1
        (sysfs / "bus" / "pci" / "drivers" / "nvidia" / address).mkdir(parents=True)
    kmsg = FakeKmsg(tmp_path / "kmsg")
    kmsg.write("Linux version 6.8.0 (builder@host)", pri=5)  # history: a first start reads after it
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "kmsg-rank-marker"],
                            env={**os.environ, "RANK": "5", "LOCAL_RANK": "1"})
    env = agent_env(topics, broker_bootstrap, tmp_path / "home", VIGIL_KMSG_PATH=str(kmsg.path),
                    VIGIL_SYSFS_ROOT=str(sysfs), VIGIL_HEARTBEAT_INTERVAL="0.5")
    args = ["collector", "--host", HOST, "--job", "job-k", "--match", "kmsg[-]rank-marker"]
    offsets = tmp_path / "home" / "agent" / HOST / "offsets.json"
    agents = [start_agent(args, env, tmp_path / "agent1.log")]
    try:
        wait_until(lambda: offsets.exists() and "kmsg" in json.loads(offsets.read_text()), 60, "the kernel log followed")
        wait_until(lambda: any(isinstance(e, Heartbeat) and e.host == HOST and rank.pid in {p.pid for p in e.processes}
                               for e in read_events(topics, broker_bootstrap, ["heartbeats"], timeout=2)),
                   60, "the rank process tracked")
        pid = rank.pid
        lines = [XID[13], XID[31], XID[48], XID[79], XID[94]]
        kmsg.write(*[x.replace("pid=4242", f"pid={pid}").replace("pid=4243", f"pid={pid}") for x in lines])
        kmsg.write(SXID, AER, LINK_DOWN, NOISE, pri=4)
        kmsg.write(OOM_KILL.replace("4242", str(pid)), OOM.replace("4242", str(pid)), EDAC_UE)
        wait_until(lambda: len(kernel_facts(topics, broker_bootstrap)) >= 10, 60, "ten kernel facts")
        facts = kernel_facts(topics, broker_bootstrap)
        by_xid = {f.xid: f for f in facts if f.category == "xid"}
        assert {x: (f.action, f.gpu_index, f.rank, f.local_rank, f.severity) for x, f in by_xid.items()} == {
            13: (XidAction.RESTART_JOB, 0, 5, 1, "error"), 31: (XidAction.RESTART_JOB, 0, 5, 1, "error"),
            48: (XidAction.RESET_GPU, 1, 5, 1, "critical"), 79: (XidAction.REBOOT_THEN_CHECK, 1, None, None, "critical"),
            94: (XidAction.RESET_GPU, 0, 5, 1, "error")}
        other = {f.category: f for f in facts if f.category != "xid"}
        assert set(other) == {"sxid", "pcie_aer", "nic_link_down", "oom", "host_memory"}
        assert other["pcie_aer"].gpu_index == 1 and other["pcie_aer"].severity == "critical"
        assert (other["oom"].pid, other["oom"].rank, other["oom"].action) == (pid, 5, XidAction.RESTART_JOB)
        assert other["sxid"].action is XidAction.CORDON and other["host_memory"].severity == "critical"
        assert len(facts) == 10 and all(f.message for f in facts)  # the OOM kill's two lines: one fact

        agents[0].terminate()
        assert agents[0].wait(timeout=60) == 0
        kmsg.write(XID[79].replace("86:00", "3b:00"), EDAC_CE)  # while no agent runs
        agents.append(start_agent(args, env, tmp_path / "agent2.log"))
        wait_until(lambda: len(kernel_facts(topics, broker_bootstrap)) >= 12, 60, "the facts written while down")
        kmsg.write(LINK_DOWN.replace("5e:00", "5f:00"))
        wait_until(lambda: len(kernel_facts(topics, broker_bootstrap)) >= 13, 60, "a fact after the restart")
        after = kernel_facts(topics, broker_bootstrap)
        ids = [f.event_id for f in after]
        assert len(ids) == len(set(ids)) == 13, "a record read twice"
        assert {(f.category, f.gpu_index) for f in after if f.event_id not in {g.event_id for g in facts}} == {
            ("xid", 0), ("host_memory", None), ("nic_link_down", None)}
    finally:
        rank.kill()
        for agent in agents:
            if agent.poll() is None:
                agent.terminate()
                agent.wait(timeout=60)

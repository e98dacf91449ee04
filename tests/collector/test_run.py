"""`vigil run` with real child processes against the real broker: classification, exits, signals."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.agent_harness import agent_env, read_events
from tests.support.fake_node import FakeNode
from tests.support.waiting import wait_until
from vigil.contract import Heartbeat, LogLine, NicCounters, ProcessExit
from vigil.settings import VigilSettings

pytestmark = pytest.mark.kafka

FAILING_CHILD = textwrap.dedent("""
    import sys
    print("epoch 0 step 1 loss 2.5")
    print("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.", file=sys.stderr)
    print("[rank1]: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) "
          "ran for 600000 milliseconds before timing out.", file=sys.stderr)
    def load_batch():
        raise ValueError("boom: corrupt shard 17")
    try:
        load_batch()
    except ValueError:
        import traceback
        traceback.print_exc()
    sys.stderr.flush()
    sys.exit(3)
""")


def vigil_run(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vigil", "run", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_failing_child_is_classified_summarised_and_its_code_returned(
    topics: VigilSettings, broker_bootstrap: str, tmp_path: Path
) -> None:
    node = FakeNode(tmp_path)
    env = agent_env(topics, broker_bootstrap, tmp_path / "home")
    script = tmp_path / "child.py"
    script.write_text(FAILING_CHILD)
    done = vigil_run(env, "--host", "node-a", "--job", "job-a", "--sysfs-root", str(node.sysfs),
                     "--procfs-root", str(node.procfs), "--", sys.executable, str(script))
    assert done.returncode == 3, done.stderr
    assert "epoch 0 step 1 loss 2.5" in done.stdout  # echoed
    assert "ValueError: boom: corrupt shard 17" in done.stderr
    events = read_events(topics, broker_bootstrap, ["logs", "heartbeats"])
    logs = [e for e in events if isinstance(e, LogLine)]
    assert {(e.category, e.xid, e.rank) for e in logs} == {("xid", 79, None), ("nccl_timeout", None, 1),
                                                            ("traceback", None, None)}
    assert all(e.host == "node-a" and e.job_id == "job-a" for e in events)
    (exit_event,) = [e for e in events if isinstance(e, ProcessExit)]
    assert exit_event.exit_code == 3 and exit_event.signal is None
    assert exit_event.summary == "ValueError: boom: corrupt shard 17"
    assert exit_event.traceback.startswith("Traceback (most recent call last):")
    assert any(isinstance(e, Heartbeat) for e in events)
    # all output, classified or not, is in the segment files
    out_dir = tmp_path / "home" / "output" / "job-a" / "node-a"
    assert "epoch 0 step 1 loss 2.5" in (out_dir / "stdout.000000001.log").read_text()
    assert "GPU has fallen off the bus" in (out_dir / "stderr.000000001.log").read_text()


def test_signals_are_forwarded_and_the_child_env_is_set(
    topics: VigilSettings, broker_bootstrap: str, tmp_path: Path
) -> None:
    env = agent_env(topics, broker_bootstrap, tmp_path / "home")
    child = textwrap.dedent("""
        import os, sys, time
        print("env", os.environ["VIGIL_HOST"], os.environ["VIGIL_JOB_ID"], os.environ["VIGIL_SPOOL_DIR"], flush=True)
        print("ready", flush=True)
        time.sleep(120)
    """)
    out = tmp_path / "out.txt"
    with open(out, "w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "vigil", "run", "--host", "node-b", "--job", "job-b",
                                 "--heartbeat-interval", "0.2", "--", sys.executable, "-c", child],
                                env=env, stdout=fh, stderr=subprocess.STDOUT)
    wait_until(lambda: "ready" in out.read_text(), 60, "the child to start")

    def child_in_heartbeat() -> bool:
        beats = [e for e in read_events(topics, broker_bootstrap, ["heartbeats"]) if isinstance(e, Heartbeat)]
        return any(p.status in ("sleeping", "running") for b in beats for p in b.processes)

    wait_until(child_in_heartbeat, 60, "a heartbeat listing the child")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    assert f"env node-b job-b {tmp_path / 'home' / 'spool' / 'node-b'}" in out.read_text()
    events = read_events(topics, broker_bootstrap, ["logs", "heartbeats"])
    (exit_event,) = [e for e in events if isinstance(e, ProcessExit)]
    assert exit_event.signal == "SIGTERM" and exit_event.exit_code is None


def test_nic_rates_reach_kafka(topics: VigilSettings, broker_bootstrap: str, tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    env = agent_env(topics, broker_bootstrap, tmp_path / "home")
    child = "import time; time.sleep(3)"
    done = vigil_run(env, "--host", "node-c", "--nic-interval", "0.5", "--sysfs-root", str(node.sysfs),
                     "--procfs-root", str(node.procfs), "--", sys.executable, "-c", child)
    assert done.returncode == 0, done.stderr
    nics = [e for e in read_events(topics, broker_bootstrap, ["nic"]) if isinstance(e, NicCounters)]
    assert {(e.link, e.device) for e in nics} == {("rdma", "mlx5_0"), ("rdma", "mlx5_1"), ("ethernet", "eth0")}
    assert all(e.host == "node-c" and e.tx_bps == 0 for e in nics)  # counters in the fixture tree stand still
    assert {e.tx_bytes for e in nics if e.device == "mlx5_0"} == {4000}


def test_collector_mode_classifies_log_files_and_ships_fr_dumps(
    topics: VigilSettings, broker_bootstrap: str, tmp_path: Path
) -> None:
    import json

    from tests.support.agent_harness import start_agent
    from vigil.contract import CollectiveTrace

    logs = tmp_path / "torchrun-logs" / "run1" / "attempt_0" / "1"  # torchrun --log-dir layout: <local_rank>/
    logs.mkdir(parents=True)
    (logs / "stderr.log").write_text("warming up\nRuntimeError: CUDA error: an illegal memory access was encountered\n")
    fr = tmp_path / "home" / "fr"
    fr.mkdir(parents=True)
    dump = {"version": "2.10", "pg_config": {"": {"desc": "", "name": "", "ranks": "[0, 1]"}},
            "pg_status": {"0": {"last_enqueued_collective": "8", "last_started_collective": "-1",
                                "last_completed_collective": "7"}},
            "entries": [{"record_id": i, "pg_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": i + 1,
                         "p2p_seq_id": 0, "op_id": i + 1, "profiling_name": "gloo:all_reduce",
                         "time_created_ns": 1_795_000_000_000_000_000 + i, "state": "scheduled",
                         "retired": i < 7, "timeout_ms": 10000, "input_sizes": [[8]], "is_p2p": False}
                        for i in range(8)]}
    (fr / "nccl_trace_rank_3").write_text(json.dumps(dump))
    env = agent_env(topics, broker_bootstrap, tmp_path / "home")
    agent = start_agent(["collector", "--host", "node-d", "--job", "job-d", "--log-dir", str(tmp_path / "torchrun-logs")],
                        env, tmp_path / "agent.log")
    try:
        def kinds() -> set[str]:
            return {e.kind for e in read_events(topics, broker_bootstrap, ["logs", "collectives"])}

        wait_until(lambda: {"log", "collective"} <= kinds(), 60, "a classified line and a trace")
        with open(logs / "stderr.log", "a") as fh:
            fh.write("NVRM: Xid (PCI:0000:3b:00): 31, pid=99, MMU Fault\n")
        wait_until(lambda: any(isinstance(e, LogLine) and e.xid == 31
                             for e in read_events(topics, broker_bootstrap, ["logs"])), 60, "the appended Xid line")
    finally:
        agent.terminate()
        assert agent.wait(timeout=60) == 0
    events = read_events(topics, broker_bootstrap, ["logs", "collectives"])
    logs_ev = [e for e in events if isinstance(e, LogLine)]
    assert {(e.category, e.local_rank) for e in logs_ev} == {("cuda_error", 1), ("xid", 1)}
    (trace,) = [e for e in events if isinstance(e, CollectiveTrace)]
    assert trace.rank == 3 and len(trace.entries) == 8 and trace.last_completed_seq == {"0": 7}

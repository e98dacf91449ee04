"""`vigil run` with real child processes against the real broker: classification, exits, signals."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from collector_helpers import FakeNode, agent_env, read_events, wait_for

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
    # all output, classified or not, is in the rotating files
    out_dir = tmp_path / "home" / "output" / "job-a" / "node-a"
    assert "epoch 0 step 1 loss 2.5" in (out_dir / "stdout.log").read_text()
    assert "GPU has fallen off the bus" in (out_dir / "stderr.log").read_text()


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
    wait_for(lambda: "ready" in out.read_text(), 60, "the child to start")

    def child_in_heartbeat() -> bool:
        beats = [e for e in read_events(topics, broker_bootstrap, ["heartbeats"]) if isinstance(e, Heartbeat)]
        return any(p.status in ("sleeping", "running") for b in beats for p in b.processes)

    wait_for(child_in_heartbeat, 60, "a heartbeat listing the child")
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

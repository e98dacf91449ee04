"""The ingest SIGKILLed mid-batch and restarted: no event lost, nothing double-counted."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from crafted import heartbeats, nic, steps

from vigil.kafka.producer import EventProducer
from vigil.settings import VigilSettings

pytestmark = [pytest.mark.kafka, pytest.mark.clickhouse, pytest.mark.slow]

WORKER = str(Path(__file__).with_name("crash_worker.py"))


def worker(mode: str, topics: VigilSettings, dsn: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, WORKER, mode, str(topics.kafka_bootstrap), topics.topic_prefix, dsn, *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_sigkill_mid_batch_then_restart_loses_nothing_and_counts_once(topics: VigilSettings, tmp_path: Path) -> None:
    dsn = f"chdb://{tmp_path / 'crash-chdb'}"
    producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap), batch_events=10)
    evs = [*steps("crash", 32, 200, gpus=4), *heartbeats("crash", 32, 200), *nic("crash", 32, 100)]
    producer.send(evs)
    producer.flush()
    n_steps = 32 * 4 * 200

    first = worker("crash-after-write", topics, dsn, "3")  # dies between its 3rd write and that batch's commit
    out, _ = first.communicate(timeout=120)
    assert first.returncode == -signal.SIGKILL and "killed after write 3" in out, out[-2000:]

    second = worker("ingest", topics, dsn)
    out, _ = second.communicate(timeout=120)
    assert "drained" in out, out[-2000:]
    skipped = int(out.split("drained skipped_duplicates=")[1].split()[0])
    assert skipped > 0, "the uncommitted batch is read again and its stored events skipped"
    counter = worker("count", topics, dsn)
    out, _ = counter.communicate(timeout=120)
    counts = json.loads(out.strip().splitlines()[-1])
    assert counts == {"steps": n_steps, "unique_steps": n_steps, "window_samples": n_steps,
                      "job_step_ranks": n_steps, "heartbeats": 32 * 100, "nic_window_samples": 32 * 100}


def test_restart_resumes_from_committed_offsets(topics: VigilSettings, tmp_path: Path) -> None:
    """A clean stop commits: a second run finds nothing new and stores nothing twice."""
    dsn = f"chdb://{tmp_path / 'restart-chdb'}"
    producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap))
    producer.send(steps("again", 4, 10))
    producer.flush()
    for _ in range(2):
        out, _ = worker("ingest", topics, dsn).communicate(timeout=120)
        assert "drained" in out or "events 0" in out
        time.sleep(0.1)
    out, _ = worker("count", topics, dsn).communicate(timeout=120)
    assert json.loads(out.strip().splitlines()[-1])["steps"] == 4 * 2 * 10

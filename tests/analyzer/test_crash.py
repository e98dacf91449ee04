"""The ingest SIGKILLed mid-batch and restarted: no event lost, nothing double-counted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from analyzer_helpers import heartbeats, steps

from vigil.kafka.producer import EventProducer
from vigil.settings import VigilSettings

pytestmark = [pytest.mark.kafka, pytest.mark.clickhouse, pytest.mark.slow]

WORKER = str(Path(__file__).with_name("crash_worker.py"))


def worker(mode: str, topics: VigilSettings, dsn: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, WORKER, mode, str(topics.kafka_bootstrap), topics.topic_prefix, dsn],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_sigkill_mid_batch_then_restart_loses_nothing_and_counts_once(topics: VigilSettings, tmp_path: Path) -> None:
    dsn = f"chdb://{tmp_path / 'crash-chdb'}"
    producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap), batch_events=10)
    evs = [*steps("crash", 32, 200, gpus=4), *heartbeats("crash", 32, 200)]
    producer.send(evs)
    producer.flush()
    n_steps = 32 * 4 * 200

    first = worker("ingest", topics, dsn)
    assert first.stdout is not None
    seen = 0
    for line in first.stdout:  # kill once some batches are written but far from all
        if line.startswith("events "):
            seen = int(line.split()[1])
            if seen > 0:
                break
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    assert 0 < seen < len(evs), "the kill must land mid-stream"

    second = worker("ingest", topics, dsn)
    out, _ = second.communicate(timeout=120)
    assert "drained" in out, out[-2000:]
    counter = worker("count", topics, dsn)
    out, _ = counter.communicate(timeout=120)
    counts = json.loads(out.strip().splitlines()[-1])
    assert counts == {"steps": n_steps, "unique_steps": n_steps, "window_samples": n_steps,
                      "job_step_ranks": n_steps, "heartbeats": 32 * 100}


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

"""The ingest SIGKILLed mid-batch and restarted: no event lost, nothing double-counted in any table or rollup.

Three crash points: after a whole batch is written (before its commit); between two tables of a batch;
and between a raw table's part and one of its rollups' parts (that view detached for the crashed run).
The restarted consumer re-cuts the uncommitted batch from its intent and writes it under the same tokens:
what got through is not written again, what did not is filled. Producer re-sends in the stream are
dropped as well. Every raw table must hold each event once, and every rollup must equal the same
figures computed from the raw rows.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support.crafted import T0, heartbeats, nic, steps
from vigil.contract import SPECS, Event, GpuState, validate_event
from vigil.kafka.producer import EventProducer
from vigil.settings import VigilSettings

pytestmark = [pytest.mark.kafka, pytest.mark.clickhouse, pytest.mark.slow]

WORKER = str(Path(__file__).with_name("crash_worker.py"))
OTHER_KINDS = ("log", "exit", "collective", "alert", "checkpoint", "recovery")


def worker(mode: str, topics: VigilSettings, dsn: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, WORKER, mode, str(topics.kafka_bootstrap), topics.topic_prefix, dsn, *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def stream() -> tuple[list[Event], dict[str, int]]:
    """Every stored kind (heartbeats with GPUs), plus producer re-sends; and the rows each raw table must hold."""
    gpus = [GpuState(index=i, name="H100", util_pct=90.0 + i) for i in range(2)]
    hbs = [h.model_copy(update={"gpus": gpus}) for h in heartbeats("crash", 16, 100)]
    evs: list[Event] = [*steps("crash", 16, 100, gpus=4), *hbs, *nic("crash", 16, 50)]
    for spec in SPECS:
        if spec.kind in OTHER_KINDS:
            evs += [validate_event(spec.kind, {**spec.example, "event_id": f"{spec.kind}-{i:06d}", "host": f"h{i % 16:04d}",
                                               "ts": (T0 + timedelta(seconds=i)).isoformat()}) for i in range(40)]
    expected = {"step_timings": 16 * 4 * 100, "heartbeats": 16 * 50, "gpu_stats": 16 * 50 * 2, "nic_counters": 16 * 50,
                **{t: 40 for t in ("log_lines", "process_exits", "collective_traces", "alert_events", "checkpoints",
                                   "recovery_actions")}}
    resent = evs[100:400] + hbs[:50] + evs[-30:]  # an agent replaying its spool: same ids, same timestamps
    return evs + resent, expected


def produce(topics: VigilSettings) -> dict[str, int]:
    events, expected = stream()
    producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap), batch_events=10)
    producer.send(events)
    producer.flush()
    return expected


def assert_exact(topics: VigilSettings, dsn: str, expected: dict[str, int]) -> None:
    out, _ = worker("count", topics, dsn).communicate(timeout=120)
    counts: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    for table, n in expected.items():
        assert counts[table] == [n, n], f"{table}: [rows, distinct event_ids] = {counts[table]}, expected {n} each"
    for name in ("phase_host_windows", "phase_rank_windows", "job_steps", "job_step_runs",
                 "job_step_spans", "nic_windows", "host_presence", "job_clock", "host_clock"):
        assert counts[name] == counts[name + ":raw"] and counts[name], f"{name}: {counts[name]} != {counts[name + ':raw']}"


def crash_and_restart(topics: VigilSettings, dsn: str, *crash: str) -> str:
    first = worker(*crash[:1], topics, dsn, *crash[1:])
    out, _ = first.communicate(timeout=180)
    assert first.returncode == -signal.SIGKILL and "killed" in out, out[-2000:]
    second = worker("ingest", topics, dsn)
    out, _ = second.communicate(timeout=180)
    assert "drained" in out and "failed=''" in out, out[-2000:]
    return out


def test_sigkill_after_write_then_restart_loses_nothing_and_counts_once(topics: VigilSettings, tmp_path: Path) -> None:
    dsn = f"chdb://{tmp_path / 'crash-chdb'}"
    expected = produce(topics)
    out = crash_and_restart(topics, dsn, "crash-after-write", "2")  # dies between its 2nd write and that batch's commit
    assert "replayed=1" in out, out[-500:]  # the uncommitted batch was re-cut from its intent and written again
    assert_exact(topics, dsn, expected)


def test_sigkill_between_tables_of_a_batch(topics: VigilSettings, tmp_path: Path) -> None:
    dsn = f"chdb://{tmp_path / 'mid-chdb'}"
    expected = produce(topics)
    out = crash_and_restart(topics, dsn, "crash-mid-write", "1", "heartbeats")  # gpu_stats, heartbeats in; the rest not
    assert "replayed=1" in out, out[-500:]
    assert_exact(topics, dsn, expected)


def test_sigkill_between_a_raw_part_and_a_rollup_part(topics: VigilSettings, tmp_path: Path) -> None:
    dsn = f"chdb://{tmp_path / 'mv-chdb'}"
    expected = produce(topics)
    out = crash_and_restart(topics, dsn, "crash-mid-write", "1", "step_timings", "phase_host_windows_mv")
    assert "replayed=1" in out, out[-500:]
    assert_exact(topics, dsn, expected)


def test_sigkill_between_a_raw_part_and_a_rollup_part_with_the_decode_process(topics: VigilSettings, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The same crash with step records decoded, built and encoded by the decode process (analyzer/ingest/offload.py):
    the crashed run inserts the child's encoded columns, the restarted one re-cuts the batch from its events."""
    monkeypatch.setenv("VIGIL_ANALYZER_DECODE_PROCESS", "true")  # the workers' settings
    dsn = f"chdb://{tmp_path / 'mv-off-chdb'}"
    expected = produce(topics)
    out = crash_and_restart(topics, dsn, "crash-mid-write", "1", "step_timings", "phase_host_windows_mv")
    assert "replayed=1" in out, out[-500:]
    assert_exact(topics, dsn, expected)


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
    assert json.loads(out.strip().splitlines()[-1])["step_timings"] == [4 * 2 * 10] * 2

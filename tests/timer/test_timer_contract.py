"""The timer's lines are valid `StepTiming` events, and importing it stays light."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.timer.timer_testutil import read_records, timer_config
from vigil.contract.telemetry import StepTiming
from vigil.timer import StepTimer

pytestmark = pytest.mark.pure

REPO = Path(__file__).resolve().parents[2]


def test_every_record_validates_against_step_timing(tmp_path: Path) -> None:
    t = StepTimer(timer_config(spool_dir=tmp_path, device="cpu", job_id="job-1", host="node-1", rank=3, local_rank=3, world_size=8,
        coords={"dp": 1, "tp": 1, "pp": 0}, flops_per_step=1e9, gpu_peak_tflops=1.0, queue_size=2,
        flush_interval_s=3600,))  # fmt: skip
    with t.phase("data"):
        pass
    for i in range(4):  # 2 of them are dropped: the next written record reports it
        with t.step(tokens=1024, samples=8), t.phase("forward"), t.phase("attention"):
            time.sleep(0.001 * i)
    t.flush()
    with pytest.raises(RuntimeError), t.step(), t.phase("backward"):
        raise RuntimeError("nan loss")
    with t.step(step=9):  # no phases, no counts
        pass
    t.close()
    lines = [p.read_text() for p in sorted(tmp_path.rglob("*.jsonl"))]
    events = [StepTiming.model_validate_json(x) for text in lines for x in text.splitlines()]
    assert len(events) == 4
    assert [e.step for e in events] == [0, 1, 4, 9]
    assert events[0].dropped == 2 and events[0].coords.tp == 1
    assert "forward/attention" in events[0].phases and "data" in events[0].phases
    assert events[2].failed and not events[3].failed
    assert events[0].ts.tzinfo is not None and abs(events[0].ts.timestamp() - time.time()) < 60
    assert len({e.event_id for e in events}) == 4
    assert read_records(tmp_path)[0]["kind"] == "step"


def test_import_pulls_in_no_platform_dependency(tmp_path: Path) -> None:
    # Only the `vigil` namespace package itself, `vigil.timer.*` and the training side's leaf may be loaded.
    check = ("bad = [m for m in sys.modules if m.startswith(('confluent_kafka','clickhouse_connect','dash','chdb',"
             "'pydantic','psutil','vigil.')) and not m.startswith(('vigil.timer','vigil.trainside'))]; "
             "assert not bad, bad; ")
    code = (
        "import sys; import vigil.timer as timer; " + check +
        "t = timer.StepTimer(timer.TimerConfig(device='cpu', spool=timer.SpoolConfig(directory=sys.argv[1]))); "
        "ctx = t.step(); ctx.__enter__(); ctx.__exit__(None, None, None); t.close(); " + check +
        "assert t.written == 1"
    )  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr

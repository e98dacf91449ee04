"""A real job (torchrun, gloo, CPU) through `vigil.data`: 3 ranks -> crash -> 2 ranks -> crash -> 3 ranks.

Every sample id of the epoch is consumed exactly once along the committed steps (each run's
steps up to the checkpoint the next run resumed from), in static, dynamic and balanced mode; the
steps after a checkpoint that died with the job are read again; and (static) the loss
sequence of two identical runs is identical.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from vigil.kafka.broker import free_port

pytestmark = [pytest.mark.pure, pytest.mark.slow]
JOB = Path(__file__).with_name("elastic_job.py")
ROOT = Path(__file__).resolve().parents[2]
N = 240


def torchrun(work: Path, world: int, tag: str, mode: str, crash_after: int | None = None) -> dict[str, Any]:
    """Run the job; rank 0's resume report."""
    work.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(world), "--master-port",
           str(free_port()), str(JOB), str(work), tag, mode, *([str(crash_after)] if crash_after is not None else [])]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HOME": str(work)}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == (0 if crash_after is None else 1), done.stderr[-4000:]
    report: dict[str, Any] = json.loads((work / f"resume-{tag}.json").read_text())
    return report


def steps(work: Path, tag: str) -> dict[int, list[dict[str, Any]]]:
    """Each step's records, one per rank."""
    out: dict[int, list[dict[str, Any]]] = {}
    for f in sorted(work.glob(f"ids-{tag}-rank*.jsonl")):
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            out.setdefault(rec["step"], []).append(rec)
    return out


@pytest.mark.parametrize("mode", ["static", "dynamic", "balanced"])
def test_3_2_3_ranks_with_crashes_consume_every_sample_exactly_once(tmp_path: Path, mode: str) -> None:
    first = torchrun(tmp_path, 3, "a", mode, crash_after=6)
    second = torchrun(tmp_path, 2, "b", mode, crash_after=13)
    third = torchrun(tmp_path, 3, "c", mode)
    assert (first["resumed"], first["world"], first["samples"]) == (None, 3, N)
    assert second["world"] == 2 and third["world"] == 3
    resumed_b, resumed_c = second["resumed"], third["resumed"]
    assert resumed_b is not None and resumed_b < 6 and resumed_c is not None and resumed_c < 13
    runs = [(steps(tmp_path, "a"), resumed_b), (steps(tmp_path, "b"), resumed_c), (steps(tmp_path, "c"), None)]
    committed: list[int] = []
    for records, until in runs:
        for step, recs in records.items():
            assert len(recs) == len(records[min(records)])  # every rank logged every step
            if until is None or step <= until:
                committed.extend(i for r in recs for i in r["ids"])
    assert Counter(committed) == Counter(range(N))  # every sample once along the committed steps
    lost = {i for step, recs in runs[0][0].items() if step > resumed_b for r in recs for i in r["ids"]}
    assert lost and lost <= {i for recs in runs[1][0].values() for r in recs for i in r["ids"]}  # read again
    assert second["samples"] == N - 3 * 4 * (resumed_b + 1)  # the rest of the epoch was re-split over 2 ranks
    if mode == "balanced":  # the epoch's first 12 x steps samples were read: one shard part-way, or none
        assert second["in_flight"] == int(3 * 4 * (resumed_b + 1) % 16 != 0)
    else:
        assert second["in_flight"] == 3  # each rank had read its shard part-way: resumed inside it, on 2 ranks
    if mode == "static":  # the same job again: the same batches, so the same loss sequence, bit for bit
        torchrun(tmp_path / "again", 3, "a", mode, crash_after=6)
        def losses(work: Path) -> list[float]:
            return [recs[0]["loss"] for _, recs in sorted(steps(work, "a").items())]
        assert len(losses(tmp_path)) == 7 and losses(tmp_path / "again") == losses(tmp_path)
    if mode == "balanced":  # the same job again: who read what may differ, each step's samples may not
        torchrun(tmp_path / "again", 3, "a", mode, crash_after=6)
        def step_ids(work: Path) -> list[list[int]]:
            return [sorted(i for r in recs for i in r["ids"]) for _, recs in sorted(steps(work, "a").items())]
        assert len(step_ids(tmp_path)) == 7 and step_ids(tmp_path / "again") == step_ids(tmp_path)


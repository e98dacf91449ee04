"""Planted snapshots and checkpoints, with markers the planter recomputed, against the real checkpointer (torch).

Whoever can write a job's snapshot root or checkpoint directory can compute the sha256 digests of a
marker; with the job's integrity key (`VIGIL_CHECKPOINT_KEY_FILE`, as `vigil run` gives it) such a
marker lacks the key's mac: the planted checkpoint is never restored (its pickle never runs) and is
pruned; the planted snapshot is never listed, and a restore reports it (a ``failed`` `unverified`
event of that rank) so the controller raises one `security` alert. The snapshot root is this uid's, 0700, files 0600; a
root owned by another uid is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import torch

from vigil.contract import Checkpoint, validate_event
from vigil.recovery.checkpoint import CheckpointConfig, Checkpointer, integrity
from vigil.recovery.checkpoint.layout import FORMAT, MARKER
from vigil.recovery.checkpoint.snapshot import MARKER as SNAP_MARKER
from vigil.recovery.checkpoint.snapshot import SnapshotDir
from vigil.recovery.controller.claims import Claims
from vigil.signing.policy import Refusals

pytestmark = pytest.mark.pure


class Payload:
    def __init__(self, sentinel: Path) -> None:
        self.sentinel = sentinel

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.sentinel), "w"))


@pytest.fixture(autouse=True)
def job_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    key = tmp_path / "job.key"
    key.write_text("k" * 64)
    key.chmod(0o600)
    monkeypatch.setenv(integrity.KEY_FILE_VAR, str(key))
    return key


def cfg(tmp_path: Path, **kw: Any) -> CheckpointConfig:
    return CheckpointConfig(directory=tmp_path / "ckpt", spool_dir=tmp_path / "spool", job_id="job", host="h", **kw)


def save(tmp_path: Path, step: int) -> None:
    with Checkpointer(cfg(tmp_path, keep=1)) as ckpt:
        assert ckpt.save(step, {"w": torch.full((4,), float(step))}) and ckpt.wait(30), ckpt.last_error


def test_a_planted_checkpoint_with_a_recomputed_marker_never_runs_its_pickle_and_is_pruned(tmp_path: Path) -> None:
    save(tmp_path, 1)
    sentinel = tmp_path / "pickle-ran"
    planted = tmp_path / "ckpt" / "step-0000000009-0badc0de"
    planted.mkdir()
    evil = pickle.dumps(Payload(sentinel))
    (planted / ".metadata").write_bytes(evil)
    (planted / MARKER).write_text(json.dumps({"format": FORMAT, "step": 9, "token": "0badc0de", "world_size": 1,
                                              "committed_at": time.time(), "bytes": len(evil),
                                              "files": {".metadata": hashlib.sha256(evil).hexdigest()}}))
    w = torch.full((4,), -1.0)
    with Checkpointer(cfg(tmp_path)) as ckpt:
        assert ckpt.load_latest({"w": w}) == 1 and torch.equal(w, torch.full((4,), 1.0))
    assert not sentinel.exists()
    spool = [json.loads(ln) for f in sorted((tmp_path / "spool").rglob("*.jsonl")) for ln in f.read_text().splitlines()]
    (failed,) = [e for e in spool if e.get("phase") == "failed"]  # the controller raises it as a security alert
    assert failed["step"] == 9 and failed["unverified"] and "integrity key" in failed["error"]
    save(tmp_path, 2)
    assert not planted.exists() and not sentinel.exists()


def test_a_planted_snapshot_with_a_recomputed_marker_is_never_listed(tmp_path: Path) -> None:
    shm = tmp_path / "shm" / "job"
    own = SnapshotDir(shm / "0", rank=0, world_size=1, keep=2)
    own.write(1, {"w": torch.ones(2)})
    assert (shm.stat().st_mode & 0o777, (shm / "0").stat().st_mode & 0o777) == (0o700, 0o700)
    assert all(p.stat().st_mode & 0o077 == 0 for p in (shm / "0").rglob("*") if p.is_file())
    planted = plant(shm / "0", 9)
    assert [s.step for s in own.held()] == [1] and [s.step for s in own.planted()] == [9]
    own.write(2, {"w": torch.ones(2)})
    assert not planted.exists()


def plant(rank_dir: Path, step: int) -> Path:
    """A snapshot of `step` whose marker the planter computed (right digest, no mac)."""
    planted = rank_dir / f"snap-{step:010d}-0badc0de"
    planted.mkdir()
    torch.save({"w": torch.full((2,), 666.0)}, planted / "state.pt")
    (planted / SNAP_MARKER).write_text(json.dumps({
        "format": "vigil-snapshot/1", "step": step, "token": "0badc0de", "rank": 0, "world_size": 1,
        "sha256": hashlib.sha256((planted / "state.pt").read_bytes()).hexdigest(), "written_at": time.time()}))
    return planted


def test_a_restore_reports_a_planted_snapshot_and_the_controller_raises_one_alert(tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    with Checkpointer(cfg(tmp_path, snapshot_dir=shm)) as ckpt:
        assert ckpt.snapshot(1, {"w": torch.ones(2)})
        assert ckpt.snapshots.wait(30) and ckpt.snapshots.written == 1
    plant(shm / "0", 9)
    state: dict[str, Any] = {"w": torch.zeros(2)}
    with Checkpointer(cfg(tmp_path, snapshot_dir=shm)) as ckpt:
        assert ckpt.load_latest(state) == 1 and torch.equal(state["w"], torch.ones(2))
        assert ckpt.load_latest(state) == 1  # reported again: the controller's alert stays one
    spool = [json.loads(ln) for f in sorted((tmp_path / "spool").rglob("*.jsonl")) for ln in f.read_text().splitlines()]
    failed = [e for e in spool if e.get("phase") == "failed"]
    assert [(e["step"], e["unverified"]) for e in failed] == [(9, True), (9, True)]
    assert "snapshot marker not made with the job's integrity key" in failed[0]["error"]
    events = [validate_event("checkpoint", e, 1) for e in failed]
    assert all(isinstance(e, Checkpoint) for e in events)
    (alert,) = Claims(refusals=Refusals(reporter="controller")).review(events, [], datetime.now(UTC))
    assert (alert.subject, alert.job_id, alert.host) == ("checkpoint", "job", "h")
    assert alert.evidence["detail"].startswith("step 9 ")


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0, reason="needs root to chown")
def test_a_snapshot_root_owned_by_another_uid_is_refused(tmp_path: Path) -> None:
    shm = tmp_path / "shm" / "job"
    shm.mkdir(parents=True)
    os.chown(shm, 65534, 65534)
    with pytest.raises(PermissionError, match="belongs to uid 65534"):
        SnapshotDir(shm / "0", rank=0, world_size=1, keep=2).write(1, {"w": torch.ones(2)})


def test_a_key_file_open_to_others_is_refused(tmp_path: Path, job_key: Path) -> None:
    job_key.chmod(0o644)
    with pytest.raises(ValueError, match="mode 0600"):
        integrity.read_key(job_key)

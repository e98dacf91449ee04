"""Planted snapshots and checkpoints, with markers the planter recomputed, against the real checkpointer (torch).

Whoever can write a job's snapshot root or checkpoint directory can compute the sha256 digests of a
marker; with the job's integrity key (`VIGIL_CHECKPOINT_KEY_FILE`, as `vigil run` gives it) such a
marker lacks the key's mac: the planted checkpoint is never restored (its pickle never runs) and is
pruned; the planted snapshot is never listed. The snapshot root is this uid's, 0700, files 0600; a
root owned by another uid is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from vigil.recovery.checkpoint import CheckpointConfig, Checkpointer, integrity
from vigil.recovery.checkpoint.layout import FORMAT, MARKER
from vigil.recovery.checkpoint.snapshot import MARKER as SNAP_MARKER
from vigil.recovery.checkpoint.snapshot import SnapshotDir

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
    planted = shm / "0" / "snap-0000000009-0badc0de"
    planted.mkdir()
    torch.save({"w": torch.full((2,), 666.0)}, planted / "state.pt")
    (planted / SNAP_MARKER).write_text(json.dumps({
        "format": "vigil-snapshot/1", "step": 9, "token": "0badc0de", "rank": 0, "world_size": 1,
        "sha256": hashlib.sha256((planted / "state.pt").read_bytes()).hexdigest(), "written_at": time.time()}))
    assert [s.step for s in own.held()] == [1]
    own.write(2, {"w": torch.ones(2)})
    assert not planted.exists()


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

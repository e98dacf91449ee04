"""Checkpoints planted, tampered with or dated in the future, against the real checkpointer (torch, one process).

A checkpoint counts only through a commit marker that lists the sha256 of its every file: a
planted directory never runs its pickle, a tampered one is refused with a ``failed`` event and
the next verified one is loaded, a marker dated ahead does not win over higher steps, and
pruning never deletes a checkpoint of a higher step than the one it keeps.
"""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from vigil.recovery.checkpoint import CheckpointConfig, Checkpointer
from vigil.recovery.checkpoint.errors import RestoreError
from vigil.recovery.checkpoint.layout import FORMAT, MARKER

pytestmark = pytest.mark.pure


class Payload:
    def __init__(self, sentinel: Path) -> None:
        self.sentinel = sentinel

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.sentinel), "w"))


def cfg(tmp_path: Path, **kw: Any) -> CheckpointConfig:
    return CheckpointConfig(directory=tmp_path / "ckpt", spool_dir=tmp_path / "spool", job_id="job", host="h", **kw)


def events(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for f in sorted((tmp_path / "spool").rglob("*.jsonl")) for ln in f.read_text().splitlines()]


def save_steps(tmp_path: Path, steps: list[int], **kw: Any) -> None:
    w = torch.zeros(4)
    with Checkpointer(cfg(tmp_path, **kw)) as ckpt:
        for step in steps:
            w.fill_(step)
            assert ckpt.save(step, {"w": w}) and ckpt.wait(30), ckpt.last_error


def step_dir(tmp_path: Path, step: int) -> Path:
    (found,) = (tmp_path / "ckpt").glob(f"step-{step:010d}-*")
    return found


def load(tmp_path: Path) -> tuple[int | None, torch.Tensor]:
    w = torch.full((4,), -1.0)
    with Checkpointer(cfg(tmp_path)) as ckpt:
        return ckpt.load_latest({"w": w}), w


def test_a_planted_checkpoint_never_runs_its_pickle_and_is_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    save_steps(tmp_path, [1])
    sentinel = tmp_path / "pickle-ran"
    evil = pickle.dumps(Payload(sentinel))
    old = tmp_path / "ckpt" / "step-0000000009-0badc0de"  # an old-format marker, no digests: not a checkpoint
    old.mkdir()
    (old / ".metadata").write_bytes(evil)
    (old / MARKER).write_text(json.dumps({"format": "vigil-checkpoint/1", "step": 9, "token": "0badc0de",
                                          "committed_at": time.time()}))
    forged = tmp_path / "ckpt" / "step-0000000008-00c0ffee"  # digests that do not match its files
    forged.mkdir()
    (forged / ".metadata").write_bytes(evil)
    (forged / MARKER).write_text(json.dumps({"format": FORMAT, "step": 8, "token": "00c0ffee",
                                             "committed_at": time.time(), "files": {".metadata": "0" * 64}}))
    with caplog.at_level(logging.WARNING, logger="vigil.recovery.checkpoint"):
        step, w = load(tmp_path)
    assert step == 1 and torch.equal(w, torch.full((4,), 1.0))
    assert not sentinel.exists()
    assert "1 checkpoints under" in caplog.text and "step-0000000009-0badc0de" in caplog.text
    failed = [e for e in events(tmp_path) if e["phase"] == "failed"]
    assert [(e["step"], e["error"]) for e in failed] == [
        (8, "IntegrityError: step-0000000008-00c0ffee: sha256 of .metadata does not match the commit marker")]


def test_a_tampered_checkpoint_is_refused_with_an_event_and_the_next_verified_one_loads(tmp_path: Path) -> None:
    save_steps(tmp_path, [1, 2, 3])
    shard = step_dir(tmp_path, 3) / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(bytes(data))
    (step_dir(tmp_path, 2) / "extra.distcp").write_bytes(b"planted")
    step, w = load(tmp_path)
    assert step == 1 and torch.equal(w, torch.full((4,), 1.0))
    failed = [(e["step"], e["error"]) for e in events(tmp_path) if e["phase"] == "failed"]
    assert failed == [
        (3, f"IntegrityError: {step_dir(tmp_path, 3).name}: sha256 of __0_0.distcp does not match the commit marker"),
        (2, f"IntegrityError: {step_dir(tmp_path, 2).name}: files not in the commit marker: extra.distcp"),
    ]
    (step_dir(tmp_path, 1) / ".metadata").unlink()
    with pytest.raises(RestoreError, match=r"files missing: \.metadata") as err:
        load(tmp_path)
    assert [s for s, _, _ in err.value.rejected] == [3, 2, 1]


def test_the_marker_lists_every_file_with_its_sha256(tmp_path: Path) -> None:
    save_steps(tmp_path, [1])
    directory = step_dir(tmp_path, 1)
    marker = json.loads((directory / MARKER).read_text())
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir() if p.name != MARKER}
    assert marker["files"] == files and {".metadata", "__0_0.distcp"} <= set(files)


def test_a_future_dated_marker_does_not_win_and_pruning_keeps_higher_steps(tmp_path: Path) -> None:
    save_steps(tmp_path, [1, 2])
    marker_path = step_dir(tmp_path, 1) / MARKER
    marker = json.loads(marker_path.read_text())
    marker_path.write_text(json.dumps({**marker, "committed_at": time.time() + 86_400 * 365}))  # a clock jump
    step, w = load(tmp_path)
    assert step == 2 and torch.equal(w, torch.full((4,), 2.0))
    save_steps(tmp_path, [3], keep=2)  # keeps 3 and 2 (highest steps), not the future-dated 1
    assert sorted(int(p.name[5:15]) for p in (tmp_path / "ckpt").iterdir()) == [2, 3]
    save_steps(tmp_path, [1], keep=1)  # a rollback: the higher steps are never pruned by it
    assert sorted(int(p.name[5:15]) for p in (tmp_path / "ckpt").iterdir()) == [1, 2, 3]
    assert load(tmp_path)[0] == 3

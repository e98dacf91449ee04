"""In-memory snapshots in one process: taken every N steps, K kept, verified, preferred over older checkpoints."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint.stateful import Stateful

from vigil.contract import Checkpoint, validate_event
from vigil.recovery.checkpoint import CheckpointConfig, Checkpointer, ConfigError, RNGState, TrainState
from vigil.recovery.checkpoint.memory import choose

pytestmark = pytest.mark.pure


def cfg(tmp_path: Path, **kw: Any) -> CheckpointConfig:
    kw.setdefault("snapshot_wait_s", 30)  # every snapshot taken: the tests count them
    kw.setdefault("snapshot_budget", None)  # every snapshot_every steps: the tests name the steps
    return CheckpointConfig(directory=tmp_path / "ckpt", spool_dir=tmp_path / "spool", job_id="job", host="h",
                            snapshot_dir=tmp_path / "shm", **kw)


def job(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer, dict[str, Any]]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    return model, opt, {"train": TrainState(model, opt), "rng": RNGState(), "meta": {"step": 0}}


def step(model: torch.nn.Module, opt: torch.optim.Optimizer, state: dict[str, Any], n: int) -> None:
    opt.zero_grad()
    x = torch.randn(4, 8) * random.random()  # both generators are part of the state
    model(x).pow(2).mean().backward()
    opt.step()
    state["meta"]["step"] = n


def snapshots(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "shm" / "0").iterdir())


def restored_events(tmp_path: Path) -> list[dict[str, Any]]:
    lines = [json.loads(line) for f in sorted((tmp_path / "spool").rglob("*.jsonl")) for line in f.read_text().splitlines()]
    return [e for e in lines if e["phase"] == "restored"]


def test_choose_takes_the_newest_step_every_rank_holds_unless_a_checkpoint_is_newer() -> None:
    assert choose([[10, 14, 13], [-1, 14, 13], [-1, 13, 12]]) == 13
    assert choose([[10, 16, 14], [-1, 15, 14]]) == 14  # a skipped snapshot: the minimum (15) is not held by all
    assert choose([[20, 14, 13], [-1, 14, 13]]) is None  # the persisted checkpoint is newer
    assert choose([[10, 10, 9], [-1, 10, -1]]) == 10  # as new as the checkpoint: memory (faster)
    assert choose([[10, 14, 13], [-1, -1, -1]]) is None  # a rank without snapshots (a new host)
    assert choose([[-1, -1, -1]]) is None


def test_config_checks_the_snapshot_settings(tmp_path: Path) -> None:
    for bad in ({"snapshot_every": 0}, {"snapshot_keep": 0}, {"snapshot_wait_s": -1}):
        with pytest.raises(ConfigError):
            cfg(tmp_path, **bad)


def test_snapshots_keep_k_restore_bitwise_and_beat_an_older_checkpoint(tmp_path: Path) -> None:
    random.seed(1)
    model, opt, state = job()
    with Checkpointer(cfg(tmp_path, snapshot_every=2, snapshot_keep=2)) as ckpt:
        for n in range(1, 10):
            step(model, opt, state, n)
            if n == 4:
                assert ckpt.save(n, state) and ckpt.wait(30)
            assert ckpt.snapshot(n, state) == (n % 2 == 0)
        assert ckpt.snapshots.wait(30)
        assert [name[5:15] for name in snapshots(tmp_path)] == ["0000000006", "0000000008"]
        assert ckpt.stats().snapshots == 4 and ckpt.stats().snapshots_written == 4
    # a new process (other seed) resumes from the snapshot of step 8, the newest, not the checkpoint of 4
    model2, opt2, state2 = job(seed=5)
    with Checkpointer(cfg(tmp_path, snapshot_every=2, snapshot_keep=2)) as again:
        assert again.load_latest(state2) == 8
        assert again.last_restore is not None and again.last_restore.source == "memory"
    assert state2["meta"] == {"step": 8}
    for n in range(9, 13):
        step(model2, opt2, state2, n)
    # the uninterrupted run, from scratch with the same seeds
    random.seed(1)
    model3, opt3, state3 = job()
    for n in range(1, 13):
        step(model3, opt3, state3, n)
    for a, b in zip(model2.state_dict().values(), model3.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    (event,) = restored_events(tmp_path)
    assert event["step"] == 8 and event["source"] == "memory"
    checked = validate_event("checkpoint", event)
    assert isinstance(checked, Checkpoint) and checked.source == "memory"


def test_a_rollback_restores_nothing_newer_than_its_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 51's SDC rollback: the agent sets VIGIL_RESTORE_MAX_STEP from the start command; the ranks take the
    newest snapshot or checkpoint at or below it (a newer one may hold the corruption) and drop the newer snapshots."""
    assert choose([[4, 8, 6], [-1, 8, 6]], at_most=7) == 6
    assert choose([[4, 8, 6], [-1, 8, 6]], at_most=5) is None  # the checkpoint of step 4, then
    model, opt, state = job()
    with Checkpointer(cfg(tmp_path, snapshot_every=2, snapshot_keep=2)) as ckpt:
        for n in range(1, 9):
            step(model, opt, state, n)
            if n in (4, 8):
                assert ckpt.save(n, state) and ckpt.wait(30)
            ckpt.snapshot(n, state)
        assert ckpt.snapshots.wait(30)
    monkeypatch.setenv("VIGIL_RESTORE_MAX_STEP", "7")
    with Checkpointer(cfg(tmp_path, snapshot_every=2, snapshot_keep=2)) as again:
        fresh = job(seed=3)[2]
        assert again.load_latest(fresh) == 6 and fresh["meta"] == {"step": 6}
        assert again.last_restore is not None and again.last_restore.source == "memory"
        assert again.snapshots.find(8) is None  # the abandoned future is gone
        assert [c.step for c in again.layout.committed()] == [4]  # and its checkpoint of step 8
        fresh = job(seed=3)[2]
        assert again.load_latest(fresh, at_most=5) == 4 and fresh["meta"] == {"step": 4}
        assert again.last_restore is not None and again.last_restore.source == "persisted"
    monkeypatch.delenv("VIGIL_RESTORE_MAX_STEP")  # an ordinary restart after the rollback: never the newer future
    with Checkpointer(cfg(tmp_path, snapshot_every=2, snapshot_keep=2)) as later:
        fresh = job(seed=3)[2]
        assert later.load_latest(fresh) == 4 and fresh["meta"] == {"step": 4}


def test_a_corrupt_snapshot_is_never_restored_and_the_checkpoint_is(tmp_path: Path) -> None:
    model, opt, state = job()
    with Checkpointer(cfg(tmp_path, snapshot_keep=1)) as ckpt:
        step(model, opt, state, 1)
        assert ckpt.save(1, state) and ckpt.wait(30)
        step(model, opt, state, 2)
        assert ckpt.snapshot(2, state) and ckpt.snapshots.wait(30)
    (name,) = snapshots(tmp_path)
    blob = tmp_path / "shm" / "0" / name / "state.pt"
    raw = bytearray(blob.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # one flipped byte in the middle of the tensors
    blob.write_bytes(bytes(raw))
    _, _, fresh = job(seed=3)
    with Checkpointer(cfg(tmp_path)) as again:
        assert again.load_latest(fresh) == 1
        assert again.last_restore is not None and again.last_restore.source == "persisted"
    assert fresh["meta"] == {"step": 1}
    assert [e["source"] for e in restored_events(tmp_path)] == ["persisted"]


def test_a_newer_checkpoint_wins_and_snapshots_of_an_abandoned_future_are_removed(tmp_path: Path) -> None:
    model, opt, state = job()
    with Checkpointer(cfg(tmp_path)) as ckpt:
        step(model, opt, state, 1)
        assert ckpt.snapshot(1, state) and ckpt.snapshots.wait(30)
        step(model, opt, state, 2)
        assert ckpt.save(2, state) and ckpt.wait(30)
    _, _, fresh = job(seed=3)
    with Checkpointer(cfg(tmp_path)) as again:
        assert again.load_latest(fresh) == 2
    assert fresh["meta"] == {"step": 2}
    assert len(snapshots(tmp_path)) == 1  # step 1 is older than what was restored: kept
    # nothing persisted, snapshots of steps 5 and 6 left by an earlier run; a restore to nothing drops them
    other = tmp_path / "other"
    model, opt, state = job()
    with Checkpointer(cfg(other)) as ckpt:
        for n in (5, 6):
            step(model, opt, state, n)
            assert ckpt.snapshot(n, state) and ckpt.snapshots.wait(30)
    with Checkpointer(cfg(other, snapshot_keep=1)) as again:
        assert again.load_latest(job()[2]) == 6  # snapshot_keep=1: only the newest is listed
        assert again.snapshots.find(5) is not None  # older than the step restored: kept
        for snap in again.snapshots.dir.complete():  # both torn: nothing to resume from
            (snap.path / "state.pt").write_bytes(b"torn")
    with Checkpointer(cfg(other)) as again:
        assert again.load_latest(job()[2]) is None and snapshots(other) == []


class Broken(Stateful):
    def state_dict(self) -> dict[str, Any]:
        raise RuntimeError("user state_dict bug")

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        raise AssertionError("never loaded")


def test_a_snapshot_while_the_previous_one_is_written_is_skipped_at_once_by_default(tmp_path: Path) -> None:
    state = {"big": torch.randn(4 << 20)}
    with Checkpointer(cfg(tmp_path, snapshot_wait_s=0)) as ckpt:
        assert ckpt.snapshot(1, state)
        assert not ckpt.snapshot(2, state)  # 16 MiB are still being written: skipped, not waited for
        assert ckpt.snapshots.wait(30) and ckpt.snapshot(3, state) and ckpt.snapshots.wait(30)
        stats = ckpt.stats()
        assert (stats.snapshots, stats.snapshots_skipped, stats.snapshots_written) == (2, 1, 2)


def test_snapshot_never_raises_into_training_and_counts_failures(tmp_path: Path) -> None:
    with Checkpointer(cfg(tmp_path)) as ckpt:
        assert ckpt.snapshot(1, {"bad": Broken()}) is False
        assert ckpt.snapshot(-1, {}) is False
        assert ckpt.snapshots.wait(30)
        stats = ckpt.stats()
        assert stats.snapshots_failed == 1 and stats.snapshots == 0
    assert ckpt.snapshot(2, {"x": torch.zeros(1)}) is False  # after close


def test_the_outcome_names_the_weakest_source_any_rank_restored_from() -> None:
    from datetime import UTC, datetime, timedelta

    from vigil.recovery.controller.goodput import restore_of
    from vigil.recovery.controller.state import Job

    t0 = datetime.now(UTC)

    def restored(host: str, step: int, source: str, ms: float) -> Checkpoint:
        return Checkpoint(job_id="j", host=host, ts=t0 + timedelta(seconds=1), step=step, phase="restored",
                          duration_ms=ms, source=source)  # type: ignore[arg-type]

    job = Job(job_id="j")
    job.restored = [restored("h0", 14, "memory", 300), restored("h1", 14, "memory", 500)]
    assert restore_of(job, t0, None) == (0.5, 14, "memory")
    job.restored.append(restored("h2", 14, "persisted", 100))
    assert restore_of(job, t0, None) == (0.5, 14, "persisted")
    assert restore_of(job, t0 + timedelta(seconds=5), None) == (None, None, "")  # before this restart

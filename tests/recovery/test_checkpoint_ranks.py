"""The checkpointer across real processes (torch.distributed, gloo, CPU): round trip, SIGKILL, restore reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.recovery.ranks import kill, launch, run, wait_for
from vigil.contract import Checkpoint, validate_event
from vigil.recovery.checkpoint import CheckpointConfig, Checkpointer, TrainState
from vigil.recovery.checkpoint.layout import MARKER

pytestmark = [pytest.mark.pure, pytest.mark.slow]


def events(work: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for f in sorted((work / "spool").rglob("*.jsonl"))
        for line in f.read_text().splitlines()
    ]


def leaves(obj: Any, path: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        return {k: v for key, value in obj.items() for k, v in leaves(value, f"{path}/{key}").items()}
    if isinstance(obj, list):
        return {k: v for i, value in enumerate(obj) for k, v in leaves(value, f"{path}/{i}").items()}
    return {path: obj}


def assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    la, lb = leaves(a), leaves(b)
    assert la.keys() == lb.keys()
    for key, x in la.items():
        if isinstance(x, torch.Tensor):
            assert torch.equal(x, lb[key]), key
        else:
            assert x == lb[key], key


def test_ddp_4_ranks_round_trip_continues_bitwise_as_if_uninterrupted(tmp_path: Path) -> None:
    first = run("ddp_save", 4, tmp_path)
    assert [r["saved"] for r in first] == [True] * 4
    assert [r["stats"]["committed"] for r in first] == [1, 0, 0, 0]  # rank 0 commits

    resumed = run("ddp_resume", 4, tmp_path)  # a new process group, fresh model and optimizer
    at_save, loaded = torch.load(tmp_path / "at-save.pt"), torch.load(tmp_path / "loaded.pt")
    assert_same(at_save, loaded)  # parameters and Adam state (step, moments), bit for bit
    # bitwise as if uninterrupted (the reference never restarted): settle_ddp rebuilt the new DDP's buckets
    assert_same(torch.load(tmp_path / "end.pt"), torch.load(tmp_path / "end-resumed.pt"))
    assert [r["loaded_meta"] for r in resumed] == [{"seen": 5}] * 4
    # dp_group="world": rank 0 read the checkpoint, the other three got it by broadcast
    assert [r["read_storage"] for r in resumed] == [True, False, False, False]
    assert [r["reads"]["readers"] for r in resumed] == [1, 0, 0, 0]

    got = [validate_event("checkpoint", e) for e in events(tmp_path)]
    assert all(isinstance(e, Checkpoint) and e.step == 5 and e.job_id == "ckpt-test" for e in got)
    assert sorted((e.rank, e.phase) for e in got) == sorted(
        [(r, p) for r in range(4) for p in ("staged", "persisted", "restored")] + [(0, "committed")]
    )  # every rank of the resumed run reports its restore (the controller's checkpoint-load time)
    committed = next(e for e in got if e.phase == "committed")
    assert Path(committed.path, MARKER).exists() and committed.bytes > 0

    run("ddp_resume_unsettled", 4, tmp_path)  # the limit settle_ddp lifts: the last bits differ without it
    end, raw = leaves(torch.load(tmp_path / "end.pt")), leaves(torch.load(tmp_path / "end-unsettled.pt"))
    assert any(isinstance(v, torch.Tensor) and not torch.equal(v, raw[k]) for k, v in end.items())


def test_sigkill_mid_persist_leaves_the_previous_checkpoint_latest(tmp_path: Path) -> None:
    procs = launch("kill_mid_persist", 2, tmp_path)
    try:
        wait_for(
            lambda: (
                any(tmp_path.glob("persisting-rank*")) and len(list(tmp_path.glob("staged-20-rank*"))) == 2
            ),
            120,
            "step 20 to be staged on both ranks and half written",
        )
    finally:
        codes = kill(procs)
    assert codes == [-9, -9]
    (torn,) = (tmp_path / "ckpt").glob("step-0000000020-*")
    assert any(f.stat().st_size > 0 for f in torn.glob("*.distcp")) and not (torn / MARKER).exists()

    torch.manual_seed(123)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    with Checkpointer(CheckpointConfig(directory=tmp_path / "ckpt", events=False)) as ckpt:
        # the 2 ranks' checkpoint, read back by this one process
        assert ckpt.load_latest({"train": TrainState(model, opt)}) == 10
    at_10 = torch.load(tmp_path / "at-10.pt")
    assert all(torch.equal(at_10["model"][k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("layout", ["mesh", "lists"])
def test_restore_reads_storage_once_per_dp_group(tmp_path: Path, layout: str) -> None:
    """4 ranks as DP=2 x TP=2: the DP groups {0, 2} and {1, 3} each read once, the others read nothing."""
    results = run("reads", 4, tmp_path, layout)
    for r in results:
        for tag in ("dp", "none"):
            assert r[tag]["step"] == 7 and r[tag]["equal"], (tag, r)
            assert r[tag]["meta"] == {"lr": 0.5, "name": "x"}
    dp = [r["dp"] for r in results]
    assert [d["read_storage"] for d in dp] == [True, True, False, False]
    assert [d["count"]["readers"] for d in dp] == [1, 1, 0, 0]
    assert [d["count"]["metadata"] for d in dp] == [1, 1, 0, 0]
    assert [d["count"]["data_calls"] for d in dp] == [1, 1, 0, 0]
    # each reader reads its tp shard only; without DP groups every rank reads its own
    none = [r["none"] for r in results]
    assert [d["count"]["readers"] for d in none] == [1, 1, 1, 1]
    assert sum(d["count"]["bytes"] for d in none) == 2 * sum(d["count"]["bytes"] for d in dp)


def test_disk_full_under_one_rank_fails_the_save_everywhere_and_training_goes_on(tmp_path: Path) -> None:
    results = run("disk_full", 2, tmp_path)
    for r in results:
        assert r["save2"] and r["save4"] and r["trained_to"] == 4 and r["latest"] == 4
        assert r["stats"]["failed"] == 1 and "No space left on device" in r["error"]
    failed = [e for e in events(tmp_path) if e["phase"] == "failed"]
    assert sorted((e["rank"], e["step"]) for e in failed) == [(0, 2), (1, 2)]
    assert all(e["error"].startswith("StorageFailed: rank 1: OSError: [Errno 28]") for e in failed)
    assert [p.name[:15] for p in (tmp_path / "ckpt").iterdir()] == ["step-0000000004"]


def test_the_snapshot_interval_is_the_largest_any_rank_needs_under_the_budget_and_shared(tmp_path: Path) -> None:
    """Rank 1's 32 MiB copy does not fit 3 % of a 20 ms step, rank 0's 64 bytes do: at the save both take rank 1's
    interval, so they snapshot the same steps (a restore needs a step every rank holds)."""
    r0, r1 = run("snapshot_interval", 2, tmp_path)
    assert r0["before"] == r1["before"] == [1] * 6, (r0, r1)  # snapshot_every until the first save
    assert r0["saved"] and r1["saved"], (r0, r1)
    assert r0["every"] == r1["every"] > 1, (r0, r1)
    every = r0["every"]
    assert r0["taken"] == r1["taken"] == [s for s in range(7, 7 + 4 * every) if s % every == 0], (r0, r1)

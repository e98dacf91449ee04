"""Identity and parallel coordinates: arguments, torch.distributed, Megatron, environment."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch.distributed as dist

from tests.timer.timer_testutil import read_records, timer_config
from vigil.timer import StepTimer
from vigil.timer.identity import derive_coords, resolve_coords, resolve_identity

pytestmark = pytest.mark.pure

_ID_VARS = ("VIGIL_JOB_ID", "VIGIL_HOST", "RANK", "LOCAL_RANK", "WORLD_SIZE", "VIGIL_TP", "VIGIL_PP")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*_ID_VARS, "VIGIL_SPOOL_DIR", "VIGIL_HOME", "VIGIL_TIMER", "VIGIL_FLOPS_PER_STEP"):
        monkeypatch.delenv(name, raising=False)


def test_no_argument_timer_takes_identity_from_torchrun_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VIGIL_JOB_ID", "llama-7b/run 3")
    monkeypatch.setenv("VIGIL_HOST", "node-17")
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("VIGIL_SPOOL_DIR", str(tmp_path))
    t = StepTimer(timer_config(device="cpu"))
    with t.step():
        pass
    t.close()
    (rec,) = read_records(tmp_path)
    assert (rec["job_id"], rec["host"], rec["rank"], rec["local_rank"], rec["world_size"]) == (
        "llama-7b/run 3", "node-17", 5, 1, 8,
    )  # fmt: skip
    assert rec["coords"] == {"dp": 5, "tp": 0, "pp": 0}
    # the job id is made path-safe for the directory only
    assert t.spool_path == tmp_path / "llama-7b_run_3" / "node-17-rank5.000000.jsonl"


def test_defaults_without_env(tmp_path: Path) -> None:
    ident = resolve_identity(job_id=None, host=None, rank=None, local_rank=None, world_size=None, coords=None)
    assert (ident.job_id, ident.rank, ident.local_rank, ident.world_size) == ("default", 0, 0, 1)
    assert ident.host


def test_spool_dir_from_vigil_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VIGIL_HOME", str(tmp_path / "home"))
    t = StepTimer(timer_config(device="cpu", host="h"))
    assert t.spool_dir == tmp_path / "home" / "spool"
    with t.step():
        pass
    t.close()
    assert t.spool_path == tmp_path / "home" / "spool" / "default" / "h-rank0.000000.jsonl"
    assert t.spool_path.exists()


def test_torch_distributed_wins_over_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "7")
    monkeypatch.setenv("WORLD_SIZE", "16")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        ident = resolve_identity(
            job_id="j", host="h", rank=None, local_rank=None, world_size=None, coords=None
        )
    finally:
        dist.destroy_process_group()
    assert (ident.rank, ident.world_size) == (0, 1)


@pytest.mark.parametrize(
    ("rank", "world", "tp", "pp", "expected"),
    [
        # Megatron order: tp fastest, then dp, then pp. world 16 = tp2 x dp4 x pp2
        (0, 16, 2, 2, {"dp": 0, "tp": 0, "pp": 0}),
        (1, 16, 2, 2, {"dp": 0, "tp": 1, "pp": 0}),
        (2, 16, 2, 2, {"dp": 1, "tp": 0, "pp": 0}),
        (7, 16, 2, 2, {"dp": 3, "tp": 1, "pp": 0}),
        (8, 16, 2, 2, {"dp": 0, "tp": 0, "pp": 1}),
        (13, 16, 2, 2, {"dp": 2, "tp": 1, "pp": 1}),
        (5, 8, 8, 1, {"dp": 0, "tp": 5, "pp": 0}),
        (5, 8, 1, 4, {"dp": 1, "tp": 0, "pp": 2}),
    ],
)
def test_derive_coords_megatron_order(
    rank: int, world: int, tp: int, pp: int, expected: dict[str, int]
) -> None:
    assert derive_coords(rank, world, tp, pp) == expected


def test_coords_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VIGIL_TP", "4")
    monkeypatch.setenv("VIGIL_PP", "2")
    assert resolve_coords(13, 16, None) == {"dp": 1, "tp": 1, "pp": 1}


def test_coords_env_that_does_not_tile_falls_back_to_dp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VIGIL_TP", "3")
    with pytest.warns(RuntimeWarning, match="does not divide"):
        assert resolve_coords(4, 8, None) == {"dp": 4, "tp": 0, "pp": 0}


def test_explicit_coords_win_and_are_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VIGIL_TP", "2")
    assert resolve_coords(3, 4, {"tp": 1, "pp": 2}) == {"dp": 0, "tp": 1, "pp": 2}
    with pytest.raises(ValueError, match="unknown keys"):
        resolve_coords(0, 1, {"ep": 1})


def test_megatron_parallel_state_when_initialised(monkeypatch: pytest.MonkeyPatch) -> None:
    ps = types.ModuleType("megatron.core.parallel_state")
    ps.model_parallel_is_initialized = lambda: True  # type: ignore[attr-defined]
    ps.get_data_parallel_rank = lambda: 3  # type: ignore[attr-defined]
    ps.get_tensor_model_parallel_rank = lambda: 1  # type: ignore[attr-defined]
    ps.get_pipeline_model_parallel_rank = lambda: 2  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "megatron.core.parallel_state", ps)
    monkeypatch.setenv("VIGIL_TP", "8")  # Megatron's own answer wins over the env
    assert resolve_coords(0, 64, None) == {"dp": 3, "tp": 1, "pp": 2}
    ps.model_parallel_is_initialized = lambda: False  # type: ignore[attr-defined]
    assert resolve_coords(9, 64, None) == {"dp": 1, "tp": 1, "pp": 0}

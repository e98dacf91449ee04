"""The training side's identity rule and environment readers: precedence, fallbacks, malformed values."""

from __future__ import annotations

import sys
import types
import warnings
from pathlib import Path

import pytest

from vigil.trainside import env
from vigil.trainside.identity import resolve_identity, resolve_rank, safe_name
from vigil.trainside.snapshot import NAME, default_snapshot_dir, snapshot_name

pytestmark = pytest.mark.pure


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (env.JOB_ID, env.HOST, env.RANK, env.WORLD_SIZE, env.LOCAL_RANK, env.HOME, env.SPOOL_DIR,
                 env.SNAPSHOT_DIR, env.TIMER):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delitem(sys.modules, "torch.distributed", raising=False)  # no process group unless a test adds one


def fake_dist(monkeypatch: pytest.MonkeyPatch, rank: int, world: int, *, broken: bool = False) -> None:
    def get_rank() -> int:
        if broken:
            raise RuntimeError("the group is being torn down")
        return rank

    mod = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True, get_rank=get_rank,
                                get_world_size=lambda: world)  # fmt: skip
    monkeypatch.setitem(sys.modules, "torch.distributed", mod)


def test_arguments_then_environment_then_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    who = resolve_identity()
    assert (who.job_id, who.rank, who.local_rank, who.world_size) == ("default", 0, 0, 1) and who.host
    monkeypatch.setenv(env.JOB_ID, "j-env")
    monkeypatch.setenv(env.HOST, "h-env")
    monkeypatch.setenv(env.RANK, "3")
    monkeypatch.setenv(env.WORLD_SIZE, "4")
    monkeypatch.setenv(env.LOCAL_RANK, "1")
    who = resolve_identity()
    assert (who.job_id, who.host, who.rank, who.local_rank, who.world_size) == ("j-env", "h-env", 3, 1, 4)
    who = resolve_identity(job_id="j", host="h", rank=1, local_rank=0, world_size=2, fallback_host="f")
    assert (who.job_id, who.host, who.rank, who.local_rank, who.world_size) == ("j", "h", 1, 0, 2)
    assert resolve_identity(job_id="x" * 300).job_id == "x" * 256


def test_the_host_falls_back_to_the_callers_name_before_the_machines(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_identity(fallback_host="node-3").host == "node-3"
    monkeypatch.setenv(env.HOST, "h-env")
    assert resolve_identity(fallback_host="node-3").host == "h-env"


def test_an_initialised_process_group_wins_over_torchrun_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(env.RANK, "7")
    monkeypatch.setenv(env.WORLD_SIZE, "16")
    fake_dist(monkeypatch, 2, 4)
    who = resolve_identity()
    assert (who.rank, who.world_size) == (2, 4) and resolve_rank() == 2
    assert resolve_identity(rank=5, world_size=8).rank == 5 and resolve_rank(5) == 5  # the argument still wins
    fake_dist(monkeypatch, 2, 4, broken=True)  # a broken group falls back to the environment
    assert (resolve_identity().rank, resolve_rank()) == (7, 7)


def test_malformed_environment_is_ignored_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(env.RANK, "three")
    monkeypatch.setenv(env.LOCAL_RANK, "-1")
    with pytest.warns(RuntimeWarning, match="RANK='three'"):
        who = resolve_identity()
    assert (who.rank, who.local_rank) == (0, 0)
    monkeypatch.delenv(env.LOCAL_RANK)
    monkeypatch.setenv(env.RANK, "5")
    with pytest.warns(RuntimeWarning, match="rank 5 >= world size 1"):
        assert resolve_identity().world_size == 6
    with pytest.raises(ValueError, match="bad identity"):
        resolve_identity(rank=-1)


def test_environment_readers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for raw, on in (("", True), ("1", True), ("0", False), (" Off ", False), ("no", False), ("yes", True)):
        monkeypatch.setenv(env.TIMER, raw)
        assert env.flag(env.TIMER) is on, raw
    for raw, value in (("2.5", 2.5), ("0", None), ("nan", None), ("-1", None), ("x", None)):
        monkeypatch.setenv(env.FLOPS_PER_STEP, raw)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert env.number(env.FLOPS_PER_STEP) == value, raw
    monkeypatch.setenv(env.HOME, str(tmp_path / "home"))
    assert env.default_spool_dir() == tmp_path / "home" / "spool"
    monkeypatch.setenv(env.SPOOL_DIR, str(tmp_path / "spool"))
    assert env.default_spool_dir() == tmp_path / "spool"
    monkeypatch.setenv(env.SNAPSHOT_DIR, str(tmp_path / "shm"))
    assert default_snapshot_dir("j") == tmp_path / "shm"


def test_names_are_path_safe_and_snapshot_names_parse_back() -> None:
    assert (safe_name("a/b c"), safe_name(".."), safe_name("x" * 200)) == ("a_b_c", "_", "x" * 128)
    m = NAME.match(snapshot_name(1234, 0x3FA9C2D1))
    assert m is not None and (int(m.group(1)), m.group(2)) == (1234, "3fa9c2d1")
    assert {env.JOB_ID, env.HOST, env.SPOOL_DIR, env.SNAPSHOT_DIR} <= env.INHERITED
    assert all(n.startswith(env.PREFIX) for n in env.INHERITED)

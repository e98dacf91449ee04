"""The checkpointer in one process: commit protocol, retention, busy/slow/full/unwritable storage, events."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.recovery.storage_fakes import block_until, gated_writer
from vigil.contract import Checkpoint, validate_event
from vigil.recovery.checkpoint import (
    CheckpointConfig,
    Checkpointer,
    ConfigError,
    PersistTimeout,
    StagingFailed,
    StorageFailed,
    TrainState,
)
from vigil.recovery.checkpoint.layout import MARKER
from vigil.recovery.checkpoint.staging import Stager

pytestmark = pytest.mark.pure


def read_events(spool: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for f in sorted(spool.rglob("*.jsonl")) for line in f.read_text().splitlines()]


def phases(spool: Path) -> list[tuple[int, str]]:
    return [(e["step"], e["phase"]) for e in read_events(spool)]


def model_and_opt(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    return model, torch.optim.Adam(model.parameters(), lr=0.01)


def train(model: torch.nn.Module, opt: torch.optim.Optimizer, steps: int = 1) -> None:
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(4, 8)).pow(2).mean().backward()
        opt.step()


def cfg(tmp_path: Path, **kw: Any) -> CheckpointConfig:
    kw.setdefault("directory", tmp_path / "ckpt")
    return CheckpointConfig(spool_dir=tmp_path / "spool", job_id="job", host="host-a", **kw)


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    g = threading.Event()
    yield g
    g.set()  # never leave a persister thread blocked behind a failed test


def test_config_is_checked_when_built(tmp_path: Path) -> None:
    for bad in ({"keep": 0}, {"on_busy": "later"}, {"busy_timeout_s": -1}, {"persist_timeout_s": 0},
                {"dp_group": "everyone"}, {"dp_group": [[0, 1], []]}, {"dp_group": [[0, -1]]}):  # fmt: skip
        with pytest.raises(ConfigError):
            CheckpointConfig(directory=tmp_path, **bad)
    with pytest.raises(ConfigError, match="exactly once"):  # one process: the DP groups must tile rank 0 only
        Checkpointer(CheckpointConfig(directory=tmp_path, dp_group=[[0, 1]]))


def test_save_commits_last_and_load_latest_restores_model_optimizer_and_values(tmp_path: Path) -> None:
    model, opt = model_and_opt()
    train(model, opt, 3)
    state: dict[str, Any] = {"train": TrainState(model, opt), "extra": {"tokens": 123, "note": "x"}}
    with Checkpointer(cfg(tmp_path)) as ckpt:
        assert ckpt.save(3, state) and ckpt.wait(30)
        saved = {k: v.clone() for k, v in model.state_dict().items()}
        saved_opt = {k: v.clone() for k, v in opt.state_dict()["state"][0].items()}
        train(model, opt)  # the committed copy is independent of the live state
        latest = ckpt.latest()
        assert latest is not None and latest.step == 3
        files = {p.name for p in Path(latest.path).iterdir()}
        assert {MARKER, ".metadata", "__0_0.distcp"} <= files

    model2, opt2 = model_and_opt(seed=1)
    state2: dict[str, Any] = {"train": TrainState(model2, opt2), "extra": {"tokens": 0, "note": ""}}
    with Checkpointer(cfg(tmp_path)) as ckpt2:
        assert ckpt2.load_latest(state2) == 3
    assert all(torch.equal(saved[k], v) for k, v in model2.state_dict().items())
    assert all(torch.equal(saved_opt[k], v) for k, v in opt2.state_dict()["state"][0].items())
    assert state2["extra"] == {"tokens": 123, "note": "x"}


def test_nothing_to_load_is_none(tmp_path: Path) -> None:
    with Checkpointer(cfg(tmp_path)) as ckpt:
        assert ckpt.load_latest({"w": torch.zeros(2)}) is None


def test_keeps_the_newest_k_and_never_loads_an_incomplete_attempt(tmp_path: Path) -> None:
    w = torch.zeros(4)
    root = tmp_path / "ckpt"
    with Checkpointer(cfg(tmp_path, keep=2)) as ckpt:
        for step in range(1, 5):
            w.fill_(step)
            assert ckpt.save(step, {"w": w}) and ckpt.wait(30)
        assert sorted(int(p.name[5:15]) for p in root.iterdir()) == [3, 4]
        # leftovers of crashes: a torn newer attempt, a bad marker, and a file that is not ours
        torn = root / "step-0000000009-0badc0de"
        torn.mkdir()
        (torn / "__0_0.distcp").write_bytes(b"partial")
        bad = root / "step-0000000008-00c0ffee"
        bad.mkdir()
        (bad / MARKER).write_text("{not json")
        (root / "README").write_text("operators' notes")
        w.zero_()
        assert ckpt.load_latest({"w": w}) == 4 and torch.equal(w, torch.full((4,), 4.0))
        w.fill_(5)
        assert ckpt.save(5, {"w": w}) and ckpt.wait(30)
    assert sorted(p.name for p in root.iterdir()) == [
        "README",
        *sorted(p.name for p in root.glob("step-000000000[45]-*")),
    ]
    assert len(list(root.glob("step-*"))) == 2


def test_events_are_contract_checkpoint_lines_in_files_of_their_own(tmp_path: Path) -> None:
    with Checkpointer(cfg(tmp_path)) as ckpt:
        assert ckpt.save(7, {"w": torch.ones(1024)}) and ckpt.wait(30)
    events = read_events(tmp_path / "spool")
    assert [e["phase"] for e in events] == ["staged", "persisted", "committed"]
    for raw in events:
        event = validate_event("checkpoint", raw)
        assert isinstance(event, Checkpoint)
        assert (event.job_id, event.host, event.rank, event.step, event.error) == ("job", "host-a", 0, 7, "")
    staged, persisted, committed = events
    assert staged["bytes"] == 4096 and staged["blocked_ms"] >= staged["duration_ms"] > 0
    assert persisted["bytes"] > 4096 and committed["bytes"] >= persisted["bytes"]
    assert staged["path"] == committed["path"] and Path(committed["path"], MARKER).exists()
    (name,) = [p.name for p in (tmp_path / "spool" / "job").iterdir()]
    assert name == "host-a-rank0.ckpt-000000.jsonl"
    assert not re.fullmatch(r"host-a-rank0\.\d+\.jsonl", name)  # never one of the step timer's files


def test_busy_skip_returns_at_once_and_counts(tmp_path: Path, gate: threading.Event) -> None:
    w = torch.ones(256)
    writer = lambda path: gated_writer(path, block_until(gate))  # noqa: E731
    with Checkpointer(cfg(tmp_path, on_busy="skip", storage_writer_factory=writer)) as ckpt:
        assert ckpt.save(1, {"w": w})  # staged; persisting blocks on the gate
        t0 = time.monotonic()
        assert not ckpt.save(2, {"w": w})
        assert time.monotonic() - t0 < 1.0
        gate.set()
        assert ckpt.wait(30)
        assert ckpt.save(3, {"w": w}) and ckpt.wait(30)
        stats = ckpt.stats()
    assert (stats.requested, stats.staged, stats.skipped, stats.committed) == (3, 2, 1, 2)
    skipped = [e for e in read_events(tmp_path / "spool") if e["phase"] == "skipped"]
    assert [(e["step"], e["error"]) for e in skipped] == [
        (2, "previous save still persisting on rank(s) [0]")
    ]


def test_busy_wait_is_bounded_then_skips_or_saves(tmp_path: Path, gate: threading.Event) -> None:
    w = torch.ones(256)
    writer = lambda path: gated_writer(path, block_until(gate))  # noqa: E731
    with Checkpointer(
        cfg(tmp_path, on_busy="wait", busy_timeout_s=0.3, storage_writer_factory=writer)
    ) as ckpt:
        assert ckpt.save(1, {"w": w})
        t0 = time.monotonic()
        assert not ckpt.save(2, {"w": w})  # waited its 0.3 s, then skipped
        assert 0.3 <= time.monotonic() - t0 < 5
        gate.set()
        assert ckpt.wait(30)
    with Checkpointer(
        cfg(tmp_path, on_busy="wait", busy_timeout_s=60, storage_writer_factory=writer)
    ) as ckpt:
        gate.clear()
        assert ckpt.save(3, {"w": w})
        threading.Timer(0.2, gate.set).start()  # the slow storage catches up while save(4) waits
        assert ckpt.save(4, {"w": w}) and ckpt.wait(30)
        assert ckpt.stats().skipped == 0 and ckpt.latest() is not None


def test_a_save_persisting_too_long_is_failed_and_never_committed(
    tmp_path: Path, gate: threading.Event
) -> None:
    w = torch.ones(256)
    writer = lambda path: gated_writer(path, block_until(gate))  # noqa: E731
    config = cfg(tmp_path, on_busy="skip", persist_timeout_s=0.2, storage_writer_factory=writer)
    with Checkpointer(config) as ckpt:
        t0 = time.monotonic()
        assert ckpt.save(1, {"w": w})
        while time.monotonic() < t0 + 0.25:  # the condition is the clock itself
            time.sleep(0.01)
        assert not ckpt.save(2, {"w": w})  # reports step 1 failed, skips step 2
        assert isinstance(ckpt.last_error, PersistTimeout)
        gate.set()  # the storage finally answers: too late to count
        assert ckpt.wait(30)
        assert ckpt.latest() is None and not list((tmp_path / "ckpt").glob("step-*"))
    assert phases(tmp_path / "spool") == [(1, "staged"), (1, "failed"), (2, "skipped"), (1, "persisted")]


def test_unwritable_directory_fails_the_save_and_training_goes_on(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    model, opt = model_and_opt()
    state = {"train": TrainState(model, opt)}
    with Checkpointer(cfg(tmp_path, directory=tmp_path / "a-file" / "ckpt")) as ckpt:
        assert ckpt.save(1, state)  # staged; the storage refuses in the background
        assert ckpt.wait(30)
        train(model, opt)
        assert ckpt.save(2, state) and ckpt.wait(30)
        stats, error = ckpt.stats(), ckpt.last_error
    assert (stats.failed, stats.committed) == (2, 0)
    assert isinstance(error, StorageFailed) and "NotADirectoryError" in str(error)
    failed = [e for e in read_events(tmp_path / "spool") if e["phase"] == "failed"]
    assert [e["step"] for e in failed] == [1, 2] and all("StorageFailed" in e["error"] for e in failed)


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A real 1 MiB filesystem (tmpfs), when this process may mount one."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_fails_the_save_frees_the_attempt_and_a_smaller_save_works(
    tiny_fs: Path, tmp_path: Path
) -> None:
    big, small = torch.ones(1 << 20), torch.ones(1024)  # 4 MiB does not fit in 1 MiB
    with Checkpointer(cfg(tmp_path, directory=tiny_fs / "ckpt")) as ckpt:
        assert ckpt.save(1, {"w": big}) and ckpt.wait(60)
        error = ckpt.last_error
        # torch.save's zip writer hides the errno ("unexpected pos ..."): the checkpointer says how full it is
        assert isinstance(error, StorageFailed) and "bytes free" in str(error), error
        assert not list((tiny_fs / "ckpt").glob("step-*"))  # the torn attempt was removed
        assert ckpt.save(2, {"w": small}) and ckpt.wait(60)
        latest = ckpt.latest()
        assert latest is not None and latest.step == 2


def test_save_never_raises_into_training(tmp_path: Path) -> None:
    with Checkpointer(cfg(tmp_path)) as ckpt:
        assert not ckpt.save(-1, {"w": torch.ones(2)})
        assert not ckpt.save(1, {"w": torch.ones(2), "lock": threading.Lock()})  # cannot be copied
        assert isinstance(ckpt.last_error, StagingFailed)
        assert ckpt.save(2, {"w": torch.ones(2)}) and ckpt.wait(30)
        assert ckpt.stats().failed == 2
    assert not Checkpointer.save(ckpt, 3, {"w": torch.ones(2)})  # after close


def test_an_fsspec_url_works_too(tmp_path: Path) -> None:
    pytest.importorskip("fsspec")
    url = f"memory://vigil-test-{os.getpid()}/ckpt"
    w = torch.arange(16.0)
    with Checkpointer(cfg(tmp_path, directory=url, keep=1)) as ckpt:
        assert ckpt.save(1, {"w": w}) and ckpt.wait(30)
        assert ckpt.save(2, {"w": w * 2}) and ckpt.wait(30)
        latest = ckpt.latest()
        assert latest is not None and latest.step == 2 and latest.path.startswith("memory://")
        w.zero_()
        assert ckpt.load_latest({"w": w}) == 2 and torch.equal(w, torch.arange(16.0) * 2)
        assert len(ckpt.layout.attempts()) == 1


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.gpu
@needs_cuda
def test_cuda_state_is_staged_into_pinned_host_memory() -> None:
    src = torch.randn(1 << 20, device="cuda")
    stager = Stager()
    staged = stager.stage({"w": src, "n": 3})
    w = staged.state_dict["w"]
    assert w.device.type == "cpu" and w.is_pinned() and torch.equal(w, src.cpu())
    assert staged.nbytes == 4 << 20 and staged.state_dict["n"] == 3
    src.add_(1)  # training goes on: the staged copy does not move
    assert not torch.equal(w, src.cpu())
    again = stager.stage({"w": src}).state_dict["w"]
    assert again.data_ptr() == w.data_ptr() and torch.equal(again, src.cpu())  # the pinned buffer is reused
    stager.close()


@pytest.mark.gpu
@needs_cuda
def test_cuda_model_round_trips(tmp_path: Path) -> None:
    model, _ = model_and_opt()
    model.cuda()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(4, 8, device="cuda")).pow(2).mean().backward()
    opt.step()
    state = {"train": TrainState(model, opt)}
    with Checkpointer(cfg(tmp_path)) as ckpt:
        assert ckpt.save(1, state) and ckpt.wait(60), ckpt.last_error
        saved = {k: v.clone() for k, v in model.state_dict().items()}
        with torch.no_grad():
            for p in model.parameters():
                p.zero_()
        assert ckpt.load_latest(state) == 1
    assert all(v.is_cuda and torch.equal(saved[k], v) for k, v in model.state_dict().items())


def test_the_readme_example_runs_and_resumes(tmp_path: Path) -> None:
    readme = Path(__file__).resolve().parents[2] / "recovery" / "README.md"
    example = re.search(r"```python\n(.*?)```", readme.read_text(), re.S)
    assert example is not None
    script = tmp_path / "example.py"
    script.write_text(example.group(1))
    env = {**os.environ, "CKPT_DIR": str(tmp_path / "ckpt"), "VIGIL_SPOOL_DIR": str(tmp_path / "spool"),
           "PYTHONPATH": str(readme.parents[1]), "OMP_NUM_THREADS": "1"}  # fmt: skip
    env.pop("RANK", None)
    outputs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True,
                              timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        outputs.append(done.stdout.strip())
    assert outputs == ["starting at step 1, 0 samples seen", "starting at step 51, 1600 samples seen"]
    assert phases(tmp_path / "spool")[-3:] == [(100, "staged"), (100, "persisted"), (100, "committed")]


def test_settle_ddp_changes_nothing_but_the_buckets() -> None:
    """The no-op iteration leaves parameters, buffers (BatchNorm statistics) and the RNG stream as they were, and
    no gradient; a model whose output needs no gradient is refused."""
    from vigil.recovery.checkpoint import settle_ddp

    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Dropout(0.5),
                                torch.nn.Linear(8, 2))
    before, x = {k: v.clone() for k, v in model.state_dict().items()}, torch.randn(16, 4)
    rng = torch.get_rng_state()
    settle_ddp(model, x)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert torch.equal(torch.get_rng_state(), rng) and all(p.grad is None for p in model.parameters())
    with pytest.raises(ValueError):
        settle_ddp(torch.nn.Identity(), torch.zeros(2))

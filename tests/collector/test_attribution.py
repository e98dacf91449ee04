"""Per-rank attribution of a torchrun node's output: each rank's own error, one exit per rank, the first failure.

The console logs in tests/fixtures/torchrun/ are a real 2-node crash (rank 2 raises an NVLink
error; its peers fail with "Connection closed by peer"), as `torchrun --tee 3` printed them.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from vigil.collector.control import torchrun
from vigil.collector.exits import launched_exits, read_error_file
from vigil.collector.logstream import LogStream, split_prefix
from vigil.collector.procs import Worker
from vigil.collector.rules import BUILTIN
from vigil.collector.summary import ErrorMemory

pytestmark = pytest.mark.pure
FIXTURES = Path(__file__).parents[1] / "fixtures" / "torchrun"
T0 = datetime(2026, 11, 23, 10, 32, 40, tzinfo=UTC)


def test_nested_prefixes_name_both_ranks() -> None:
    assert split_prefix("[default0]:[rank2]: RuntimeError: x") == (2, 0, "RuntimeError: x")
    assert split_prefix("[rank2]:[default0]:x") == (2, 0, "x")
    assert split_prefix("[0]:") == (None, None, "[0]:")  # torchrun's report entry, not a prefix
    assert split_prefix("[default0]:[default1]:x") == (None, 0, "[default1]:x")


def node(memory: ErrorMemory, log: str, ranks: dict[int, int]) -> list[object]:
    s = LogStream(job_id="j", host="h", stream="stderr", rules=BUILTIN, memory=memory, rank_of=ranks.get)
    events: list[object] = []
    for line in (FIXTURES / log).read_text().splitlines():
        events += s.feed(line)
    return events + s.close()


def test_a_crash_node_reports_each_rank_with_its_own_error() -> None:
    memory = ErrorMemory()
    events = node(memory, "crash_tee_node1.log", {0: 2, 1: 3})
    # rank 2's traceback and its NVLink line, rank 3's traceback; torchrun's report quotes them but adds nothing
    assert sorted((e.category, e.rank) for e in events) == [  # type: ignore[attr-defined]
        ("nvlink", 2), ("traceback", 2), ("traceback", 3)]
    assert [(f.rank, f.exit_code, f.pid, f.signal_name, f.root) for f in memory.failures] == [
        (3, -15, 25012, "SIGTERM", False), (2, 1, 25010, None, True)]
    workers = [Worker(pid=25010, rank=2, local_rank=0, restart=0, seen_at=T0, gone_at=T0 + timedelta(seconds=3)),
               Worker(pid=25012, rank=3, local_rank=1, restart=0, seen_at=T0, gone_at=T0 + timedelta(seconds=2))]
    exits = launched_exits(job_id="j", host="h", memory=memory, workers=workers, child_pid=24973, returncode=1,
                           now=T0 + timedelta(seconds=4), read_error=lambda _p: None)
    by_pid = {e.pid: e for e in exits}
    assert len(exits) == 3
    r2, r3, launcher = by_pid[25010], by_pid[25012], by_pid[24973]
    assert (r2.rank, r2.local_rank, r2.exit_code, r2.signal) == (2, 0, 1, None)
    assert r2.summary == "RuntimeError: CUDA error: uncorrectable NVLink error detected during execution"
    assert r2.traceback.startswith("Traceback (most recent call last):")
    assert (r3.rank, r3.exit_code, r3.signal) == (3, None, "SIGTERM")
    assert "Connection closed by peer" in r3.summary  # its own error, not the culprit's
    assert r2.failed_at is not None and r3.failed_at is not None and r2.failed_at <= r3.failed_at
    assert r3.ts < r2.ts  # the victim was gone first: exit times alone would blame it
    assert launcher.launcher and launcher.rank is None and launcher.exit_code == 1
    assert launcher.summary.startswith("rank 2 (local rank 0) failed first: RuntimeError: CUDA error: uncorrectable")


def test_the_other_node_names_its_own_first_failure_and_no_peer_message() -> None:
    memory = ErrorMemory()
    node(memory, "crash_tee_node0.log", {0: 0, 1: 1})
    exits = launched_exits(job_id="j", host="h0", memory=memory, workers=[], child_pid=24971, returncode=1,
                           now=T0, read_error=lambda _p: None)
    ranks = {e.rank: e for e in exits if not e.launcher}
    assert set(ranks) == {0, 1}  # only torchrun's report knew them: each still gets its exit
    assert all("Connection closed by peer" in e.summary for e in ranks.values())
    assert all("NVLink" not in e.summary for e in exits)


def test_error_files_give_the_message_when_the_output_had_none(tmp_path: Path) -> None:
    f = tmp_path / "error.json"
    f.write_text(json.dumps({"message": {"message": "ValueError: bad shard\n", "extraInfo": {
        "py_callstack": "Traceback (most recent call last):\n  x\nValueError: bad shard", "timestamp": "1795430398"}}}))
    got = read_error_file(str(f))
    assert got is not None and got.message == "ValueError: bad shard"
    assert got.at == datetime.fromtimestamp(1795430398, UTC)
    assert read_error_file(str(tmp_path / "missing.json")) is None
    (tmp_path / "bad.json").write_text("{not json")
    assert read_error_file(str(tmp_path / "bad.json")) is None
    memory = ErrorMemory()
    assert not memory.note_line("-" * 60)  # torchrun's rule before its report
    for line in ["Failures:", "[0]:", "  rank      : 4 (local_rank: 0)", "  exitcode  : 1 (pid: 99)",
                 f"  error_file: {f}", "  traceback : Traceback (most recent call last):", "    x",
                 "  ValueError: bad shard", "=" * 20]:
        assert memory.note_line(line)
    (e, _launcher) = launched_exits(job_id="j", host="h", memory=memory, workers=[], child_pid=1, returncode=1, now=T0)
    assert (e.rank, e.exit_code, e.summary) == (4, 1, "ValueError: bad shard")
    assert e.failed_at == datetime.fromtimestamp(1795430398, UTC) and e.traceback.endswith("ValueError: bad shard")


def test_a_plain_child_is_one_exit_and_a_clean_run_reports_zero() -> None:
    memory = ErrorMemory()
    (e,) = launched_exits(job_id="j", host="h", memory=memory, workers=[], child_pid=7, returncode=-9, now=T0)
    assert (e.pid, e.exit_code, e.signal, e.launcher, e.rank) == (7, None, "SIGKILL", False, None)
    workers = [Worker(pid=10 + r, rank=r, local_rank=r, restart=0, seen_at=T0, gone_at=T0) for r in range(2)]
    exits = launched_exits(job_id="j", host="h", memory=memory, workers=workers, child_pid=7, returncode=0, now=T0)
    assert [(e.rank, e.exit_code, e.launcher) for e in exits] == [(0, 0, False), (1, 0, False), (None, 0, True)]


@pytest.mark.parametrize(("argv", "added", "redirected"), [
    (["torchrun", "--nproc-per-node", "2", "train.py", "-r", "5"], ["--log-dir", "L", "--tee", "3"], False),
    (["python", "-m", "torch.distributed.run", "--tee=3", "train.py"], ["--log-dir", "L"], False),
    (["/usr/bin/torchrun", "--log_dir", "/x", "-r3", "t.py"], [], True),
    (["python", "train.py", "--tee", "3"], [], False),
])
def test_torchrun_gets_a_log_dir_and_tee_unless_it_has_them(argv: list[str], added: list[str],
                                                           redirected: bool) -> None:
    got = torchrun.with_attribution(argv, Path("L"))
    args = torchrun.parse(argv)
    if args is None:
        assert got.argv == argv and got.log_dir is None
        return
    assert got.argv == [*argv[:args.at], *added, *argv[args.at:]]
    assert got.redirected is redirected and got.injected is ("--log-dir" in added)
    assert got.argv[-1] in ("5", "t.py", "train.py")  # the script and its own arguments are untouched


def test_old_torchrun_runs_are_pruned(tmp_path: Path) -> None:
    import os

    for i in range(5):
        (tmp_path / f"none_{i}").mkdir()
        os.utime(tmp_path / f"none_{i}", (i, i))
    torchrun.prune_runs(tmp_path, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["none_3", "none_4"]

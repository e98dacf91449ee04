"""The spool: file naming, rotation, complete lines, and never hurting training on I/O trouble."""

from __future__ import annotations

import errno
import json
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest

import vigil.trainside.spoolfile
from tests.timer.timer_testutil import read_records, spool_files, timer_config
from vigil.timer import StepTimer
from vigil.trainside.spool import SpoolWriter

pytestmark = pytest.mark.pure


def make(spool: Path, **kw: Any) -> StepTimer:
    return StepTimer(timer_config(spool_dir=spool, device="cpu", job_id="job", host="h", rank=2, world_size=4, **kw))


def run_steps(t: StepTimer, n: int, first: int | None = None) -> None:
    for i in range(n):
        with t.step(tokens=i, step=first if (first is not None and i == 0) else None), t.phase("forward"):
            pass


def test_rotation_keeps_newest_files_with_contiguous_complete_lines(tmp_path: Path) -> None:
    t = make(tmp_path, max_file_bytes=2000, keep_files=3)
    run_steps(t, 60)
    t.close()
    files = spool_files(tmp_path)
    names = [p.name for p in files]
    assert all(p.parent == tmp_path / "job" for p in files)
    assert all(n.startswith("h-rank2.") and n.endswith(".jsonl") for n in names)
    seqs = [int(n.split(".")[1]) for n in names]
    assert len(files) == 3 and seqs == list(range(seqs[0], seqs[0] + 3)) and seqs[0] > 0
    assert all(p.stat().st_size <= 2000 for p in files)
    steps = [r["step"] for r in read_records(tmp_path)]  # read_records asserts each file ends in \n
    assert steps == list(range(steps[0], 60))  # oldest dropped by deletion, newest last
    assert t.spool_path == files[-1]


def test_a_new_process_starts_a_new_file(tmp_path: Path) -> None:
    for n in range(2):
        t = make(tmp_path)
        run_steps(t, 2, first=n * 2)
        t.close()
    files = spool_files(tmp_path)
    assert [p.name for p in files] == ["h-rank2.000000.jsonl", "h-rank2.000001.jsonl"]
    assert [[json.loads(x)["step"] for x in p.read_text().splitlines()] for p in files] == [[0, 1], [2, 3]]


def test_unwritable_spool_dir_never_reaches_training(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a regular file")
    t = make(blocker / "spool")  # mkdir under a file fails, even as root
    with pytest.warns(RuntimeWarning, match="cannot write step records"):
        run_steps(t, 20)
        assert t.flush(timeout=10)
    run_steps(t, 5)
    t.close()
    assert t.written == 0
    assert t.dropped == 25
    assert blocker.read_text() == "a regular file"


def test_full_queue_drops_and_reports_the_count(tmp_path: Path) -> None:
    t = make(tmp_path, queue_size=3, flush_interval_s=3600)  # the writer only runs on flush
    run_steps(t, 10)
    assert t.dropped == 7
    t.flush()
    run_steps(t, 2, first=100)
    t.close()
    recs = read_records(tmp_path)
    assert [r["step"] for r in recs] == [0, 1, 2, 100, 101]
    assert [r["dropped"] for r in recs] == [7, 0, 0, 0, 0]


def test_disk_full_mid_write_leaves_only_complete_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = vigil.trainside.spoolfile._os_write
    state = {"full": True}

    def half_then_enospc(fd: int, data: Any) -> int:
        if state["full"]:
            real_write(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    t = make(tmp_path, retry_s=0.0)
    run_steps(t, 2)
    assert t.flush()
    monkeypatch.setattr(vigil.trainside.spoolfile, "_os_write", half_then_enospc)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_steps(t, 3)
        assert t.flush()
    state["full"] = False  # space freed: writing resumes in a new file
    run_steps(t, 1, first=50)
    t.close()
    recs = read_records(tmp_path)  # asserts no torn line anywhere
    assert [r["step"] for r in recs] == [0, 1, 50]
    assert recs[-1]["dropped"] == 3
    assert t.dropped == 3


def test_writer_flush_and_close_are_bounded_and_lines_are_whole(tmp_path: Path) -> None:
    w: SpoolWriter[int] = SpoolWriter(
        tmp_path, "s", lambda i: {"i": i, "pad": "x" * 50}, max_bytes=300, keep_files=None
    )
    for i in range(50):
        assert w.put(i)
    assert w.flush(timeout=10)
    w.close(timeout=10)
    assert not w.put(99)  # closed: dropped, counted
    assert w.dropped == 1
    files = spool_files(tmp_path)
    assert len(files) > 3 and all(p.stat().st_size <= 300 for p in files)  # rotated by size
    lines = [json.loads(x) for p in files for x in p.read_text().splitlines()]
    assert [x["i"] for x in lines] == list(range(50))
    assert all(len(x["event_id"]) == 32 for x in lines)


def test_a_stuck_disk_never_blocks_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = vigil.trainside.spoolfile._os_write
    entered, release = threading.Event(), threading.Event()

    def stuck_write(fd: int, data: Any) -> int:
        entered.set()
        release.wait()  # the disk hangs until the test releases it
        return real_write(fd, data)

    monkeypatch.setattr(vigil.trainside.spoolfile, "_os_write", stuck_write)
    t = make(tmp_path, queue_size=5, flush_interval_s=0.01)
    run_steps(t, 1)
    assert entered.wait(10)  # the spool thread is now stuck in write()
    run_steps(t, 50)  # would hang here if the training thread waited on the writer
    assert t.dropped == 45  # 5 queued behind the stuck write, the rest dropped
    release.set()
    t.close(timeout=10)
    recs = read_records(tmp_path)
    assert [r["step"] for r in recs] == list(range(6))
    assert recs[1]["dropped"] == 45


def test_a_write_failing_after_rotation_counts_only_the_unwritten(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real, calls = vigil.trainside.spoolfile._os_write, [0]

    def second_write_fails(fd: int, data: Any) -> int:
        calls[0] += 1
        if calls[0] >= 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(vigil.trainside.spoolfile, "_os_write", second_write_fails)
    w: SpoolWriter[int] = SpoolWriter(tmp_path, "s", lambda i: {"i": i}, max_bytes=100, keep_files=None,
                                      flush_interval_s=3600)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(5):
            w.put(i)
        assert w.flush()
    w.close()
    assert (w.written, w.dropped) == (1, 4)  # the first chunk reached the disk before the rotation's write failed
    assert [json.loads(x)["i"] for p in sorted(tmp_path.glob("s.*.jsonl")) for x in p.read_text().splitlines()] == [0]

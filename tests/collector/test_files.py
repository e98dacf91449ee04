"""Tailing and the outbox: rotation, renames, truncation, partial lines, restarts, bounds, full disks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vigil.collector.outbox import Outbox
from vigil.collector.tailer import Tailer
from vigil.contract import Heartbeat

pytestmark = pytest.mark.pure


def lines_of(t: Tailer, commit: bool = True) -> list[bytes]:
    t.scan()
    chunks = t.read_lines(10_000)
    if commit:
        t.commit({c.file.key: c.end for c in chunks})
    return [ln for c in chunks for ln in c.lines]


def test_partial_lines_wait_for_their_end(tmp_path: Path) -> None:
    f = tmp_path / "a.jsonl"
    f.write_bytes(b'{"a":1}\n{"a":')
    t = Tailer(roots=[tmp_path])
    assert lines_of(t) == [b'{"a":1}']
    with open(f, "ab") as fh:
        fh.write(b'2}\n')
    assert lines_of(t) == [b'{"a":2}']


def test_rename_keeps_offset_and_new_file_starts_at_zero(tmp_path: Path) -> None:
    f = tmp_path / "r0.jsonl"
    f.write_bytes(b"1\n2\n")
    t = Tailer(roots=[tmp_path])
    assert lines_of(t) == [b"1", b"2"]
    sub = tmp_path / "old"
    sub.mkdir()
    with open(f, "ab") as fh:
        fh.write(b"3\n")
    f.rename(sub / "r0.1.jsonl")  # rotation by rename, then a fresh file under the old name
    f.write_bytes(b"4\n")
    assert sorted(lines_of(t)) == [b"3", b"4"]


def test_truncation_restarts_and_deletion_counts_unshipped(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    f.write_bytes(b"aaaa\nbbbb\n")
    t = Tailer(roots=[tmp_path])
    assert lines_of(t) == [b"aaaa", b"bbbb"]
    f.write_bytes(b"c\n")
    assert lines_of(t) == [b"c"] and t.truncations == 1
    with open(f, "ab") as fh:
        fh.write(b"never shipped\n")
    t.scan()
    f.unlink()
    t.scan()
    assert t.lost_bytes == len(b"never shipped\n") and t.files == {}


def test_rewind_and_restart_from_committed_state(tmp_path: Path) -> None:
    f = tmp_path / "s.jsonl"
    f.write_bytes(b"1\n2\n")
    t = Tailer(roots=[tmp_path])
    assert lines_of(t, commit=False) == [b"1", b"2"]
    t.rewind()
    assert lines_of(t) == [b"1", b"2"]
    with open(f, "ab") as fh:
        fh.write(b"3\n")
    t2 = Tailer(roots=[tmp_path], restored=t.state())  # a restarted agent
    assert lines_of(t2) == [b"3"]
    os.unlink(f)  # same path, new content (maybe the same inode): the fingerprint tells them apart
    f.write_bytes(b"x\n")
    t3 = Tailer(roots=[tmp_path], restored=t2.state())
    assert lines_of(t3) == [b"x"]


def hb(i: int) -> Heartbeat:
    return Heartbeat(job_id="j", host="h", uptime_s=float(i))


def test_a_line_over_the_read_limit_is_skipped_and_counted_not_read_forever(tmp_path: Path) -> None:
    from vigil.collector.tailer import READ_CHUNK

    f = tmp_path / "big.jsonl"
    f.write_bytes(b"before\n" + b"x" * (READ_CHUNK + READ_CHUNK // 2) + b"\nafter\n")
    t = Tailer(roots=[tmp_path])
    got: list[bytes] = []
    for _ in range(4):  # the long line takes one read per READ_CHUNK, then the file goes on
        got += lines_of(t)
    assert got == [b"before", b"after"]
    assert t.oversized_lines == 1
    assert t.state()[0]["committed"] == f.stat().st_size
    with open(f, "ab") as fh:
        fh.write(b"later\n")
    assert lines_of(t) == [b"later"]


def test_a_failed_delivery_during_a_skip_rewinds_without_losing_lines(tmp_path: Path) -> None:
    from vigil.collector.tailer import READ_CHUNK

    f = tmp_path / "big.jsonl"
    f.write_bytes(b"one\n" + b"y" * (READ_CHUNK + 10) + b"\ntwo\n")
    t = Tailer(roots=[tmp_path])
    t.scan()
    t.read_lines(1)  # "one", never committed
    t.read_lines(10)  # the long line begins: skipping
    t.rewind()
    got: list[bytes] = []
    for _ in range(4):
        got += lines_of(t)
    assert got == [b"one", b"two"]


def test_outbox_survives_restart_and_ships_in_order(tmp_path: Path) -> None:
    box = Outbox(directory=tmp_path, segment_bytes=600)
    box.restore(None)
    box.append([hb(i) for i in range(10)])
    batch = box.poll(4)
    box.commit(batch)
    cursor = box.cursor()
    box.append([hb(i) for i in range(10, 12)])
    again = Outbox(directory=tmp_path, segment_bytes=600)  # restart: resumes at the committed cursor
    again.restore(cursor)
    assert again.backlog() == 8
    got = []
    while (b := again.poll(3)).lines:
        got += [Heartbeat.model_validate_json(ln).uptime_s for ln in b.lines]
        again.commit(b)
    assert got == [float(i) for i in range(4, 12)]
    assert again.backlog() == 0
    assert len(list(tmp_path.glob("seg-*.jsonl"))) <= 2  # shipped segments are deleted


def test_outbox_bound_drops_oldest_and_counts(tmp_path: Path) -> None:
    box = Outbox(directory=tmp_path, max_bytes=2000, segment_bytes=500)
    box.restore(None)
    for i in range(40):
        box.append([hb(i)])
    total = sum(p.stat().st_size for p in tmp_path.glob("seg-*.jsonl"))
    assert total <= 2000 + 500
    assert box.dropped > 0 and box.dropped + box.backlog() == 40
    b = box.poll(1000)
    assert Heartbeat.model_validate_json(b.lines[-1]).uptime_s == 39.0  # the newest are kept


def test_outbox_disk_full_falls_back_to_bounded_memory(tmp_path: Path) -> None:
    box = Outbox(directory=tmp_path, memory_limit=5, retry_disk_s=3600)
    box.restore(None)
    (tmp_path / "seg-000000001.jsonl").symlink_to("/dev/full")  # the next segment: every write is ENOSPC
    box.append([hb(i) for i in range(3)])
    assert box.write_errors == 1 and box.dropped == 0
    box.append([hb(i) for i in range(3, 8)])
    assert box.dropped == 3 and box.backlog() == 5
    b = box.poll(100)
    assert [e.uptime_s for e in b.memory] == [3.0, 4.0, 5.0, 6.0, 7.0]  # type: ignore[attr-defined]
    box.commit(b)
    assert box.backlog() == 0


def test_outbox_memory_overflow_between_poll_and_commit_keeps_the_unsent(tmp_path: Path) -> None:
    box = Outbox(directory=tmp_path, memory_limit=4, retry_disk_s=3600)
    box.restore(None)
    (tmp_path / "seg-000000001.jsonl").symlink_to("/dev/full")
    box.append([hb(i) for i in range(4)])
    b = box.poll(100)  # takes 0..3
    box.append([hb(i) for i in range(4, 7)])  # overflows: 0..2 dropped while in flight
    box.commit(b)
    left = box.poll(100)
    assert [e.uptime_s for e in left.memory] == [4.0, 5.0, 6.0]  # type: ignore[attr-defined]


def test_outbox_unwritable_directory_never_raises(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    box = Outbox(directory=blocker / "outbox", memory_limit=2, retry_disk_s=0)
    box.restore(None)
    for i in range(5):
        box.append([hb(i)])
    assert box.write_errors == 5 and box.dropped == 3 and box.backlog() == 2


@pytest.mark.pure
def test_segments_roll_whole_records_keep_the_newest_and_continue_after_a_restart(tmp_path: Path) -> None:
    from vigil.collector.segments import SegmentWriter

    w = SegmentWriter(directory=tmp_path, stem="out.", suffix=".log", segment_bytes=10, keep=2)
    for i in range(8):
        w.append(f"line{i}\n".encode())  # 6 bytes: one record per segment
    w.close()
    assert [p.name for p in sorted(tmp_path.iterdir())] == ["out.000000006.log", "out.000000007.log",
                                                            "out.000000008.log"]
    assert (tmp_path / "out.000000008.log").read_text() == "line7\n"
    again = SegmentWriter(directory=tmp_path, stem="out.", suffix=".log", segment_bytes=10)
    assert again.append(b"after\n") == 9  # a restarted writer never appends to an old segment

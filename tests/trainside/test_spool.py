"""The training side's one spool: bounded, counted, never raising, each stream in its own files."""

from __future__ import annotations

import json
import math
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.support.waiting import wait_until
from vigil.trainside.identity import Identity
from vigil.trainside.spool import SpoolWriter
from vigil.trainside.spoolfile import location

pytestmark = pytest.mark.pure


def as_is(record: dict[str, Any]) -> dict[str, Any]:
    return record


def lines(directory: Path, pattern: str = "*.jsonl") -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted(directory.glob(pattern)):
        text = path.read_text()
        assert text == "" or text.endswith("\n"), f"{path}: a torn line"
        out += [json.loads(x) for x in text.splitlines()]
    return out


def spool_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("vigil-") and t.name.endswith("-spool")]


def test_a_full_queue_drops_counts_and_reports_with_the_next_line(tmp_path: Path) -> None:
    w = SpoolWriter(tmp_path, "s", as_is, name="t1", flush_interval_s=3600, queue_size=3)
    accepted = [w.put({"i": i}) for i in range(10)]  # the writer sleeps for an hour: nothing drains
    assert accepted == [True] * 3 + [False] * 7 and w.dropped == 7
    w.count_dropped(2)  # lost by the caller before reaching the queue
    assert w.flush(timeout=10)
    w.close()
    recs = lines(tmp_path)
    assert [r["i"] for r in recs] == [0, 1, 2]
    assert [r["dropped"] for r in recs] == [9, 0, 0] and w.dropped == 9 and w.written == 3
    assert all(len(r["event_id"]) == 32 for r in recs)


def test_nothing_reaches_the_caller_and_each_loss_is_counted(tmp_path: Path) -> None:
    def render(i: int) -> dict[str, Any]:
        if i == 1:
            raise KeyError("a bug in render")
        return {"i": i, "v": math.nan if i == 2 else object() if i == 3 else i}

    w = SpoolWriter(tmp_path, "s", render, name="t2", flush_interval_s=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert all(w.put(i) for i in range(5))
        assert w.flush(timeout=10)
    w.close()
    assert not w.put(9)  # after close: dropped, counted, never raised
    assert [r["i"] for r in lines(tmp_path)] == [0, 4]  # 1 did not render, 2 and 3 are not JSON
    assert (w.written, w.dropped) == (2, 4)


def test_an_unwritable_directory_drops_and_backs_off(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    w = SpoolWriter(blocker / "spool", "s", as_is, name="t3", flush_interval_s=0, retry_s=3600)
    with pytest.warns(RuntimeWarning, match="cannot write things under"):
        w.what = "things"
        assert w.put({"i": 0})
        assert w.flush(timeout=10)
    assert w.put({"i": 1}) and w.flush(timeout=10)  # within retry_s: dropped at once
    w.close()
    assert (w.written, w.dropped) == (0, 2)


def test_an_unused_spool_starts_no_thread_and_a_stream_gets_written_at_once(tmp_path: Path) -> None:
    before = spool_threads()
    w = SpoolWriter(tmp_path, "s", as_is, name="t4", flush_interval_s=0)
    assert w.flush(timeout=1) and spool_threads() == before
    w.put({"i": 0})  # flush_interval_s=0: written without a flush
    wait_until(lambda: w.written == 1, 10, "the record to be written", 0.005)
    w.close()
    w.close()  # idempotent
    assert "vigil-t4-spool" not in spool_threads()


def test_streams_share_a_directory_and_never_rotate_each_other(tmp_path: Path) -> None:
    directory, stem = location(tmp_path, Identity(job_id="llama/7b", host="node 1", rank=3))
    assert (directory, stem) == (tmp_path / "llama_7b", "node_1-rank3")
    steps = SpoolWriter(directory, stem, as_is, name="t5", flush_interval_s=0, max_bytes=40, keep_files=1)
    ckpt = SpoolWriter(directory, stem, as_is, stream="ckpt", name="t6", flush_interval_s=0, max_bytes=40,
                       keep_files=1)  # fmt: skip
    for i in range(4):
        steps.put({"i": i})
        ckpt.put({"c": i})
        assert steps.flush(10) and ckpt.flush(10)
    steps.close()
    ckpt.close()
    names = sorted(p.name for p in directory.iterdir())
    assert names == ["node_1-rank3.000003.jsonl", "node_1-rank3.ckpt-000003.jsonl"]
    assert steps.current_path == directory / names[0] and ckpt.current_path == directory / names[1]

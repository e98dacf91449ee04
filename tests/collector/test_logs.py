"""Log classification: built-in rules, rank prefixes, tracebacks, floods, exit summaries."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from vigil.collector.flood import FloodLimiter
from vigil.collector.logstream import LogStream, split_prefix
from vigil.collector.rules import BUILTIN, classify, load_rules
from vigil.collector.summary import ErrorMemory, summarize

pytestmark = pytest.mark.pure


@pytest.mark.parametrize(("line", "category", "xid"), [
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.", "xid", 79),
    ("[  812.1] NVRM: Xid (PCI:0000:b3:00): 48, An uncorrectable double bit error (DBE) has been detected", "xid", 48),
    ("kernel: NVRM: uncorrectable ECC error detected on GPU 3", "ecc", None),
    ("NVLink: fatal error detected on link 2", "nvlink", None),
    ("RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution", "nvlink", None),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "oom", None),
    ("[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE)", "nccl_timeout", None),
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 10000ms for recv operation to complete",
     "collective_timeout", None),
    ("node-3:1234:1290 [3] NCCL WARN NET/IB : Got completion with error 12", "nccl_error", None),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "cuda_error", None),
    ("Fatal Python error: Segmentation fault", "signal", None),
    ("epoch 3 step 1200 loss 2.31", None, None),
    ("NCCL INFO Channel 00/32 : 0 1 2 3", None, None),
])
def test_builtin_rules(line: str, category: str | None, xid: int | None) -> None:
    m = classify(line, BUILTIN)
    assert (m.category if m else None) == category
    if m is not None:
        assert m.xid == xid


def test_user_rules_go_first_and_can_ignore(tmp_path: Path) -> None:
    f = tmp_path / "rules.toml"
    f.write_text('[[rules]]\npattern = "Xid.*: 13,"\ncategory = "ignore"\nseverity = "info"\n')
    rules = load_rules([{"pattern": r"loss is nan", "category": "nan_loss", "severity": "warning"}], f)
    assert classify("step 9 loss is nan", rules).category == "nan_loss"  # type: ignore[union-attr]
    assert classify("NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception", rules) is None
    assert classify("NVRM: Xid (PCI:0000:3b:00): 79, fell off", rules).xid == 79  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="severity"):
        load_rules([{"pattern": "x", "category": "c", "severity": "fatal"}])
    with pytest.raises(ValueError, match="not a regular expression"):
        load_rules([{"pattern": "(", "category": "c", "severity": "error"}])


def test_rank_prefixes() -> None:
    assert split_prefix("[rank3]: hello") == (3, None, "hello")
    assert split_prefix("[default1]:NCCL WARN x") == (None, 1, "NCCL WARN x")
    assert split_prefix("[W1105 12:00:00.1] warning") == (None, None, "[W1105 12:00:00.1] warning")


def stream(**kw: object) -> LogStream:
    return LogStream(job_id="j", host="h", stream="stderr", rules=BUILTIN, **kw)  # type: ignore[arg-type]


TRACEBACK = """Traceback (most recent call last):
  File "train.py", line 8, in <module>
    step()
    ^^^^^^
  File "train.py", line 6, in step
    raise RuntimeError("CUDA error: an illegal memory access was encountered")
RuntimeError: CUDA error: an illegal memory access was encountered"""


def test_traceback_is_one_event_and_frames_are_not_classified() -> None:
    s = stream(rank_of=lambda local: local + 8)
    events = [e for line in ["plain output", *(f"[default1]:{ln}" for ln in TRACEBACK.splitlines())] for e in s.feed(line)]
    assert [e.category for e in events] == ["traceback", "cuda_error"]
    tb = events[0]
    assert tb.message.endswith("RuntimeError: CUDA error: an illegal memory access was encountered")
    assert (tb.rank, tb.local_rank) == (9, 1)
    summary = summarize(s.memory)
    assert summary.summary == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert summary.traceback.startswith("Traceback")


def test_flood_is_summarised_not_dropped() -> None:
    now = [0.0]
    s = stream(flood_burst=5, flood_window_s=10.0, clock=lambda: now[0])
    events = [e for i in range(105) for e in s.feed(f"NCCL WARN retry {i}")]
    assert len(events) == 5 and all(e.repeats == 1 for e in events)
    now[0] = 10.5
    summary = s.tick()
    assert len(summary) == 1 and summary[0].repeats == 100 and summary[0].message == "NCCL WARN retry 104"
    assert s.feed("NCCL WARN again")[0].repeats == 1  # a new window
    assert s.close() == []


def test_flood_limiter_drains_open_windows() -> None:
    lim: FloodLimiter[str] = FloodLimiter(burst=1, window_s=60)
    assert lim.offer("k", "a", 0) == [("a", 1)]
    assert lim.offer("k", "b", 1) == [] and lim.offer("k", "c", 2) == []
    assert lim.drain() == [("c", 2)]


TORCHRUN_REPORT = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-01_12:00:01
  host      : node-7
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 4241) SIGTERM
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 4241
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-01_12:00:00
  host      : node-7
  rank      : 1 (local_rank: 1)
  exitcode  : 3 (pid: 4242)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================"""


def test_summary_prefers_torchrun_root_cause_rank() -> None:
    memory = ErrorMemory()
    s = stream(memory=memory)
    for line in TRACEBACK.replace("CUDA error: an illegal memory access was encountered", "ValueError on rank 1").splitlines():
        s.feed(f"[rank1]:{line}")
    for line in "Traceback (most recent call last):\n  File \"x\"\nKeyboardInterrupt: later".splitlines():
        s.feed(f"[rank0]:{line}")
    for line in ["Traceback (most recent call last):", '  File "torchrun"', *TORCHRUN_REPORT.splitlines()]:
        s.feed(line)
    summary = summarize(memory)
    assert memory.root is not None and (memory.root.rank, memory.root.exit_code, memory.root.pid) == (1, 3, 4242)
    assert summary.rank == 1 and summary.local_rank == 1
    assert summary.summary == "RuntimeError: ValueError on rank 1"


def test_a_huge_line_is_cut_marked_counted_and_still_classified() -> None:
    s = stream()
    [event] = s.feed("NCCL WARN " + "x" * 65_536)
    assert event.category == "nccl_error" and s.truncated == 1
    assert len(event.message) <= 8192 and "x" * 100 in event.message
    assert s.feed("NCCL " * 13_000) == []  # the line that backtracked for seconds: no match, bounded work


def test_rules_are_re2_and_refuse_what_would_backtrack() -> None:
    with pytest.raises(ValueError, match="not a regular expression"):
        load_rules([{"pattern": r"(a+)+(?!b)", "category": "c", "severity": "error"}])
    with pytest.raises(ValueError, match="not a regular expression"):
        load_rules([{"pattern": r"(\w+) \1", "category": "c", "severity": "error"}])
    assert classify("RuntimeError: CUBLAS_STATUS_EXECUTION_FAILED when calling cublasGemmEx", BUILTIN).category == \
        "cuda_error"  # type: ignore[union-attr]
    assert classify("CUBLAS_STATUS_SUCCESS", BUILTIN) is None


def test_a_user_line_reading_failures_does_not_silence_later_errors() -> None:
    s = stream()
    s.feed("Failures:")
    s.feed("[0]:")
    [event] = s.feed("RuntimeError: CUDA error: an illegal memory access was encountered")
    assert event.category == "cuda_error"


def test_the_report_parser_state_is_bounded() -> None:
    from vigil.collector.summary import MAX_QUOTED, MAX_REPORT_LINES

    memory = ErrorMemory()
    s = stream(memory=memory)
    for line in ["-" * 60, "Failures:", "[0]:", "  rank      : 1 (local_rank: 1)", "  traceback : start"]:
        s.feed(line)
    for i in range(MAX_REPORT_LINES):
        s.feed(f"quoted line {i} " + "y" * 1000)
    assert memory._entry is None or len(memory._entry._quoted) <= MAX_QUOTED
    [event] = s.feed("RuntimeError: CUDA error: an illegal memory access was encountered")  # the report was not one
    assert event.category == "cuda_error"
    assert len(memory.failures) <= 1 and all(len(f.message) <= 8192 for f in memory.failures)


def test_classification_falls_behind_without_blocking_the_reader() -> None:
    import threading

    from vigil.collector.classifying import LineClassifier

    release = threading.Event()
    emitted: list[object] = []

    def slow_emit(events: object) -> None:
        release.wait(30)
        emitted.extend(events)  # type: ignore[call-overload]

    c = LineClassifier(stream=stream(flood_burst=1000), emit=slow_emit, name="stderr", max_lines=5)
    for i in range(50):
        c.offer(f"NCCL WARN line {i}\n".encode())  # returns at once: the classifier thread is stuck in emit
    assert 50 - 5 - 1 <= c.dropped <= 50 - 5
    release.set()
    c.close()
    assert len(emitted) == 50 - c.dropped


def test_the_memory_keeps_the_first_kernel_hardware_fault_of_a_generation(tmp_path: Path) -> None:
    """What a failed command's agent names in its attested report (`Member.fault`): the first hardware fault the
    kernel reported since the generation started and whose catalog action takes the host out. A line a rank
    printed is a claim, never a fault (issue 49); an application Xid (31) and a CUDA error are not host faults."""
    from datetime import UTC, datetime, timedelta

    from vigil.collector.gpumap import GpuMap
    from vigil.collector.kernellog import KernelLog
    from vigil.collector.kmsg import KmsgRecord
    from vigil.collector.offsets import OffsetStore

    memory = ErrorMemory()
    s = stream(memory=memory)
    start = datetime.now(UTC) - timedelta(seconds=30)
    s.feed(b"[rank4]: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.", at=start)
    s.feed(b"[rank4]: RuntimeError: CUDA error: an illegal memory access was encountered", at=start)
    assert memory.fault_since(start) is None  # printed by the training process: a claim
    kernel = KernelLog(path=tmp_path / "kmsg", job_id="j", host="h", store=OffsetStore(path=tmp_path / "o.json"),
                       emit=lambda _: None, gpus=GpuMap(sysfs_root=tmp_path), rank_of_pid=lambda _: (None, None),
                       memory=memory)

    def record(seq: int, message: str, facility: int = 0) -> KmsgRecord:
        return KmsgRecord(seq=seq, usec=int(time.monotonic() * 1e6), level=3, facility=facility, message=message)

    kernel.handle(record(1, "NVRM: Xid (PCI:0000:3b:00): 31, pid=1234, name=python, MMU Fault"))
    kernel.handle(record(2, "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.", facility=1))
    assert memory.fault_since(start) is None and kernel.user_records == 1  # an application Xid; a user's record
    kernel.handle(record(3, "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', GPU has fallen off the bus."))
    got = memory.fault_since(start)
    assert got is not None and got[0] == "xid" and "fallen off the bus" in got[1].text


"""The kernel log source: follow `/dev/kmsg` on a thread of its own and ship its hardware facts as `source=kernel`.

Where `/dev/kmsg` is not readable, the kernel log is followed through journald (`source` auto, the default, or
journald: `collector.journal`, `journalctl -k -o json --follow`), with the same guarantees: the position saved
is the journal cursor (under `journal` in the agent's offsets), a restart resumes after it, lines are bounded,
and the reads happen on this thread only.

Each record `kernelrules` recognises becomes a `LogLine` with the fact's category, severity and catalog action,
the GPU its PCI address names (`GpuMap`), and the job rank of the pid it names when that pid is one of this
host's ranks (`rank_of_pid`). Its `event_id` derives from (host, boot, sequence number), so a record read again
is a duplicate downstream removes; the position (boot id + last sequence number) is saved in the agent's
offsets after the record's events reached the durable outbox: an agent restart resumes after it, and a new
boot (another boot id) reads the new ring from its start. Only the kernel's own records count (facility 0):
what a process writes to `/dev/kmsg` gets the user facility and is skipped (counted). A kernel Xid or fatal
SXid whose catalog action takes the host out is noted in the agent's error memory: a generation that fails
after it reports it as its fault (`Member.fault`), which a training process's printed line no longer does. Records lost before they were read (a sequence gap,
a wrapped ring) are counted and reported as a `kernel_log_lost` warning. Floods pass the per-(category, GPU)
limiter as log lines do. This thread never feeds heartbeats: a stuck read stalls only it.

A rank that dies of a hardware fault sees its error after the driver logged it, but its agent may notice the exit
before this thread read that record: `caught_up` lets the agent wait (bounded) for a read begun after the exit, so
the exit is reported with the kernel's fault rather than as software.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from vigil.collector.flood import FloodLimiter
from vigil.collector.gpumap import GpuMap
from vigil.collector.journal import JournalReader
from vigil.collector.kernelrules import classify_kernel
from vigil.collector.kmsg import KmsgReader, KmsgRecord
from vigil.collector.offsets import OffsetStore
from vigil.collector.summary import ErrorMemory
from vigil.contract import Event, LogLine, new_event_id, utcnow
from vigil.contract.xid import HOST_ACTIONS

log = logging.getLogger(__name__)
STATE_KEY = "kmsg"
JOURNAL_KEY = "journal"
RETRY_OPEN_S = 10.0
MAX_BACKDATE_S = 86_400.0  # a record's time from the boot clock, unless that puts it further back than this

KERNEL_FACILITY = 0  # what userspace writes to /dev/kmsg gets LOG_USER (1) or above: never a kernel fact
FAULTS = {"xid": "xid", "sxid": "nvlink"}  # kernel facts the agent attests as its ranks' hardware fault (Member.fault)
RankOfPid = Callable[[int], tuple[int | None, int | None]]  # pid -> (rank, local rank)


def read_boot_id(procfs_root: Path) -> str:
    try:
        return (procfs_root / "sys" / "kernel" / "random" / "boot_id").read_text().strip()[:64]
    except OSError:
        return ""


@dataclass(kw_only=True)
class KernelLog:
    path: Path
    job_id: str
    host: str
    store: OffsetStore
    emit: Callable[[Sequence[Event]], None]
    gpus: GpuMap
    rank_of_pid: RankOfPid
    boot_id: str = ""
    poll_s: float = 0.5
    flood_burst: int = 20
    flood_window_s: float = 10.0
    clock: Callable[[], float] = time.monotonic
    memory: ErrorMemory | None = None  # the agent's: a host fault here is what a failed generation reports
    source: str = "kmsg"  # kmsg | journald | auto: /dev/kmsg where it is readable, else journald
    journalctl: str = "journalctl"
    reader: KmsgReader | JournalReader | None = field(default=None, init=False)
    facts: int = 0
    user_records: int = 0  # records userspace wrote to the log (facility >= 1): not the kernel's word
    save_errors: int = 0  # the position could not be saved (the state directory refused it)
    _reported_lost: int = field(default=0, init=False)
    _oom_pids: deque[int] = field(default_factory=lambda: deque(maxlen=64), init=False, repr=False)
    _limiter: FloodLimiter[LogLine] = field(init=False, repr=False)
    _reads: threading.Condition = field(default_factory=threading.Condition, init=False, repr=False)
    _began: int = field(default=0, init=False)  # reads begun by the thread, and the last one handled
    _handled: int = field(default=0, init=False)
    _following: bool = field(default=False, init=False)
    _wake: threading.Event = field(default_factory=threading.Event, init=False, repr=False)

    def __post_init__(self) -> None:
        self._limiter = FloodLimiter(burst=self.flood_burst, window_s=self.flood_window_s)

    @property
    def following(self) -> bool:
        """The thread is reading the kernel log (it opened it and has not stopped)."""
        return self._following

    def interrupt(self) -> None:
        """End the thread's wait between reads now (a stop set, or a read wanted)."""
        self._wake.set()

    def caught_up(self, timeout_s: float) -> bool:
        """Wait until a read this thread began after the call was handled (its facts emitted, a host fault in the
        error memory), read on until nothing was left; at most `timeout_s`. False at once when the kernel log is
        not being followed, or at the timeout (a stuck read): the caller goes on with what is known."""
        with self._reads:
            target = self._began + 1
            self.interrupt()  # a reader waiting out its interval on a file reads now
            return self._reads.wait_for(lambda: self._handled >= target or not self._following, timeout_s) \
                and self._handled >= target

    def open(self) -> bool:
        if self.source != "journald":
            kmsg = self._open_kmsg(quiet=self.source == "auto")
            if kmsg is not None or self.source == "kmsg":
                return self._opened(kmsg, str(self.path))
        return self._opened(self._open_journal(), "journald")

    def _opened(self, reader: KmsgReader | JournalReader | None, what: str) -> bool:
        if reader is None:
            return False
        self.reader = reader
        self._save()
        log.info("following the kernel log (%s) after record %s", what, reader.last_seq)
        return True

    def _open_kmsg(self, *, quiet: bool) -> KmsgReader | None:
        saved = self.store.get(STATE_KEY) or {}
        same_boot = isinstance(saved, dict) and saved.get("boot") == self.boot_id and isinstance(saved.get("seq"), int)
        reader = KmsgReader(path=self.path, after_seq=saved["seq"] if same_boot else None,
                            from_end=not isinstance(saved, dict) or "boot" not in saved)
        try:
            reader.open()
        except OSError as exc:
            if self.reader is None and not quiet:
                log.warning("kernel log %s not readable (%s): no kernel facts (retried every %.0f s)",
                            self.path, exc.strerror, RETRY_OPEN_S)
            self.reader = self.reader or reader
            return None
        return reader

    def _open_journal(self) -> JournalReader | None:
        saved = self.store.get(JOURNAL_KEY)
        cursor = saved.get("cursor") if isinstance(saved, dict) and isinstance(saved.get("cursor"), str) else None
        reader = JournalReader(journalctl=self.journalctl, after_cursor=cursor, from_end=cursor is None)
        try:
            reader.open()
        except OSError as exc:
            if not isinstance(self.reader, JournalReader):
                log.warning("kernel log: %s not readable and %s cannot run (%s): no kernel facts (retried every "
                            "%.0f s)", self.path, self.journalctl, exc.strerror or exc, RETRY_OPEN_S)
            self.reader = reader
            return None
        return reader

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set() and not self.open():
            stop.wait(RETRY_OPEN_S)
        reader = self.reader
        try:
            with self._reads:
                self._following = reader is not None
            while reader is not None and not stop.is_set():
                with self._reads:
                    self._began += 1
                    began = self._began
                while self.poll() and not stop.is_set():
                    pass  # a backlog past one read's limit: read on, so a handled read means nothing was left
                with self._reads:
                    self._handled = began
                    self._reads.notify_all()
                reader.wait(self.poll_s, self._wake)
                self._wake.clear()
        finally:
            with self._reads:
                self._following = False
                self._reads.notify_all()
            if reader is not None:
                reader.close()
            self.emit([self._repeat(e, n) for e, n in self._limiter.drain()])

    def poll(self) -> int:
        """Read what is new (at most one read's limit), emit its facts, then save the position; the records read."""
        assert self.reader is not None
        records = self.reader.read()
        out: list[LogLine] = []
        for record in records:
            out += self.handle(record)
        out += [self._repeat(e, n) for e, n in self._limiter.due(self.clock())]
        missing = self.reader.lost - self._reported_lost
        if missing > 0:
            self._reported_lost = self.reader.lost
            out.append(LogLine(job_id=self.job_id, host=self.host, category="kernel_log_lost", severity="warning",
                               source="kernel", message=f"{missing} kernel log records lost before they were read "
                               f"({self.reader.lost} in all; the ring buffer wrapped {self.reader.wrapped} times)"))
        self.emit(out)
        if records:
            self._save()
        return len(records)

    def handle(self, record: KmsgRecord) -> list[LogLine]:
        if record.facility != KERNEL_FACILITY:
            self.user_records += 1
            return []
        fact = classify_kernel(record.message)
        if fact is None:
            return []
        if fact.category == "oom" and fact.pid is not None:
            if fact.pid in self._oom_pids:
                return []  # the same kill's second line
            self._oom_pids.append(fact.pid)
        gpu, uuid = self.gpus.lookup(fact.pci) if fact.pci else (None, "")
        rank, local = self.rank_of_pid(fact.pid) if fact.pid is not None else (None, None)
        self.facts += 1
        event = LogLine(
            event_id=hashlib.sha256((f"{self.host}|journal|{record.cursor}" if record.cursor else
                                     f"{self.host}|{self.boot_id}|{record.seq}").encode()).hexdigest()[:32],
            job_id=self.job_id, host=self.host, ts=self._when(record), rank=rank, local_rank=local,
            category=fact.category, severity=fact.severity, message=record.message[:8192], xid=fact.xid,
            source="kernel", action=fact.action, gpu_index=gpu, gpu_uuid=uuid[:256], pci=fact.pci, pid=fact.pid)
        if self.memory is not None and fact.action in HOST_ACTIONS and fact.category in FAULTS:
            self.memory.note_fault(FAULTS[fact.category], record.message[:2048], event.ts, gpu=gpu,
                                   action=str(fact.action or ""))
        emitted = self._limiter.offer((fact.category, gpu, fact.pci), event, self.clock())
        return [self._repeat(e, n) if n > 1 else e for e, n in emitted]

    def _when(self, record: KmsgRecord) -> datetime:
        now = time.time()
        at = now - time.monotonic() + record.usec / 1e6
        return datetime.fromtimestamp(at, UTC) if now - MAX_BACKDATE_S <= at <= now + 1 else utcnow()

    def _save(self) -> None:
        """Save the position; a state directory that refuses it (full, unwritable) is counted and logged, never the
        end of the thread: the agent keeps reading, and after a restart re-reads at most what was not saved."""
        r = self.reader
        if r is not None and r.last_seq is not None:
            position = {JOURNAL_KEY: {"cursor": r.last_seq}} if isinstance(r, JournalReader) else \
                {STATE_KEY: {"boot": self.boot_id, "seq": r.last_seq}}
            try:
                self.store.save(**position)
            except OSError as exc:
                self.save_errors += 1
                if self.save_errors == 1 or self.save_errors % 1000 == 0:
                    log.warning("kernel log: cannot save the position (%d times): %s", self.save_errors, exc)

    def stats(self) -> dict[str, int]:
        r = self.reader
        return {"kernel_facts": self.facts, "kernel_user_records": self.user_records, "kernel_lost": r.lost if r else 0,
                "kernel_wrapped": r.wrapped if r else 0, "kernel_malformed": r.malformed if r else 0}

    @staticmethod
    def _repeat(event: LogLine, repeats: int) -> LogLine:
        return event.model_copy(update={"repeats": repeats, "event_id": new_event_id(), "ts": utcnow()})

"""The hot records decoded into their groups' columns, in a process of their own or on the consumer's thread.

One consumer's Python holds the GIL for every event it ingests: decoding the record (msgspec),
building the columns, encoding them for the engine. `decode(values)` does that work for the
records of the kinds with a column builder (step, nic): a columnar record (`wire.COLUMNAR`, what
producers write for those kinds) is read straight into columns with no object per event
(`vigil.contract.colwire`), a row record's events are read into them. What comes back is, per
kind, the group's columns already encoded as JSON arrays and the fields the recent-id window
reads. It runs in a child process (`DecodeProcess`, on machines with the cores for it) or on the
consumer's thread (`InlineDecode`), while the writer inserts the batch before.

What it guarantees (the writer relies on each):

* **The same decisions.** A record is taken only when the fast path accepts every event of it
  (`fastwire.decode_hot`, `colwire.decode_columnar`), as the consumer's own `decode_fast` would,
  and every event names its event_id and ts (values a decoder fills in would differ in a second
  decode); any other record is *declined* and the consumer decodes it itself (pydantic, dead
  letters with reasons).
* **The same rows.** A group is `staging.stage` of the taken events: the repeats of an
  event_id dropped (the first kept, in record order), the columns those of `columns.BUILDERS`;
  the encoded arrays are msgspec's encoding of those columns, so the document the writer
  assembles is byte for byte `blocks.BlockInserter`'s (tests/analyzer/test_offload.py).
* **The same events when asked.** `Offloaded.events()` gives each taken record's events as
  structs, decoded again from the kept records at the clock of the first decode (a decode is a
  function of both), so a batch that leaves the steady state (a re-send, a re-cut, a value the
  store refuses) takes the ordinary path with exactly the events whose columns were built.
* **Nothing waits on a dead child.** A child that dies, fails or answers nothing for
  `timeout_s` is stopped and started again at the next batch; its batches come back `None`
  and the consumer decodes them itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import subprocess
import sys
import threading
import time
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import compress
from multiprocessing.connection import Connection
from typing import Any, cast

import msgspec

from vigil.analyzer.ingest.blocks import Encoded, encoded
from vigil.analyzer.ingest.columns import FROM_COLUMNS
from vigil.analyzer.ingest.recent import Marks
from vigil.analyzer.ingest.staging import first_mask
from vigil.contract.colwire import (
    EventColumns,
    columns_of,
    decode_columnar,
    events_of,
    is_columnar,
    rows_claimed,
)
from vigil.contract.fastwire import decode_hot
from vigil.contract.hotkinds import HOT_PREFIXES, FastNic, FastStep, Ingestable
from vigil.kafka.consumer import OffloadLost

log = logging.getLogger(__name__)

_PREFIXES = tuple(HOT_PREFIXES[k] for k in FROM_COLUMNS)
_KIND_OF = {HOT_PREFIXES[k]: k for k in FROM_COLUMNS}
_PACKED: dict[str, msgspec.msgpack.Decoder[Any]] = {"step": msgspec.msgpack.Decoder(list[FastStep]),
                                                    "nic": msgspec.msgpack.Decoder(list[FastNic])}
_pack = msgspec.msgpack.Encoder().encode
PIPE_BYTES = 1 << 20  # Linux's default most for an unprivileged process (/proc/sys/fs/pipe-max-size)
KEEP = 4  # batches whose events the child keeps: the one being written, the next, and room for a retry
_STRINGS = ("job_id", "host")  # interned in the child: one string object per host, so pickling sends it once


@dataclass(frozen=True, kw_only=True)
class Group:
    """One kind's unique events of a batch, as columns: what the writer inserts and what its window reads."""

    table: str
    repeats: int  # events dropped as repeats of an earlier event_id of the taken records
    block: Encoded  # its columns, each encoded as one JSON array, in the builder's column order
    ids: list[str]
    jobs: list[str]
    hosts: list[str]
    times: list[float]  # event time, epoch seconds (`recent.Marks.of_columns`)
    marks: Marks | None = None  # what the window reads, made where the ids' hashes are this process's (InlineDecode)


@dataclass(kw_only=True)
class Offloaded:
    """A batch's taken records decoded: `counts[i]` the events of value i, None where it was declined."""

    counts: list[int | None]
    kinds: list[str | None]
    groups: dict[str, Group]
    fetch: Callable[[], dict[str, bytes] | None] | None = field(default=None, repr=False, compare=False)
    # -> each kind's taken events in record order (repeats included), msgpack; None: they are gone

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "fetch": None}  # a closure stays in the process that made it

    def events(self) -> list[list[Ingestable] | None]:
        """Each value's events, as the child decoded them (None: declined); OffloadLost when the child that
        decoded them is gone."""
        packed = self.fetch() if self.fetch is not None else None
        if packed is None:
            raise OffloadLost("the ingest decode process no longer holds the batch's events")
        lists = {k: iter(_PACKED[k].decode(b)) for k, b in packed.items()}
        return [None if c is None or k is None else [next(lists[k]) for _ in range(c)]
                for c, k in zip(self.counts, self.kinds, strict=True)]


def claim(value: bytes | None) -> int | None:
    """The events of a record the child would take (an estimate, for the batch's size), or None: decoded here."""
    if value is None or not value.startswith(_PREFIXES):
        return None
    return rows_claimed(value) if is_columnar(value) is not None else max(1, value.count(b'"job_id"'))


def _group(kind: str, events: EventColumns, repeats: int, marks: bool) -> Group:
    table, make = FROM_COLUMNS[kind]
    cols = make(events)
    for name in _STRINGS:
        cols[name] = list(map(sys.intern, cols[name]))
    block = encoded(cols)
    times = list(map(datetime.timestamp, cols["ts"]))
    return Group(table=table, repeats=repeats, block=block, ids=cols["event_id"], jobs=cols["job_id"],
                 hosts=cols["host"], times=times,
                 marks=Marks.made(cols["job_id"], cols["host"], times, list(map(hash, cols["event_id"]))) if marks else None)


def _kind(value: bytes | None) -> str | None:
    return next((k for p, k in _KIND_OF.items() if value is not None and value.startswith(p)), None)


def _taken(value: bytes | None, now: datetime) -> tuple[str, EventColumns] | None:
    """A record the fast path takes whole, with every event's id and time given, as its kind and event columns: a
    columnar record read as columns, a row record's events read into them (`colwire.columns_of`)."""
    kind = _kind(value)
    if kind is None or value is None:
        return None
    if is_columnar(value) is not None:
        cols = decode_columnar(value, kind, now)
        return None if cols is None else (kind, cols)
    events = decode_hot(value, given=True, now=now)  # ids and times as sent: see the docstring
    return None if events is None else (kind, columns_of(kind, events))


def decode(values: list[bytes | None], now: datetime | None = None, marks: bool = False) -> Offloaded:
    """Decode the records the fast path takes whole and make their groups (pure: the child's whole work, `now` the
    clock its freshness checks read; `marks`: also the window's marks, for a writer in this process). The batch's
    repeats of an event_id are dropped across kinds in record order, the first kept, as `staging.stage` drops them."""
    now = now or datetime.now(UTC)
    counts: list[int | None] = []
    kinds: list[str | None] = []
    parts: list[tuple[str, EventColumns]] = []
    for value in values:
        got = _taken(value, now)
        counts.append(None if got is None else len(got[1]["event_id"]))
        kinds.append(None if got is None else got[0])
        if got is not None:
            parts.append(got)
    keep = first_mask([i for _kind, cols in parts for i in cols["event_id"]])
    merged: dict[str, EventColumns] = {}
    taken: dict[str, int] = defaultdict(int)
    at = 0
    for kind, cols in parts:
        n = len(cols["event_id"])
        taken[kind] += n
        if keep is not None and not all(keep[at:at + n]):
            mask = keep[at:at + n]
            cols = {name: list(compress(v, mask)) for name, v in cols.items()}
        at += n
        if kind not in merged:
            merged[kind] = {name: list(v) for name, v in cols.items()}
        else:
            for name, v in cols.items():
                merged[kind][name] += v
    return Offloaded(counts=counts, kinds=kinds, groups={k: _group(k, c, taken[k] - len(c["event_id"]), marks)
                                                         for k, c in merged.items() if c["event_id"]})


def taken_events(values: list[bytes | None], now: datetime) -> dict[str, list[Any]]:
    """Each kind's taken events of `decode(values, now)`, in record order (repeats included), as the fast-path structs:
    the same records taken, the same values (a decode is a function of the record and the clock)."""
    by_kind: dict[str, list[Any]] = defaultdict(list)
    for value in values:
        got = _taken(value, now)
        if got is not None:
            by_kind[got[0]] += events_of(*got)
    return dict(by_kind)


def _packed(by_kind: dict[str, list[Any]]) -> dict[str, bytes]:
    return {k: _pack(v) for k, v in by_kind.items()}


def serve(requests: Connection, replies: Connection, keep: int = KEEP) -> None:
    """The child: ("decode", seq, values) -> ("decoded", seq, Offloaded | error text); ("events", seq) ->
    ("events", seq, packed events | None); until None or a pipe closes. Keeps the last `keep` batches' records (and
    the clock they were read at), to decode them again as events when asked."""
    kept: OrderedDict[int, tuple[list[bytes | None], datetime]] = OrderedDict()
    while True:
        try:
            msg = requests.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        if msg[0] == "events":
            reply: tuple[Any, ...] = ("events", msg[1], _packed(taken_events(*kept[msg[1]])) if msg[1] in kept else None)
        else:
            _op, seq, values = msg
            try:
                now = datetime.now(UTC)
                out = decode(values, now)
                kept[seq] = (values, now)
                while len(kept) > keep:
                    kept.popitem(last=False)
                reply = ("decoded", seq, out)
            except Exception as exc:  # a bug: the consumer decodes this batch itself
                reply = ("decoded", seq, f"{type(exc).__name__}: {exc}")
        try:
            replies.send(reply)
        except (EOFError, OSError):
            return


class Pending:
    """A batch handed to the child; `result()` waits for it (None: the consumer decodes the batch itself)."""

    def __init__(self, owner: DecodeProcess | None, seq: int, done: Offloaded | None = None) -> None:
        self._owner, self._seq, self._done, self._waited = owner, seq, done, owner is None

    def result(self) -> Offloaded | None:
        if not self._waited:
            assert self._owner is not None
            self._done, self._waited = self._owner.decoded(self._seq), True
        return self._done


class InlineDecode:
    """The in-memory implementation: `decode` on the calling thread (tests, and a consumer without a child)."""

    claim = staticmethod(claim)
    decode_s = 0.0  # seconds spent decoding (the calling thread's)

    def submit(self, values: list[bytes | None]) -> Pending:
        t = time.perf_counter()
        now = datetime.now(UTC)
        out = decode(values, now, marks=True)
        self.decode_s += time.perf_counter() - t
        out.fetch = lambda: _packed(taken_events(values, now))
        return Pending(None, 0, out)

    def close(self) -> None:
        pass


@dataclass
class _Child:
    """One started child: its process, its pipes, the replies it owes, and whether its pipe is read to the end."""

    proc: subprocess.Popen[bytes]
    requests: Connection
    replies: Connection
    owed: set[tuple[str, int]] = field(default_factory=set)
    gone: bool = False
    started: float = field(default_factory=time.monotonic)


class DecodeProcess:
    """`decode` in one child process, its batches answered in the order they were handed over.

    Nothing waits on the child while holding anything the child needs: a reader thread per child drains its
    replies into `_got` whatever anyone is doing (so the child never blocks on a full pipe), sends take only
    the send lock, and a waiter gives up after `timeout_s` and kills that child (a send stuck on it then fails).
    A child that is gone answers None for everything it owed; the next batch starts another, not within
    `restart_backoff_s` of a failed start or of the start of one that died."""

    claim = staticmethod(claim)

    def __init__(self, timeout_s: float = 120.0, restart_backoff_s: float = 5.0) -> None:
        self.timeout_s, self.restart_backoff_s = timeout_s, restart_backoff_s
        self.batches = self.failures = self.restarts = 0
        self._cond = threading.Condition()  # guards everything below
        self._sending = threading.Lock()
        self._child: _Child | None = None
        self._seq = 0
        self._got: OrderedDict[tuple[str, int], Any] = OrderedDict()
        self._not_before = 0.0  # no new child before this (monotonic)
        self._closed = False

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The running child, to watch or signal (None before it starts, after it is gone and after `close`)."""
        child = self._child
        return child.proc if child is not None and not child.gone else None

    @property
    def pid(self) -> int | None:
        """The child's process id (None before it starts, after it is gone and after `close`)."""
        process = self.process
        return int(process.pid) if process is not None else None

    def start(self) -> None:
        with self._cond:
            self._ensure()

    def _ensure(self) -> _Child | None:
        """The running child, started if there is none (None: it cannot be started now)."""
        child = self._child
        if child is not None and not child.gone and child.proc.poll() is None:
            return child
        now = time.monotonic()
        if child is not None and now - child.started < self.restart_backoff_s:  # it died young: not at once again
            self._not_before = max(self._not_before, child.started + self.restart_backoff_s)
        if self._closed or now < self._not_before:
            return None
        if child is not None:
            self.restarts += 1
        theirs_in, ours_out = os.pipe()
        ours_in, theirs_out = os.pipe()
        try:
            for fd in (ours_out, theirs_out):  # a batch is tens of MB: fewer wake-ups per batch than at 64 KiB
                with contextlib.suppress(OSError):
                    fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
            # a plain interpreter on this module (nothing of the parent's __main__ is run again, as spawn would), in
            # a session of its own (a terminal's Ctrl-C stops the parent, which stops it)
            proc = subprocess.Popen([sys.executable, "-m", __name__, str(theirs_in), str(theirs_out)],
                                    pass_fds=(theirs_in, theirs_out), stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            for fd in (ours_in, ours_out):
                os.close(fd)
            log.warning("ingest decode process could not start, decoding here: %s", exc)
            self.failures += 1
            self._not_before = time.monotonic() + self.restart_backoff_s
            return None
        finally:
            os.close(theirs_in)
            os.close(theirs_out)
        self._child = child = _Child(proc=proc, requests=Connection(ours_out, readable=False),
                                     replies=Connection(ours_in, writable=False))
        threading.Thread(target=self._read, args=(child,), name="ingest-decode-replies", daemon=True).start()
        return child

    def _read(self, child: _Child) -> None:
        """Drain one child's replies until its pipe ends (it exited or was killed), then forget what it owed."""
        while True:
            try:
                kind, seq, out = child.replies.recv()
            except Exception as exc:  # gone, or an answer that cannot be read: never trusted after
                if not isinstance(exc, EOFError):
                    log.warning("ingest decode process sent what cannot be read, decoding here: %s", exc)
                break
            with self._cond:
                if (kind, seq) in child.owed:
                    child.owed.discard((kind, seq))
                    self._got[(kind, seq)] = out
                    while len(self._got) > 4 * KEEP:  # answers nobody waits for (a batch dropped by a rebalance)
                        self._got.popitem(last=False)
                    self._cond.notify_all()
        self._gone(child, failed=not self._closed)

    def _gone(self, child: _Child, failed: bool) -> None:
        with self._cond:
            if child.gone:
                return
            child.gone = True
            self.failures += failed
            child.owed.clear()
            self._cond.notify_all()
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            child.proc.kill()
            child.proc.wait(5)
        for conn in (child.requests, child.replies):
            with contextlib.suppress(OSError):
                conn.close()

    def _ask(self, key: tuple[str, int], msg: tuple[Any, ...], start: bool) -> _Child | None:
        with self._cond:
            child = self._ensure() if start else self._child
            if child is None or child.gone:
                return None
            child.owed.add(key)
        try:
            with self._sending:  # may wait while the child works (its replies are drained meanwhile)
                child.requests.send(msg)
        except (OSError, EOFError, ValueError) as exc:
            log.warning("ingest decode process unusable, decoding here: %s", exc)
            with self._cond:
                child.owed.discard(key)
            return None
        return child

    def submit(self, values: list[bytes | None]) -> Pending:
        with self._cond:
            self._seq += 1
            seq = self._seq
        child = self._ask(("decoded", seq), ("decode", seq, values), start=True)
        return Pending(self if child is not None else None, seq, None)

    def decoded(self, seq: int) -> Offloaded | None:
        out = self._await(("decoded", seq))
        if isinstance(out, str):
            log.error("ingest decode process refused a batch, decoding here: %s", out)
            with self._cond:
                self.failures += 1
            return None
        if out is not None:
            out.fetch = lambda: self.events(seq)
            with self._cond:
                self.batches += 1
        return cast("Offloaded | None", out)

    def events(self, seq: int) -> dict[str, bytes] | None:
        """The packed events of batch `seq`, asked of the child that decoded it (None: that child is gone)."""
        if self._ask(("events", seq), ("events", seq), start=False) is None:
            return None
        return cast("dict[str, bytes] | None", self._await(("events", seq)))

    def _await(self, key: tuple[str, int]) -> Any:
        deadline = time.monotonic() + self.timeout_s
        with self._cond:
            while key not in self._got:
                child = self._child
                if child is None or key not in child.owed:
                    return None  # never asked, or its child is gone
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            else:
                return self._got.pop(key)
        log.warning("ingest decode process answered nothing in %.0f s: killed, decoding here", self.timeout_s)
        self._gone(child, failed=True)  # its reader ends, a send stuck on it fails
        return None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            child = self._child
        if child is None or child.gone:
            return
        with contextlib.suppress(OSError, ValueError):
            if self._sending.acquire(timeout=2):
                try:
                    child.requests.send(None)
                finally:
                    self._sending.release()
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.proc.wait(2)
        self._gone(child, failed=False)


if __name__ == "__main__":  # the child (`DecodeProcess`), given its two pipes' descriptors
    from vigil.analyzer.ingest import (
        offload as _named,  # what it sends is pickled under the module's own name
    )
    from vigil.runtime import tune_gc

    tune_gc()  # it allocates a phase map or two per event, like the ingest it serves
    _named.serve(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False))

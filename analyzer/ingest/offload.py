"""The hot records decoded in a process of their own: the per-event work of a batch off the ingest's GIL.

One consumer's Python holds the GIL for every event it ingests: decoding the record (msgspec),
building the columns, encoding them for the engine (~0.6 of ~0.9 s per 100k step events, the
engine's insert running beside it). `offload(values)` does that work for the records of the
kinds with a column builder (step, nic) in a child process (`DecodeProcess`), while the
writer inserts the batch before: what comes back is, per kind, the group's columns already
encoded as JSON arrays, the fields the recent-id window reads, and the accepted events packed
(msgpack) in case the writer needs them as objects after all.

What it guarantees (the writer relies on each):

* **The same decisions.** A record is taken only when `fastwire.decode_hot` accepts every
  event of it, as the consumer's own `decode_fast` would; any other record is *declined* and
  the consumer decodes it itself (pydantic, dead letters with reasons). A record is decided
  by exactly one process.
* **The same rows.** A group is `staging.stage` of the taken events: the repeats of an
  event_id dropped (the first kept, in record order), the columns built by `columns.BUILDERS`;
  the encoded arrays are msgspec's encoding of those columns, so the document the writer
  assembles is byte for byte `blocks.BlockInserter`'s (tests/analyzer/test_offload.py).
* **The same events when asked.** `Offloaded.events()` gives each taken record's events as the
  child decoded them (ids and times it filled in included), so a batch that leaves the steady
  state (a re-send, a re-cut, a value the store refuses) takes the ordinary path with exactly
  the events whose columns were built.
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
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from multiprocessing.connection import Connection
from typing import Any, cast

import msgspec

from vigil.analyzer.ingest.blocks import Encoded
from vigil.analyzer.ingest.columns import BUILDERS
from vigil.analyzer.ingest.staging import first_of_each
from vigil.contract.fastwire import HOT_PREFIXES, FastNic, FastStep, Ingestable, decode_hot
from vigil.kafka.consumer import OffloadLost

log = logging.getLogger(__name__)

_PREFIXES = tuple(HOT_PREFIXES[k] for k in BUILDERS)
_KIND_OF = {HOT_PREFIXES[k]: k for k in BUILDERS}
_PACKED: dict[str, msgspec.msgpack.Decoder[Any]] = {"step": msgspec.msgpack.Decoder(list[FastStep]),
                                                    "nic": msgspec.msgpack.Decoder(list[FastNic])}
_encode = msgspec.json.Encoder().encode
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

    @property
    def accepted(self) -> int:
        return sum(c for c in self.counts if c is not None)

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
    return max(1, value.count(b'"job_id"'))


def _bounds(cols: dict[str, list[Any]]) -> dict[str, tuple[int, int]]:
    """Each integer column's least and greatest value (what `blocks.check_ranges` checks), in C where it can."""
    out: dict[str, tuple[int, int]] = {}
    for name, values in cols.items():
        first = values[0] if values else 0.0
        if type(first) is int:
            try:
                out[name] = (min(values), max(values))
                continue
            except TypeError:  # a null among them
                pass
        elif first is not None:
            continue  # a float, text, map or time column
        present = [v for v in values if v is not None]
        if present and type(present[0]) is int:
            out[name] = (min(present), max(present))
    return out


def _group(kind: str, events: list[Any], repeats: int) -> Group:
    table, build = BUILDERS[kind]
    cols = build(events)
    for name in _STRINGS:
        cols[name] = list(map(sys.intern, cols[name]))
    block = Encoded(arrays={n: _encode(v) for n, v in cols.items()}, bounds=_bounds(cols), rows=len(events))
    return Group(table=table, repeats=repeats, block=block, ids=cols["event_id"], jobs=cols["job_id"],
                 hosts=cols["host"], times=list(map(datetime.timestamp, cols["ts"])))


def _kind(value: bytes | None) -> str | None:
    return next((k for p, k in _KIND_OF.items() if value is not None and value.startswith(p)), None)


def decode(values: list[bytes | None]) -> tuple[Offloaded, dict[str, list[Any]]]:
    """Decode the records the fast path takes whole and make their groups (pure: the child's whole work); also
    each kind's taken events in record order, for `Offloaded.events`."""
    counts: list[int | None] = []
    kinds: list[str | None] = []
    taken: list[Any] = []
    by_kind: dict[str, list[Any]] = defaultdict(list)
    for value in values:
        kind = _kind(value)
        events = decode_hot(value) if kind is not None else None
        if kind is None or events is None:
            counts.append(None)
            kinds.append(None)
            continue
        counts.append(len(events))
        kinds.append(kind)
        taken += events
        by_kind[kind] += events
    groups: dict[str, list[Any]] = defaultdict(list)
    for e in first_of_each(taken):
        groups[e.kind].append(e)
    return Offloaded(counts=counts, kinds=kinds,
                     groups={k: _group(k, g, len(by_kind[k]) - len(g)) for k, g in groups.items()}), dict(by_kind)


def _packed(by_kind: dict[str, list[Any]]) -> dict[str, bytes]:
    return {k: _pack(v) for k, v in by_kind.items()}


def _serve(requests: Connection, replies: Connection, keep: int = KEEP) -> None:
    """The child: ("decode", seq, values) -> ("decoded", seq, Offloaded | error text); ("events", seq) ->
    ("events", seq, packed events | None); until None or a pipe closes. Keeps the last `keep` batches' events."""
    kept: OrderedDict[int, dict[str, list[Any]]] = OrderedDict()
    while True:
        try:
            msg = requests.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        if msg[0] == "events":
            reply: tuple[Any, ...] = ("events", msg[1], _packed(kept[msg[1]]) if msg[1] in kept else None)
        else:
            _op, seq, values = msg
            try:
                out, kept[seq] = decode(values)
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

    def submit(self, values: list[bytes | None]) -> Pending:
        out, by_kind = decode(values)
        out.fetch = lambda: _packed(by_kind)
        return Pending(None, 0, out)

    def close(self) -> None:
        pass


class DecodeProcess:
    """`decode` in one spawned child process, batches answered in the order they were handed over.

    Two one-way pipes: the consumer's thread sends (a send waits while the child finishes the batch before),
    the writer's thread receives; a child that dies or hangs is killed first, so neither side waits on it."""

    claim = staticmethod(claim)

    def __init__(self, timeout_s: float = 120.0) -> None:
        self.timeout_s = timeout_s
        self.batches = self.failures = self.restarts = 0
        self._state = threading.Lock()  # the child, its pipes, what it owes (held while sending)
        self._receiving = threading.Lock()
        self._proc: Any = None
        self._requests: Connection | None = None
        self._replies: Connection | None = None
        self._seq = 0
        self._owed: set[tuple[str, int]] = set()  # replies the child owes: ("decoded" | "events", seq)
        self._got: dict[tuple[str, int], Any] = {}

    def start(self) -> None:
        with self._state:
            self._ensure()

    @property
    def pid(self) -> int | None:
        """The child's process id (None before it starts and after `close`)."""
        proc = self._proc
        return int(proc.pid) if proc is not None else None

    def _ensure(self) -> Connection:
        if self._requests is None or self._proc is None or self._proc.poll() is not None:
            if self._proc is not None:
                self._close_child()
                self.restarts += 1
            theirs_in, ours_out = os.pipe()
            ours_in, theirs_out = os.pipe()
            for fd in (ours_out, theirs_out):  # a batch is tens of MB: fewer wake-ups per batch than at 64 KiB
                with contextlib.suppress(OSError):
                    fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
            try:  # a plain interpreter on this module: nothing of the parent's __main__ is run again (as spawn would)
                self._proc = subprocess.Popen([sys.executable, "-m", __name__, str(theirs_in), str(theirs_out)],
                                              pass_fds=(theirs_in, theirs_out), stdin=subprocess.DEVNULL)
            finally:
                os.close(theirs_in)
                os.close(theirs_out)
            self._requests, self._replies = Connection(ours_out, readable=False), Connection(ours_in, writable=False)
        return self._requests

    def _ask(self, key: tuple[str, int], msg: tuple[Any, ...], restart: bool) -> None:
        with self._state:
            try:
                conn = self._ensure() if restart else self._requests
                if conn is None:
                    return
                self._owed.add(key)
                conn.send(msg)
            except (OSError, EOFError, ValueError) as exc:
                log.warning("ingest decode process unusable, decoding here: %s", exc)
                self._owed.discard(key)

    def submit(self, values: list[bytes | None]) -> Pending:
        with self._state:
            self._seq += 1
            seq = self._seq
        self._ask(("decoded", seq), ("decode", seq, values), restart=True)
        return Pending(self, seq)

    def decoded(self, seq: int) -> Offloaded | None:
        out = self._await(("decoded", seq))
        if isinstance(out, str):
            log.error("ingest decode process refused a batch, decoding here: %s", out)
            with self._state:
                self.failures += 1
            return None
        if out is not None:
            out.fetch = lambda: self.events(seq)
        with self._state:
            self.batches += 1
        return cast("Offloaded | None", out)

    def events(self, seq: int) -> dict[str, bytes] | None:
        """The packed events of batch `seq`, asked of the child that decoded it (None: that child is gone)."""
        self._ask(("events", seq), ("events", seq), restart=False)
        return cast("dict[str, bytes] | None", self._await(("events", seq)))

    def _await(self, key: tuple[str, int]) -> Any:
        with self._receiving:
            while True:
                with self._state:
                    if key in self._got:
                        return self._got.pop(key)
                    conn = self._replies if key in self._owed else None
                    if conn is None:
                        return None
                try:
                    if not conn.poll(self.timeout_s):
                        raise TimeoutError(f"no answer in {self.timeout_s:.0f} s")
                    kind, seq, out = conn.recv()
                except Exception as exc:  # gone, hung, or an answer that cannot be read: never trusted after
                    log.warning("ingest decode process failed, decoding here: %s", exc)
                    self._fail()
                    continue
                with self._state:
                    if (kind, seq) in self._owed:
                        self._owed.discard((kind, seq))
                        self._got[(kind, seq)] = out

    def _fail(self) -> None:
        """Kill the child (a send waiting on it returns), then forget it: what it owed comes back None."""
        proc = self._proc
        if proc is not None:
            proc.kill()
        with self._state:
            self.failures += 1
            self._owed.clear()
            self._close_child()

    def _close_child(self) -> None:
        for conn in (self._requests, self._replies):
            if conn is not None:
                conn.close()
        self._requests = self._replies = None
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(5)

    def close(self) -> None:
        with self._state:
            if self._requests is not None and self._proc is not None and self._proc.poll() is None:
                try:
                    self._requests.send(None)
                    self._proc.wait(2)
                except (OSError, ValueError, subprocess.TimeoutExpired):
                    pass
            self._close_child()
            self._proc = None


if __name__ == "__main__":  # the child (`DecodeProcess`), given its two pipes' descriptors
    from vigil.analyzer.ingest import (
        offload as _named,  # what it sends is pickled under the module's own name
    )
    from vigil.runtime import tune_gc

    tune_gc()  # it allocates a phase map or two per event, like the ingest it serves
    _named._serve(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False))

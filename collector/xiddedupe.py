"""One Xid, one event: the same Xid seen in the kernel log and through NVML is shipped once.

The driver reports an Xid twice on a host that runs both sources: an `NVRM: Xid` record in the kernel log
(source kernel) and an NVML Xid event (source nvml). Counted twice, one fault would look like a repeat (fleet
memory condemns a GPU on repeats) and page twice. `XidDedupe` sits between those sources and the outbox: an Xid
event (category `xid`, a code and a GPU index) from one source that pairs with an unpaired one of another source
for the same host, GPU and code within `window_s` is dropped and counted (`duplicates`); whichever came first
ships. Each source's own repeats are distinct occurrences and pass. Thread-safe (the sources run on threads of
their own); memory bounded by the window and `max_keys`.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from vigil.contract import Event, LogLine

Key = tuple[str, int, int]  # host, GPU index, Xid code


@dataclass(kw_only=True)
class XidDedupe:
    window_s: float = 10.0
    max_keys: int = 4096
    clock: Callable[[], float] = time.monotonic
    duplicates: int = 0
    _seen: dict[Key, deque[tuple[float, str]]] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def filter(self, events: Sequence[Event]) -> list[Event]:
        """`events` less the Xids another source already reported (see the module's doc)."""
        now = self.clock()
        out: list[Event] = []
        with self._lock:
            self._prune(now)
            for e in events:
                if not self._duplicate(e, now):
                    out.append(e)
        return out

    def wrap(self, emit: Callable[[Sequence[Event]], None]) -> Callable[[Sequence[Event]], None]:
        """`emit` behind this filter: what a kernel-log or NVML source is given."""
        return lambda events: emit(self.filter(events))

    def _duplicate(self, e: Event, now: float) -> bool:
        if not isinstance(e, LogLine) or e.category != "xid" or e.xid is None or e.gpu_index is None \
                or e.repeats != 1:
            return False
        key = (e.host, e.gpu_index, e.xid)
        held = self._seen.setdefault(key, deque(maxlen=64))
        for i, (_, source) in enumerate(held):
            if source != e.source:  # the other source's report of this very Xid: pair them, ship one
                del held[i]
                self.duplicates += 1
                return True
        held.append((now, e.source))
        return False

    def _prune(self, now: float) -> None:
        for key in list(self._seen):
            held = self._seen[key]
            while held and now - held[0][0] > self.window_s:
                held.popleft()
            if not held:
                del self._seen[key]
        while len(self._seen) > self.max_keys:  # a flood of distinct Xids: forget the oldest keys
            del self._seen[next(iter(self._seen))]

"""The recent-id window: event_ids this process stored lately, per job and host, by event time.

A producer re-send (an agent replaying its spool after a delivery it thought failed) carries
the original event's id *and* timestamp. For the high-volume kinds the writer asks this
window, in memory and at constant cost per event, instead of ClickHouse:

* it holds the ids of every event of a host (of a job) this process stored (or found
  stored) with `ts >= newest(job, host) - window_s`, where newest is the latest event time
  it saw from that host. Per host, because a host's events arrive in order on one
  partition while partitions catch up at their own pace (a backlog after an outage);
* an event is `covered` when its ts is inside the window *and* after `since(job, host)`,
  the host's newest event time already stored when this process started (those could be
  stored by an earlier run, which this window never saw). For a covered event, "its id is
  in the window" is exactly "it is stored" (host-keyed partitions: only this consumer
  stores that host's events). Everything else the writer looks up in ClickHouse.

Memory: one small int (the id's hash) per event of the window, bucketed by event second
for eviction: about 100 bytes x events/s x window_s (a 10,000-GPU job at 60 s: ~100 MB;
lower `dedup_window_s` to trade memory for look-ups of older re-sends).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from operator import attrgetter
from typing import Any

_JOB, _HOST, _TS, _EVENT_ID = (attrgetter(n) for n in ("job_id", "host", "ts", "event_id"))
_TIMESTAMP = datetime.timestamp


def _insert(buckets: deque[tuple[int, list[int]]], sec: int, hashes: list[int]) -> None:
    """Put ids of second `sec` in its own bucket, in order (scanning from the newest): never into an older
    second's bucket, which `evict` would drop before their time."""
    for i in range(len(buckets) - 1, -1, -1):
        s, ids = buckets[i]
        if s == sec:
            ids.extend(hashes)
            return
        if s < sec:
            buckets.insert(i + 1, (sec, hashes))
            return
    buckets.appendleft((sec, hashes))


@dataclass
class _Job:
    newest: float = float("-inf")
    since: float = float("-inf")  # events at or before this may have been stored before this process started
    buckets: deque[tuple[int, list[int]]] = field(default_factory=deque)  # (event second, id hashes), oldest first


@dataclass(kw_only=True)
class RecentIds:
    window_s: float = 60.0
    _jobs: dict[tuple[str, str], _Job] = field(default_factory=dict)
    _ids: set[int] = field(default_factory=set)

    def __len__(self) -> int:
        return len(self._ids)

    def started_after(self, stored_newest: dict[tuple[str, str], datetime]) -> None:
        """What was stored before this process: per (job, host), the newest event time (from `host_clock`)."""
        for key, ts in stored_newest.items():
            j = self._jobs.setdefault(key, _Job())
            j.since = max(j.since, ts.timestamp())
            j.newest = max(j.newest, j.since)

    def covered(self, job: str, host: str, ts: datetime) -> bool:
        """True when this window alone can tell whether an event of `job` from `host` at `ts` is stored."""
        j = self._jobs.get((job, host))
        if j is None:
            return True  # nothing of the host was stored before this process, nor since: not stored
        t = ts.timestamp()
        return t > j.since and t >= j.newest - self.window_s

    def split(self, events: Sequence[Any]) -> tuple[list[Any], list[Any], int]:
        """A batch's events judged at once, as `covered` and `seen` judge each: (those the window knows are not
        stored, those it cannot judge (look them up), how many it knows are stored). One window look-up per
        run of a host's events; events need `job_id`, `host`, `ts`, `event_id`."""
        fresh: list[Any] = []
        unknown: list[Any] = []
        stored = 0
        ids, jobs, window = self._ids, self._jobs, self.window_s
        last_job = last_host = None
        since = lo = float("-inf")
        for e, t in zip(events, map(_TIMESTAMP, map(_TS, events)), strict=True):
            if e.host != last_host or e.job_id != last_job:
                last_job, last_host = e.job_id, e.host
                j = jobs.get((last_job, last_host))
                since, lo = (float("-inf"), float("-inf")) if j is None else (j.since, j.newest - window)
            if t > since and t >= lo:
                if hash(e.event_id) in ids:
                    stored += 1
                else:
                    fresh.append(e)
            else:
                unknown.append(e)
        return fresh, unknown, stored

    def seen(self, event_id: str) -> bool:
        return hash(event_id) in self._ids

    def add(self, job: str, host: str, ts: datetime, event_id: str) -> None:
        """Remember a stored event (call after the write succeeded)."""
        j = self._jobs.get((job, host))
        if j is None:
            j = self._jobs[(job, host)] = _Job()
        t = ts.timestamp()
        if t < j.newest - self.window_s:
            return
        h = hash(event_id)
        self._ids.add(h)
        sec = int(t)
        if j.buckets and j.buckets[-1][0] == sec:
            j.buckets[-1][1].append(h)
        elif not j.buckets or j.buckets[-1][0] < sec:
            j.buckets.append((sec, [h]))
        else:  # out of order within the window (rare)
            _insert(j.buckets, sec, [h])
        if t > j.newest:
            j.newest = t

    def add_all(self, events: Sequence[Any]) -> None:
        """`add` for many events (with `job_id`, `host`, `ts`, `event_id`): each host's newest of the batch first,
        then one pass that appends to the newest bucket while the seconds run in order (the common case)."""
        keys = list(zip(map(_JOB, events), map(_HOST, events), strict=True))
        times = list(map(_TIMESTAMP, map(_TS, events)))
        top: dict[tuple[str, str], float] = {}
        for key, t in zip(keys, times, strict=True):
            if t > top.get(key, float("-inf")):
                top[key] = t
        jobs, window = self._jobs, self.window_s
        limits: dict[tuple[str, str], float] = {}
        for key, t in top.items():
            j = jobs.get(key)
            if j is None:
                j = jobs[key] = _Job()
            j.newest = max(j.newest, t)
            limits[key] = j.newest - window  # older ones would never be covered, nor kept by `evict`
        kept: list[int] = []
        last: tuple[str, str] | None = None
        buckets: deque[tuple[int, list[int]]] = deque()
        limit = float("inf")
        for key, t, h in zip(keys, times, map(hash, map(_EVENT_ID, events)), strict=True):
            if key != last:
                last, buckets, limit = key, jobs[key].buckets, limits[key]
            if t < limit:
                continue
            kept.append(h)
            sec = int(t)
            if buckets and buckets[-1][0] == sec:
                buckets[-1][1].append(h)
            elif not buckets or buckets[-1][0] < sec:
                buckets.append((sec, [h]))
            else:  # out of order within the window (rare)
                _insert(buckets, sec, [h])
        self._ids.update(kept)

    def evict(self) -> None:
        """Forget ids older than each job's window."""
        for j in self._jobs.values():
            limit = j.newest - self.window_s
            while j.buckets and j.buckets[0][0] + 1 <= limit:
                _, ids = j.buckets.popleft()
                self._ids.difference_update(ids)

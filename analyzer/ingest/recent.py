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
from typing import Any


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
        last_key: tuple[str, str] | None = None
        since = lo = float("-inf")
        for e in events:
            key = (e.job_id, e.host)
            if key != last_key:
                last_key = key
                j = jobs.get(key)
                since, lo = (float("-inf"), float("-inf")) if j is None else (j.since, j.newest - window)
            t = e.ts.timestamp()
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
        """`add` for many events (with `job_id`, `host`, `ts`, `event_id`): grouped by host and second first, so
        the window's buckets are touched once per host and second, not per event."""
        groups: dict[tuple[str, str], dict[int, list[tuple[float, int]]]] = {}
        for e in events:
            t = e.ts.timestamp()
            groups.setdefault((e.job_id, e.host), {}).setdefault(int(t), []).append((t, hash(e.event_id)))
        ids, window = self._ids, self.window_s
        for key, seconds in groups.items():
            j = self._jobs.get(key)
            if j is None:
                j = self._jobs[key] = _Job()
            newest = max(j.newest, max(t for t, _ in seconds[max(seconds)]))
            limit = newest - window  # older ones would never be covered, nor kept by `evict`
            for sec in sorted(seconds):
                if sec + 1 < limit:
                    continue
                hashes = [h for t, h in seconds[sec] if t >= limit]
                ids.update(hashes)
                buckets = j.buckets
                if buckets and buckets[-1][0] == sec:
                    buckets[-1][1].extend(hashes)
                elif not buckets or buckets[-1][0] < sec:
                    buckets.append((sec, hashes))
                else:  # out of order within the window (rare)
                    _insert(buckets, sec, hashes)
            j.newest = newest

    def evict(self) -> None:
        """Forget ids older than each job's window."""
        for j in self._jobs.values():
            limit = j.newest - self.window_s
            while j.buckets and j.buckets[0][0] + 1 <= limit:
                _, ids = j.buckets.popleft()
                self._ids.difference_update(ids)

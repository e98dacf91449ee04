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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import compress, pairwise
from operator import attrgetter, ne, not_, or_
from typing import Any

_JOB, _HOST, _TS, _EVENT_ID = (attrgetter(n) for n in ("job_id", "host", "ts", "event_id"))
_TIMESTAMP = datetime.timestamp
_INF = float("inf")


@dataclass(frozen=True)
class Marks:
    """What the window reads of a batch's events, one list per field, made a column at a time in C: each event's
    job, host, event time (epoch seconds) and id hash, and where each run of consecutive events of one host
    and second starts (then the end). A host's events come in runs (its ranks' steps, its NICs), so the
    window's work is per run. The writer makes them once for `split` and `add_all`."""

    jobs: list[str]
    hosts: list[str]
    times: list[float]
    hashes: list[int]
    runs: list[int]

    @classmethod
    def of(cls, events: Sequence[Any]) -> Marks:
        """Events need `job_id`, `host`, `ts`, `event_id`."""
        return cls.made(list(map(_JOB, events)), list(map(_HOST, events)), list(map(_TIMESTAMP, map(_TS, events))),
                        list(map(hash, map(_EVENT_ID, events))))

    @classmethod
    def of_columns(cls, cols: Mapping[str, list[Any]]) -> Marks:
        """The marks of events whose columns are built (`job_id`, `host`, `ts`, `event_id` columns: read as they are,
        not from the events again)."""
        return cls.made(cols["job_id"], cols["host"], list(map(_TIMESTAMP, cols["ts"])), list(map(hash, cols["event_id"])))

    @classmethod
    def made(cls, jobs: list[str], hosts: list[str], times: list[float], hashes: list[int]) -> Marks:
        secs = list(map(int, times))
        cuts = map(or_, map(or_, map(ne, hosts[1:], hosts), map(ne, secs[1:], secs)), map(ne, jobs[1:], jobs))
        return cls(jobs, hosts, times, hashes, [0, *compress(range(1, len(times)), cuts), len(times)] if times else [0])

    def __add__(self, other: Marks) -> Marks:
        """These events then `other`'s (a run may end where the other's first starts: runs need not be longest)."""
        n = len(self.times)
        return Marks(self.jobs + other.jobs, self.hosts + other.hosts, self.times + other.times,
                     self.hashes + other.hashes, self.runs[:-1] + [n + i for i in other.runs] if n else other.runs)

    def where(self, keep: Sequence[bool]) -> Marks:
        """The marks of the events whose `keep` is true."""
        return Marks.made(list(compress(self.jobs, keep)), list(compress(self.hosts, keep)),
                          list(compress(self.times, keep)), list(compress(self.hashes, keep)))


def _inside(t: float, bounds: tuple[float, float]) -> bool:
    return t > bounds[0] and t >= bounds[1]


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
class JobIds:
    newest: float = float("-inf")
    since: float = float("-inf")  # events at or before this may have been stored before this process started
    buckets: deque[tuple[int, list[int]]] = field(default_factory=deque)  # (event second, id hashes), oldest first


@dataclass(kw_only=True)
class RecentIds:
    window_s: float = 60.0
    _jobs: dict[tuple[str, str], JobIds] = field(default_factory=dict)
    _ids: set[int] = field(default_factory=set)

    def __len__(self) -> int:
        return len(self._ids)

    def started_after(self, stored_newest: dict[tuple[str, str], datetime]) -> None:
        """What was stored before this process: per (job, host), the newest event time (from `host_clock`)."""
        for key, ts in stored_newest.items():
            j = self._jobs.setdefault(key, JobIds())
            j.since = max(j.since, ts.timestamp())
            j.newest = max(j.newest, j.since)

    def covered(self, job: str, host: str, ts: datetime) -> bool:
        """True when this window alone can tell whether an event of `job` from `host` at `ts` is stored."""
        j = self._jobs.get((job, host))
        if j is None:
            return True  # nothing of the host was stored before this process, nor since: not stored
        t = ts.timestamp()
        return t > j.since and t >= j.newest - self.window_s

    def split(self, events: Sequence[Any], marks: Marks | None = None) -> tuple[list[Any], list[Any], int]:
        """A batch's events judged at once, as `covered` and `seen` judge each: (those the window knows are not
        stored, those it cannot judge (look them up), how many it knows are stored). Events need `job_id`,
        `host`, `ts`, `event_id`. Per batch, not per event, where it can be: a host whose oldest event of the
        batch is covered has all of them covered, and the ids are matched against the window in one set
        operation; only a host straddling its bounds is judged event by event."""
        m = marks or Marks.of(events)
        jobs, hosts, times, hashes = m.jobs, m.hosts, m.times, m.hashes
        oldest: dict[tuple[str, str], float] = {}
        for a, b in pairwise(m.runs):
            key, t = (jobs[a], hosts[a]), min(times[a:b])
            if t < oldest.get(key, _INF):
                oldest[key] = t
        straddling = {key: bd for key, t in oldest.items() if not _inside(t, bd := self._bounds(key))}
        if straddling:
            inside = [(key := (j, h)) not in straddling or _inside(t, straddling[key])
                      for j, h, t in zip(jobs, hosts, times, strict=True)]
            unknown = [e for e, ok in zip(events, inside, strict=True) if not ok]
            events, hashes = list(compress(events, inside)), list(compress(hashes, inside))
        else:
            unknown = []
        seen = self._ids.intersection(hashes)
        if not seen:
            return list(events), unknown, 0
        fresh = list(compress(events, map(not_, map(seen.__contains__, hashes))))
        return fresh, unknown, len(events) - len(fresh)

    def _bounds(self, key: tuple[str, str]) -> tuple[float, float]:
        """(since, lowest covered time) of a host: an event at t is covered when t > since and t >= lowest."""
        j = self._jobs.get(key)
        return (-_INF, -_INF) if j is None else (j.since, j.newest - self.window_s)

    def seen(self, event_id: str) -> bool:
        return hash(event_id) in self._ids

    def add(self, job: str, host: str, ts: datetime, event_id: str) -> None:
        """Remember a stored event (call after the write succeeded)."""
        j = self._jobs.get((job, host))
        if j is None:
            j = self._jobs[(job, host)] = JobIds()
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

    def add_all(self, events: Sequence[Any], marks: Marks | None = None) -> None:
        """`add` for many events (with `job_id`, `host`, `ts`, `event_id`): each host's newest of the batch first,
        then one pass over the runs of events of one host and second (a host's events come in runs), each
        appended to its bucket at once."""
        m = marks or Marks.of(events)
        times, hashes = m.times, m.hashes
        runs = [((m.jobs[a], m.hosts[a]), a, b) for a, b in pairwise(m.runs)]
        top: dict[tuple[str, str], float] = {}
        for key, a, b in runs:
            t = max(times[a:b])
            if t > top.get(key, -_INF):
                top[key] = t
        jobs, window = self._jobs, self.window_s
        limits: dict[tuple[str, str], float] = {}
        for key, t in top.items():
            j = jobs.get(key)
            if j is None:
                j = jobs[key] = JobIds()
            j.newest = max(j.newest, t)
            limits[key] = j.newest - window  # older ones would never be covered, nor kept by `evict`
        kept: list[int] = []
        for key, a, b in runs:
            sec = int(times[a])
            limit = limits[key]
            if sec >= limit and sec > 0:  # every time of the run is >= sec (not so below 1 s: int() rounds to 0)
                ids = hashes[a:b]
            elif sec + 1 <= limit:
                continue
            else:  # the limit falls inside this second
                ids = [h for h, t in zip(hashes[a:b], times[a:b], strict=True) if t >= limit]
                if not ids:
                    continue
            kept += ids
            buckets = jobs[key].buckets
            if buckets and buckets[-1][0] == sec:
                buckets[-1][1].extend(ids)
            elif not buckets or buckets[-1][0] < sec:
                buckets.append((sec, ids))
            else:  # out of order within the window (rare)
                _insert(buckets, sec, ids)
        self._ids.update(kept)

    def evict(self) -> None:
        """Forget ids older than each job's window."""
        for j in self._jobs.values():
            limit = j.newest - self.window_s
            while j.buckets and j.buckets[0][0] + 1 <= limit:
                _, ids = j.buckets.popleft()
                self._ids.difference_update(ids)

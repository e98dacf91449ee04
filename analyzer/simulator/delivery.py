"""Delivering simulated telemetry as a real fleet does: many jobs at once, restarts, late arrival.

A `Run` is one simulation over a range of steps (a job resumed from a checkpoint starts at
step 4800, not 0); its `then` builds the job's next run once this one has ended (a restart:
same job, new registration, steps from the checkpoint), `gap_s` later. `deliver` merges
every run's events by simulated time, the way several jobs' agents produce them side by
side, and sends them paced at `speed` (simulated seconds per wall second; 0 = as fast as
possible) in slices of `tick_s` simulated seconds. `late(event)` holds an event back by
that many simulated seconds (a host whose telemetry is ingested late); with `shuffle`,
the events of one slice are sent in a random interleaving of the hosts, each host's events
of one kind still in order: the order a keyed topic keeps (a host's agent ships in order,
keyed by host, idempotent; partitions interleave at will), and the order the analyzer's
event-time clock relies on. `topic_skew` is a `late` policy by topic: a heavy topic (steps,
NIC samples: large records, many of them) delivered minutes of event time behind a light one
(heartbeats), and one host's partition further behind still, as a consumer catching up after a
restart, a broker outage or a rebalance reads them; `cut` is where such a catch-up stands. Everything
follows from the seed: the same runs and policy send the same events in the same order.
"""

from __future__ import annotations

import heapq
import random
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from vigil.analyzer.simulator.model import Simulation
from vigil.analyzer.simulator.runner import Send
from vigil.contract import Event
from vigil.contract.registry import topic_of


@dataclass(frozen=True, kw_only=True)
class Run:
    sim: Simulation
    steps: range
    then: Callable[[datetime], Run] | None = None  # the job's next run, given this one's end + gap_s
    gap_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Delivery:
    speed: float = 0.0
    tick_s: float = 1.0
    late: Callable[[Event], float] | None = None
    shuffle: bool = False
    seed: int = 0


def _batches(run: Run) -> Iterator[tuple[datetime, list[Event]]]:
    """(time every later event of the job is stamped at or after, events) for one job's chain of runs."""
    r: Run | None = run
    while r is not None:
        yield r.sim.now, [r.sim.registration()]
        for i in r.steps:
            events = r.sim.step(i)
            yield r.sim.now, events
        r = r.then(r.sim.now + timedelta(seconds=r.gap_s)) if r.then is not None else None


def deliver(runs: Sequence[Run], send: Send, how: Delivery = Delivery()) -> int:
    """Send every run's events, merged by simulated time; returns the number of events sent."""
    if how.speed < 0 or how.tick_s <= 0:
        raise ValueError("speed must be >= 0 and tick_s > 0")
    rng = random.Random(how.seed)
    sources = [_batches(r) for r in runs]
    t0 = min(r.sim.now for r in runs)
    ready: list[tuple[datetime, int, Event]] = []  # (release time, order, event)
    order = 0
    clocks = [(t0, k) for k in range(len(sources))]  # (job's next event time, source index): a heap
    wall0 = time.monotonic()
    tick = timedelta(seconds=how.tick_s)
    sent = 0
    release_until = t0 + tick
    while clocks or ready:
        # generate until every job has passed the slice being released (nothing earlier can come)
        while clocks and clocks[0][0] < release_until:
            _, k = heapq.heappop(clocks)
            batch = next(sources[k], None)
            if batch is None:
                continue
            after, events = batch
            for e in events:
                delay = how.late(e) if how.late is not None else 0.0
                heapq.heappush(ready, (e.ts + timedelta(seconds=delay), order, e))
                order += 1
            heapq.heappush(clocks, (after, k))
        out: list[Event] = []
        while ready and ready[0][0] < release_until:
            out.append(heapq.heappop(ready)[2])
        if out:
            if how.shuffle:
                out = interleave(out, rng)
            if how.speed > 0:
                delay_s = wall0 + (release_until - t0).total_seconds() / how.speed - time.monotonic()
                if delay_s > 0:
                    time.sleep(delay_s)
            send(out)
            sent += len(out)
        release_until += tick
    return sent


def interleave(events: Sequence[Event], rng: random.Random) -> list[Event]:
    """A uniformly random interleaving of the (job, host, kind) streams in `events`, each stream kept in order."""
    turns = [(e.job_id, e.host, e.kind) for e in events]
    streams: dict[tuple[str, str, str], deque[Event]] = defaultdict(deque)
    for k, e in zip(turns, events, strict=True):
        streams[k].append(e)
    rng.shuffle(turns)
    return [streams[k].popleft() for k in turns]


def late_hosts(hosts: set[str], delay_s: float, *, jitter_s: float = 0.0, burst_s: float = 0.0,
               kinds: tuple[str, ...] = ("heartbeat",), seed: int = 0) -> Callable[[Event], float]:
    """A `late` policy: events of `kinds` from `hosts` arrive `delay_s` (+ up to `jitter_s`) late; with `burst_s`,
    held further to the next multiple of `burst_s` simulated seconds (a backlogged consumer's bursts)."""
    def late(e: Event) -> float:
        if e.host not in hosts or e.kind not in kinds:
            return 0.0
        delay = delay_s + random.Random(f"{seed}/{e.event_id}").uniform(0, jitter_s)
        if burst_s > 0:
            due = e.ts.timestamp() + delay
            delay += -due % burst_s
        return delay
    return late


def topic_skew(lag_s: Mapping[str, float], *, hosts: Mapping[str, float] | None = None) -> Callable[[Event], float]:
    """A `late` policy: each event of a topic in `lag_s` (e.g. {"steps": 300}) arrives that many simulated seconds
    behind the topics not in it; `hosts` (host -> seconds) holds one host's events of those topics further back still
    (its partition slower than its topic's others)."""
    def late(e: Event) -> float:
        topic = topic_of(e)
        if topic not in lag_s:
            return 0.0
        return lag_s[topic] + (hosts or {}).get(e.host, 0.0)
    return late


def cut(sent: Sequence[Event], until: datetime) -> tuple[list[Event], list[Event]]:
    """Split a delivered stream (in its delivery order) where a catch-up stands: what had arrived when the stream
    reached `until` (the topics not held back up to `until`, the others up to `until` less their lag), and the rest
    (nothing is released before its event time, so the first event stamped after `until` starts the rest)."""
    k = next((i for i, e in enumerate(sent) if e.ts > until), len(sent))
    return list(sent[:k]), list(sent[k:])

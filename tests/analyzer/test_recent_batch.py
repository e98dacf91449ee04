"""The window's batch methods (`split`, `add_all`) answer exactly as its per-event ones (`covered`, `seen`, `add`)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from vigil.analyzer.ingest.recent import JobIds, Marks, RecentIds

pytestmark = [pytest.mark.pure]
T0 = datetime(2026, 11, 1, 12, tzinfo=UTC)


@dataclass(frozen=True)
class Ev:
    job_id: str
    host: str
    ts: datetime
    event_id: str


def stream(rng: random.Random, n: int, start: float, t0: datetime = T0) -> list[Ev]:
    """Hosts interleaved, mostly in time order, some late (out of order, some beyond the window)."""
    out = []
    for i in range(n):
        t = start + i / 20 - (rng.choice([0, 0, 0, 5, 90]) if rng.random() < 0.1 else 0)
        out.append(Ev(f"j{i % 2}", f"h{rng.randrange(6)}", t0 + timedelta(seconds=t), f"e{start}-{i}-{rng.random()}"))
    return out


def add_each(w: RecentIds, batch: list[Ev]) -> None:
    """`add` per event, as add_all keeps them: inside the window of each host's newest of the batch."""
    for e in batch:
        j = w._jobs.setdefault((e.job_id, e.host), JobIds())
        j.newest = max(j.newest, e.ts.timestamp())
    for e in batch:
        w.add(e.job_id, e.host, e.ts, e.event_id)


def answer(w: RecentIds, e: Ev) -> str:
    if not w.covered(e.job_id, e.host, e.ts):
        return "look up"
    return "stored" if w.seen(e.event_id) else "new"


@pytest.mark.parametrize("seed", range(5))
def test_batch_methods_agree_with_per_event_ones(seed: int) -> None:
    rng = random.Random(seed)
    one, bulk = RecentIds(window_s=30), RecentIds(window_s=30)
    for w in (one, bulk):
        w.started_after({("j0", "h1"): T0 + timedelta(seconds=40)})
    for b in range(6):
        batch = stream(rng, 2_000, start=b * 100)
        probes = batch[::3] + stream(rng, 300, start=b * 100 + 90) + batch[:50]
        add_each(one, batch)
        bulk.add_all(batch)
        one.evict()
        bulk.evict()
        assert bulk._jobs == one._jobs and bulk._ids == one._ids, "the same buckets, in the same order"
        want = [answer(one, e) for e in probes]
        assert [answer(bulk, e) for e in probes] == want
        fresh, unknown, stored = bulk.split(probes)
        assert [e for e, a in zip(probes, want, strict=True) if a == "new"] == fresh
        assert [e for e, a in zip(probes, want, strict=True) if a == "look up"] == unknown
        assert stored == want.count("stored") > 0 and unknown and fresh


def test_marks_joined_or_filtered_judge_as_made_afresh() -> None:
    """The writer joins each hot kind's marks and filters out refused events: the window reads them the same."""
    rng = random.Random(7)
    batch = stream(rng, 3_000, start=0)
    keep = [rng.random() < 0.9 for _ in batch]
    kept = [e for e, k in zip(batch, keep, strict=True) if k]
    assert Marks.of(batch).where(keep) == Marks.of(kept)
    cut = 1_234
    joined = Marks.of(batch[:cut]) + Marks.of(batch[cut:])
    assert (joined.jobs, joined.hosts, joined.times, joined.hashes) == (
        (m := Marks.of(batch)).jobs, m.hosts, m.times, m.hashes)
    fresh, made = RecentIds(window_s=30), RecentIds(window_s=30)
    fresh.add_all(batch, joined)
    made.add_all(batch)
    assert fresh._jobs == made._jobs and fresh._ids == made._ids
    probes = stream(rng, 500, start=60) + batch[::7]
    assert fresh.split(probes, Marks.of(probes[:100]) + Marks.of(probes[100:])) == made.split(probes)


def test_around_the_epoch_the_batch_methods_agree_too() -> None:
    """Times below 1 s and negative ones (int() rounds them towards 0): the same buckets as per-event adds."""
    rng = random.Random(3)
    epoch = datetime(1970, 1, 1, tzinfo=UTC) - timedelta(seconds=300)
    one, bulk = RecentIds(window_s=30), RecentIds(window_s=30)
    for b in range(6):
        batch = stream(rng, 2_000, start=b * 100, t0=epoch)
        add_each(one, batch)
        bulk.add_all(batch)
        assert bulk._jobs == one._jobs and bulk._ids == one._ids


def test_no_hot_event_at_all() -> None:
    """A batch of other kinds only (an alert, a log line), or whose hot events were all refused: nothing to do."""
    w = RecentIds()
    assert w.split([]) == ([], [], 0)
    w.add_all([])
    w.add_all([], Marks.of([]) + Marks.of([]))
    batch = stream(random.Random(1), 10, start=0)
    assert Marks.of(batch) + Marks.of([]) == Marks.of(batch) == Marks.of([]) + Marks.of(batch)
    assert Marks.of(batch).where([False] * 10) == Marks.of([])
    w.add_all(batch, Marks.of(batch) + Marks.of([]))
    assert len(w) == 10

"""Elastic data without processes: every sample exactly once across resizes, determinism, state round trips."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from itertools import islice

import pytest

from vigil.data import DataState, ElasticSampler, EpochPlan, Piece, ShardReader
from vigil.data.dynamic import Claims
from vigil.data.split import assign, tiles

pytestmark = pytest.mark.pure

N, BATCH, SHARD = 1000, 7, 64


def world(size: int, state: dict[str, object] | None = None, seed: int = 0) -> list[ElasticSampler]:
    ranks = [ElasticSampler(N, BATCH, shard_size=SHARD, seed=seed, rank=r, world_size=size) for r in range(size)]
    for s in ranks:
        if state is not None:
            s.load_state_dict(state)
    return ranks


def run(ranks: list[ElasticSampler], steps: int | None) -> tuple[list[int], dict[str, object]]:
    """Lockstep `steps` batches on every rank (all of them when None); the ids read and the checkpoint."""
    streams = [s.batches() for s in ranks]
    read: list[int] = []
    for batches in islice(zip(*streams, strict=True), steps):
        assert all(len(b) <= BATCH for b in batches)
        read.extend(i for b in batches for i in b)
    states = [s.state_dict() for s in ranks]
    assert all(st == states[0] for st in states)  # every rank checkpoints the same, world-free state
    return read, states[0]


def test_resize_3_2_3_reads_every_sample_exactly_once() -> None:
    first, state = run(world(3), 5)
    assert len(first) == 3 * 5 * BATCH
    second, state = run(world(2, json.loads(json.dumps(state))), 11)  # through JSON, as a checkpoint would
    third, state = run(world(3, state), None)
    counts = Counter(first + second + third)
    assert sorted(counts) == list(range(N)) and set(counts.values()) == {1}
    assert DataState.from_dict(state, EpochPlan.even(N, SHARD)).finished(EpochPlan.even(N, SHARD))


def test_a_crash_after_the_checkpoint_re_reads_only_what_followed_it() -> None:
    ranks = world(3)
    _, saved = run(ranks, 4)
    lost, _ = run(ranks, 3)  # handed out, never checkpointed: the job dies here
    again, _ = run(world(2, saved), None)
    assert set(lost) <= set(again)  # re-read after the restart, like the steps that used them
    before, _ = run(world(3), 4)
    assert Counter(before + again) == Counter(range(N))


def test_ranks_take_the_same_number_of_batches_and_the_tail_is_short() -> None:
    ranks = world(3)
    lengths = [[len(b) for b in s.batches()] for s in ranks]
    assert len({len(x) for x in lengths}) == 1  # lockstep: no rank stops early
    assert sum(map(sum, lengths)) == N
    for x in lengths:  # full batches, at most one short one, then empty ones (shares differ by < one shard)
        full = x.index(next(n for n in x if n < BATCH)) if min(x) < BATCH else len(x)
        assert x[:full] == [BATCH] * full and all(n == 0 for n in x[full + 1:])
        assert len(x) - full <= -(-SHARD // BATCH) + 1


def test_same_seed_same_batches_other_seed_or_epoch_other_order() -> None:
    a = [list(s.batches()) for s in world(3)]
    assert a == [list(s.batches()) for s in world(3)]
    assert a != [list(s.batches()) for s in world(3, seed=1)]
    later = world(3)
    for s in later:
        s.set_epoch(1)
    b = [list(s.batches()) for s in later]
    assert b != a and sorted(i for r in b for x in r for i in x) == list(range(N))


def test_state_round_trip_and_a_state_that_does_not_fit_is_refused() -> None:
    plan = EpochPlan.even(N, SHARD)
    state = DataState(2, frozenset({0, 5}), {3: 10})
    assert DataState.from_dict(json.loads(json.dumps(state.to_dict())), plan) == state
    assert state.to_dict()["done"] == "21"  # shards 0 and 5, a hex bitmap
    fresh, loaded = DataState().to_dict(), state.to_dict()
    assert fresh.keys() == loaded.keys() and all(isinstance(v, int | str) for v in loaded.values())  # one layout
    for bad in ({**state.to_dict(), "version": 9}, {**state.to_dict(), "offsets": "[[3, 64]]"},
                {**state.to_dict(), "done": "-1"}, {**state.to_dict(), "offsets": "[[0, 1]]"},
                {**state.to_dict(), "done": format(1 << plan.num_shards, "x")}, {**state.to_dict(), "done": "zz"},
                {**state.to_dict(), "done": [0, 5]}, {**state.to_dict(), "offsets": "[[3, 10]"},
                {**state.to_dict(), "done": "f" * 100}):  # fmt: skip
        with pytest.raises(ValueError):
            DataState.from_dict(bad, plan)


def test_the_static_deal_is_balanced_to_within_one_shard() -> None:
    pieces = [Piece(s, o, 64) for s, o in enumerate([0, 10, 0, 63, 0, 5, 0, 0, 30, 0])]
    for size in (1, 2, 3, 4):
        loads = [sum(len(p) for p in share) for share in assign(pieces, size)]
        assert sum(loads) == sum(len(p) for p in pieces) and max(loads) - min(loads) <= 64


class DictStore:
    """The three TCPStore calls the claims use, in memory."""

    def __init__(self) -> None:
        self.counters: dict[str, int] = {}
        self.values: dict[str, bytes] = {}

    def add(self, key: str, amount: int) -> int:
        self.counters[key] = self.counters.get(key, 0) + amount
        return self.counters[key]

    def set(self, key: str, value: str) -> None:
        self.values[key] = value.encode()

    def get(self, key: str) -> bytes:
        return self.values[key]


def test_claims_hand_every_piece_to_exactly_one_claimant() -> None:
    store, pieces = DictStore(), [Piece(s, 0, 10) for s in range(7)]
    ranks = [Claims(store, "k", pieces, r) for r in range(3)]
    while any([c.claim() is not None for c in ranks[:1]] + [c.claim() is not None for c in ranks]):
        pass  # rank 0 claims twice as often (a faster rank), the others once
    taken = [p for c in ranks for p in c.taken]
    assert sorted(taken, key=lambda p: p.shard) == pieces
    assert len(ranks[0].taken) > len(ranks[1].taken)
    assert all(c.everyone(3) == [r.taken for r in ranks] for c in ranks)  # any rank rebuilds every rank's claims


def test_the_shard_reader_resumes_inside_a_shard_on_another_world() -> None:
    sizes = [50, 13, 40, 27, 64]
    opened: list[tuple[int, int]] = []

    def open_shard(shard: int, start: int) -> Iterator[tuple[int, int]]:
        opened.append((shard, start))
        return ((shard, i) for i in range(start, sizes[shard]))

    def readers(size: int, state: dict[str, object] | None) -> list[ShardReader[tuple[int, int]]]:
        out = [ShardReader(open_shard, sizes, 5, seed=3, rank=r, world_size=size) for r in range(size)]
        for r in out:
            if state is not None:
                r.load_state_dict(state)
        return out

    got: list[tuple[int, int]] = []
    state: dict[str, object] | None = None
    for size, steps in ((3, 4), (2, 6), (3, None)):
        group = readers(size, state)
        for batches in islice(zip(*(r.batches() for r in group), strict=True), steps):
            got.extend(x for b in batches for x in b)
        state = group[0].state_dict()
    assert Counter(got) == Counter((s, i) for s, n in enumerate(sizes) for i in range(n))
    assert any(start > 0 for _, start in opened)  # in-flight shards were reopened at their position
    assert len(opened) < sum(sizes) // 5  # a shard stays open across batches


def test_a_resumed_segment_says_what_was_read_and_that_the_re_split_covers_the_epoch_exactly_once() -> None:
    first, state = run(world(3), 5)
    resumed = world(2, state)
    run(resumed, 1)
    seg = resumed[0].segment
    assert seg is not None and seg.world_size == 2 and seg.exact
    assert seg.done == len(first) and seg.done + seg.samples == N and seg.in_flight == 3
    fresh = world(3)
    run(fresh, 1)
    assert fresh[0].segment is not None and fresh[0].segment.done == 0 and fresh[0].segment.exact


def test_tiles_finds_a_lost_or_a_repeated_sample() -> None:
    sizes = [4, 4]
    done = [(0, 0, 4), (1, 0, 1)]
    assert tiles(sizes, done, [[Piece(1, 1, 3)], [Piece(1, 3, 4)]])
    assert not tiles(sizes, done, [[Piece(1, 2, 4)]])  # sample 1 of shard 1 lost
    assert not tiles(sizes, done, [[Piece(1, 1, 4)], [Piece(1, 3, 4)]])  # sample 3 dealt twice
    assert not tiles(sizes, done, [[Piece(1, 0, 4)]])  # re-reads what was done
    assert not tiles(sizes, done, [[Piece(1, 1, 4), Piece(2, 0, 1)]])  # a shard the plan does not have


def balanced_world(size: int, state: dict[str, object] | None = None, micro: int = 2) -> list[ElasticSampler]:
    store = DictStore()  # a new job (and store) per world, as after a restart
    ranks = [ElasticSampler(N, BATCH, shard_size=SHARD, mode="balanced", rank=r, world_size=size, store=store,
                            micro_batch=micro) for r in range(size)]  # fmt: skip
    for s in ranks:
        if state is not None:
            s.load_state_dict(state)
    return ranks


def balanced_run(ranks: list[ElasticSampler], steps: int | None, cost: list[float]) -> tuple[
        list[list[int]], list[int], dict[str, object]]:
    """Lockstep steps; inside a step the rank free earliest (virtual time, `cost` per sample) claims next.
    Each step's ids, the samples each rank read, and the checkpoint."""
    read, per_rank = [], [0] * len(ranks)
    for step in islice(zip(*[s.steps() for s in ranks], strict=True), steps):
        clock, ids, open_ = [0.0] * len(ranks), [], set(range(len(ranks)))
        while open_:
            r = min(open_, key=lambda r: (clock[r], r))
            got = next(step[r], None)
            if got is None:
                open_.discard(r)
                continue
            ids.extend(got)
            per_rank[r] += len(got)
            clock[r] += cost[r] * len(got)
        read.append(ids)
    states = [s.state_dict() for s in ranks]
    assert all(st == states[0] for st in states)
    return read, per_rank, states[0]


@pytest.fixture
def one_key(monkeypatch: pytest.MonkeyPatch) -> None:
    # no collective; the key is fresh because every world (segment) gets a new store
    monkeypatch.setattr("vigil.data.dynamic.segment_key", lambda name: f"vigil.data/{name}/test")


@pytest.mark.usefixtures("one_key")
def test_balanced_steps_give_a_slow_rank_fewer_samples_and_keep_each_steps_samples() -> None:
    even, even_counts, _ = balanced_run(balanced_world(3), None, [1.0, 1.0, 1.0])
    slowed, counts, state = balanced_run(balanced_world(3), None, [1.0, 1.0, 1.3])
    assert [sorted(s) for s in slowed] == [sorted(s) for s in even]  # which samples make a step: not speed
    assert all(len(s) == 3 * BATCH for s in slowed[:-1]) and len(slowed) == -(-N // (3 * BATCH))
    assert Counter(i for s in slowed for i in s) == Counter(range(N))
    assert counts[2] < min(counts[:2]) and max(even_counts) - min(even_counts) <= len(slowed) * 2
    assert DataState.from_dict(state, EpochPlan.even(N, SHARD)).finished(EpochPlan.even(N, SHARD))


@pytest.mark.usefixtures("one_key")
def test_balanced_resize_3_2_3_with_a_crash_reads_every_sample_exactly_once() -> None:
    first, _, saved = balanced_run(balanced_world(3), 5, [1.0, 2.0, 1.0])
    lost, _, _ = balanced_run(balanced_world(3, saved), 3, [1.0, 1.0, 1.0])  # never checkpointed: dies
    second, _, saved = balanced_run(balanced_world(2, json.loads(json.dumps(saved)), micro=3), 11, [1.0, 1.5])
    third, _, state = balanced_run(balanced_world(3, saved), None, [3.0, 1.0, 1.0])
    assert Counter(i for s in first + second + third for i in s) == Counter(range(N))
    assert set(i for s in lost for i in s) <= set(i for s in second for i in s)  # the lost steps are read again
    assert DataState.from_dict(state, EpochPlan.even(N, SHARD)).finished(EpochPlan.even(N, SHARD))


@pytest.mark.usefixtures("one_key")
def test_a_balanced_step_must_be_read_to_its_end() -> None:
    rank = balanced_world(1)[0]
    steps = rank.steps()
    next(next(steps))  # one micro-batch of the first step, the rest left unread
    with pytest.raises(RuntimeError, match="unread"):
        next(steps)
    with pytest.raises(ValueError, match="micro-batches"):
        next(balanced_world(1)[0].batches())


@pytest.mark.usefixtures("one_key")
def test_a_balanced_shard_reader_reads_each_shard_once_per_rank_at_most() -> None:
    sizes, reads = [50, 7, 64, 1, 33], Counter[int]()

    def open_shard(shard: int, start: int) -> Iterator[tuple[int, int]]:  # not seekable: reads from the front
        for i in range(sizes[shard]):
            reads[shard] += 1
            if i >= start:
                yield shard, i

    store = DictStore()
    ranks = [ShardReader(open_shard, sizes, 4, mode="balanced", rank=r, world_size=3, store=store, micro_batch=1)
             for r in range(3)]  # fmt: skip
    got: list[tuple[int, int]] = []
    for step in zip(*[r.steps() for r in ranks], strict=True):
        open_ = list(range(3))
        while open_:  # round robin: every rank's micro-batches of a shard are far apart
            for r in list(open_):
                batch = next(step[r], None)
                if batch is None:
                    open_.remove(r)
                else:
                    got.extend(batch)
    assert Counter(got) == Counter((s, i) for s, n in enumerate(sizes) for i in range(n))
    assert all(reads[s] <= 3 * n for s, n in enumerate(sizes))  # skipped forward, not reopened per micro-batch

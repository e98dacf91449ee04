"""Flight Recorder matching on real gloo dumps (tests/fixtures/flightrec) and crafted ones.

Each dump goes the way a live one does: the agent's parser (`collector.flightrec`), the
ingest's compaction (`pg_tail`), then the cross-rank match.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from vigil.analyzer.incidents.flightrec import GroupTail, dumps_tail, loads_tail, tail_of
from vigil.analyzer.incidents.match import match
from vigil.collector.flightrec import parse_dump, to_trace

pytestmark = pytest.mark.pure
FIXTURES = Path(__file__).parents[1] / "fixtures" / "flightrec"


def load(run: str, prefix: str, ranks: tuple[int, ...] = (0, 1, 2, 3),
         edit: Any = None) -> tuple[dict[int, dict[str, GroupTail]], dict[str, list[int]]]:
    tails: dict[int, dict[str, GroupTail]] = {}
    members: dict[str, set[int]] = {}
    for rank in ranks:
        path = FIXTURES / run / f"{prefix}{rank}"
        if not path.exists():
            continue
        doc = parse_dump(path.read_bytes())
        if edit is not None:
            edit(rank, doc)
        trace = to_trace(doc, job_id="j", host=f"host-{rank // 2}", rank=rank)
        tails[rank] = loads_tail(dumps_tail(tail_of(e.model_dump(mode="json") for e in trace.entries)))
        for name, info in json.loads(path.with_name(path.name + ".pgs.json").read_text()).items():
            members.setdefault(name, set()).update(info["ranks"])
    return tails, {k: sorted(v) for k, v in members.items()}


def test_hang_ddp_names_the_sleeping_rank() -> None:
    tails, members = load("hang_ddp", "fr_")
    v = match(tails, members)
    assert (v.kind, v.culprits, v.victims, v.strong) == ("missing_rank", [3], [0, 1, 2], True)
    (front,) = v.frontiers
    assert (front.group, front.seq, front.op, front.sizes) == ("0", 21, "gloo:all_reduce", [[68]])
    assert front.missing == [3] and front.open_on == [0, 1, 2] and front.timeout_ms == 30_000
    assert v.frontier_of(3) is front and v.frontier_of(0) is front
    assert any("seq 20" in e for e in v.evidence[3])


def test_hang_in_a_subgroup_follows_the_wait_for_graph() -> None:
    """Rank 1 misses the world all-reduce only because it waits for rank 3 in dp_b: 3 is the culprit."""
    tails, members = load("hang_2pg", "fr_")
    v = match(tails, members)
    assert (v.kind, v.culprits, v.victims, v.strong) == ("missing_rank", [3], [0, 1, 2], True)
    assert v.wait_for == {0: [1, 3], 1: [3], 2: [1, 3]}
    assert {(f.group, f.desc, f.seq) for f in v.frontiers} == {("0", "default_pg", 17), ("2", "dp_b", 16)}


def test_post_failure_dumps_still_separate_the_culprit() -> None:
    """After a crash the victims' failed collective reads retired: the enqueued counter still tells."""
    tails, members = load("crash_ddp", "post_")
    v = match(tails, members)
    assert (v.kind, v.culprits, v.victims) == ("missing_rank", [2], [0, 1, 3])


def test_a_missing_dump_is_a_weak_culprit_with_or_without_membership() -> None:
    tails, members = load("hang_ddp", "post_")  # rank 3 was killed before it could dump
    assert set(tails) == {0, 1, 2}
    for reported, world in ((members, None), ({}, {0, 1, 2, 3})):
        v = match(tails, reported, world)
        assert (v.kind, v.culprits, v.victims, v.strong) == ("missing_rank", [3], [0, 1, 2], False)
        assert "sent no Flight Recorder dump" in " ".join(v.evidence[3])


def test_a_size_mismatch_names_the_minority() -> None:
    def shrink(rank: int, doc: dict[str, Any]) -> None:
        if rank == 1:  # rank 1 joined seq 21 with a different bucket size: a desync, not a hang
            doc["entries"][-1]["input_sizes"] = [[64]]
        if rank == 3:  # ... and everyone reached seq 21
            last = dict(doc["entries"][-1])
            last.update(record_id=last["record_id"] + 1, collective_seq_id=21, op_id=21, retired=False)
            doc["entries"].append(last)

    tails, members = load("hang_ddp", "fr_", edit=shrink)
    v = match(tails, members)
    assert (v.kind, v.culprits, v.victims, v.strong) == ("desync", [1], [0, 2, 3], True)
    (mm,) = v.mismatches
    assert (mm.seq, mm.field, mm.values[1]) == (21, "input_sizes", "[[64]]")


def test_a_checkpointing_job_s_gathers_and_scatters_are_no_desync() -> None:
    """Real tails of a 6-rank demo job that checkpoints (`vigil_ckpt_persist` gathers to and scatters from
    rank 0, which alone holds the gathered output and the scattered input) when rank 3 hangs before an
    all-reduce: rank 3 is the culprit, not the checkpoint's root."""
    doc = json.loads((FIXTURES / "hang_ckpt" / "tails.json").read_text())
    tails = {int(r): loads_tail(json.dumps(d["pg_tail"])) for r, d in doc.items()}
    v = match(tails, {k: list(v) for k, v in doc["0"]["groups"].items()})
    assert (v.kind, v.culprits, v.victims, v.strong) == ("missing_rank", [3], [0, 1, 2, 4, 5], True)
    assert not v.mismatches
    (front,) = v.frontiers
    assert (front.desc, front.seq, front.op, front.missing) == ("default_pg", 266, "gloo:all_reduce", [3])
    persist = tails[0]["1"]
    assert {o.op for o in persist.ops} >= {"gloo:gather", "gloo:scatter"}
    scatter = next(o for o in persist.ops if o.op == "gloo:scatter")  # what made it read as a desync before
    assert scatter.input_sizes != tails[3]["1"].op(scatter.seq).input_sizes  # type: ignore[union-attr]

    def resize(rank: int) -> dict[str, GroupTail]:  # a real mismatch in a gather's sent side still counts
        ops = tuple(replace(o, input_sizes=[[1]]) if o.op == "gloo:gather" and rank == 4 else o
                    for o in tails[rank]["1"].ops)
        return {**tails[rank], "1": replace(tails[rank]["1"], ops=ops, _by_seq={})}

    v = match({r: resize(r) for r in tails}, {k: list(v) for k, v in doc["0"]["groups"].items()})
    assert (v.kind, v.culprits) == ("desync", [4])
    assert {mm.field for mm in v.mismatches} == {"input_sizes"}


def test_all_in_the_open_collective_names_nobody_and_idle_is_healthy() -> None:
    def join(rank: int, doc: dict[str, Any]) -> None:
        if rank == 3:
            last = dict(doc["entries"][-1])
            last.update(record_id=last["record_id"] + 1, collective_seq_id=21, op_id=21, retired=False)
            doc["entries"].append(last)

    tails, members = load("hang_ddp", "fr_", edit=join)
    v = match(tails, members)
    assert (v.kind, v.culprits, v.victims) == ("all_reached_open", [], [])

    def finish(rank: int, doc: dict[str, Any]) -> None:
        join(rank, doc)
        doc["entries"][-1]["retired"] = True

    tails, members = load("hang_ddp", "fr_", edit=finish)
    assert match(tails, members).kind == "healthy"


def test_circular_wait_names_the_cycle() -> None:
    def op(seq: int, retired: bool) -> dict[str, Any]:
        return {"seq": seq, "op": "nccl:all_reduce", "input_sizes": [[4]], "output_sizes": [[4]], "dtypes": ["Float"],
                "retired": retired, "created_ns": 0, "timeout_ms": 600_000}

    def tail(name: str, last: int) -> GroupTail:
        from vigil.analyzer.incidents.flightrec import Op

        return GroupTail(name=name, desc=name, last_seq=last, ops=(Op(**op(last, False)),))

    # rank 0 waits in group "1" for rank 1, rank 1 waits in group "2" for rank 0
    tails = {0: {"1": tail("1", 5), "2": tail("2", 3)}, 1: {"1": tail("1", 4), "2": tail("2", 4)}}
    v = match(tails, {"1": [0, 1], "2": [0, 1]})
    assert (v.kind, v.culprits) == ("circular_wait", [0, 1])


def test_rows_stored_before_pg_tail_are_read_from_their_entries() -> None:
    from vigil.analyzer.detect.hang import parse_tails

    doc = parse_dump((FIXTURES / "hang_ddp" / "fr_3").read_bytes())
    entries = [e.model_dump(mode="json") for e in to_trace(doc, job_id="j", host="h", rank=3).entries]
    from_entries = parse_tails({"tail": "", "raw_entries": json.dumps(entries)})
    assert from_entries == parse_tails({"tail": dumps_tail(tail_of(entries))}) and from_entries["0"].last_seq == 20
    assert parse_tails({"tail": "not json"}) == {}

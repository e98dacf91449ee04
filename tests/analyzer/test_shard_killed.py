"""A detect shard SIGKILLed (it never leaves the group) loses its jobs to the others once its session expires; what
`vigil status` reads from the broker shows it, then shows only the survivors holding every partition (issue 50).

Three shard processes (tests/analyzer/shard_worker.py: the analyzer's ShardGroup and its lease records, without
ClickHouse) split the `detect-jobs` partitions; one is killed with SIGKILL. Its partitions stay its own in the
records until the group, having heard no heartbeat for the session timeout, assigns them to the survivors and
they report: then every job is owned by exactly one survivor and the killed shard is no longer listed.

This is the membership half of a killed shard's failover, through real processes. The judging half (the new owner
resumes from saved positions, alerts equal to a single replay) runs in-process in test_shard_chaos.py: ClickHouse
here is chdb, one engine per process, which separate shard processes cannot share.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.waiting import wait_until
from vigil.analyzer.shard import partition_of
from vigil.analyzer.shardreport import read_shards
from vigil.settings import VigilSettings

pytestmark = [pytest.mark.kafka, pytest.mark.chaos]

WORKER = str(Path(__file__).with_name("shard_worker.py"))
P = 12
JOBS = [f"job-{k}" for k in range(30)]


def test_a_killed_shards_jobs_move_to_the_survivors_after_its_session_expires(topics: VigilSettings,
                                                                             tmp_path: Path) -> None:
    bootstrap = str(topics.kafka_bootstrap)
    names = ["shard-a", "shard-b", "shard-c"]
    procs = [subprocess.Popen([sys.executable, WORKER, bootstrap, topics.topic_prefix, str(tmp_path), name, str(P),
                               *JOBS],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for name in names]
    try:
        def listed() -> dict[str, list[int]]:
            return {s["shard"]: s["partitions"] for s in read_shards(topics, bootstrap)}

        def split(among: list[str]) -> bool:
            held = listed()
            parts = [p for name in among for p in held.get(name, [])]
            return set(held) == set(among) and sorted(parts) == list(range(P))

        wait_until(lambda: split(names), 120, "the three shards sharing the partitions in their records")
        held = listed()
        victim = max(names, key=lambda n: len(held[n]))
        lost = held[victim]
        procs[names.index(victim)].send_signal(signal.SIGKILL)
        procs[names.index(victim)].wait(30)
        survivors = [n for n in names if n != victim]
        wait_until(lambda: split(survivors), 120, "the two survivors holding every partition, the killed one gone")
        shards = read_shards(topics, bootstrap)
        owner_of = {p: s["shard"] for s in shards for p in s["partitions"]}
        for job in JOBS:  # every job by exactly one live shard, and each of its jobs listed by it
            shard = next(s for s in shards if s["shard"] == owner_of[partition_of(job, P)])
            assert shard["shard"] in survivors and job in shard["jobs"], job
        assert all(owner_of[p] in survivors for p in lost)
        assert all(p.poll() is None for n, p in zip(names, procs, strict=True) if n != victim)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(30)

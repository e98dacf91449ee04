"""Subprocess body for the killed-shard test: one detect shard's group membership and lease records, nothing else.

`shard_worker.py BOOTSTRAP PREFIX HOME NAME PARTITIONS JOB...`: joins `vigil-detect` over `detect-jobs` as the analyzer's
ShardGroup does, polls, and reports (every turn of 0.2 s, throttled to 0.5 s) the partitions and jobs it owns, as a
detect shard does after each turn. It runs until killed: the test SIGKILLs one, so it never leaves the group.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from vigil.analyzer.shard import Ownership
from vigil.analyzer.shardgroup import ShardGroup
from vigil.settings import VigilSettings


def main(bootstrap: str, prefix: str, home: str, name: str, partitions: str, *jobs: str) -> None:
    settings = VigilSettings(kafka_bootstrap=bootstrap, topic_prefix=prefix, home=Path(home))
    owner = Ownership(partitions=int(partitions), owned=[])
    group = ShardGroup(settings=settings, bootstrap=bootstrap, owner=owner, turn_lock=threading.Lock(), name=name,
                       report_every_s=0.5)
    print("started", flush=True)
    while True:
        group.poll(0.2)
        group.report(turn_at=time.time(), behind_s=0.0, backlog=0, jobs=owner.jobs(jobs))


if __name__ == "__main__":
    main(*sys.argv[1:])

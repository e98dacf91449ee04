"""Which detecting analyzer owns which job: a job's shard partition, and a shard's set of owned partitions.

Detection is split by job: a job belongs to partition `partition_of(job, partitions)` of the `detect-jobs` topic,
computed here as Kafka's own default partitioner computes a keyed record's partition (murmur2 of the key's UTF-8
bytes, made positive, modulo the partition count: the Java client's `Utils.murmur2` / `toPositive`, librdkafka's
`murmur2_random`), so a record keyed by the job on that topic lands on the partition of the shard that owns it.
Which shard owns which partitions is the consumer group's assignment (an existing mechanism, no home-made
consensus); `Ownership` holds one shard's share and answers `owns(job)`.

`Ownership.everything()` owns every job: the default, one detecting analyzer exactly as before sharding.
The function is pure and stable: the same job maps to the same partition in every process, on every host.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

DETECT_TOPIC = "detect-jobs"
DETECT_GROUP = "vigil-detect"
PARTITIONS = 64

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (32 bits, seed 0x9747b28c) of `data`, as a signed 32-bit int like the Java client's."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length % 4
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_of(job: str, partitions: int = PARTITIONS) -> int:
    """The `detect-jobs` partition of `job` (Kafka's default partitioner for the key `job`)."""
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    return (murmur2(job.encode()) & 0x7FFFFFFF) % partitions


class Ownership:
    """One shard's owned partitions (thread-safe: the group's callbacks set them, the detect loop reads them).

    `changed` counts assignments, so a reader can tell that jobs may have moved since it last looked (the cursor
    then reloads the positions another shard saved for the jobs it gained).
    """

    def __init__(self, partitions: int = PARTITIONS, owned: Iterable[int] | None = None) -> None:
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        self.partitions = partitions
        self._lock = threading.Lock()
        self._owned: frozenset[int] | None = None if owned is None else frozenset(owned)
        self.changed = 0

    @classmethod
    def everything(cls) -> Ownership:
        return cls(partitions=1, owned=None)

    @property
    def owned(self) -> frozenset[int] | None:
        """The partitions owned; None: every one (no sharding)."""
        with self._lock:
            return self._owned

    def assign(self, owned: Iterable[int]) -> None:
        parts = frozenset(owned)
        bad = sorted(p for p in parts if not 0 <= p < self.partitions)
        if bad:
            raise ValueError(f"partitions {bad} outside 0..{self.partitions - 1}")
        with self._lock:
            self._owned = parts
            self.changed += 1

    def revoke(self, parts: Iterable[int]) -> None:
        with self._lock:
            self._owned = (self._owned or frozenset()) - frozenset(parts)
            self.changed += 1

    def owns(self, job: str) -> bool:
        owned = self.owned
        return owned is None or partition_of(job, self.partitions) in owned

    def jobs(self, jobs: Iterable[str]) -> list[str]:
        """`jobs` this shard owns, in order."""
        return [j for j in jobs if self.owns(j)]


def describe(owner: Ownership | None, jobs: list[str], shown: int = 20) -> str:
    """What `vigil status` shows of a detecting analyzer: its partitions (as ranges) and the jobs it judges."""
    if owner is None or owner.owned is None:
        return "all jobs"
    ranges: list[list[int]] = []
    for p in sorted(owner.owned):
        if ranges and ranges[-1][1] == p - 1:
            ranges[-1][1] = p
        else:
            ranges.append([p, p])
    parts = ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges) or "none"
    more = f",+{len(jobs) - shown}" if len(jobs) > shown else ""
    return f"partitions {parts} of {owner.partitions}, jobs {','.join(jobs[:shown]) or '-'}{more}"

"""A consumer's counters and state, as its service reports them (`vigil status`, metrics).

Every step of the chain adds to the same `ConsumerStats`: records read, events stored, events dead-lettered,
batches committed, rebalances seen; `state` is running | retrying | failed | stopped with the last error in one line.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(kw_only=True)
class ConsumerStats:
    records: int = 0
    events: int = 0
    rejected: int = 0
    batches: int = 0
    replayed_batches: int = 0
    rechecked_batches: int = 0
    write_errors: int = 0
    rebalances: int = 0  # revocations seen (records consumed before one are stale)
    decode_s: float = 0.0  # seconds spent decoding records (the consumer thread)
    commit_s: float = 0.0  # seconds spent committing offsets
    state: str = "running"  # running | retrying | failed | stopped
    last_error: str = ""
    last_commit_ts: float = 0.0

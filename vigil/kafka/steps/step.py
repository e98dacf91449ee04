"""The shape every processing step has, and the messages that pass between the steps of the chain.

A step is handed messages with `submit` (in the order they were read), does its due work with `poll` (a time bound,
a finished write), finishes what it holds with `join` and lets its resources go with `close`. A step passes what it
made to the next with the next's `submit`, on the caller's thread: a `submit` that returns has handed the message
on or kept it, and a step holds a bounded amount (the batch being cut, one batch in flight), so a slow step slows
the consumer (backpressure) rather than growing memory.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol, TypeVar

from vigil.contract.hotkinds import Ingestable
from vigil.kafka.batch import Batch, Raw
from vigil.kafka.batchid import BatchId
from vigil.kafka.deadletter import DeadLetter

T_contra = TypeVar("T_contra", contravariant=True)


class Step(Protocol[T_contra]):
    def submit(self, message: T_contra) -> None: ...

    def poll(self) -> None: ...

    def join(self) -> None: ...

    def close(self) -> None: ...


class Stateless:
    """A step that holds nothing between its submits: no due work to poll, nothing to join, nothing to close."""

    def poll(self) -> None:
        return None

    def join(self) -> None:
        return None

    def close(self) -> None:
        return None


class Roomy(Step[Batch], Protocol):
    """A step that is asked for room before a batch is cut and handed to it (`vigil.kafka.steps.write.Write`)."""

    def make_room(self, upcoming: Batch) -> None: ...


class Pipelined(Roomy, Protocol):
    """A batch step with a batch of its own in flight (`busy`) while the next one is read (`Write`)."""

    @property
    def busy(self) -> bool: ...


class Handler(Protocol):
    """The write's work on its thread: a batch stored durably under its id (`Store`, or a step in front of it that
    does its part first and hands the batch on by calling the next handler)."""

    def __call__(self, batch: Batch, bid: BatchId) -> Stored: ...


class Decoded(NamedTuple):
    """A record as `Decode` passes it on: its events decoded here, or claimed by the offload (`events` None)."""

    raw: Raw
    events: list[Ingestable] | None
    letters: list[DeadLetter]  # its rejected events (bounded per record)
    estimate: int = 0  # the offload's estimate of a claimed record's events


class Stored(NamedTuple):
    """A batch as `Write` passes it on: durably written, with its dead letters."""

    bid: BatchId
    stored: int  # events stored
    letters: list[DeadLetter]

"""What a consumer's chain asks of the component that owns the events: the writer and its optional abilities.

A `BatchWriter` stores a batch durably under its `BatchId` (the same id twice stores nothing twice) and returns the
events it can never store. The optional abilities are checked once, when the chain is built: a `Staging` writer
does part of the next batch's work while the one before is written, an `OffloadWriter` takes records decoded by an
`Offload` (the analyzer's decode process), an `IntentSource` says which batch each partition last began to write.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from vigil.kafka.batchid import BatchId, Intent, Partition, Unstorable


class BatchWriter(Protocol):
    def write(self, events: Sequence[Any], batch: BatchId) -> Sequence[Unstorable]:
        """Store the events (`Ingestable`s) durably before returning (writing the same BatchId again stores
        nothing twice); raise while the store fails (`Unreachable` when that is transient); return the
        events that can never be stored."""


@runtime_checkable
class Staging(Protocol):
    """A writer that does part of a batch's work ahead, on the consumer's thread, while the batch before is written
    (with `pipeline`): `stage` needs nothing of earlier batches and changes nothing `write` relies on but its own
    result, which `write` of the same event list uses (and ignores if the list changed after)."""

    def stage(self, events: Sequence[Any]) -> None: ...


class Deferred(Protocol):
    """Records decoded elsewhere (`Offload`): `counts[i]` the events of the i-th, None where it was declined."""

    @property
    def counts(self) -> Sequence[int | None]: ...

    def events(self) -> Sequence[Sequence[Any] | None]:
        """Each record's events as they were decoded (None: declined)."""


class Pending(Protocol):
    def result(self) -> Deferred | None:
        """Wait for the records' decode; None when it failed (the consumer decodes them itself)."""


class Offload(Protocol):
    """Decodes some records away from this process's GIL (the analyzer's decode process). A record it claims is
    decoded there, with the same decisions as `decode_fast`, or declined and decoded here; a batch with claimed
    records goes to an `OffloadWriter`."""

    def claim(self, value: bytes | None) -> int | None:
        """About how many events `value` holds when the offload takes it, else None (decoded here)."""

    def submit(self, values: list[bytes | None]) -> Pending: ...


@runtime_checkable
class OffloadWriter(Protocol):
    def write_offloaded(self, events: Sequence[Any], deferred: Deferred, everything: Any,
                        batch: BatchId) -> Sequence[Unstorable]:
        """`write` of the batch whose records are `events` (decoded here) and `deferred`'s (decoded by the offload);
        `everything()` gives the whole batch's events in record order, for a batch the writer cannot store from
        `deferred` as it is."""


@runtime_checkable
class IntentSource(Protocol):
    """A writer that records each batch's intent before writing it (so a re-read batch can be re-cut)."""

    def intents(self, partitions: Sequence[Partition]) -> dict[Partition, Intent]:
        """The latest intent recorded for each of `partitions` (absent: none)."""

"""Write: a cut batch is stored (the `Handler`) on a writer thread while the next one is read; one batch in flight.

The hand-over of a batch: the batch in flight is waited for and passed on (its commit comes before the next batch
is handed over, so crash semantics do not change), then the batch gets its identity and is written. The batch is
cut only after that wait (`make_room`, then `submit`): records re-read meanwhile join it, and a rebalance meanwhile
(it may drop the batch being read) is seen by the cut. Steps in front of it do their part of the hand-over first
(`Stage` stages the next batch while this one is `busy`). Backpressure: the hand-over returns once the batch before
is written and committed. A failed write (or commit) goes to `retry`, which retries transient failures of that same
batch or raises; without `pipeline` every batch is written through `retry`, on the caller's thread.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from vigil.kafka.batch import Batch
from vigil.kafka.batchid import BatchId
from vigil.kafka.steps.step import Handler, Step, Stored


@dataclass(kw_only=True)
class Write:
    next: Step[Stored]
    store: Handler
    identify: Callable[[Batch], BatchId]  # asked once the batch before is committed (that may clear a re-check)
    retry: Callable[[Batch, BatchId, Exception | None], None]  # store and commit until done, or raise
    pipeline: bool = True

    def __post_init__(self) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="ingest-write") if self.pipeline else None
        self._inflight: tuple[Batch, BatchId, Future[Stored]] | None = None

    @property
    def busy(self) -> bool:
        """Whether a batch is being written (what a step in front does meanwhile runs beside it)."""
        return self._inflight is not None

    def make_room(self, upcoming: Batch) -> None:
        """The hand-over's first half, while `upcoming` is still the batch being read into: the batch in flight
        waited for and committed (a failed one retried). Backpressure: nothing more is read until it returns."""
        self.join()  # one batch in flight at most: its commit comes before the next write

    def submit(self, message: Batch) -> None:
        """The hand-over's second half: the batch (cut after `make_room`) gets its identity and is written."""
        self.join()
        bid = self.identify(message)
        if self._pool is not None:
            self._inflight = (message, bid, self._pool.submit(self.store, message, bid))
        else:
            self.retry(message, bid, None)

    def poll(self) -> None:
        """Pass the batch in flight on once written; a failed one is retried here."""
        self._reap(wait=False)

    def join(self) -> None:
        """Wait for the batch in flight and pass it on (a failed one is retried here)."""
        self._reap(wait=True)

    def _reap(self, wait: bool) -> None:
        if self._inflight is None:
            return
        batch, bid, fut = self._inflight
        if not wait and not fut.done():
            return
        self._inflight = None
        try:
            self.next.submit(fut.result())
        except Exception as exc:
            self.retry(batch, bid, exc)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)

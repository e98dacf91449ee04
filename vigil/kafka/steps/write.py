"""Write: a cut batch is stored (`Store`) on a writer thread while the next one is read; one batch in flight at most.

The hand-over of a batch: its claimed records go to the offload (decoded while the batch before is written), a
`Staging` writer stages its events, then the batch in flight is waited for and passed on (its commit comes before
the next batch is handed over, so crash semantics do not change), then the batch gets its identity and is written.
The batch is cut only after that wait (`make_room`, then `submit`): records re-read meanwhile join it, and a
rebalance meanwhile (it may drop the batch being read) is seen by the cut. Backpressure: the hand-over returns once
the batch before is written and committed. A failed write (or commit) goes to `retry`, which retries transient
failures of that same batch or raises; without `pipeline` every batch is written through `retry`, on the caller's
thread.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from vigil.kafka.batch import Batch
from vigil.kafka.batchid import BatchId
from vigil.kafka.ports import Offload, Staging
from vigil.kafka.steps.step import Step, Stored


@dataclass(kw_only=True)
class Write:
    next: Step[Stored]
    store: Callable[[Batch, BatchId], Stored]
    identify: Callable[[Batch], BatchId]  # asked once the batch before is committed (that may clear a re-check)
    retry: Callable[[Batch, BatchId, Exception | None], None]  # store and commit until done, or raise
    offload: Offload | None = None
    staging: Staging | None = None
    pipeline: bool = True

    def __post_init__(self) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="ingest-write") if self.pipeline else None
        self._inflight: tuple[Batch, BatchId, Future[Stored]] | None = None

    def prefetch(self, batch: Batch) -> None:
        """Hand the batch's claimed records to the offload (once)."""
        if self.offload is not None and batch.deferred and batch.pending is None:
            batch.pending = self.offload.submit([d[4] for d in batch.deferred])

    def make_room(self, upcoming: Batch) -> None:
        """The hand-over's first half, while `upcoming` is still the batch being read into: its claimed records to
        the offload and its events staged while the batch in flight is written, then that one waited for and
        committed (a failed one retried). Backpressure: nothing more is read until it returns."""
        self.prefetch(upcoming)  # the offload decodes it while the batch before is written
        if self._inflight is not None and self.staging is not None:
            self.staging.stage(upcoming.events)  # while the batch before is written
        self.join()  # one batch in flight at most: its commit comes before the next write

    def submit(self, message: Batch) -> None:
        """The hand-over's second half: the batch (cut after `make_room`) gets its identity and is written."""
        if self._inflight is not None:
            self.make_room(message)
        self.prefetch(message)
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

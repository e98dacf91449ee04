"""The notifier's consumer chain, listed in one place: decode -> accumulate (small, young batches: a page is
prompt) -> write (the service folds the batch, one in flight) -> store -> commit.

`notify_chain` is the `ChainFactory` the service gives its consumer (`vigil.kafka.steps.chain`): no offload and no
staging (the notifier's events are few); its writer (the service) records no intents, so a batch left uncommitted
is simply read again.
"""

from __future__ import annotations

from vigil.kafka.steps.accumulate import Accumulate
from vigil.kafka.steps.chain import Chain, Ports
from vigil.kafka.steps.commit import Commit
from vigil.kafka.steps.decode import Decode
from vigil.kafka.steps.store import Store
from vigil.kafka.steps.write import Write


def notify_chain(ports: Ports) -> Chain:
    commit = Commit(commit=ports.commit, stats=ports.stats)
    store = Store(writer=ports.writer, dead_letters=ports.dead_letters, stats=ports.stats)
    write = Write(next=commit, store=store, identify=lambda batch: batch.identity(commit.recheck),
                  retry=ports.retry, pipeline=ports.pipeline)
    accumulate = Accumulate(next=write, max_events=ports.max_events, max_s=ports.max_s)
    return Chain(decode=Decode(next=accumulate, stats=ports.stats), accumulate=accumulate, write=write, store=store,
                 commit=commit)

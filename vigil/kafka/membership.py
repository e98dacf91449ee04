"""A group member that leaves its consumer group cleanly, even when it stops while joining.

A consumer that subscribes sends a JoinGroup and waits for its assignment; librdkafka queues
the LeaveGroup of a `close()` behind that join, gives up on it after a few seconds, and closes
the connection. The embedded Tansu broker (0.6.0) then keeps the departed member in the
group's rebalance until the rebalance timeout (the consumer's `max.poll.interval.ms`: 5-10
minutes here) instead of its session timeout: every later member of that group, a restarted
analyzer or the standby recovery controller, waits that long for an assignment (measured: a
member closed 1 s after subscribing left the next one unassigned for over 90 s; closed after
its assignment, the next one was assigned in 3 s).

`Membership` tracks whether a join is in flight (from subscribe, and from each revocation,
until the next assignment) and `settle` polls the consumer until that join is answered,
at most `wait_s`, before the caller closes it: the join completes, then the LeaveGroup is
sent and taken. Nothing read while settling is handed to anyone (it was never committed: the
next owner reads it again), and the owner's assignment callback may skip its work (`closing`).
A member that is not joining closes at once; a broker that does not answer a metadata request
within `REACH_S` is not waited for; one that answers but never completes the join costs at most
`wait_s`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, TopicPartition

log = logging.getLogger(__name__)
Callback = Callable[[Consumer, list[TopicPartition]], None]

JOIN_WAIT_S = 10.0
"""How long `settle` waits for a join in flight (Tansu answers a new group's first join after ~3 s)."""
REACH_S = 2.0
"""How long `settle` asks the broker whether it is there at all before it waits for a join (a broker gone after a
lost session: the join never completes, and a stop should not wait `JOIN_WAIT_S` for it)."""


class Membership:
    """Wraps a subscriber's assignment callbacks; knows when a join is in flight."""

    def __init__(self) -> None:
        self.joining = True  # from subscribe until the first assignment
        self.closing = False  # set by `settle`: callbacks may skip work that only a staying member does

    def assigned(self, inner: Callback | None = None) -> Callback:
        def on_assign(consumer: Consumer, parts: list[TopicPartition]) -> None:
            self.joining = False
            if inner is not None:
                inner(consumer, parts)
        return on_assign

    def revoked(self, inner: Callback | None = None) -> Callback:
        def on_revoke(consumer: Consumer, parts: list[TopicPartition]) -> None:
            if not self.closing:
                self.joining = True  # the eager protocol: a revocation starts a rejoin
            if inner is not None:
                inner(consumer, parts)
        return on_revoke

    def settle(self, consumer: Any, topic: str | None = None, wait_s: float = JOIN_WAIT_S, poll_s: float = 0.1) -> bool:
        """Poll `consumer` until no join is in flight (at most `wait_s`), dropping what it reads; whether it
        settled. Call it just before `consumer.close()`, from the thread that polls the consumer. A broker that does
        not answer a metadata request (of `topic`, one the member subscribed to) within `REACH_S` is not waited for
        (a join cannot complete without it)."""
        self.closing = True
        if not self.joining:
            return True
        try:
            consumer.list_topics(topic, timeout=REACH_S)  # one topic's metadata: a real request, never the cache
        except Exception as exc:
            log.info("leaving the group without waiting for the join in flight: broker unreachable (%s)", exc)
            return False
        deadline = time.monotonic() + wait_s
        while self.joining and time.monotonic() < deadline:
            consumer.poll(poll_s)  # serves the callbacks; a record read here is never committed
        if self.joining:
            log.warning("leaving the group with its join unanswered after %.0f s: the embedded broker may hold the "
                        "group's next rebalance until its rebalance timeout", wait_s)
        return not self.joining

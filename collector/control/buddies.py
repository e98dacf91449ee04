"""How snapshot copies travel between node agents: a small `Transport` protocol and its two implementations.

`LocalTransport` serves agents that share a filesystem — in this repository a multi-host job is
several `vigil run --host H` agents on one machine, and each host's memory is its own directory
under the snapshot root (`<root>/<host>/<job>`, see `replicas`): pushing to a host writes into
its peer copies through that host's `HostStore`, with every bound and the digest check of the
receiver. `MemoryTransport` keeps received copies in a dict, for pure tests. A production
deployment would put the same three calls behind an agent-to-agent TCP (or RDMA) stream
authenticated per job, the receiving agent applying the same `HostStore.accept`.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from vigil.collector.control.replicas import STATE, Held, HostStore, Refused, open_regular


class Transport(Protocol):
    def push(self, host: str, held: Held) -> Refused | None:
        """Send this host's snapshot `held` to `host`'s peer copies; None when `host` kept it."""

    def offers(self, host: str, rank: int) -> list[Held]:
        """What `host` holds of `rank` (its own snapshots and its peer copies), newest first."""

    def fetch(self, host: str, held: Held, into: HostStore) -> Refused | None:
        """Copy `held`, one of `host`'s offers, into `into`'s peer copies; None when kept."""


@dataclass(kw_only=True)
class LocalTransport:
    """Hosts whose snapshot memories are directories this agent can reach (one machine, or a shared mount)."""

    store_of: Callable[[str], HostStore]

    def push(self, host: str, held: Held) -> Refused | None:
        return self._copy(held, self.store_of(host))

    def offers(self, host: str, rank: int) -> list[Held]:
        return self.store_of(host).held(rank)

    def fetch(self, host: str, held: Held, into: HostStore) -> Refused | None:
        return self._copy(held, into)

    @staticmethod
    def _copy(held: Held, into: HostStore) -> Refused | None:
        try:
            with open_regular(held.path / STATE) as data:
                return into.accept(held, data)
        except OSError:
            return Refused.IO


@dataclass(kw_only=True)
class MemoryTransport:
    """Copies kept in memory per host (pure tests): the digest is checked, the bounds are the receiver's."""

    max_rank_bytes: int = 1 << 30
    received: dict[str, dict[tuple[int, str], tuple[Held, bytes]]] = field(default_factory=dict)

    def push(self, host: str, held: Held) -> Refused | None:
        if held.size > self.max_rank_bytes:
            return Refused.TOO_LARGE
        try:
            with open_regular(held.path / STATE) as f:
                data = f.read(self.max_rank_bytes + 1)
        except OSError:
            return Refused.IO
        if hashlib.sha256(data).hexdigest() != held.sha256:
            return Refused.DIGEST
        self.received.setdefault(host, {})[(held.rank, held.name)] = (replace(held, peer=True), data)
        return None

    def offers(self, host: str, rank: int) -> list[Held]:
        got = [h for (r, _), (h, _) in self.received.get(host, {}).items() if r == rank]
        return sorted(got, key=lambda h: h.step, reverse=True)

    def fetch(self, host: str, held: Held, into: HostStore) -> Refused | None:
        item = self.received.get(host, {}).get((held.rank, held.name))
        if item is None:
            return Refused.IO
        return into.accept(item[0], io.BytesIO(item[1]))


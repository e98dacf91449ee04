"""A counter that keeps rising condemns what it counts (issue 49's fleet memory, at the agent).

One growth of a GPU's retired pages, remapped rows or an InfiniBand port's symbol errors is a warning to watch
(the hardware corrected it); growth that keeps coming back is a part wearing out, which a short self-test
passes. `Rising.grew(key, now)` notes one reported growth of `key` and answers True exactly once: when the
growths within `window_s` reach `condemn_after`; the caller then reports the part as condemned (critical,
cordon: a strong culprit, which the controller cordons without diagnostics). Bounded: at most `max_keys`
parts, at most `condemn_after` times each; the caller passes the clock. `history` and `restore` carry a part's
growths across an agent restart (where the caller's clock is the wall clock).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field


@dataclass(kw_only=True)
class Rising:
    condemn_after: int = 3
    window_s: float = 86_400.0
    max_keys: int = 1024
    _seen: dict[Hashable, deque[float]] = field(default_factory=dict, init=False, repr=False)
    _condemned: set[Hashable] = field(default_factory=set, init=False, repr=False)

    def grew(self, key: Hashable, now: float) -> bool:
        """Note one growth of `key`; True the first time its growths in the window reach `condemn_after`."""
        if self.condemn_after < 1 or key in self._condemned:
            return False
        held = self._seen.setdefault(key, deque(maxlen=self.condemn_after))
        held.append(now)
        while held and now - held[0] > self.window_s:
            held.popleft()
        if len(held) >= self.condemn_after:
            self._condemned.add(key)
            del self._seen[key]
            return True
        while len(self._seen) > self.max_keys:
            del self._seen[next(iter(self._seen))]
        return False

    def history(self, key: Hashable) -> list[float]:
        """The growths of `key` held now (at most `condemn_after - 1`: a part reaching it is condemned)."""
        return list(self._seen.get(key, ()))

    def restore(self, key: Hashable, times: list[float]) -> None:
        """Growths of `key` noted before a restart (the latest `condemn_after - 1` are kept)."""
        if self.condemn_after < 2 or not times or key in self._condemned:
            return
        held = self._seen.setdefault(key, deque(maxlen=self.condemn_after))
        held.extend(sorted(times)[-(self.condemn_after - 1):])
        while len(self._seen) > self.max_keys:
            del self._seen[next(iter(self._seen))]

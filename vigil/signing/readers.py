"""What a reader of the log may show as a decision: the ones that pass the same gate the services run.

The CLI's folds (`vigil alerts`, `vigil incidents`, `vigil silence list`, `vigil recovery status|history`)
and the analyzer's restore of its alert and incident books read decisions straight from their topics,
where anyone who can produce may write. `verified(events, home)` keeps what `policy.check` admits
(facts, and decisions validly signed by a role that may make them) and counts the rest; a reader shows
the kept ones and says how many unverified claims it left out, never acting on or listing them as real.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from vigil.contract import Event
from vigil.signing.policy import check
from vigil.signing.setup import verifier

log = logging.getLogger(__name__)
E = TypeVar("E", bound=Event)


def verified(events: Iterable[E], home: Path, what: str = "decisions") -> tuple[list[E], int]:
    """`events` the gate admits, and how many it refused (logged once per call)."""
    ring = verifier(home)
    kept: list[E] = []
    refused = 0
    for e in events:
        if check(e, ring) is None:
            kept.append(e)
        else:
            refused += 1
    if refused:
        log.warning("%d unverified %s left out (not signed by a role that may make them)", refused, what)
    return kept, refused


def left_out(refused: int, what: str) -> str:
    """The line a CLI fold prints (stderr) for the decisions it left out, '' for none."""
    return f"({refused} unverified {what} left out: not signed by a role that may make them)" if refused else ""


def admits(home: Path) -> Callable[[Event], bool]:
    """A test of one event against the gate, for a reader that streams (one key ring for all)."""
    ring = verifier(home)
    return lambda e: check(e, ring) is None

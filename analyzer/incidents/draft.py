"""An incident in the making: the culprits and victims (`Party`) and what one evaluation says of them (`Draft`).

Its own module so that each incident shape (`incidents.build`'s crash, hang and hardware; `incidents.numeric`'s
numerical ones) builds on it and `incidents.book` keeps it, without those modules importing one another. Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from vigil.analyzer.detect.base import Finding
from vigil.analyzer.incidents.errors import Cause
from vigil.contract import IncidentCategory


@dataclass(frozen=True, kw_only=True)
class Party:
    """A culprit or victim: a rank (or a whole host when `rank` is None) and its own message."""

    host: str
    rank: int | None
    message: str = ""
    at: datetime | None = None

    @property
    def key(self) -> tuple[str, int | None]:
        return self.host, self.rank


@dataclass(kw_only=True)
class Draft:
    category: IncidentCategory
    cause: Cause
    culprits: list[Party]
    victims: list[Party]
    strong: bool
    first_sign: datetime
    last_sign: datetime
    summary: str
    culprit_findings: list[Finding] = field(default_factory=list)
    victim_findings: list[Finding] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def parties(self) -> set[tuple[str, int | None]]:
        return {p.key for p in self.culprits + self.victims}

    @property
    def hosts(self) -> set[str]:
        return {p.host for p in self.culprits + self.victims}

"""How a component's long-running service plugs into the application: a small explicit interface.

A component that runs a service (the analyzer, the dashboard, the recovery controller, ...)
describes it with one `ServiceSpec` (its name, how to build it from a `StackContext`, and an
optional status probe for clusters where it runs elsewhere). The application layer
(`vigil.app`) lists the specs it hosts by importing them: nothing is found by name, so a
missing or broken service is an import error, never a silently skipped one.

A `Service` starts its own threads in `start()` and returns; `stop()` ends them and waits;
`health()` is cheap and says whether it is fine, with figures for `vigil status`. Services
never raise out of their threads: they record errors in `health()` and keep going.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from vigil.settings import VigilSettings


@dataclass(frozen=True, kw_only=True)
class StackContext:
    """Everything a hosted service needs to reach the rest of the stack."""

    settings: VigilSettings
    bootstrap: str
    clickhouse: Any  # a clickhouse-connect Client (inserts as well as queries)
    clickhouse_dsn: str


class Service(Protocol):
    name: str

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def health(self) -> dict[str, Any]:
        """At least {"ok": bool}; anything else is shown by `vigil status`."""
        ...


StatusProbe = Callable[[VigilSettings, str], dict[str, Any]]
"""(core settings, Kafka bootstrap) -> {"ok": bool, ...}: the service's progress seen from outside,
for `vigil status` against a production cluster where the service runs in its own process."""


@dataclass(frozen=True, kw_only=True)
class ServiceSpec:
    """One hostable service of a component."""

    name: str
    help: str
    factory: Callable[[StackContext], Service]
    probe: StatusProbe | None = None

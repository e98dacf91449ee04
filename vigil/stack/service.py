"""What `vigil up` hosts: long-running services that share one process (and one chdb engine).

A service starts its own threads in `start()` and returns; `stop()` ends them and
waits; `health()` is cheap and says whether it is fine, with figures for
`vigil status`. Services never raise out of their threads: they record errors
in `health()` and keep going.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from clickhouse_connect.driver.client import Client

from vigil.settings import VigilSettings


@dataclass(frozen=True, kw_only=True)
class StackContext:
    """Everything a hosted service needs to reach the rest of the stack."""

    settings: VigilSettings
    bootstrap: str
    clickhouse: Client
    clickhouse_dsn: str


class Service(Protocol):
    name: str

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def health(self) -> dict[str, Any]:
        """At least {"ok": bool}; anything else is shown by `vigil status`."""
        ...

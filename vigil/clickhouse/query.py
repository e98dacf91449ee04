"""The read side every consumer of ClickHouse relies on, as a Protocol.

A clickhouse-connect client satisfies it, and so does the query-only proxy to a
running `vigil up` (`vigil.app.stack.access.RemoteClient`), so detectors, replay and
the dashboard run unchanged against the embedded engine, a server, or the proxy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class QueryResult(Protocol):
    @property
    def result_rows(self) -> Sequence[Sequence[Any]]: ...

    @property
    def column_names(self) -> Sequence[str]: ...


class QueryClient(Protocol):
    def query(self, sql: str, parameters: dict[str, Any] | None = None) -> QueryResult: ...

"""The dashboard's only door to ClickHouse: run a parameterised query, get plain rows back.

`QueryClient` is the small protocol both a clickhouse-connect client and the query-only
proxy of a running `vigil up` satisfy. `Store.rows` binds user input only as server-side
parameters (`{name:Type}` in the SQL) and turns any failure into a `StoreError` whose
message is fit to show on a page. Queries are serialised per store: the embedded engine
is shared with the rest of `vigil up` and one query at a time keeps its latency fair.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from vigil.clickhouse.query import QueryClient
from vigil.errors import VigilError, one_line


class StoreError(VigilError):
    """A query failed; the message says what the page could not load and why."""


Row = dict[str, Any]


@dataclass(kw_only=True)
class Store:
    """Wraps a query client; every page query goes through `rows`."""

    client: QueryClient
    queries: int = 0
    errors: int = 0
    last_error: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def rows(self, what: str, sql: str, params: dict[str, Any] | None = None) -> list[Row]:
        """Rows as dicts by column name; `what` names the data in error messages."""
        with self._lock:
            self.queries += 1
            try:
                result = self.client.query(sql, parameters=params or {})
                names = list(result.column_names)
                return [dict(zip(names, row, strict=False)) for row in result.result_rows]
            except Exception as exc:
                self.errors += 1
                self.last_error = f"{what}: {one_line(exc, 400)}"
                raise StoreError(f"could not load {what} from ClickHouse: {one_line(exc, 400)}") from exc

    def one(self, what: str, sql: str, params: dict[str, Any] | None = None) -> Row | None:
        rows = self.rows(what, sql, params)
        return rows[0] if rows else None

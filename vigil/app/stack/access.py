"""ClickHouse access for CLI processes: direct, or through a running `vigil up`.

With a server DSN every process connects directly. With the embedded engine
(chdb, one engine per process) a running `vigil up` owns it, so read-only
queries go through its control port; without a running stack the CLI opens the
engine itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from vigil.app.stack.state import read_state
from vigil.clickhouse.client import connect
from vigil.clickhouse.query import QueryClient
from vigil.errors import Unreachable
from vigil.settings import VigilSettings


@dataclass(frozen=True)
class RemoteResult:
    column_names: list[str]
    result_rows: list[list[Any]]


class RemoteClient:
    """Read-only queries proxied to `vigil up`'s control port."""

    def __init__(self, control_url: str, token: str, timeout: float = 60.0) -> None:
        self._url = control_url
        self._http = httpx.Client(timeout=timeout, headers={"Authorization": f"Bearer {token}"})

    def query(self, sql: str, parameters: dict[str, Any] | None = None) -> RemoteResult:
        try:
            resp = self._http.post(f"{self._url}/sql", json={"sql": sql, "parameters": parameters or {}})
        except httpx.HTTPError as exc:
            raise Unreachable(f"vigil up control port {self._url}: {exc}") from None
        doc = resp.json()
        if resp.status_code != 200:
            raise Unreachable(f"ClickHouse via {self._url}: {doc.get('error', resp.status_code)}")
        return RemoteResult(column_names=doc["columns"], result_rows=doc["rows"])


def clickhouse_for_cli(settings: VigilSettings) -> QueryClient:
    dsn = settings.effective_clickhouse_dsn
    if dsn.startswith("chdb://"):
        state = read_state(settings)
        if state is not None and state.clickhouse_dsn == dsn:
            return RemoteClient(state.control_url, state.token)
    return connect(dsn, explicit=settings.clickhouse_dsn is not None)  # type: ignore[return-value]

"""One ClickHouse client factory for both the embedded engine and a server.

`chdb:///abs/path` runs the real ClickHouse engine in this process (one engine per
process, so clients for one path are shared); `http(s)://[user:pass@]host:port`
talks to a server. The same SQL runs on both.
"""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import urlparse

import clickhouse_connect
from clickhouse_connect.driver.client import Client

from vigil.errors import Unreachable, one_line
from vigil.redact import scrub, shown_dsn

DATABASE = "vigil"
_shared: dict[tuple[str, str], Client] = {}
_lock = threading.Lock()


def _source(dsn: str, explicit: bool) -> str:
    return f"VIGIL_CLICKHOUSE_DSN={shown_dsn(dsn)}" if explicit else f"embedded ClickHouse {dsn}"


def connect(dsn: str, *, database: str = DATABASE, explicit: bool = True, create: bool = True) -> Client:
    """A client with `database` selected (created when missing and `create`)."""
    scheme = urlparse(dsn).scheme
    if scheme not in ("chdb", "http", "https"):
        raise ValueError(f"VIGIL_CLICKHOUSE_DSN={shown_dsn(dsn)}: expected chdb:///path or http(s)://host:port")
    key = (dsn, database)
    with _lock:
        if key in _shared:
            return _shared[key]
        try:
            if scheme == "chdb":
                path = dsn[len("chdb://"):]
                if not path.startswith("/"):
                    raise ValueError(f"VIGIL_CLICKHOUSE_DSN={dsn}: chdb path must be absolute (chdb:///abs/path)")
                client = _chdb_client(dsn, path, database, create)
            else:
                client = _http_client(dsn, database, create)
        except ValueError:
            raise
        except Exception as exc:
            raise Unreachable(f"{_source(dsn, explicit)}: ClickHouse not reachable ({scrub(one_line(exc), dsn)})") from None
        _shared[key] = client
        return client


def open_client(dsn: str, *, database: str = DATABASE, options: dict[str, Any] | None = None) -> Client:
    """A client of its own (not shared), for one role: the ingest writer, the control port, ...

    chdb serves any number of handles on its one engine; a handle whose query failed may hand
    the failed query's leftover output to its next query, and clickhouse-connect holds one lock
    per client for a whole call, so roles that must not disturb or wait for each other each get
    one. `options` become the handle's session settings (e.g. `readonly`, limits): set once at
    open, they cannot be lifted by the queries it runs when `readonly` is among them (put last).
    The database must exist (`connect` creates it).
    """
    scheme = urlparse(dsn).scheme
    try:
        if scheme == "chdb":
            path = dsn[len("chdb://"):]
            return clickhouse_connect.get_client(dsn=f"chdb://{path}", database=database, chdb_options=options or None)
        if scheme in ("http", "https"):
            return clickhouse_connect.get_client(dsn=dsn, database=database, autogenerate_session_id=False,
                                                 connect_timeout=5, settings=options or {})
    except Exception as exc:
        raise Unreachable(f"ClickHouse {shown_dsn(dsn)}: not reachable ({scrub(one_line(exc), dsn)})") from None
    raise ValueError(f"VIGIL_CLICKHOUSE_DSN={shown_dsn(dsn)}: expected chdb:///path or http(s)://host:port")


def _chdb_client(dsn: str, path: str, database: str, create: bool) -> Client:
    import os

    os.makedirs(path, exist_ok=True)
    boot = clickhouse_connect.get_client(dsn=f"chdb://{path}")
    if create:
        boot.command(f"CREATE DATABASE IF NOT EXISTS {database}")
    return clickhouse_connect.get_client(dsn=f"chdb://{path}", database=database)


def _http_client(dsn: str, database: str, create: bool) -> Client:
    kwargs: dict[str, Any] = {"dsn": dsn, "autogenerate_session_id": False, "connect_timeout": 5}
    if create:
        clickhouse_connect.get_client(**kwargs).command(f"CREATE DATABASE IF NOT EXISTS {database}")
    return clickhouse_connect.get_client(database=database, **kwargs)


def check(client: Client) -> str:
    """The server version; raises on a dead connection."""
    return str(client.query("SELECT version()").result_rows[0][0])

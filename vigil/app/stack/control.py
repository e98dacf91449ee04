"""The control port of a running `vigil up`: health, read-only SQL, migrations. Loopback, token only.

chdb runs one engine per process, so while `vigil up` holds it every other
process (the CLI, a replay) reaches the data through this port:

    GET  /health            {"ok": bool, "parts": {name: {...}}}
    GET  /metrics           every hosted service's Prometheus families (OpenMetrics text when asked for)
    POST /sql {sql, parameters}   {"columns": [...], "rows": [[...]]}   one read statement (see sqlgate)
    POST /migrate           {"applied": [...], "already": [...], "changed": [...]}

Every request must carry `Authorization: Bearer <token>`, the random token `vigil up`
writes to `$VIGIL_HOME/stack.json` (mode 0600): other users of a shared node, who can
reach any loopback port, get 401. SQL runs through `sqlgate.ReadOnlySql` on read-only
handles of its own, never on the handle the services write with.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import threading
from collections.abc import Callable
from datetime import date, datetime
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from uuid import UUID

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from vigil.app.stack.sqlgate import ReadOnlySql, Refused
from vigil.clickhouse.client import DATABASE, open_client
from vigil.errors import MigrationError, one_line

log = logging.getLogger(__name__)


def to_jsonable(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    return value


class ControlServer:
    def __init__(
        self, *, port: int, dsn: str, health: Callable[[], dict[str, Any]], migrate: Callable[[], dict[str, Any]],
        token: str | None = None, database: str = DATABASE, metrics: CollectorRegistry | None = None,
    ) -> None:
        self._health, self._migrate = health, migrate
        self._metrics = metrics or CollectorRegistry(auto_describe=False)
        self.token = token or secrets.token_urlsafe(32)
        self._sql = ReadOnlySql(lambda options: open_client(dsn, database=database, options=options))
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt: str, *args: Any) -> None:
                log.debug("control: " + fmt, *args)

            def _reply(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self) -> bool:
                given = self.headers.get("Authorization") or ""
                if hmac.compare_digest(given.encode(), f"Bearer {server.token}".encode()):
                    return True
                self._reply(401, {"error": "missing or wrong token (Authorization: Bearer <token from stack.json>)"})
                return False

            def do_GET(self) -> None:
                if not self._authorized():
                    return
                if self.path == "/health":
                    self._reply(200, server._health())
                elif self.path == "/metrics":
                    encode, content_type = choose_encoder(self.headers.get("Accept") or "")
                    data = encode(server._metrics)
                    self.send_response(200)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                else:
                    self._reply(404, {"error": f"no such path {self.path}"})

            def do_POST(self) -> None:
                if not self._authorized():
                    return
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                    doc = json.loads(self.rfile.read(length) or b"{}")
                    if self.path == "/sql":
                        self._reply(200, server.sql(str(doc.get("sql", "")), doc.get("parameters") or {}))
                    elif self.path == "/migrate":
                        self._reply(200, server._migrate())
                    else:
                        self._reply(404, {"error": f"no such path {self.path}"})
                except ValueError as exc:
                    self._reply(400, {"error": str(exc)})
                except MigrationError as exc:  # a migration this running stack must not apply (it ingests)
                    self._reply(409, {"error": str(exc)})
                except Exception as exc:
                    self._reply(500, {"error": one_line(exc, 500)})

        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="vigil-control", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def sql(self, sql: str, parameters: dict[str, Any]) -> dict[str, Any]:
        """Run one vetted read statement; ValueError (400) when refused or failed."""
        try:
            result = self._sql.query(sql, parameters)
        except Refused:
            raise
        except Exception as exc:
            raise ValueError(f"ClickHouse: {one_line(exc, 400)}") from None
        return {"columns": list(result.column_names), "rows": to_jsonable(result.result_rows)}

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._sql.close()

"""The control port of a running `vigil up`: health, read-only SQL, migrations. Loopback only.

chdb runs one engine per process, so while `vigil up` holds it every other
process (the CLI, a replay) reaches the data through this port:

    GET  /health            {"ok": bool, "parts": {name: {...}}}
    POST /sql {sql, parameters}   {"columns": [...], "rows": [[...]]}   SELECT/WITH/SHOW/DESCRIBE/EXPLAIN only
    POST /migrate           {"applied": [...], "already": [...], "changed": [...]}
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable
from datetime import date, datetime
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from uuid import UUID

from clickhouse_connect.driver.client import Client

from vigil.errors import one_line

log = logging.getLogger(__name__)
_READ_ONLY = re.compile(r"^\s*(SELECT|WITH|SHOW|DESCRIBE|DESC|EXPLAIN)\b", re.I)


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
        self, *, port: int, client: Client, health: Callable[[], dict[str, Any]], migrate: Callable[[], dict[str, Any]]
    ) -> None:
        self._client, self._health, self._migrate = client, health, migrate
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

            def do_GET(self) -> None:
                if self.path == "/health":
                    self._reply(200, server._health())
                else:
                    self._reply(404, {"error": f"no such path {self.path}"})

            def do_POST(self) -> None:
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
        if not _READ_ONLY.match(sql):
            raise ValueError("only read-only statements (SELECT, WITH, SHOW, DESCRIBE, EXPLAIN) are served")
        result = self._client.query(sql, parameters=parameters)
        return {"columns": list(result.column_names), "rows": to_jsonable(result.result_rows)}

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

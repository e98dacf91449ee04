"""A webhook receiver on a loopback port for notifier tests: records every request, answers as told.

`status` is what it answers (200, 503, 400, ...); `down()` closes the listening socket so
connections are refused, `up()` listens again on the same port. Signatures are checked
here with the standard library alone (not the notifier's own code), as a receiver would.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from vigil.kafka.broker import free_port


@dataclass(frozen=True)
class Request:
    path: str
    headers: dict[str, str]
    body: bytes
    answered: int

    @property
    def key(self) -> str:
        return self.headers.get("Idempotency-Key", "")

    def json(self) -> Any:
        return json.loads(self.body)


def signed_by(secret: bytes, req: Request, body: bytes | None = None, tolerance_s: float = 300) -> bool:
    """A receiver's check: HMAC-SHA256 over "<timestamp>." + body, constant-time compare, fresh timestamp."""
    stamp, given = req.headers.get("X-Vigil-Timestamp", ""), req.headers.get("X-Vigil-Signature", "")
    if not stamp.isdigit() or abs(time.time() - int(stamp)) > tolerance_s:
        return False
    mac = hmac.new(secret, stamp.encode() + b"." + (req.body if body is None else body), hashlib.sha256).hexdigest()
    return hmac.compare_digest(f"v1={mac}", given)


class Receiver:
    def __init__(self) -> None:
        self.port = free_port()
        self.status = 200
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def up(self) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status = outer.status
                with outer._lock:
                    outer.requests.append(Request(self.path, dict(self.headers.items()), body, status))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"ok": true}' if status < 300 else b'{"error": "told to fail"}')

            def log_message(self, *_args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def down(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def delivered(self) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if 200 <= r.answered < 300]

    def all(self) -> list[Request]:
        with self._lock:
            return list(self.requests)

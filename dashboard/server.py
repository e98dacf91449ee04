"""Serve a Dash app's Flask server on a background thread that `stop()` can end.

werkzeug's threaded server (one thread per request), so a slow page does not hold up
the others; port 0 picks a free port, reported by `url` once started.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from flask import Flask
from werkzeug.serving import BaseWSGIServer, make_server


@dataclass(kw_only=True)
class ThreadedServer:
    app: Flask
    host: str = "127.0.0.1"
    port: int = 0
    _server: BaseWSGIServer | None = field(default=None, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def start(self) -> str:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        try:
            self._server = make_server(self.host, self.port, self.app, threaded=True)
        except SystemExit:  # werkzeug prints the bind error and exits; a hosted service must not
            raise OSError(f"cannot listen on {self.host}:{self.port} (address in use or not permitted)") from None
        self.port = int(self._server.server_port)
        self._thread = threading.Thread(target=self._server.serve_forever, name="vigil-dashboard", daemon=True)
        self._thread.start()
        return self.url

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}/"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout)
        self._server = None
        self._thread = None

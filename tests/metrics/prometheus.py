"""A real Prometheus (Debian's `prometheus`) for tests: static loopback targets scraped every second.

`Prometheus.start(targets)` writes a prometheus.yml (one scrape job per target), starts
`prometheus --config.file=... --storage.tsdb.path=<tmp> --web.listen-address=127.0.0.1:<free port>`
and waits until `/-/ready` answers 200; the test is skipped with the reason when the binary is
absent or it cannot start. `query` runs an instant PromQL query over the HTTP API.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import yaml

from tests.support.waiting import wait_until

BINARY = shutil.which("prometheus")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(kw_only=True)
class Prometheus:
    tmp: Path
    port: int = 0
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, targets: dict[str, str]) -> None:
        """`targets`: scrape job -> a metrics URL (http://host:port/metrics) to scrape every second."""
        if BINARY is None:
            pytest.skip("prometheus not installed (Debian's prometheus: `make test` installs it as root)")
        config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                  "scrape_configs": [{"job_name": job, "metrics_path": "/" + url.split("/", 3)[3],
                                      "static_configs": [{"targets": [url.split("/")[2]]}]}
                                     for job, url in targets.items()]}
        path = self.tmp / "prometheus.yml"
        path.write_text(yaml.safe_dump(config))
        self.port = free_port()
        log = open(self.tmp / "prometheus.log", "ab")  # noqa: SIM115
        try:
            self.proc = subprocess.Popen([BINARY, f"--config.file={path}", f"--storage.tsdb.path={self.tmp / 'tsdb'}",
                                          f"--web.listen-address=127.0.0.1:{self.port}"],
                                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        finally:
            log.close()
        wait_until(self._ready, 60, "prometheus to be ready")

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            pytest.skip(f"prometheus could not start: {(self.tmp / 'prometheus.log').read_text()[-1500:]}")
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def query(self, promql: str) -> dict[tuple[tuple[str, str], ...], float]:
        """An instant query: each series' labels (sorted; name, `instance` and `job` left out) -> its value."""
        doc = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=10).json()
        assert doc["status"] == "success", doc
        return {tuple(sorted((k, v) for k, v in r["metric"].items() if k not in ("__name__", "instance", "job"))): float(r["value"][1])
                for r in doc["data"]["result"]}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

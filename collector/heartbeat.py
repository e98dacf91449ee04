"""Who this agent is (IP, pod, node) and its periodic Heartbeat.

Identity comes from the Kubernetes downward API when present (`POD_IP`, `POD_NAME`,
`NODE_NAME`), else from the machine (the address of the default route's interface).
A heartbeat adds uptime and version, the training processes' states, GPU readings
when NVML is present, and the events the agent dropped and still holds spooled.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import PackageNotFoundError, version

from vigil.collector.gpu import NvmlProbe
from vigil.collector.procs import ProcessTracker
from vigil.contract import Heartbeat


@cache
def agent_version() -> str:
    try:
        return version("vigil")
    except PackageNotFoundError:
        return "0.0.0"


def local_ip(env: Mapping[str, str] = os.environ) -> str:
    if env.get("POD_IP"):
        return env["POD_IP"]
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))  # UDP connect sends nothing: it only picks a route
            return str(s.getsockname()[0])
    except OSError:
        return "127.0.0.1"


@dataclass(frozen=True, kw_only=True)
class Identity:
    job_id: str
    host: str
    ip: str
    pod: str
    node: str

    @classmethod
    def detect(cls, *, job_id: str, host: str, env: Mapping[str, str] = os.environ) -> Identity:
        return cls(job_id=job_id, host=host, ip=local_ip(env), pod=env.get("POD_NAME", ""),
                   node=env.get("NODE_NAME", ""))


@dataclass(kw_only=True)
class HeartbeatBuilder:
    identity: Identity
    interval_s: float
    processes: ProcessTracker
    gpus: NvmlProbe
    counters: Callable[[], tuple[int, int]]  # (dropped, spooled)
    started: float = field(default_factory=time.monotonic)

    def build(self) -> Heartbeat:
        dropped, spooled = self.counters()
        ident = self.identity
        return Heartbeat(
            job_id=ident.job_id, host=ident.host, ip=ident.ip, pod=ident.pod, node=ident.node,
            agent_version=agent_version(), uptime_s=round(time.monotonic() - self.started, 3),
            interval_s=self.interval_s, processes=self.processes.refresh(), gpus=self.gpus.read(),
            dropped_events=dropped, spooled_events=spooled,
        )

"""What the node agents of a simulated job report between step ends: heartbeats, NIC samples, benign logs.

`NodeReports.between(t0, end, ...)` emits every heartbeat (every `heartbeat_s`, with GPU
and process state) and every NIC sample (every `nic_s`, per RDMA NIC) stamped in
[t0, end) for each host. NIC throughput follows the step (it peaks in the gradient
exchange) times a per-(host, NIC) level the model decides: 1 while training, a fraction
of a percent while the job is paused (evaluation, a hang: NCCL keeps polling), zero for a
dead link. GPUs report NVML-like readings: a thermally throttled GPU shows a lower SM
clock, its slowdown throttle reasons, a high temperature and lower power; healthy GPUs
now and then show a benign `sw_power_cap`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from vigil.contract import Event, GpuState, Heartbeat, LogLine, NicCounters, ProcessState

NIC_BPS = 1.2e10
SM_CLOCK_MHZ = 1980.0

# (host index, NIC name, sample time) -> traffic level (1 = normal training traffic)
Level = Callable[[int, str, datetime], float]


@dataclass(frozen=True, kw_only=True)
class GpuFault:
    slowdown: float  # 0.08 = 8 % slower
    reasons: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class NodeState:
    """How the hosts' processes and GPUs look over an interval."""

    running: bool = True  # training processes alive
    gpu_util: float = 95.0
    silent: frozenset[int] = frozenset()  # hosts that report nothing
    exited: frozenset[int] = frozenset()  # global ranks whose process exited


class NodeReports:
    def __init__(self, *, job: str, names: list[str], gpus: int, nics: int, start: datetime, heartbeat_s: float,
                 nic_s: float, rng: random.Random, new_id: Callable[[], str]) -> None:
        self.job, self.names, self.gpus, self.hb_s, self.nic_s = job, names, gpus, heartbeat_s, nic_s
        self.start, self.rng, self.new_id = start, rng, new_id
        self.nic_names = [f"mlx5_{i}" for i in range(nics)]
        hosts = len(names)
        self._tx = {(h, n): 0 for h in range(hosts) for n in range(nics)}
        self._next_hb = [start + timedelta(seconds=(h % 20) * heartbeat_s / 20) for h in range(hosts)]
        self._next_nic = [start + timedelta(seconds=(h % 10) * nic_s / 10) for h in range(hosts)]

    def between(self, t0: datetime, end: datetime, *, period_ms: float, level: Level, state: NodeState,
                gpu_faults: Mapping[tuple[int, int], GpuFault]) -> list[Event]:
        """Heartbeats and NIC samples stamped in [t0, end); traffic peaks once per `period_ms`."""
        out: list[Event] = []
        for h, name in enumerate(self.names):
            while self._next_hb[h] < end:
                ts = self._next_hb[h]
                self._next_hb[h] = ts + timedelta(seconds=self.hb_s)
                if h not in state.silent:
                    out.append(self._heartbeat(h, name, ts, state, gpu_faults))
            while self._next_nic[h] < end:
                ts = self._next_nic[h]
                self._next_nic[h] = ts + timedelta(seconds=self.nic_s)
                if h in state.silent:
                    continue
                pos = ((ts - t0).total_seconds() * 1000 / period_ms) % 1.0 if period_ms > 0 else 0.5
                shape = 0.6 + 0.8 * math.sin(math.pi * pos) ** 2
                for n, dev in enumerate(self.nic_names):
                    out.append(self._nic(h, n, dev, name, ts, shape * level(h, dev, ts)))
        return out

    def _heartbeat(self, h: int, name: str, ts: datetime, state: NodeState,
                   gpu_faults: Mapping[tuple[int, int], GpuFault]) -> Heartbeat:
        rng, g = self.rng, self.gpus
        procs = [ProcessState(pid=40000 + h * g + k, local_rank=k, cpu_pct=98.0 if state.running else 0.0,
                              status="running" if state.running and h * g + k not in state.exited else "exited")
                 for k in range(g)]
        gpus = []
        for k in range(g):
            fault = gpu_faults.get((h, k))
            util = max(0.0, min(100.0, state.gpu_util + rng.gauss(0, 2))) if state.running else 0.0
            if fault is not None:
                clock = SM_CLOCK_MHZ / (1 + fault.slowdown) + rng.gauss(0, 5)
                temp, power, reasons = 88 + rng.gauss(0, 1.5), 540 + rng.gauss(0, 15), list(fault.reasons)
            else:
                clock = SM_CLOCK_MHZ - abs(rng.gauss(0, 8))
                temp, power = 62 + rng.gauss(0, 3), 640 + rng.gauss(0, 20)
                reasons = ["sw_power_cap"] if rng.random() < 0.01 else []
            if not state.running:
                clock, power = 345.0, 75.0
            gpus.append(GpuState(index=k, name="NVIDIA H100 80GB HBM3", util_pct=round(util, 1), temp_c=round(temp, 1),
                                 power_w=round(power, 1), sm_clock_mhz=round(clock, 1), mem_used_mib=61000.0,
                                 mem_total_mib=81559.0, throttle_reasons=reasons, ecc_uncorrected=0))
        return Heartbeat(
            event_id=self.new_id(), job_id=self.job, host=name, ts=ts, ip=f"10.{h // 250}.{h % 250}.7",
            pod=f"{self.job}-worker-{h}", node=name, agent_version="sim", interval_s=self.hb_s,
            uptime_s=round((ts - self.start).total_seconds(), 3), processes=procs, gpus=gpus)

    def _nic(self, h: int, n: int, dev: str, name: str, ts: datetime, factor: float) -> NicCounters:
        rng = self.rng
        tx = max(0.0, NIC_BPS / 2 * factor * (1 + rng.gauss(0, 0.05)))
        rx = max(0.0, NIC_BPS / 2 * factor * (1 + rng.gauss(0, 0.05)))
        self._tx[(h, n)] += int((tx + rx) * self.nic_s)
        return NicCounters.model_construct(
            event_id=self.new_id(), job_id=self.job, host=name, ts=ts, device=dev, port=1, link="rdma",
            tx_bytes=self._tx[(h, n)] // 2, rx_bytes=self._tx[(h, n)] // 2, tx_bps=round(tx, 1), rx_bps=round(rx, 1),
            interval_s=self.nic_s, extra={}, kind="nic", schema_version=1)

    def benign_log(self, t0: datetime, silent: frozenset[int] | set[int]) -> list[Event]:
        """Now and then a harmless NCCL warning from some host."""
        rng = self.rng
        if rng.random() >= 0.05:
            return []
        h = rng.randrange(len(self.names))
        if h in silent:
            return []
        return [LogLine(event_id=self.new_id(), job_id=self.job, host=self.names[h], ts=t0 + timedelta(milliseconds=10),
                        rank=h * self.gpus, local_rank=0, stream="stdout", category="nccl_warn", severity="warning",
                        message="NCCL WARN Call to ibv_reg_mr took 1.2 s (benign, retried)")]

"""The simulation model: pure, seeded generators of a job's telemetry, one training step at a time.

Each step: per-rank phase times (forward, backward, optimizer, comm) = base x fleet-wide
step factor x per-host bias x (1 + gaussian jitter), rare +15% spikes, the last
pipeline stage 6% heavier; every `checkpoint_every` steps a `checkpoint` phase on
every rank. The step lasts as long as the slowest host (synchronous training); every
rank reports that step time and the MFU it implies. Between step ends, hosts send
heartbeats (GPU and process state) and periodic per-NIC RDMA traffic samples, plus
occasional benign warning lines. Faults (see faults.py) bend these numbers.
Everything, including event ids, follows from the seed; timestamps are simulated time.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from vigil.analyzer.simulator.faults import Fault
from vigil.analyzer.simulator.layout import Layout
from vigil.contract import (
    Event,
    GpuState,
    Heartbeat,
    JobRegistered,
    LogLine,
    NicCounters,
    ProcessExit,
    ProcessState,
    StepTiming,
)

PHASES: dict[str, float] = {"forward": 0.30, "backward": 0.52, "optimizer": 0.06, "comm": 0.12}
PEAK_TFLOPS = 989.0
BASE_MFU = 0.42
NIC_BPS = 1.2e10


@dataclass(kw_only=True)
class SimConfig:
    job: str
    layout: Layout
    faults: list[Fault] = field(default_factory=list)
    seed: int = 0
    start: datetime
    step_ms: float = 1000.0
    heartbeat_s: float = 2.0
    nic_s: float = 1.0
    nics: int = 2
    jitter: float = 0.02
    checkpoint_every: int = 100
    checkpoint_ms: float = 1500.0


class Simulation:
    """`registration()` first, then `step(i)` for i = 0, 1, ...; `now` is the simulated clock."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        lay = cfg.layout
        for f in cfg.faults:
            if f.host != "all":
                lay.host_index(f.host)
        self.now = cfg.start
        self.onsets: dict[int, datetime] = {}
        self.step_starts: dict[int, datetime] = {}
        self._rng = random.Random(cfg.seed)
        self._ids = random.Random(f"{cfg.seed}/{cfg.job}/{cfg.start.isoformat()}")
        self._bias = [1 + self._rng.gauss(0, 0.005) for _ in range(lay.hosts)]
        self._stage = [1.06 if lay.pp > 1 and lay.stage_of_host(h) == lay.pp - 1 else 1.0 for h in range(lay.hosts)]
        self._coords = [lay.coords(r) for r in range(lay.world_size)]
        self._names = lay.host_names()
        self._nic_names = [f"mlx5_{i}" for i in range(cfg.nics)]
        self._tx = {(h, n): 0 for h in range(lay.hosts) for n in range(cfg.nics)}
        self._next_hb = [cfg.start + timedelta(seconds=(h % 20) * cfg.heartbeat_s / 20) for h in range(lay.hosts)]
        self._next_nic = [cfg.start + timedelta(seconds=(h % 10) * cfg.nic_s / 10) for h in range(lay.hosts)]
        self._exited: dict[int, int] = {}  # global rank -> step it restarts at (or -1)
        self.flops = BASE_MFU * PEAK_TFLOPS * 1e12 * lay.world_size * cfg.step_ms / 1000

    def _id(self) -> str:
        return f"{self._ids.getrandbits(64):016x}"

    def registration(self) -> JobRegistered:
        lay = self.cfg.layout
        return JobRegistered(
            event_id=self._id(), job_id=self.cfg.job, host=self._names[0], ts=self.now, name=f"simulated {self.cfg.job}",
            world_size=lay.world_size, tp=lay.tp, pp=lay.pp, dp=lay.dp, gpus_per_host=lay.gpus_per_host,
            gpu_model="NVIDIA H100 80GB HBM3 (simulated)", gpu_peak_tflops=PEAK_TFLOPS,
            model_flops_per_step=self.flops, ranks=lay.placements())

    def _faults(self, kind: str, step: int) -> list[Fault]:
        return [f for f in self.cfg.faults if f.kind == kind and f.active(step)]

    def silent_hosts(self, step: int) -> set[int]:
        return {self.cfg.layout.host_index(f.host) for f in self._faults("heartbeat_loss", step)}

    def step(self, i: int) -> list[Event]:
        cfg, lay, rng = self.cfg, self.cfg.layout, self._rng
        t0 = self.now
        self.step_starts[i] = t0
        for k, f in enumerate(cfg.faults):
            if f.active(i) and k not in self.onsets:
                self.onsets[k] = t0
        silent = self.silent_hosts(i)
        slow = {(lay.host_index(f.host), f.phase): 1 + f.magnitude for f in self._faults("straggler", i)}
        decay = 1.0
        for f in self._faults("mfu_decay", i):
            decay += f.magnitude * min(1.0, (i - f.start + 1) / f.int_option("ramp", 100))
        ckpt = cfg.checkpoint_every > 0 and i > 0 and i % cfg.checkpoint_every == cfg.checkpoint_every - 1
        fleet = 1 + rng.gauss(0, 0.01)
        g = lay.gpus_per_host
        per_rank: list[dict[str, float]] = []
        host_compute = [0.0] * lay.hosts
        for r in range(lay.world_size):
            h = r // g
            phases = {}
            for p, frac in PHASES.items():
                ms = cfg.step_ms * frac * fleet * (1 + rng.gauss(0, cfg.jitter))
                if p != "comm":
                    ms *= self._bias[h] * self._stage[h]
                if rng.random() < 0.002:
                    ms *= 1.15
                ms *= slow.get((h, p), 1.0) * (decay if p == "forward" else 1.0)
                phases[p] = round(ms, 3)
            if ckpt:
                phases["checkpoint"] = round(cfg.checkpoint_ms * (1 + rng.gauss(0, 0.02)), 3)
            per_rank.append(phases)
            if h not in silent:
                host_compute[h] = max(host_compute[h], phases["forward"] + phases["backward"] + phases["optimizer"])
        comm = cfg.step_ms * PHASES["comm"] * fleet
        dur_ms = max(host_compute) + comm + (cfg.checkpoint_ms if ckpt else 0.0)
        end = t0 + timedelta(milliseconds=dur_ms)
        events: list[Event] = []
        events += self._between(t0, end, i, dur_ms, silent)
        events += self._fault_events(i, t0, silent)
        mfu = self.flops / (dur_ms / 1000) / lay.world_size / (PEAK_TFLOPS * 1e12)
        tokens = 4 * 1024 * 1024 // lay.world_size
        for r, phases in enumerate(per_rank):
            h = r // g
            if h in silent or r in self._exited:
                continue
            events.append(StepTiming.model_construct(
                event_id=self._id(), job_id=cfg.job, host=self._names[h], rank=r, local_rank=r % g,
                ts=end + timedelta(microseconds=r % 997), world_size=lay.world_size, coords=self._coords[r], step=i,
                step_ms=round(dur_ms, 3), phases=phases, tokens=tokens, samples=None, tflops=round(mfu * PEAK_TFLOPS, 2),
                mfu=round(mfu, 5), failed=False, dropped=0, kind="step", schema_version=1))
        self.now = end
        return events

    def _fault_events(self, i: int, t0: datetime, silent: set[int]) -> list[Event]:
        cfg, lay = self.cfg, self.cfg.layout
        out: list[Event] = []
        for r, back in list(self._exited.items()):
            if back == i:
                del self._exited[r]
        for f in cfg.faults:
            if f.host == "all":
                continue
            h = lay.host_index(f.host)
            rank = h * lay.gpus_per_host + f.int_option("local_rank", 0)
            if f.kind == "xid" and f.start <= i < f.start + 4 and h not in silent:
                code = f.int_option("xid", 79)
                out.append(LogLine(
                    event_id=self._id(), job_id=cfg.job, host=f.host, ts=t0 + timedelta(milliseconds=50),
                    rank=rank, local_rank=rank % lay.gpus_per_host, stream="stderr", category="xid",
                    severity="critical", xid=code,
                    message=f"NVRM: Xid (PCI:0000:{0x18 + rank % lay.gpus_per_host:02x}:00): {code}, pid=4242, "
                            "GPU has fallen off the bus."))
            if f.kind == "process_exit" and i == f.start and h not in silent:
                out.append(ProcessExit(
                    event_id=self._id(), job_id=cfg.job, host=f.host, ts=t0 + timedelta(milliseconds=100),
                    rank=rank, local_rank=rank % lay.gpus_per_host, pid=40000 + rank,
                    exit_code=f.int_option("exit_code", 1),
                    summary="RuntimeError: CUDA error: an illegal memory access was encountered",
                    traceback="Traceback (most recent call last):\n  File \"train.py\", line 212, in <module>\n"
                              "RuntimeError: CUDA error: an illegal memory access was encountered"))
                self._exited[rank] = f.start + f.duration if f.duration is not None else -1
        return out

    def _between(self, t0: datetime, end: datetime, i: int, dur_ms: float, silent: set[int]) -> list[Event]:
        """Heartbeats, NIC samples and benign log lines stamped in [t0, end)."""
        cfg, lay, rng = self.cfg, self.cfg.layout, self._rng
        out: list[Event] = []
        drops: dict[tuple[int, str], float] = {}
        for f in self._faults("nic_drop", i):
            drops[(lay.host_index(f.host), f.nic)] = 1 - f.magnitude
        for f in self._faults("traffic_stop", i):
            drops[(lay.host_index(f.host), f.nic)] = 0.0
        g = lay.gpus_per_host
        for h in range(lay.hosts):
            name = self._names[h]
            while self._next_hb[h] < end:
                ts = self._next_hb[h]
                self._next_hb[h] = ts + timedelta(seconds=cfg.heartbeat_s)
                if h in silent:
                    continue
                procs = [ProcessState(pid=40000 + h * g + k, local_rank=k, cpu_pct=98.0,
                                      status="exited" if h * g + k in self._exited else "running") for k in range(g)]
                gpus = [GpuState(index=k, name="NVIDIA H100 80GB HBM3", util_pct=round(95 + rng.gauss(0, 2), 1),
                                 temp_c=round(62 + rng.gauss(0, 3), 1), power_w=round(640 + rng.gauss(0, 20), 1),
                                 sm_clock_mhz=1980.0, mem_used_mib=61000.0, mem_total_mib=81559.0,
                                 ecc_uncorrected=0) for k in range(g)]
                out.append(Heartbeat(
                    event_id=self._id(), job_id=cfg.job, host=name, ts=ts, ip=f"10.{h // 250}.{h % 250}.7",
                    pod=f"{cfg.job}-worker-{h}", node=name, agent_version="sim", interval_s=cfg.heartbeat_s,
                    uptime_s=round((ts - cfg.start).total_seconds(), 3), processes=procs, gpus=gpus))
            while self._next_nic[h] < end:
                ts = self._next_nic[h]
                self._next_nic[h] = ts + timedelta(seconds=cfg.nic_s)
                if h in silent:
                    continue
                pos = ((ts - t0).total_seconds() * 1000 / dur_ms) % 1.0
                shape = 0.6 + 0.8 * math.sin(math.pi * pos) ** 2
                for n, dev in enumerate(self._nic_names):
                    factor = drops.get((h, dev), 1.0)
                    tx = NIC_BPS / 2 * shape * factor * (1 + rng.gauss(0, 0.05))
                    rx = NIC_BPS / 2 * shape * factor * (1 + rng.gauss(0, 0.05))
                    tx, rx = max(0.0, tx), max(0.0, rx)
                    self._tx[(h, n)] += int((tx + rx) * cfg.nic_s)
                    out.append(NicCounters.model_construct(
                        event_id=self._id(), job_id=cfg.job, host=name, ts=ts, device=dev, port=1, link="rdma",
                        tx_bytes=self._tx[(h, n)] // 2, rx_bytes=self._tx[(h, n)] // 2, tx_bps=round(tx, 1),
                        rx_bps=round(rx, 1), interval_s=cfg.nic_s, extra={}, kind="nic", schema_version=1))
        if rng.random() < 0.05:
            h = rng.randrange(lay.hosts)
            if h not in silent:
                out.append(LogLine(
                    event_id=self._id(), job_id=cfg.job, host=self._names[h], ts=t0 + timedelta(milliseconds=10),
                    rank=h * g, local_rank=0, stream="stdout", category="nccl_warn", severity="warning",
                    message="NCCL WARN Call to ibv_reg_mr took 1.2 s (benign, retried)"))
        return out

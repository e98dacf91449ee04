"""Crafted telemetry for analyzer tests: small, explicit generators with controlled noise."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from vigil.contract import Heartbeat, NicCounters, ParallelCoords, ProcessState, StepTiming

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def steps(job: str, hosts: int, n_steps: int, *, gpus: int = 2, jitter: float = 0.02, seed: int = 0,
          slow: dict[str, float] | None = None, slow_from: int = 0, phase_factor: dict[int, dict[str, float]] | None = None,
          host_bias: float = 0.0, step_s: float = 1.0, first_step: int = 0, start: datetime = T0) -> list[StepTiming]:
    """Step timings; `slow` = {host: factor on forward from `slow_from`}, `phase_factor` = {step: {phase: x}} for all.

    `slow_from` and `phase_factor` count steps from the first one; the reported step numbers start at
    `first_step` (a job resumed from a checkpoint), the first one ending `step_s` after `start`.
    """
    rng = random.Random(seed)
    bias = [1 + rng.uniform(-host_bias, host_bias) for _ in range(hosts)]
    out = []
    for s in range(n_steps):
        ts = start + timedelta(seconds=(s + 1) * step_s)
        for h in range(hosts):
            host = f"h{h:04d}"
            for g in range(gpus):
                ph: dict[str, float] = {}
                for p, base in (("forward", 300.0), ("backward", 500.0), ("optimizer", 60.0)):
                    ms = base * bias[h] * (1 + rng.gauss(0, jitter))
                    if slow and host in slow and p == "forward" and s >= slow_from:
                        ms *= slow[host]
                    ms *= (phase_factor or {}).get(s, {}).get(p, 1.0)
                    ph[p] = ms
                out.append(StepTiming(job_id=job, host=host, rank=h * gpus + g, local_rank=g, world_size=hosts * gpus,
                                      coords=ParallelCoords(tp=g, dp=h), step=first_step + s, step_ms=sum(ph.values()) + 100,
                                      phases=ph, ts=ts, mfu=0.4 * 960 / (sum(ph.values()) + 100)))
    return out


def nic(job: str, hosts: int, seconds: int, *, level: dict[tuple[str, int], float] | None = None,
        seed: int = 0) -> list[NicCounters]:
    """1 Hz samples of a periodic ~10 GB/s NIC per host; `level` = {(host, from_second): factor}."""
    rng = random.Random(seed)
    out = []
    for t in range(seconds):
        for h in range(hosts):
            host = f"h{h:04d}"
            factor = 1.0
            for (lh, start), f in (level or {}).items():
                if lh == host and t >= start:
                    factor = f
            bps = 1e10 * (0.6 + 0.4 * (t % 3) / 2) * (1 + rng.gauss(0, 0.05)) * factor
            out.append(NicCounters(job_id=job, host=host, device="mlx5_0", link="rdma", tx_bytes=0, rx_bytes=0,
                                   tx_bps=max(bps / 2, 0), rx_bps=max(bps / 2, 0), interval_s=1.0,
                                   ts=T0 + timedelta(seconds=t)))
    return out


def heartbeats(job: str, hosts: int, seconds: int, *, silent: dict[str, tuple[int, int]] | None = None,
               interval: float = 2.0) -> list[Heartbeat]:
    """Heartbeats every `interval`; `silent` = {host: (from_s, to_s)} gaps."""
    out = []
    t = 0.0
    while t < seconds:
        for h in range(hosts):
            host = f"h{h:04d}"
            gap = (silent or {}).get(host)
            if gap and gap[0] <= t < gap[1]:
                continue
            out.append(Heartbeat(job_id=job, host=host, ts=T0 + timedelta(seconds=t), interval_s=interval,
                                 processes=[ProcessState(pid=1, status="running")]))
        t += interval
    return out

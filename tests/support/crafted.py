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


def sync_steps(job: str, hosts: int, n_steps: int, *, gpus: int = 8, tp_coupled: bool = True, pp: int = 1,
               slow_host: dict[str, float] | None = None, slow_gpu: dict[tuple[str, int], float] | None = None,
               intermittent: tuple[str, float, float] | None = None, slow_from: int = 0, jitter: float = 0.02,
               seed: int = 0, comm: str = "grad_sync", declare: dict[str, str] | None = None,
               nested_wait: bool = False, step_s: float = 1.0, spikes: float = 0.0,
               host_bias: float = 0.0, pauses: dict[str, list[int]] | None = None) -> list[StepTiming]:
    """Synchronous data-parallel steps: everyone waits in `comm` for the slowest rank's compute.

    `slow_host` = {host: factor on its compute}, `slow_gpu` = {(host, gpu): factor} (with
    `tp_coupled` the host's ranks are one tensor-parallel group and all wait for that GPU),
    `intermittent` = (host, fraction of steps, factor). With pp > 1, hosts are split into
    contiguous stages: the first stage's forward is 4% heavier (embedding), the last stage's
    compute 6% (head, loss), and each rank waits for its pipeline's slowest stage in `bubble`.
    `declare` goes into every step's `phase_kinds`; `nested_wait` records the wait as
    `backward/allreduce` inside backward instead of a top-level `comm` phase. `spikes`: the
    share of rank-steps whose forward a GC-like pause makes 20-60 % longer (heavy tail, one rank).
    `host_bias`: the spread (std) of each host's lasting speed factor (a speed lottery: silicon, clocks).
    `pauses` = {host: [steps]}: a GC-like pause of one rank (+200 ms in its backward) that its whole
    tensor-parallel group waits for, so every rank of the host shows it in that step.
    """
    rng = random.Random(seed)
    bias = [1 + random.Random(f"{seed}/bias/{h}").gauss(0, host_bias) for h in range(hosts)]
    per_stage = hosts // pp
    out = []
    for s in range(n_steps):
        ts = T0 + timedelta(seconds=(s + 1) * step_s)
        fleet = 1 + rng.gauss(0, 0.01)
        compute: dict[int, dict[str, float]] = {}
        for h in range(hosts):
            host, stage = f"h{h:04d}", h // per_stage
            host_f = ((slow_host or {}).get(host, 1.0) if s >= slow_from else 1.0) * bias[h]
            if intermittent and intermittent[0] == host and s >= slow_from and rng.random() < intermittent[1]:
                host_f *= intermittent[2]
            gpu_f = [(slow_gpu or {}).get((host, g), 1.0) if s >= slow_from else 1.0 for g in range(gpus)]
            group = [1 + rng.gauss(0, jitter) for _ in range(3)]
            for g in range(gpus):
                f = host_f * (max(gpu_f) if tp_coupled else gpu_f[g])
                own = group if tp_coupled else [1 + rng.gauss(0, jitter) for _ in range(3)]
                ph = {}
                for k, (p, base) in enumerate((("forward", 300.0), ("backward", 500.0), ("optimizer", 60.0))):
                    ms = base * fleet * f * own[k] * (1 + rng.gauss(0, 0.003))
                    if pp > 1 and stage == pp - 1 and p != "optimizer":
                        ms *= 1.06
                    elif pp > 1 and stage == 0 and p == "forward":
                        ms *= 1.04
                    if p == "forward" and spikes and rng.random() < spikes:
                        ms *= rng.uniform(1.2, 1.6)
                    if p == "backward" and s in (pauses or {}).get(host, ()):
                        ms += 200.0
                    ph[p] = ms
                compute[h * gpus + g] = ph
        pace: dict[int, float] = {}  # per pipeline (position within its stage)
        for r, ph in compute.items():
            d = (r // gpus) % per_stage
            pace[d] = max(pace.get(d, 0.0), ph["forward"] + ph["backward"])
        slowest = max(pace.values())
        base_comm = 120.0 * fleet * (1 + rng.gauss(0, 0.02))
        for r, ph in compute.items():
            h, d = r // gpus, (r // gpus) % per_stage
            own = ph["forward"] + ph["backward"]
            phases = {"forward": ph["forward"], "backward": ph["backward"]}
            if pp > 1:
                phases["bubble"] = 40.0 + pace[d] - own
                wait = base_comm + slowest - pace[d]
            else:
                wait = base_comm + slowest - own
            if nested_wait:
                phases["backward"] += wait
                phases["backward/allreduce"] = wait
            else:
                phases[comm] = wait
            phases["optimizer"] = ph["optimizer"]
            out.append(StepTiming(job_id=job, host=f"h{h:04d}", rank=r, local_rank=r % gpus,
                                  world_size=hosts * gpus, coords=ParallelCoords(tp=r % gpus, dp=d, pp=h // per_stage),
                                  step=s, step_ms=sum(v for k, v in phases.items() if "/" not in k), phases=phases,
                                  phase_kinds=declare or {}, ts=ts))
    return out


def gpu_heartbeats(job: str, hosts: int, seconds: int, *, gpus: int = 8,
                   throttled: dict[tuple[str, int], str] | None = None, interval: float = 2.0) -> list[Heartbeat]:
    """Heartbeats with NVML-like GPU readings; `throttled` = {(host, gpu): reason}: lower SM clock, hot, less power."""
    from vigil.contract import GpuState

    rng = random.Random(1)
    out = []
    t = 0.0
    while t < seconds:
        for h in range(hosts):
            host = f"h{h:04d}"
            states = []
            for g in range(gpus):
                reason = (throttled or {}).get((host, g))
                states.append(GpuState(
                    index=g, util_pct=97.0, sm_clock_mhz=1830.0 if reason else 1980.0 - abs(rng.gauss(0, 8)),
                    temp_c=89.0 if reason else 63.0, power_w=540.0 if reason else 640.0,
                    throttle_reasons=[reason] if reason else (["sw_power_cap"] if rng.random() < 0.05 else [])))
            out.append(Heartbeat(job_id=job, host=host, ts=T0 + timedelta(seconds=t), interval_s=interval,
                                 processes=[ProcessState(pid=1, status="running")], gpus=states))
        t += interval
    return out

"""The simulation model: pure, seeded generators of a job's telemetry, one training step at a time.

The physics of one synchronous step (data-parallel replicas of pipelines of
tensor-parallel groups; a TP group is one host unless `Layout.tp_size` splits it):

* compute (`forward`, `backward`, `optimizer`) per TP group = base x fleet-wide step
  factor x host bias x stage structure (first stage +4 % forward for the embedding, last
  stage +6 % for the head and loss) x the slowest GPU of the group (its ranks wait for it
  inside every layer) x (1 + jitter); each rank adds 0.3 % timing noise. Rare 15 % spikes
  and GC-like pauses (80-300 ms) hit random groups.
* waiting: a pipeline runs at the pace of its slowest stage, so with pp > 1 every rank
  shows a `bubble` (wait) = a structural share + its pipeline's pace - its own compute;
  the gradient all-reduce (`grad_sync`, comm) ends together everywhere, so each
  rank's `grad_sync` = the collective itself + the slowest pipeline's pace - its own
  pipeline's. The slow rank waits least; the others wait for it.
* every `checkpoint_every` steps a `checkpoint` phase on every rank (traffic low meanwhile);
  every `eval_every` steps an evaluation pause of `eval_s` without steps and with NIC traffic
  at `quiet_level` of normal; `tail_s` after the last step (runner) the job has stopped while
  the agents keep reporting (processes exited, traffic near zero).

The step lasts as long as its slowest rank; every rank reports that step time and the MFU
it implies. Between step ends the node agents report (see nodes.py). Faults (faults.py)
bend these numbers. Everything, including event ids, follows from the seed; timestamps
are simulated time.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from vigil.analyzer.simulator.faults import Fault
from vigil.analyzer.simulator.health import HealthModel
from vigil.analyzer.simulator.layout import Layout
from vigil.analyzer.simulator.nodes import GpuFault, Level, NodeReports, NodeState
from vigil.contract import Event, JobRegistered, LogLine, ProcessExit, StepTiming
from vigil.contract.xid import xid_entry

COMPUTE: dict[str, float] = {"forward": 0.30, "backward": 0.52, "optimizer": 0.06}  # shares of step_ms
COMM_SHARE = 0.12  # the gradient all-reduce itself
BUBBLE_SHARE = 0.04  # structural pipeline bubble (pp > 1)
PHASES = (*COMPUTE, "grad_sync")
PEAK_TFLOPS = 989.0
BASE_MFU = 0.42
FLAP_OTHERS = 0.3  # the job's other NICs during a flap: its collectives stall


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
    eval_every: int = 0  # steps between evaluation pauses (0: none)
    eval_s: float = 30.0
    quiet_level: float = 0.005  # NIC traffic of a paused job, as a fraction of normal
    gc_prob: float = 0.002  # per TP group and step: a GC-like pause
    tail_s: float = 0.0  # after the last step: the job stopped, agents still report (runner)
    digest_every: int = 50  # steps between replica digests on the step records (the timer's default; 0: none)


class Simulation:
    """`registration()` first, then `step(i)` for i = 0, 1, ...; `now` is the simulated clock."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        lay = cfg.layout
        for f in cfg.faults:
            if f.host != "all":
                lay.host_index(f.host)
            for opt in ("gpu", "local_rank"):
                if not 0 <= f.int_option(opt, 0) < lay.gpus_per_host:
                    raise ValueError(f"{f.kind} on {f.host}: {opt}={f.options[opt]} is not one of the host's "
                                     f"{lay.gpus_per_host} GPUs (0 .. {lay.gpus_per_host - 1})")
        self.now = cfg.start
        self.onsets: dict[int, datetime] = {}
        self.step_starts: dict[int, datetime] = {}
        self._rng = random.Random(cfg.seed)
        self._ids = random.Random(f"{cfg.seed}/{cfg.job}/{cfg.start.isoformat()}")
        g = lay.gpus_per_host
        self._bias = [1 + self._rng.gauss(0, 0.005) for _ in range(lay.hosts)]
        self._gpu_bias = [1 + abs(self._rng.gauss(0, 0.003)) for _ in range(lay.world_size)]
        self._coords = [lay.coords(r) for r in range(lay.world_size)]
        self._names = lay.host_names()
        self._groups = [list(range(k, k + lay.tp)) for k in range(0, lay.world_size, lay.tp)]
        self._stage = [self._coords[grp[0]].pp for grp in self._groups]
        self._exited: dict[int, int] = {}  # global rank -> step it restarts at (or -1)
        self._flaps: dict[int, list[tuple[datetime, datetime]]] = {}  # fault index -> down intervals
        self._hung_at: datetime | None = None
        self._silent: frozenset[int] = frozenset()  # hosts silent at the latest step
        self.nodes = NodeReports(job=cfg.job, names=self._names, gpus=g, nics=cfg.nics, start=cfg.start,
                                 heartbeat_s=cfg.heartbeat_s, nic_s=cfg.nic_s, rng=self._rng, new_id=self._id)
        self._health = HealthModel(lay, cfg.seed, cfg.digest_every)  # its own random stream: the timings stay as they were
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

    def _gpu_faults(self, step: int) -> dict[tuple[int, int], GpuFault]:
        return {(self.cfg.layout.host_index(f.host), f.int_option("gpu", 0)):
                GpuFault(slowdown=f.magnitude, reasons=(f.options.get("reason", "hw_slowdown"),))
                for f in self._faults("gpu_straggler", step)}

    # ---- one step -------------------------------------------------------------------------
    def step(self, i: int) -> list[Event]:
        cfg = self.cfg
        t0 = self.now
        self.step_starts[i] = t0
        for k, f in enumerate(cfg.faults):
            if f.active(i) and k not in self.onsets:
                self.onsets[k] = t0
        if self._hung_at is not None or self._faults("hang", i):
            return self._hung(i, t0)
        silent = self.silent_hosts(i)
        self._silent = frozenset(silent)
        per_rank, dur_ms, ckpt = self._phases(i, t0)
        end = t0 + timedelta(milliseconds=dur_ms)
        gpu_faults = self._gpu_faults(i)
        events: list[Event] = self.nodes.between(
            t0, end, period_ms=dur_ms, level=self._level(i, end, ckpt), gpu_faults=gpu_faults,
            state=NodeState(silent=frozenset(silent), exited=frozenset(self._exited)))
        events += self.nodes.benign_log(t0, silent)
        events += self._fault_events(i, t0, silent)
        events += self._step_timings(i, per_rank, dur_ms, end, silent)
        self.now = end
        if cfg.eval_every > 0 and i > 0 and (i + 1) % cfg.eval_every == 0:
            events += self._pause(cfg.eval_s, gpu_faults)
        return events

    def _phases(self, i: int, t0: datetime) -> tuple[list[dict[str, float]], float, bool]:
        """Per-rank phase times of step `i`, the step's duration (ms) and whether it checkpoints."""
        cfg, lay, rng = self.cfg, self.cfg.layout, self._rng
        g = lay.gpus_per_host
        slow: dict[tuple[int, str], float] = {}
        for f in self._faults("straggler", i):
            slow[(lay.host_index(f.host), f.phase)] = 1 + f.magnitude
        for f in self._faults("intermittent", i):
            if rng.random() < f.float_option("fraction", 0.25):
                slow[(lay.host_index(f.host), f.phase)] = 1 + f.magnitude
        gpu_slow = {k: 1 + v.slowdown for k, v in self._gpu_faults(i).items()}
        decay = 1.0
        for f in self._faults("mfu_decay", i):
            decay += f.magnitude * min(1.0, (i - f.start + 1) / f.int_option("ramp", 100))
        ckpt = cfg.checkpoint_every > 0 and i > 0 and i % cfg.checkpoint_every == cfg.checkpoint_every - 1
        fleet = 1 + rng.gauss(0, 0.01)
        last_stage = lay.pp - 1
        per_rank: list[dict[str, float]] = [{} for _ in range(lay.world_size)]
        for gi, ranks in enumerate(self._groups):
            h, stage = ranks[0] // g, self._stage[gi]
            gpu = max(gpu_slow.get((h, r % g), 1.0) * self._gpu_bias[r] for r in ranks)
            pause = rng.uniform(80, 300) if rng.random() < cfg.gc_prob else 0.0
            for p, share in COMPUTE.items():
                ms = cfg.step_ms * share * fleet * self._bias[h] * gpu * (1 + rng.gauss(0, cfg.jitter))
                if lay.pp > 1 and stage == last_stage and p != "optimizer":
                    ms *= 1.06  # the head and the loss
                elif lay.pp > 1 and stage == 0 and p == "forward":
                    ms *= 1.04  # the embedding
                if rng.random() < 0.002:
                    ms *= 1.15
                ms *= slow.get((h, p), 1.0) * (decay if p == "forward" else 1.0)
                if p == "backward":
                    ms += pause
                for r in ranks:
                    per_rank[r][p] = ms * (1 + rng.gauss(0, 0.003))
        # waiting: the pipeline's pace is its slowest stage; the all-reduce ends together everywhere
        pace: dict[int, float] = {}
        for r, ph in enumerate(per_rank):
            d = self._coords[r].dp
            pace[d] = max(pace.get(d, 0.0), ph["forward"] + ph["backward"])
        slowest = max(pace.values())
        bubble = cfg.step_ms * BUBBLE_SHARE * fleet if lay.pp > 1 else 0.0
        comm = cfg.step_ms * COMM_SHARE * fleet * (1 + rng.gauss(0, 0.02))
        comm += self._flap_stall_ms(t0, t0 + timedelta(milliseconds=cfg.step_ms * 1.2))
        opt = 0.0
        for r, ph in enumerate(per_rank):
            d = self._coords[r].dp
            own = ph["forward"] + ph["backward"]
            if lay.pp > 1:
                ph["bubble"] = bubble + pace[d] - own
                ph["grad_sync"] = comm + slowest - pace[d]
            else:
                ph["grad_sync"] = comm + slowest - own
            ph["optimizer"] = ph.pop("optimizer")  # recorded in execution order
            opt = max(opt, ph["optimizer"])
            if ckpt:
                ph["checkpoint"] = cfg.checkpoint_ms * (1 + rng.gauss(0, 0.02))
        dur = slowest + bubble + comm + opt + (cfg.checkpoint_ms if ckpt else 0.0)
        return per_rank, dur, ckpt

    def _step_timings(self, i: int, per_rank: list[dict[str, float]], dur_ms: float, end: datetime,
                      silent: set[int]) -> list[Event]:
        cfg, lay = self.cfg, self.cfg.layout
        g = lay.gpus_per_host
        mfu = self.flops / (dur_ms / 1000) / lay.world_size / (PEAK_TFLOPS * 1e12)
        tokens = 4 * 1024 * 1024 // lay.world_size
        out: list[Event] = []
        health = self._health.signals(i, cfg.faults)
        for r, phases in enumerate(per_rank):
            h = r // g
            if h in silent or r in self._exited:
                continue
            out.append(StepTiming.model_construct(
                event_id=self._id(), job_id=cfg.job, host=self._names[h], rank=r, local_rank=r % g,
                ts=end + timedelta(microseconds=r % 997), world_size=lay.world_size, coords=self._coords[r], step=i,
                step_ms=round(dur_ms, 3), phases={p: round(ms, 3) for p, ms in phases.items()}, phase_kinds={},
                tokens=tokens, samples=None, tflops=round(mfu * PEAK_TFLOPS, 2), mfu=round(mfu, 5), failed=False,
                dropped=0, kind="step", schema_version=1, **health[r]))
        return out

    # ---- traffic levels, flaps, pauses, hangs ---------------------------------------------------
    def _level(self, i: int, end: datetime, ckpt: bool) -> Level:
        lay = self.cfg.layout
        fixed: dict[tuple[int, str], float] = {}
        for f in self._faults("nic_drop", i):
            fixed[(lay.host_index(f.host), f.nic)] = 1 - f.magnitude
        for f in self._faults("traffic_stop", i):
            fixed[(lay.host_index(f.host), f.nic)] = 0.0
        flaps = [(lay.host_index(f.host), f.nic, self._flap_intervals(k))
                 for k, f in enumerate(self.cfg.faults) if f.kind == "nic_flap" and f.active(i)]
        ckpt_from = end - timedelta(milliseconds=self.cfg.checkpoint_ms) if ckpt else None
        quiet = self.cfg.quiet_level * 2

        def level(h: int, dev: str, ts: datetime) -> float:
            x = fixed.get((h, dev), 1.0)
            for fh, fdev, downs in flaps:
                if any(a <= ts < b for a, b in downs):
                    x *= 0.0 if (fh, fdev) == (h, dev) else FLAP_OTHERS
            if ckpt_from is not None and ts >= ckpt_from:
                x *= quiet
            return x

        return level

    def _flap_intervals(self, k: int) -> list[tuple[datetime, datetime]]:
        """Down intervals of flap fault `k` from its onset on (seeded apart from the main stream)."""
        if k not in self._flaps:
            f = self.cfg.faults[k]
            onset = self.onsets.get(k, self.now)
            rng = random.Random(f"{self.cfg.seed}/flap/{k}")
            down, period = f.float_option("down", 3.0), f.float_option("period", 20.0)
            out, t = [], onset + timedelta(seconds=rng.uniform(0, 2))
            for _ in range(2000):
                length = down * rng.uniform(0.8, 1.2)
                out.append((t, t + timedelta(seconds=length)))
                t += timedelta(seconds=period * rng.uniform(0.85, 1.15))
            self._flaps[k] = out
        return self._flaps[k]

    def _flap_stall_ms(self, a: datetime, b: datetime) -> float:
        total = 0.0
        for k, f in enumerate(self.cfg.faults):
            if f.kind != "nic_flap" or k not in self.onsets:
                continue
            for lo, hi in self._flap_intervals(k):
                if lo >= b:
                    break
                total += max(0.0, (min(hi, b) - max(lo, a)).total_seconds() * 1000)
        return total

    def _pause(self, seconds: float, gpu_faults: dict[tuple[int, int], GpuFault]) -> list[Event]:
        """An evaluation pause: no training steps, NIC traffic at `quiet_level`, GPUs still busy."""
        t0, end = self.now, self.now + timedelta(seconds=seconds)
        q = self.cfg.quiet_level
        events = self.nodes.between(t0, end, period_ms=0, level=lambda h, d, ts: q, gpu_faults=gpu_faults,
                                    state=NodeState(gpu_util=60.0, exited=frozenset(self._exited)))
        self.now = end
        return events

    def tail(self, seconds: float) -> list[Event]:
        """After the last step: training has stopped, the agents keep reporting (exited, traffic near zero)."""
        t0, end = self.now, self.now + timedelta(seconds=seconds)
        events = self.nodes.between(t0, end, period_ms=0, level=lambda h, d, ts: 0.0002, gpu_faults={},
                                    state=NodeState(running=False, silent=self._silent))
        self.now = end
        return events

    def _hung(self, i: int, t0: datetime) -> list[Event]:
        """A hang: the culprit host stops first, the others block in a collective `lag` s later; no steps."""
        lay, q = self.cfg.layout, self.cfg.quiet_level
        f = next(f for f in self.cfg.faults if f.kind == "hang" and f.start <= i)
        culprit = lay.host_index(f.host)
        if self._hung_at is None:
            self._hung_at = t0 + timedelta(milliseconds=0.3 * self.cfg.step_ms)
        stop, block = self._hung_at, self._hung_at + timedelta(seconds=f.float_option("lag", 3.0))

        def level(h: int, dev: str, ts: datetime) -> float:
            if ts < stop:
                return 1.0
            return 0.0 if h == culprit else (1.0 if ts < block else q)

        end = t0 + timedelta(milliseconds=self.cfg.step_ms)
        events = self.nodes.between(t0, end, period_ms=self.cfg.step_ms, level=level, gpu_faults=self._gpu_faults(i),
                                    state=NodeState(gpu_util=100.0, exited=frozenset(self._exited)))
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
                    severity=xid_entry(code).severity, xid=code, source="kernel", action=xid_entry(code).action,
                    gpu_index=rank % lay.gpus_per_host,
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

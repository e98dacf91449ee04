"""Fault specs: `KIND:host=NAME[,start=STEP][,magnitude=X][,duration=STEPS][,...]`.

Kinds and what they do (defaults in brackets):

    straggler       one phase of every GPU on the host slower by magnitude [0.08] (phase=[forward])
    intermittent    the host's phase slower by magnitude [0.2] on a random fraction [0.25] of its steps
    gpu_straggler   one GPU (gpu=[0]) thermally throttled: its compute slower by magnitude [0.08], its SM
                    clock down and `reason` [hw_slowdown] in its throttle reasons; with tp = GPUs per
                    host its whole tensor-parallel group (the host) waits for it inside every layer
    nic_drop        one NIC's traffic lower by magnitude [0.7] (nic=[mlx5_0])
    traffic_stop    one NIC's traffic zero while training runs (nic=[mlx5_0])
    nic_flap        one NIC (nic=[mlx5_0]) down for `down` [3] s every `period` [20] s; the job's
                    collectives stall meanwhile (every step in a flap lasts that much longer)
    hang            the host stops (its NICs fall silent, its ranks stop); `lag` [3] s later every other
                    rank blocks in a collective: the whole job hangs, traffic low everywhere
    mfu_decay       forward time of every host grows linearly to +magnitude [0.3] over ramp=[100] steps
                    (job-wide, like the MegaScale MFU decline; host= may be omitted or `all`)
    heartbeat_loss  the host goes silent: no heartbeat, NIC, step or log events
    xid             a GPU Xid error (xid=[79]) logged by local_rank=[0], repeated a few times
    grad_drift      one rank's (local_rank=[0]) local grad norm grows by magnitude [0.02] a step (health.py):
                    slow drift (0.005 takes ~40 steps to stand out)
    grad_spike      one rank's (local_rank=[0]) local grad norm x (1 + magnitude [1.0]) for `duration` [5]
                    steps, then back: spike and recover
    nan             one rank's (local_rank=[0]) gradients non-finite at `start`; every rank's for `duration` - 1 after
    loss_spike      the job's loss jumps by magnitude [1.0] (relative) and recovers over `duration` [10] steps
                    (job-wide: host= may be omitted or `all`)
    sdc             one rank's (local_rank=[0]) parameters corrupted at `start` (a flipped bit): its replica
                    digest differs from its replicas' at every digest step from then on (health.py)
    sdc_transient   the same, diverging at the first digest step at or after `start` only (a rollback and
                    replay of the suspect step restored it)
    process_exit    the training process of local_rank=[0] exits (exit_code=[1]); it restarts after
                    `duration` steps when given

Each fault names the alert it should raise (`expected`), which is what `--json`
reports as ground truth.
"""

from __future__ import annotations

from dataclasses import dataclass, field

KINDS = ("straggler", "intermittent", "gpu_straggler", "nic_drop", "traffic_stop", "nic_flap", "hang", "mfu_decay",
         "heartbeat_loss", "xid", "process_exit", "grad_drift", "grad_spike", "nan", "loss_spike", "sdc", "sdc_transient")
JOB_WIDE = ("mfu_decay", "loss_spike")
_DEFAULT_MAGNITUDE = {"straggler": 0.08, "intermittent": 0.2, "gpu_straggler": 0.08, "nic_drop": 0.7,
                      "traffic_stop": 1.0, "mfu_decay": 0.3, "grad_drift": 0.02, "grad_spike": 1.0, "loss_spike": 1.0}
_EXTRA = {"phase", "nic", "ramp", "xid", "local_rank", "exit_code", "gpu", "reason", "fraction", "down", "period", "lag"}
_INTS = ("ramp", "xid", "local_rank", "exit_code", "gpu")
_FLOATS = ("fraction", "down", "period", "lag")


@dataclass(frozen=True, kw_only=True)
class Fault:
    kind: str
    host: str  # "all" for job-wide faults
    start: int = 100
    magnitude: float = 0.0
    duration: int | None = None
    options: dict[str, str] = field(default_factory=dict)

    def active(self, step: int) -> bool:
        return step >= self.start and (self.duration is None or step < self.start + self.duration)

    @property
    def phase(self) -> str:
        return self.options.get("phase", "forward")

    @property
    def nic(self) -> str:
        return self.options.get("nic", "mlx5_0")

    def int_option(self, name: str, default: int) -> int:
        return int(self.options.get(name, default))

    def float_option(self, name: str, default: float) -> float:
        return float(self.options.get(name, default))

    def expected(self, job: str, gpus_per_host: int, host_index: int) -> tuple[str, str]:
        """(alert, subject) this fault should raise."""
        if self.kind in ("straggler", "intermittent"):
            return "straggler", f"{self.host}/{self.phase}"
        if self.kind == "gpu_straggler":
            return "straggler", f"{self.host}/gpu{self.int_option('gpu', 0)}"
        if self.kind in ("nic_drop", "traffic_stop"):
            return "traffic_stall", f"{self.host}/{self.nic}"
        if self.kind == "nic_flap":
            return "traffic_stall", f"{self.host}/{self.nic}"
        if self.kind == "hang":
            return "traffic_stall", "job"  # one job-level event, naming this host as the suspect
        if self.kind == "mfu_decay":
            return "mfu_drift", "job"
        if self.kind == "heartbeat_loss":
            return "heartbeat_loss", self.host
        if self.kind in ("sdc", "sdc_transient"):
            return "replica_mismatch", f"{self.host}/rank{host_index * gpus_per_host + self.int_option('local_rank', 0)}"
        if self.kind in ("grad_drift", "grad_spike"):
            return "numeric_fault", f"{self.host}/rank{host_index * gpus_per_host + self.int_option('local_rank', 0)}"
        if self.kind == "nan":
            return "numeric_fault", "nonfinite"
        if self.kind == "loss_spike":
            return "numeric_fault", "loss"
        if self.kind == "xid":
            return "error_log", f"{self.host}/xid"
        rank = host_index * gpus_per_host + self.int_option("local_rank", 0)
        return "process_exit", f"{self.host}/rank{rank}"


def parse_fault(spec: str) -> Fault:
    """Parse one `--fault` value; ValueError naming what is wrong."""
    kind, sep, rest = spec.partition(":")
    kind = kind.strip()
    if kind not in KINDS:
        raise ValueError(f"--fault {spec!r}: unknown kind {kind!r}; kinds: {', '.join(KINDS)}")
    params: dict[str, str] = {}
    for part in rest.split(",") if sep and rest.strip() else []:
        key, eq, value = part.partition("=")
        if not eq or not key.strip() or not value.strip():
            raise ValueError(f"--fault {spec!r}: expected key=value, got {part!r}")
        params[key.strip()] = value.strip()
    host = params.pop("host", "all" if kind in JOB_WIDE else "")
    if not host:
        raise ValueError(f"--fault {spec!r}: host=NAME is required for {kind}")
    if host == "all" and kind not in JOB_WIDE:
        raise ValueError(f"--fault {spec!r}: {kind} needs one host, not 'all'")
    try:
        start = int(params.pop("start", "100"))
        magnitude = float(params.pop("magnitude", str(_DEFAULT_MAGNITUDE.get(kind, 0.0))))
        duration = int(params["duration"]) if "duration" in params else None
        params.pop("duration", None)
        for k in _INTS:
            if k in params:
                int(params[k])
        for k in _FLOATS:
            if k in params and float(params[k]) <= 0:
                raise ValueError
    except ValueError:
        raise ValueError(f"--fault {spec!r}: start, duration, {', '.join(_INTS)} are integers, magnitude a number "
                         f"and {', '.join(_FLOATS)} positive numbers") from None
    unknown = set(params) - _EXTRA
    if unknown:
        raise ValueError(f"--fault {spec!r}: unknown option(s) {', '.join(sorted(unknown))}")
    if start < 0 or (duration is not None and duration < 1):
        raise ValueError(f"--fault {spec!r}: start must be >= 0 and duration >= 1")
    if kind in ("straggler", "intermittent", "gpu_straggler", "mfu_decay", "grad_drift", "grad_spike",
                "loss_spike") and magnitude <= 0:
        raise ValueError(f"--fault {spec!r}: magnitude must be > 0")
    if kind == "nic_drop" and not 0 < magnitude <= 1:
        raise ValueError(f"--fault {spec!r}: nic_drop magnitude is the fraction lost, in (0, 1]")
    if kind == "intermittent" and not 0 < float(params.get("fraction", 0.25)) < 1:
        raise ValueError(f"--fault {spec!r}: intermittent fraction is in (0, 1)")
    return Fault(kind=kind, host=host, start=start, magnitude=magnitude, duration=duration, options=params)

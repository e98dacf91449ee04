"""Facts observed on the nodes: step timings, heartbeats, NIC counters, logs, exits, traces.

These are what the timer and the node agent produce and what the analyzer ingests.
Durations are milliseconds, byte counters are bytes (RDMA's 4-byte units are
converted at the source), rates are per second.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from vigil.contract.base import (
    FLOAT_MAX,
    I32,
    MODEL_CONFIG,
    U32,
    U64,
    Event,
    Name,
    NonNegFloat,
    RankScoped,
    Text,
    UtcDatetime,
)
from vigil.contract.phases import PhaseKind
from vigil.contract.severity import Severity
from vigil.contract.xid import LogSource, XidAction

__all__ = ["Severity"]  # re-exported: the scale lives in vigil.contract.severity


class ParallelCoords(BaseModel):
    """A rank's place in the 3D-parallel layout."""

    model_config = MODEL_CONFIG

    dp: U32 = 0
    tp: U32 = 0
    pp: U32 = 0


class StepTiming(RankScoped):
    """One training step of one rank, with per-phase durations from the step timer."""

    kind: Literal["step"] = "step"
    schema_version: Literal[1] = 1
    world_size: U32 = Field(ge=1)
    coords: ParallelCoords = ParallelCoords()
    step: U64
    step_ms: NonNegFloat
    phases: dict[Name, NonNegFloat] = Field(default_factory=dict)
    phase_kinds: dict[Name, PhaseKind] = Field(
        default_factory=dict, description="kinds the producer declared (compute/comm/wait); others default by name")
    tokens: U64 | None = None
    samples: U64 | None = None
    tflops: float | None = Field(default=None, ge=0)
    mfu: float | None = Field(default=None, ge=0, le=1.5)
    failed: bool = False
    dropped: U32 = Field(default=0, description="records the timer dropped since the last one")
    loss: float | None = Field(default=None, ge=-FLOAT_MAX, le=FLOAT_MAX, allow_inf_nan=False,
                               description="the step's loss on this rank (null when not reported or not finite)")
    grad_norm: NonNegFloat | None = Field(
        default=None, le=FLOAT_MAX, description="this rank's local gradient L2 norm, before the all-reduce")
    nonfinite: U32 | None = Field(default=None, description="non-finite values this rank saw in its loss and gradients")
    update_ratio: NonNegFloat | None = Field(
        default=None, le=FLOAT_MAX, description="||dθ||/||θ|| of this rank's parameters over the step")
    digest: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1, description="order-sensitive 64-bit digest "
                               "of this rank's parameter shard after the step (vigil.timer.digest); every N steps")


class GpuState(BaseModel):
    """NVML readings for one GPU; absent fields were not available."""

    model_config = MODEL_CONFIG

    index: U32
    name: Text = ""
    uuid: Text = ""
    util_pct: float | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    throttle_reasons: list[Text] = Field(default_factory=list, max_length=64)
    ecc_uncorrected: U64 | None = None
    retired_pages: U64 | None = None


class ProcessState(BaseModel):
    """A training process the agent tracks."""

    model_config = MODEL_CONFIG

    pid: U32
    status: Text
    local_rank: U32 | None = None
    cpu_pct: float | None = None
    rss_mib: float | None = None


class Heartbeat(Event):
    """The node agent's periodic liveness and state report."""

    kind: Literal["heartbeat"] = "heartbeat"
    schema_version: Literal[1] = 1
    ip: Text = ""
    pod: Text = ""
    node: Text = ""
    agent_version: Text = ""
    uptime_s: NonNegFloat = 0
    interval_s: float = Field(default=2, gt=0)
    processes: list[ProcessState] = Field(default_factory=list)
    gpus: list[GpuState] = Field(default_factory=list)
    dropped_events: U64 = 0
    spooled_events: U64 = 0


class NicCounters(Event):
    """Throughput of one NIC port over the last sampling interval."""

    kind: Literal["nic"] = "nic"
    schema_version: Literal[1] = 1
    device: Name
    port: U32 = 1
    link: Literal["rdma", "ethernet"]
    tx_bytes: U64 = Field(description="cumulative")
    rx_bytes: U64 = Field(description="cumulative")
    tx_bps: NonNegFloat = Field(description="bytes per second over interval_s")
    rx_bps: NonNegFloat
    interval_s: float = Field(gt=0)
    extra: dict[Name, U64] = Field(default_factory=dict, description="hw_counters when present")


class LogLine(Event):
    """A classified line (or a summary of a rate-limited flood): a training process's stdout/stderr, or a record
    of the host's kernel log (`source` kernel). `source` says who made the claim: only a `kernel`, `nvml` or
    `sysfs` fact may decide (`vigil.contract.xid.decides`); a `process` line is what the training code printed.
    `action` is the Xid catalog's action for an Xid the hardware reported (and the source's own for other
    kernel facts); `gpu_index`/`gpu_uuid` the GPU its PCI address names, `pid` the process the record names."""

    kind: Literal["log"] = "log"
    schema_version: Literal[1] = 1
    rank: U32 | None = None
    local_rank: U32 | None = None
    stream: Literal["stdout", "stderr"] = "stderr"
    category: Name
    severity: Severity
    message: str = Field(max_length=8192)
    xid: I32 | None = None
    repeats: U32 = Field(default=1, ge=1, description=">1 when this line summarises a flood")
    source: LogSource = Field(default="process", description="kernel, nvml, sysfs: the hardware's own report; "
                              "process: a training process's output (a claim)")
    action: XidAction | None = Field(default=None, description="what the fact calls for (the Xid catalog's action)")
    gpu_index: U32 | None = None
    gpu_uuid: Text = ""
    pci: Text = Field(default="", description="the PCI address the record names")
    pid: U32 | None = Field(default=None, description="the process the record names (OOM-killer, Xid pid=)")
    signature: str = Field(default="", max_length=512, description="a kernel/nvml/sysfs fact's attestation by its "
                           "host's agent key (vigil.signing): without it the line is a claim like any process output")


class ProcessExit(Event):
    """A process ended: one per training rank with that rank's own last error, or the launcher itself.

    `ts` is when the agent saw the process gone; `failed_at` when the rank's own fatal error
    (its last traceback or error line) was printed, which orders a cascade of failures better
    than exit times do (a rank that raised first may tear down last). `launcher` marks the
    launched command itself (torchrun): not a rank; its summary names its first failing rank.
    """

    kind: Literal["exit"] = "exit"
    schema_version: Literal[1] = 1
    rank: U32 | None = None
    local_rank: U32 | None = None
    pid: U32
    exit_code: I32 | None = None
    signal: str | None = None
    summary: str = Field(default="", max_length=8192)
    traceback: str = Field(default="", max_length=65536)
    failed_at: UtcDatetime | None = Field(default=None, description="when its own fatal error was printed")
    launcher: bool = Field(default=False, description="the launcher (torchrun) itself, not a training rank")


class CollectiveEntry(BaseModel):
    """One PyTorch Flight Recorder entry."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)

    record_id: int
    pg_id: int | str
    collective_seq_id: int = 0
    p2p_seq_id: int = 0
    profiling_name: str = ""
    state: str = ""
    retired: bool = False
    time_created_ns: int = 0
    timeout_ms: int | None = None
    input_sizes: list[list[int]] = Field(default_factory=list)


class CollectiveTrace(RankScoped):
    """A Flight Recorder dump of one rank: what it was doing when a collective hung.

    `group_ranks` (process group name -> global ranks) comes from the rank itself, written
    beside the dump by the step timer's hang watchdog: gloo's own `pg_config` is empty.
    """

    kind: Literal["collective"] = "collective"
    schema_version: Literal[1] = 1
    process_groups: dict[str, str] = Field(default_factory=dict, description="process group name -> description")
    entries: list[CollectiveEntry] = Field(default_factory=list)
    last_started_seq: dict[str, int] = Field(default_factory=dict)
    last_completed_seq: dict[str, int] = Field(default_factory=dict)
    dumped_at: UtcDatetime | None = None
    group_ranks: dict[str, list[int]] = Field(default_factory=dict, description="process group name -> global ranks")
    trigger: str = Field(default="", max_length=64, description="watchdog (the timer's hang watchdog), else unknown")
    step: U64 | None = Field(default=None, description="the last step the rank completed")
    stack: str = Field(default="", max_length=8192, description="where the rank's training thread was")

"""Recovery control: commands to node agents, and what agents and diagnostics report back.

The recovery controller drives the node agents of the jobs it controls with `command`
events on the `commands` topic (one per target host, keyed by it). Agents say who they
are and what they run with `member` events, acknowledge each command with `recovery`
events (same `command_id`), and ship the results of the diagnostics they ran as
`diagnostic` events; the controller publishes each host's verdict as a `diagnostic` of
test `verdict`, and how one incident's recovery went as an `outcome`. Everything the
controller decides is rebuilt from these events after a crash.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from vigil.contract.base import I32, MODEL_CONFIG, U32, U64, Event, Name, NonNegFloat, UtcDatetime, ValidFor
from vigil.contract.xid import XidAction

MemberState = Literal["waiting", "starting", "training", "stopping", "exited", "diagnosing", "cordoned", "left"]
Verdict = Literal["healthy", "slow", "faulty"]
HardwareFault = Literal["xid", "ecc", "nvlink", "gpu_lost"]
"""The log categories that are a hardware fault of the host that printed them (an explicit error, not a symptom)."""
HARDWARE_FAULTS: frozenset[str] = frozenset(get_args(HardwareFault))


class World(BaseModel):
    """One rendezvous of a job: which hosts train together, and this host's place in it."""

    model_config = MODEL_CONFIG

    generation: U32 = Field(ge=1, description="the job's rendezvous number; every restart takes a new one")
    hosts: list[Name] = Field(min_length=1, description="the hosts in node-rank order")
    node_rank: U32 = Field(ge=0)
    master_addr: Name
    master_port: U32 = Field(ge=1, le=65535)
    quarantined_gpus: list[Annotated[int, Field(ge=0, lt=64)]] = Field(
        default_factory=list, max_length=64,
        description="this host's GPU indices its ranks must not use (the node backend's GPU quarantine)")
    restore_max_step: U64 | None = Field(
        default=None, ge=0, description="restore no snapshot or checkpoint newer than this step: a rollback to before "
        "a silent data corruption (the ranks pick the newest one at or below it)")

    @property
    def nnodes(self) -> int:
        return len(self.hosts)

    @model_validator(mode="after")
    def _rank_in_range(self) -> World:
        if self.node_rank >= len(self.hosts):
            raise ValueError(f"node_rank {self.node_rank} is outside the {len(self.hosts)} hosts")
        return self


class Check(StrEnum):
    """A node diagnostic the agent's installed `vigil.recovery.diagnostics` can run."""

    GEMM = "gemm"
    ALLTOALL = "alltoall"
    ALLREDUCE = "allreduce"


Address = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,254}$")]


class DiagnoseParams(BaseModel):
    """What a `diagnose` command asks for: typed parameters, never a program. The agent turns them
    into the argv of its own installed diagnostics (`collector.control.diagnose.diagnostics_argv`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    checks: list[Check] = Field(default_factory=lambda: list(Check), min_length=1, max_length=len(Check))
    round: int = Field(default=1, ge=1, le=1000)
    group: list[Address] = Field(min_length=1, max_length=1024, description="the hosts tested together, rank order")
    rank: int = Field(ge=0, description="this host's index in `group`")
    master_addr: Address
    master_port: int = Field(ge=1, le=65535)
    check_timeout_s: float = Field(default=60.0, gt=0, le=3600, description="time limit of each check")
    gemm_size: int = Field(default=384, ge=1, le=65536)
    gemm_iters: int = Field(default=100, ge=1, le=100_000)
    alltoall_procs: int = Field(default=2, ge=1, le=64)
    allreduce_mb: float = Field(default=1.0, gt=0, le=4096)
    allreduce_iters: int = Field(default=5, ge=1, le=10_000)

    @model_validator(mode="after")
    def _rank_in_group(self) -> DiagnoseParams:
        if self.rank >= len(self.group):
            raise ValueError(f"rank {self.rank} is outside the group of {len(self.group)}")
        return self


class Command(Event):
    """The controller asks one node agent (`host`) of job `job_id` to act.

    `start`: launch the training command as `world.node_rank` of `world.hosts` (the agent
    fills torchrun's `--nnodes/--node-rank/--master-addr/--master-port`); `stop`: stop the
    training processes of any generation up to `generation`; `diagnose`: run the agent's own
    diagnostics with the typed `diagnose` parameters and `timeout_s` and ship the `diagnostic`
    events they print; `dump`: record the training processes' state; `finish`: the job is over
    (its command exited 0 on every host of its world), the agent exits 0. An agent executes a
    `command_id` at most once, ignores commands older than itself, and acts only on commands
    signed by the controller (`signature`) of a lease `epoch` no older than the newest it obeyed.
    `argv` and `env` are no longer accepted (a command never carries a program): they must be empty.
    """

    kind: Literal["command"] = "command"
    schema_version: Literal[1] = 1
    command_id: Name = Field(description="stable: the same decision always gets the same id")
    action: Literal["start", "stop", "diagnose", "dump", "finish"]
    incident_id: str = Field(default="", max_length=256)
    reason: str = Field(default="", max_length=2048)
    generation: U32 = Field(default=0, ge=0, description="start: the new generation; stop: up to this one")
    world: World | None = None
    diagnose: DiagnoseParams | None = None
    argv: list[str] = Field(default_factory=list, max_length=0, description="refused: see `diagnose`")
    env: dict[str, str] = Field(default_factory=dict, max_length=0, description="refused: see `diagnose`")
    timeout_s: float = Field(default=60.0, gt=0)
    epoch: U64 = Field(default=0, ge=0, description="the lease epoch of the controller that sent it (fencing)")
    valid_s: ValidFor | None = Field(default=None, description="seconds after `ts` it is valid for, signed "
                                     "(vigil.signing.freshness stamps it; None: its kind's lifetime)")
    signature: str = Field(default="", max_length=512, description="<role>/<key id>/<base64 Ed25519>: vigil.signing")

    @model_validator(mode="after")
    def _complete(self) -> Command:
        if self.action == "start" and (self.world is None or self.world.generation != self.generation):
            raise ValueError("a start command carries its world, of the same generation")
        if self.action == "diagnose" and self.diagnose is None:
            raise ValueError("a diagnose command carries its diagnose parameters")
        return self


class RefusedCopy(StrEnum):
    """Why a snapshot copy was not taken (`collector.control.replicas` refuses, `SnapshotReplication` counts)."""

    MALFORMED = "malformed"  # no usable marker, or it does not match its directory
    TOO_LARGE = "too_large"  # state.pt above max_rank_bytes
    HOST_FULL = "host_full"  # the host's peer copies would exceed max_host_bytes
    DIGEST = "digest"  # the bytes do not hash to the marker's sha256
    IO = "io"  # reading or writing failed


class SnapshotReplication(BaseModel):
    """A node agent's buddy replication of its ranks' in-memory snapshots, counted since the agent started
    (`collector.control.replication`): copies pushed to the buddy and staged from peers before a start, their bytes,
    the copies refused by reason, and the newest step of its ranks the buddy holds."""

    model_config = MODEL_CONFIG

    buddy: Name | None = Field(default=None, description="the host its ranks' snapshots go to; None: one host")
    pushed: U64 = 0
    staged: U64 = 0
    pushed_bytes: U64 = 0
    staged_bytes: U64 = 0
    refused: dict[RefusedCopy, U64] = Field(default_factory=dict, description="copies refused, by reason")
    last_step: U64 | None = Field(default=None, description="the newest step pushed to the buddy")


class Member(Event):
    """A node agent of a recovery-controlled job: who it is, what it runs, how far training got.

    Sent on every change of state and every few seconds as a keep-alive. `ports` are free
    ports on this host the controller may use for a rendezvous hosted here. Progress fields
    count the steps this host's ranks reported in the current `generation`.
    """

    kind: Literal["member"] = "member"
    schema_version: Literal[1] = 1
    state: MemberState
    since: UtcDatetime | None = Field(default=None, description="when it entered this state")
    generation: U32 = Field(default=0, ge=0)
    node_rank: U32 | None = Field(default=None, ge=0)
    nodes_min: U32 = Field(default=1, ge=1)
    nodes_max: U32 = Field(default=1, ge=1)
    node_multiple: U32 = Field(default=1, ge=1)
    spare: bool = Field(default=False, description="join only to replace a host")
    ip: str = ""
    ports: list[int] = Field(default_factory=list)
    started_at: UtcDatetime | None = Field(default=None, description="when this generation was launched here")
    exit_code: I32 | None = None
    signal: str | None = None
    first_step: U64 | None = Field(default=None, ge=0, description="first step of this generation")
    first_step_at: UtcDatetime | None = None
    last_step: U64 | None = Field(default=None, ge=0)
    last_step_at: UtcDatetime | None = None
    steps: U64 = Field(default=0, ge=0, description="steps seen in this generation (of the lowest local rank)")
    step_ms: NonNegFloat | None = Field(default=None, ge=0, description="median step time of the recent steps")
    command_id: str = Field(default="", max_length=256, description="the command that caused this state")
    reason: str = Field(default="", max_length=2048)
    replication: SnapshotReplication | None = Field(default=None, description="its snapshot replication, when it replicates")
    fault: HardwareFault | None = Field(default=None, description="exited: the hardware fault of this generation "
                                        "the agent read from the kernel log or NVML (never a line its ranks "
                                        "printed), what `reason` quotes; attested, its host is the failure's "
                                        "strong culprit")
    fault_gpus: list[Annotated[int, Field(ge=0, lt=64)]] = Field(
        default_factory=list, max_length=64, description="the GPU indices the fault's kernel/NVML record named")
    fault_action: XidAction | None = Field(default=None, description="the Xid catalog's action for the fault")
    signature: str = Field(default="", max_length=512, description="<role>/<key id>/<base64 Ed25519>: the "
                           "agent's attestation (vigil.signing); empty: an unattested fact")

    @model_validator(mode="after")
    def _range(self) -> Member:
        if self.nodes_min > self.nodes_max:
            raise ValueError(f"nodes_min {self.nodes_min} > nodes_max {self.nodes_max}")
        return self


class Diagnostic(Event):
    """One diagnostic result of `host`: a test it ran (gemm, alltoall, allreduce, check: the
    whole round) or, from the controller, its `verdict` with the numbers behind it."""

    kind: Literal["diagnostic"] = "diagnostic"
    schema_version: Literal[1] = 1
    incident_id: str = Field(default="", max_length=256)
    command_id: str = Field(default="", max_length=256)
    round: U32 = Field(default=1, ge=1)
    test: Literal["gemm", "alltoall", "allreduce", "check", "verdict"]
    group: list[Name] = Field(default_factory=list, description="the hosts tested together")
    ok: bool = True
    verdict: Verdict | None = None
    values: dict[str, float] = Field(default_factory=dict)
    error: str = Field(default="", max_length=4096)
    valid_s: ValidFor | None = Field(default=None, description="seconds after `ts` it is valid for, signed "
                                     "(vigil.signing.freshness stamps it; None: its kind's lifetime)")
    signature: str = Field(default="", max_length=512, description="<role>/<key id>/<base64 Ed25519>: vigil.signing")


class Outcome(Event):
    """How the recovery of one incident went, with where its time went (seconds) and what it cost."""

    kind: Literal["outcome"] = "outcome"
    schema_version: Literal[1] = 1
    incident_id: Name
    result: Literal["resumed", "paged", "halted", "dry_run", "failed", "relaunched"]
    category: str = ""
    cause: str = ""
    first_sign: UtcDatetime | None = None
    detected: UtcDatetime | None = None
    resumed_at: UtcDatetime | None = Field(default=None, description="the first step after the restart")
    detect_s: NonNegFloat | None = Field(default=None, ge=0, description="first sign -> incident published")
    decide_s: NonNegFloat | None = Field(default=None, ge=0, description="incident published -> controller acted")
    pause_s: NonNegFloat | None = Field(default=None, ge=0)
    diagnose_s: NonNegFloat | None = Field(default=None, ge=0)
    restart_s: NonNegFloat | None = Field(default=None, ge=0, description="start commands -> first step, load included")
    checkpoint_load_s: NonNegFloat | None = Field(default=None, ge=0)
    total_s: NonNegFloat | None = Field(default=None, ge=0, description="first sign -> first step after the restart")
    checkpoint_step: U64 | None = Field(default=None, ge=0, description="the checkpoint training resumed from")
    restore_source: Literal["", "memory", "peer", "persisted"] = Field(
        default="", description="where that state came from: an in-memory snapshot, a buddy's copy, storage")
    last_step: U64 | None = Field(default=None, ge=0, description="the last step before the fault")
    steps_lost: U64 | None = Field(default=None, ge=0)
    first_step: U64 | None = Field(default=None, ge=0)
    generation: U32 | None = Field(default=None, ge=0)
    cordoned: list[Name] = Field(default_factory=list)
    hosts: list[Name] = Field(default_factory=list, description="the hosts training resumed on")
    reason: str = Field(default="", max_length=2048)
    valid_s: ValidFor | None = Field(default=None, description="seconds after `ts` it is valid for, signed "
                                     "(vigil.signing.freshness stamps it; None: its kind's lifetime)")
    signature: str = Field(default="", max_length=512, description="<role>/<key id>/<base64 Ed25519>: the "
                           "controller's (vigil.signing); a case ends only by the controller's signed outcome")

"""Jobs and decisions: topology registration, alerts, incidents, silences, recovery actions, checkpoints.

The analyzer publishes alerts and incidents (alerts that share a cause, with the culprit
named), people publish silences (`vigil silence add`: mute notifications that match, for a
while, with a reason), the recovery controller publishes its actions and the checkpoints it
relies on; each is an event like any fact, so history replays.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, Field, model_validator

from vigil.contract.base import MODEL_CONFIG, U32, U64, Event, Name, NonNegFloat, UtcDatetime, ValidFor
from vigil.contract.phases import PhaseKind
from vigil.contract.telemetry import ParallelCoords, Severity


class RankPlacement(BaseModel):
    """Where one global rank runs and its 3D-parallel coordinates."""

    model_config = MODEL_CONFIG

    rank: U32 = Field(ge=0)
    host: Name
    local_rank: U32 = Field(ge=0)
    coords: ParallelCoords = ParallelCoords()


class DataSegment(BaseModel):
    """What the job's data sampler re-split at this (re)start (`vigil.data`): a claim of the training side."""

    model_config = MODEL_CONFIG

    epoch: U32
    ranks: U32 = Field(ge=1, description="ranks the rest of the epoch is dealt over")
    samples_left: U64 = Field(description="samples of the epoch re-split over them")
    samples_done: U64 = Field(description="samples of the epoch read before (checkpointed)")
    in_flight: U32 = Field(default=0, description="shards read part-way before, whose rest is re-split")
    exact: bool = Field(description="what was read and what is dealt cover every sample of the epoch exactly once")


class JobRegistered(Event):
    """A job's topology and model facts, sent once at start (and again on restart)."""

    kind: Literal["job"] = "job"
    schema_version: Literal[1] = 1
    name: str = ""
    world_size: U32 = Field(ge=1)
    tp: U32 = Field(default=1, ge=1)
    pp: U32 = Field(default=1, ge=1)
    dp: U32 = Field(default=1, ge=1)
    gpus_per_host: U32 = Field(default=1, ge=1)
    gpu_model: str = ""
    gpu_peak_tflops: float | None = Field(default=None, gt=0)
    model_flops_per_step: float | None = Field(default=None, gt=0)
    ranks: list[RankPlacement] = Field(default_factory=list)
    phase_kinds: dict[Name, PhaseKind] = Field(
        default_factory=dict, description="job-wide phase kinds (compute/comm/wait); a step's own declaration wins")
    data: DataSegment | None = Field(default=None, description="the data re-split at this start (vigil.data)")

    @model_validator(mode="after")
    def _sizes_agree(self) -> JobRegistered:
        if self.tp * self.pp * self.dp != self.world_size:
            raise ValueError(
                f"tp*pp*dp = {self.tp}*{self.pp}*{self.dp} does not equal world_size {self.world_size}"
            )
        if self.ranks and len({r.rank for r in self.ranks}) != len(self.ranks):
            raise ValueError("ranks: duplicate global rank")
        return self


class Alert(Event):
    """A detector's finding. One fingerprint = one incident across firing -> resolved."""

    kind: Literal["alert"] = "alert"
    schema_version: Literal[1] = 1
    fingerprint: Name = Field(description="stable id of (job, alert kind, subject)")
    alert: Name = Field(description="detector: straggler, traffic_stall, mfu_drift, ...")
    subject: Name = Field(description="what it is about, e.g. host/phase or host/nic")
    status: Literal["firing", "resolved"]
    severity: Severity
    summary: str = Field(max_length=2048)
    first_seen: UtcDatetime
    last_seen: UtcDatetime
    evidence: dict[str, Any] = Field(default_factory=dict)
    valid_s: ValidFor | None = Field(default=None, description="seconds after `ts` it is valid for, signed "
                                     "(vigil.signing.freshness stamps it; None: its kind's lifetime)")
    signature: str = Field(default="", max_length=512, description="<role>/<key id>/<base64 Ed25519>: vigil.signing")


class RankRef(BaseModel):
    """One rank of a job (or a whole host when `rank` is None) and what it said last."""

    model_config = MODEL_CONFIG

    host: Name
    rank: U32 | None = Field(default=None, ge=0)
    local_rank: U32 | None = Field(default=None, ge=0)
    coords: ParallelCoords | None = None
    message: str = Field(default="", max_length=4096, description="its own last error, when it said one")


class IncidentCategory(StrEnum):
    """What kind of incident: a closed set the controller decides on (never an incident's text).
    The wire value is the string; an unknown one is refused by the contract (dead-lettered)."""

    CRASH_CASCADE = "crash_cascade"  # ranks failed within a window; the culprit is the first with an error of its own
    HOST_FAULT = "host_fault"  # a crash cascade whose culprit's host showed Xid / ECC / NVLink errors
    COLLECTIVE_HANG = "collective_hang"  # ranks stuck in a collective; the culprit is the rank(s) missing from it
    SILENT_DATA_CORRUPTION = "silent_data_corruption"  # a replica's parameter digest off its replicas' majority
    NUMERIC_FAULT = "numeric_fault"  # one rank's numbers wrong: grad norm out of its peers', first non-finite values


class Incident(Event):
    """Findings that share one cause, with the culprit named and its victims listed.

    One `incident_id` is one incident across its life: `open` when first detected, re-published
    (`open`) when what is known changes, `resolved` when it ends. Alerts of its victims are linked
    (`alerts`) and do not page on their own.
    """

    kind: Literal["incident"] = "incident"
    schema_version: Literal[1] = 1
    incident_id: Name = Field(description="stable id, the same on every event of this incident")
    category: IncidentCategory = Field(description="crash_cascade, host_fault, collective_hang, "
                                       "silent_data_corruption, numeric_fault")
    cause: Literal["hardware", "network", "software", "unknown"]
    status: Literal["open", "resolved"]
    severity: Severity
    summary: str = Field(max_length=2048)
    culprits: list[RankRef] = Field(default_factory=list, description="who caused it, most certain first")
    victims: list[RankRef] = Field(default_factory=list, description="who failed or waited because of it")
    confidence: Literal["strong", "weak"] = Field(default="strong", description="weak: inferred without direct "
                                                  "evidence (e.g. no Flight Recorder traces)")
    alerts: list[str] = Field(default_factory=list, description="fingerprints of the alerts it groups")
    first_sign: UtcDatetime = Field(description="earliest evidence of the cause")
    detected: UtcDatetime = Field(description="when the incident was first published")
    evidence: dict[str, Any] = Field(default_factory=dict)
    valid_s: ValidFor | None = Field(default=None, description="seconds after `ts` it is valid for, signed "
                                     "(vigil.signing.freshness stamps it; None: its kind's lifetime)")
    signature: str = Field(default="", max_length=512, description="<role>/<key id>/<base64 Ed25519>: vigil.signing")


class Silence(Event):
    """Notifications that match are muted from `starts_at` to `ends_at`; a later event with the same
    `silence_id` and status `expired` ends it early. `job_id` and `host` repeat the `job` and `host`
    matchers (`*` when absent), so a silence's events share one partition and stay ordered."""

    kind: Literal["silence"] = "silence"
    schema_version: Literal[1] = 1
    silence_id: Name
    matchers: dict[str, Name] = Field(min_length=1, description="label -> glob (job, kind, severity, host, ...); all "
                                      "must match")
    starts_at: UtcDatetime
    ends_at: AwareDatetime = Field(description="may lie further ahead than event timestamps may")
    created_by: Name
    reason: str = Field(min_length=1, max_length=1024)
    status: Literal["active", "expired"] = "active"
    valid_s: ValidFor | None = Field(default=None, description="seconds after `ts` it is valid for, signed "
                                     "(vigil.signing.freshness stamps it; None: its kind's lifetime)")
    signature: str = Field(default="", max_length=512, description="<role>/<key id>/<base64 Ed25519>: vigil.signing")

    @model_validator(mode="after")
    def _ends_after_start(self) -> Silence:
        if self.ends_at <= self.starts_at:
            raise ValueError("ends_at must be after starts_at")
        return self


class RecoveryStep(StrEnum):
    """What a `recovery` event is about: a closed set (the controller and every reader decide on these, never on
    text). tests/backbone/test_contract.py checks each is planned or reported somewhere and every step the
    controller takes is one."""

    PLAN = "plan"
    APPROVE = "approve"
    PAUSE = "pause"
    DUMP = "dump"
    DIAGNOSE = "diagnose"
    CORDON = "cordon"
    UNCORDON = "uncordon"
    QUARANTINE = "quarantine"  # single GPUs of a host taken out (the Xid catalog's reset_gpu; no reset available)
    EVICT = "evict"
    RESTART = "restart"
    RELAUNCH = "relaunch"
    REPLAY = "replay"  # an SDC rollback's verdict: the replayed steps judged by the replica detector
    NOTIFY = "notify"
    PAGE = "page"
    HALT = "halt"
    START = "start"
    STOP = "stop"
    FINISH = "finish"


class RecoveryAction(Event):
    """Something the recovery controller did, or decided to do, and how it went.

    One step of one incident's recovery is one `(incident_id, action, target)`: `planned`, then
    `started`, then `succeeded`, `failed` or `skipped`, each with its reason, so the controller's
    state is rebuilt from these events and no step is taken twice. Node agents acknowledge a
    command with the command's action (`start`, `stop`, `diagnose`, `dump`) and `command_id`.
    """

    kind: Literal["recovery"] = "recovery"
    schema_version: Literal[1] = 1
    action: RecoveryStep
    target: Name = Field(description="a host, a job, or the incident")
    status: Literal["planned", "started", "succeeded", "failed", "skipped"]
    reason: str = Field(default="", max_length=4096)
    alert_fingerprint: str = ""
    details: dict[str, Any] = Field(default_factory=dict)
    incident_id: str = Field(default="", max_length=256, description="the incident this step recovers from")
    command_id: str = Field(default="", max_length=256, description="the agent command it sent or acknowledges")
    actor: str = Field(default="", max_length=256, description="controller, agent:<host>, or user:<name>")
    generation: U32 | None = Field(default=None, ge=0, description="the job's rendezvous it starts or stops")
    started_at: UtcDatetime | None = Field(default=None, description="when the step started (on its end event)")
    duration_ms: NonNegFloat | None = Field(default=None, ge=0)
    dry_run: bool = Field(default=False, description="decided and published only (mode dry-run)")
    epoch: int = Field(default=0, ge=0, description="the controller's lease epoch (fencing); 0 = not a controller's")
    valid_s: ValidFor | None = Field(default=None, description="seconds after `ts` it is valid for, signed "
                                     "(vigil.signing.freshness stamps it; None: its kind's lifetime)")
    signature: str = Field(default="", max_length=512, description="<role>/<key id>/<base64 Ed25519>: vigil.signing")


OperatorAction = Literal["cordon", "uncordon", "evict"]
REQUEST_PREFIX = "request/"


def operator_request(*, action: OperatorAction, host: str, job_id: str, reason: str, actor: str,
                     details: dict[str, Any] | None = None) -> RecoveryAction:
    """An operator asks the recovery controller to cordon, uncordon or evict `host`.

    For callers that hold no node backend (the dashboard: only the controller may write to the
    cluster). The request is a `planned` step with `command_id` ``request/<event id>``; the
    controller executes it once and records the result under the same `command_id` and actor.
    """
    req = RecoveryAction(job_id=job_id, host=host, action=action, target=host, status="planned", reason=reason,
                         actor=actor, details=details or {})
    return req.model_copy(update={"command_id": REQUEST_PREFIX + req.event_id})


def is_operator_request(e: RecoveryAction) -> bool:
    return e.command_id.startswith(REQUEST_PREFIX)


class Checkpoint(Event):
    """A checkpoint of a job: staged to host memory, then persisted to storage.

    Emitted by `vigil.recovery.checkpoint` in the training process, per save: every rank
    ``staged`` (or ``skipped``: the previous save was still persisting; or ``failed``), then
    every rank ``persisted`` (its part written) or ``failed``; rank 0 ``committed`` once the
    commit marker is written: only then is the checkpoint complete and restorable.
    The latest complete checkpoint of a job is its latest ``committed`` event. Every rank
    emits ``restored`` when `load_latest` loaded one (step, path, duration_ms = the load,
    `source`: ``memory`` its own in-memory snapshot, ``peer`` a buddy's copy, ``persisted``).
    Rank 0 emits ``failed`` with `unverified` for a checkpoint whose files do not match its
    commit marker (tampered with or planted), which restore skipped.
    """

    kind: Literal["checkpoint"] = "checkpoint"
    schema_version: Literal[1] = 1
    step: U64 = Field(ge=0)
    phase: Literal["staged", "persisted", "committed", "failed", "skipped", "restored"]
    path: str = ""
    blocked_ms: NonNegFloat = Field(default=0, ge=0, description="time training was blocked")
    duration_ms: NonNegFloat = Field(default=0, ge=0)
    bytes: U64 = Field(default=0, ge=0)
    rank: U32 | None = Field(default=None, ge=0, description="global rank that emitted it")
    error: str = Field(default="", max_length=4096, description="why a save failed or was skipped")
    dropped: U32 = Field(default=0, ge=0, description="checkpoint events of this rank lost before this one")
    source: Literal["", "memory", "peer", "persisted"] = Field(default="", description="where `restored` came from")
    unverified: bool = Field(default=False, description="`failed`: its files do not match the commit marker")
    signature: str = Field(default="", max_length=512, description="<role>/<key id>/<base64 Ed25519>: the "
                           "attestation of the agent of `host` that shipped it; only an attested commit resets "
                           "the crash-loop count")

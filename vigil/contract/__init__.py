"""The event contract: pydantic models of every fact and decision, their registry and wire format."""

from vigil.contract.base import Event, RankScoped, new_event_id, utcnow
from vigil.contract.control import Command, Diagnostic, Member, MemberState, Outcome, Verdict, World
from vigil.contract.decisions import (
    Alert,
    Checkpoint,
    Incident,
    JobRegistered,
    OperatorAction,
    RankPlacement,
    RankRef,
    RecoveryAction,
    Silence,
    is_operator_request,
    operator_request,
)
from vigil.contract.phases import PHASE_KINDS, WAITING, PhaseKind, default_phase_kind
from vigil.contract.registry import (
    DEAD_LETTER_TOPIC,
    SPECS,
    TELEMETRY_TOPICS,
    TOPICS,
    EventSpec,
    spec_for,
    topic_of,
)
from vigil.contract.telemetry import (
    CollectiveEntry,
    CollectiveTrace,
    GpuState,
    Heartbeat,
    LogLine,
    NicCounters,
    ParallelCoords,
    ProcessExit,
    ProcessState,
    StepTiming,
)
from vigil.contract.wire import Decoded, Rejected, decode_batch, encode_batch, validate_event

__all__ = [
    "DEAD_LETTER_TOPIC", "PHASE_KINDS", "SPECS", "TELEMETRY_TOPICS", "TOPICS", "WAITING", "Alert", "Checkpoint",
    "CollectiveEntry", "CollectiveTrace", "Command", "Decoded", "Diagnostic", "Event", "EventSpec", "GpuState",
    "Heartbeat", "Incident", "JobRegistered", "LogLine", "Member", "MemberState", "NicCounters", "OperatorAction",
    "Outcome", "ParallelCoords", "PhaseKind", "ProcessExit", "ProcessState", "RankPlacement", "RankRef", "RankScoped",
    "RecoveryAction", "Rejected", "Silence", "StepTiming", "Verdict", "World", "decode_batch", "default_phase_kind",
    "encode_batch", "is_operator_request", "new_event_id", "operator_request", "spec_for", "topic_of", "utcnow",
    "validate_event",
]

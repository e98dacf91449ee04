"""The event contract: every registered example validates and round-trips; bad input names the field."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from vigil.contract import SPECS, TOPICS, StepTiming, decode_batch, encode_batch, spec_for, validate_event

pytestmark = pytest.mark.pure


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.kind}-v{s.version}")
def test_every_example_validates_and_round_trips(spec) -> None:  # type: ignore[no-untyped-def]
    event = spec.model.model_validate(spec.example)
    assert event.kind == spec.kind and event.schema_version == spec.version
    decoded = decode_batch(encode_batch([event, event.model_copy(update={"event_id": "another-id-123"})]))
    assert decoded.rejected == []
    assert decoded.events[0] == event
    assert spec.topic in TOPICS


def test_each_kind_has_a_topic_and_a_latest_version() -> None:
    kinds = {s.kind for s in SPECS}
    assert kinds == {"job", "step", "heartbeat", "nic", "log", "exit", "collective", "alert", "incident", "silence",
                     "recovery", "checkpoint", "command", "member", "diagnostic", "outcome"}
    for kind in kinds:
        assert spec_for(kind).kind == kind


def test_bad_payload_names_the_field() -> None:
    example = dict(spec_for("step").example)
    example["step_ms"] = -5
    with pytest.raises(ValueError, match=r"step_ms: Input should be greater than or equal to 0"):
        validate_event("step", example)
    del example["job_id"]
    with pytest.raises(ValueError, match=r"job_id: Field required"):
        validate_event("step", example)


def test_unknown_fields_and_naive_timestamps_are_rejected() -> None:
    example = {**spec_for("heartbeat").example, "surprise": 1}
    with pytest.raises(ValueError, match="surprise: Extra inputs are not permitted"):
        validate_event("heartbeat", example)
    naive = {**spec_for("heartbeat").example, "ts": "2026-11-01T12:00:00"}
    with pytest.raises(ValueError, match="ts: Value error, timestamp must carry a UTC offset"):
        validate_event("heartbeat", naive)


@pytest.mark.parametrize("ts", ["1800-01-01T00:00:00Z", "9999-01-01T00:00:00Z", 0])
def test_timestamps_from_a_broken_clock_are_rejected(ts: object) -> None:
    with pytest.raises(ValueError, match=r"ts: Value error, timestamp .* is out of range"):
        validate_event("heartbeat", {**spec_for("heartbeat").example, "ts": ts})


def test_timestamps_normalise_to_utc_and_accept_unix_seconds() -> None:
    e = validate_event("step", {**spec_for("step").example, "ts": "2026-11-01T14:00:00+02:00"})
    assert e.ts == datetime(2026, 11, 1, 12, tzinfo=UTC)
    e2 = validate_event("step", {**spec_for("step").example, "ts": 1_793_534_400.5})
    assert e2.ts.tzinfo is not None


def test_job_topology_must_be_consistent() -> None:
    bad = {**spec_for("job").example, "tp": 4}
    with pytest.raises(ValueError, match="does not equal world_size"):
        validate_event("job", bad)


def test_decode_keeps_good_neighbours_of_a_bad_event() -> None:
    good = StepTiming(job_id="j", host="h", rank=0, world_size=1, step=1, step_ms=1.0).model_dump(mode="json")
    record = json.dumps({"kind": "step", "schema_version": 1, "events": [good, {"job_id": "j"}, "junk"]}).encode()
    decoded = decode_batch(record)
    assert len(decoded.events) == 1 and len(decoded.rejected) == 2
    assert "host: Field required" in decoded.rejected[0].reason


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "empty record"),
        (b"\xff\xfe", "not JSON"),
        (b"[1,2]", "must be an object"),
        (b'{"kind": 3, "schema_version": 1, "events": []}', "string 'kind'"),
        (b'{"kind": "step", "schema_version": 99, "events": []}', "unknown event kind/version"),
    ],
)
def test_undecodable_records_are_rejected_with_reason(value: bytes | None, reason: str) -> None:
    decoded = decode_batch(value)
    assert decoded.events == [] and reason in decoded.rejected[0].reason


def test_encode_refuses_mixed_kinds() -> None:
    a = StepTiming(job_id="j", host="h", rank=0, world_size=1, step=1, step_ms=1.0)
    b = validate_event("heartbeat", spec_for("heartbeat").example)
    with pytest.raises(ValueError, match="one kind"):
        encode_batch([a, b])

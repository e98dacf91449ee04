"""The event contract: every registered example validates and round-trips; bad input names the field."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest

from vigil.contract import SPECS, TOPICS, StepTiming, decode_batch, encode_batch, spec_for, validate_event

pytestmark = pytest.mark.pure


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.kind}-v{s.version}")
def test_every_example_validates_and_round_trips(spec) -> None:  # type: ignore[no-untyped-def]
    event = spec.model.model_validate({**spec.example, "ts": datetime.now(UTC)})  # the example's date would age out
    assert event.kind == spec.kind and event.schema_version == spec.version
    decoded = decode_batch(encode_batch([event, event.model_copy(update={"event_id": "another-id-123"})]))
    assert decoded.rejected == []
    assert decoded.events[0] == event
    assert spec.topic in TOPICS


def test_each_kind_has_a_topic_and_a_latest_version() -> None:
    kinds = {s.kind for s in SPECS}
    assert kinds == {"job", "step", "heartbeat", "nic", "log", "exit", "collective", "alert", "incident", "silence",
                     "recovery", "checkpoint", "command", "member", "diagnostic", "outcome", "advice", "service"}
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


BIG = 2**64


@pytest.mark.parametrize(("kind", "edit", "field"), [
    ("step", {"step_ms": float("nan")}, "step_ms"),
    ("step", {"step_ms": float("inf")}, "step_ms"),
    ("step", {"phases": {"forward": -1.0}}, "phases.forward"),
    ("step", {"phases": {"forward": float("nan")}}, "phases.forward"),
    ("step", {"step": BIG}, "step"),
    ("step", {"rank": 2**32}, "rank"),
    ("step", {"host": "node\n7"}, "host"),
    ("step", {"job_id": "job\x00"}, "job_id"),
    ("step", {"phases": {"fwd\x1b": 1.0}}, "phases.fwd\x1b.[key]"),
    ("heartbeat", {"gpus": [{"index": 0, "temp_c": float("inf")}]}, "gpus.0.temp_c"),
    ("nic", {"device": "mlx5_0\r"}, "device"),
    ("nic", {"rx_bytes": BIG}, "rx_bytes"),
    ("exit", {"exit_code": 2**31}, "exit_code"),
    ("log", {"xid": -(2**31) - 1}, "xid"),
    ("checkpoint", {"blocked_ms": -0.5}, "blocked_ms"),
    ("member", {"step_ms": float("-inf")}, "step_ms"),
    ("outcome", {"total_s": float("nan")}, "total_s"),
])
def test_values_beyond_their_columns_are_refused(kind: str, edit: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"{field}: ")):
        validate_event(kind, {**spec_for(kind).example, **edit})


def test_values_at_their_column_bounds_are_accepted() -> None:
    e = validate_event("step", {**spec_for("step").example, "step": BIG - 1, "rank": 2**32 - 1, "step_ms": 0.0})
    assert e.step == BIG - 1 and e.rank == 2**32 - 1


def test_timestamps_beyond_the_clock_skew_or_older_than_retention_are_rejected_off_the_wire(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from vigil.contract import base as contract_base

    monkeypatch.delenv("VIGIL_CONTRACT_MAX_AGE_DAYS", raising=False)  # the default: 30 days
    contract_base.window.cache_clear()
    try:
        check_window()
    finally:
        monkeypatch.undo()
        contract_base.window.cache_clear()


def check_window() -> None:
    base = {k: v for k, v in spec_for("step").example.items() if k not in ("kind", "schema_version")}
    now = datetime.now(UTC)
    cases = {"ahead": now + timedelta(minutes=10), "near": now + timedelta(seconds=30), "stale": now - timedelta(days=31),
             "old-ok": now - timedelta(days=29)}
    events = [{**base, "event_id": f"event-{name}", "ts": ts.isoformat()} for name, ts in cases.items()]
    decoded = decode_batch(json.dumps({"kind": "step", "schema_version": 1, "events": events}).encode())
    assert sorted(e.event_id for e in decoded.events) == ["event-near", "event-old-ok"]
    reasons = {r.payload["event_id"]: r.reason for r in decoded.rejected}
    assert "clock skew" in reasons["event-ahead"] and "older than the retention" in reasons["event-stale"]


def test_the_time_window_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    from vigil.contract import base

    monkeypatch.setenv("VIGIL_CONTRACT_CLOCK_SKEW_S", "3600")
    base.window.cache_clear()
    try:
        ts = datetime.now(UTC) + timedelta(minutes=30)
        assert validate_event("step", {**spec_for("step").example, "ts": ts.isoformat()}).ts == ts
    finally:
        monkeypatch.delenv("VIGIL_CONTRACT_CLOCK_SKEW_S")
        base.window.cache_clear()
    with pytest.raises(ValueError, match="clock skew"):
        validate_event("step", {**spec_for("step").example, "ts": ts.isoformat()})


@pytest.mark.parametrize("url", ["ftp://h/metrics", "http://user:pw@h:1/metrics", "http://h:1/m etrics", "http:///metrics",
                                 "http://h:99999/metrics", "http://h/" + "x" * 600, "javascript:alert(1)",
                                 "http://h:1/\x9b2J", "http://h:1/\u202emetrics", "http://h\u00e9:1/metrics"])
def test_a_service_announcement_takes_only_a_bounded_http_url(url: str) -> None:
    example = {**spec_for("service").example, "ts": datetime.now(UTC).isoformat(), "metrics_url": url}
    with pytest.raises(ValueError, match="metrics_url"):
        validate_event("service", example)
    with pytest.raises(ValueError, match="service"):
        validate_event("service", {**example, "metrics_url": "", "service": "dashboard"})  # a closed set
    with pytest.raises(ValueError, match="instance"):  # printed by `vigil status`: no bidi override, no C1 control
        validate_event("service", {**example, "metrics_url": "", "instance": "a\u202eb"})

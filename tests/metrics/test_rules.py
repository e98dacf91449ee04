"""Pure checks of the metrics rules: Prometheus naming, bounded labels, counting once, the served format, the page."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest

from vigil.analyzer.metrics import AnalyzerMetrics
from vigil.app.reference.metrics import page, readme, services
from vigil.contract import Alert, Incident, Member, Outcome
from vigil.contract.ledger import RECOVERY_CATEGORIES, ledger
from vigil.kafka.deadletter import DeadLetter
from vigil.metrics import Metrics, MetricsSettings
from vigil.metrics.caps import OTHER, LabelCap, top
from vigil.metrics.catalog import BEGIN, END, spliced, summary
from vigil.metrics.naming import problems
from vigil.metrics.server import MetricsServer
from vigil.recovery.controller.metrics import RecoveryMetrics

pytestmark = pytest.mark.pure
ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def settings(**kw: int) -> MetricsSettings:
    return MetricsSettings(enabled=True, bind="127.0.0.1", max_jobs=kw.get("jobs", 20), max_hosts=kw.get("hosts", 1000))


def value(m: Metrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


@pytest.mark.parametrize(("name", "kind", "labels", "wrong"), [
    ("vigil_ingest_events_total", "counter", (), ""),
    ("vigil_detect_turn_seconds", "histogram", (), ""),
    ("ingest_events_total", "counter", (), "must start with"),
    ("vigil_ingest_events", "counter", (), "ends with _total"),
    ("vigil_alerts_firing_total", "gauge", (), "only counters"),
    ("vigil_turn_ms", "histogram", (), "not a base unit"),
    ("vigil_turn_minutes_total", "counter", (), "not a base unit"),
    ("vigil_Ingest_total", "counter", (), "snake case"),
    ("vigil_alerts_total", "counter", ("incident_id",), "unbounded"),
    ("vigil_alerts_total", "counter", ("job", "job"), "repeats"),
])
def test_names_follow_prometheus_naming(name: str, kind: str, labels: tuple[str, ...], wrong: str) -> None:
    found = problems(name, kind, labels)
    assert (wrong in "; ".join(found)) if wrong else found == []
    if wrong:
        with pytest.raises(ValueError, match=wrong):
            Metrics("t", settings()).declare(name, kind, "help", labels)


def test_every_declared_family_follows_the_rules_and_is_served_under_its_name() -> None:
    for m in (AnalyzerMetrics(settings()), RecoveryMetrics(settings())):
        assert m.families
        for f in m.families:
            assert problems(f.name, f.kind, f.labels) == [], f


def test_label_caps_keep_the_first_values_of_a_counter_and_the_top_values_of_a_gauge() -> None:
    cap = LabelCap(2)
    assert [cap(v) for v in ("a", "b", "c", "a", "d", "b")] == ["a", "b", OTHER, "a", OTHER, "b"]
    values: dict[tuple[str, ...], float] = {("j1", "x"): 1.0, ("j2", "x"): 5.0, ("j3", "x"): 3.0, ("j3", "y"): 1.0,
                                            ("j4", "y"): 2.0}
    assert top(values, 0, 2) == {("j2", "x"): 5.0, ("j3", "x"): 3.0, ("j3", "y"): 1.0, (OTHER, "x"): 1.0,
                                 (OTHER, "y"): 2.0}


def log_lines(*rows: tuple[str, int | None, int]) -> dict[str, object]:
    return {"log_lines": {"host": [r[0] for r in rows], "xid": [r[1] for r in rows], "repeats": [r[2] for r in rows],
                          "category": ["xid" if r[1] is not None else "cuda_error" for r in rows]}}


def test_the_xid_counter_counts_each_stored_xid_once_and_bounds_hosts() -> None:
    m = AnalyzerMetrics(settings(hosts=2))
    m.stored(log_lines(("h0", 79, 1), ("h1", None, 1), ("h0", 79, 1), ("h1", 48, 3)))
    m.stored({"step_timings": {"host": ["h0"]}})  # no log lines: nothing
    m.stored(log_lines(("h2", 79, 1), ("h3", 79, 1)))  # past the cap: one "other" series
    assert value(m, "vigil_xid_events_total", host="h0", xid="79") == 2
    assert value(m, "vigil_xid_events_total", host="h1", xid="48") == 3  # a flood summary of 3 lines
    assert value(m, "vigil_xid_events_total", host=OTHER, xid="79") == 2
    m.stored(log_lines(*(("h0", 1000 + i, 1) for i in range(100))))  # made-up codes printed by a job
    assert value(m, "vigil_xid_events_total", host="h0", xid=OTHER) == 100 - 64 + 2  # 79 and 48 took two of 64
    m.stored({"log_lines": {"host": ["h0"], "xid": [79, 48]}})  # a malformed table is logged, never raised into the writer
    assert value(m, "vigil_xid_events_total", host="h0", xid="79") == 2


def test_dead_letters_are_counted_by_topic_and_shape_never_by_message_text() -> None:
    m = AnalyzerMetrics(settings())
    m.dead_lettered([DeadLetter(reason="not JSON: x", topic="v.steps", partition=0, offset=1, payload="{"),
                     DeadLetter(reason="invalid step v1 event", topic="v.steps", partition=0, offset=2, payload={}),
                     DeadLetter(reason="other words", topic="v.steps", partition=1, offset=3, payload={"a": 1})])
    assert value(m, "vigil_ingest_dead_letters_total", topic="v.steps", reason="not_json") == 1
    assert value(m, "vigil_ingest_dead_letters_total", topic="v.steps", reason="invalid") == 2


def incident(iid: str, status: str = "open") -> Incident:
    return Incident(job_id="j", host="h2", incident_id=iid, category="host_fault", cause="hardware", status=status,
                    severity="critical", summary="s", first_sign=T0, detected=T0)


def alert(job: str, name: str) -> Alert:
    return Alert(job_id=job, host="h", ts=T0, fingerprint=f"{job}/{name}", alert=name, subject="s", status="firing",
                 severity="critical", first_seen=T0, last_seen=T0, summary="s")


def test_a_turn_counts_each_incident_once_and_the_firing_alerts_of_the_top_jobs() -> None:
    m = AnalyzerMetrics(settings(jobs=1))
    m.turned(0.3, True, [incident("i1"), incident("i1")], [alert("a", "x"), alert("a", "y"), alert("b", "x")], 4.0)
    m.turned(0.2, False, [incident("i1", "resolved"), incident("i2")], [alert("b", "x")], 1.0)
    assert value(m, "vigil_incidents_total", category="host_fault", cause="hardware") == 2
    assert value(m, "vigil_detect_turn_seconds_count") == 2 and value(m, "vigil_detect_turn_failures_total") == 1
    assert value(m, "vigil_alerts_firing", job="b", alert="x", severity="critical") == 1
    assert value(m, "vigil_alerts_firing", job="a", alert="x", severity="critical") is None  # resolved: gone
    assert value(m, "vigil_detect_behind_seconds") == 1.0


def outcome(eid: str, ts: datetime, result: str = "resumed") -> Outcome:
    return Outcome(event_id=f"outcome-{eid}", job_id="j", host="ctl", ts=ts, incident_id="j/i", result=result, total_s=42.0,
                   pause_s=1.0, restart_s=20.0, steps_lost=3, cordoned=["h2"])


def test_an_outcome_is_counted_once_by_the_leader_and_only_after_the_start() -> None:
    m = RecoveryMetrics(settings(), started=T0)
    at = T0 + timedelta(seconds=5)
    hw, start = {"class_of": lambda cid: "hardware"}, {"class_of": lambda cid: "start"}
    m.folded([outcome("o1", at), outcome("o1", at)], leading=True, **hw)
    m.folded([outcome("o1", at)], leading=True, **hw)  # re-delivered
    m.folded([outcome("o0", T0 - timedelta(seconds=5))], leading=True, **hw)  # history folded at start
    m.folded([outcome("o2", at, "paged")], leading=False, **hw)  # a standby's fold
    m.folded([outcome("o3", at)], leading=True, **start)  # a job's start: a case, not a recovery from a fault
    cases = {"outcome": "resumed", "class": "hardware"}
    assert m.registry.get_sample_value("vigil_recovery_cases_total", cases) == 1
    assert m.registry.get_sample_value("vigil_recovery_cases_total", {**cases, "outcome": "paged"}) is None
    assert m.registry.get_sample_value("vigil_recovery_cases_total", {**cases, "class": "start"}) == 1
    assert value(m, "vigil_recovery_duration_seconds_count") == 1
    assert value(m, "vigil_recovery_phase_seconds_count", phase="restart") == 1
    assert value(m, "vigil_recovery_phase_seconds_count", phase="diagnose") is None
    assert value(m, "vigil_recovery_steps_lost_sum") == 3 and value(m, "vigil_recovery_hosts_cordoned_total") == 1


def test_metrics_are_served_as_openmetrics_when_asked_on_a_port_read_back() -> None:
    m = AnalyzerMetrics(settings())
    m.stored(log_lines(("h0", 79, 1)))
    server = MetricsServer(m.registry, port=0)
    url = server.start()
    try:
        assert url.startswith("http://127.0.0.1:") and not url.endswith(":0/metrics")
        om = httpx.get(url, headers={"Accept": "application/openmetrics-text; version=1.0.0"}, timeout=10)
        assert om.headers["content-type"].startswith("application/openmetrics-text")
        assert 'vigil_xid_events_total{host="h0",xid="79"} 1.0' in om.text and om.text.rstrip().endswith("# EOF")
        plain = httpx.get(url, timeout=10)
        assert plain.headers["content-type"].startswith("text/plain") and "# EOF" not in plain.text
    finally:
        server.stop()
    assert generate_latest(m.registry) == generate_latest(m.registry)  # sampling is side-effect free


def test_a_repeated_xid_reads_two_through_the_endpoint_not_the_last_value() -> None:
    m = AnalyzerMetrics(settings())
    server = MetricsServer(m.registry, port=0)
    url = server.start()
    om = {"Accept": "application/openmetrics-text; version=1.0.0"}
    try:
        m.stored(log_lines(("h1", 79, 1)))  # one stored batch ...
        first = httpx.get(url, headers=om, timeout=10).text
        m.stored(log_lines(("h1", 79, 1)))  # ... and a later one: the same host, the same code
        second = httpx.get(url, headers=om, timeout=10).text
    finally:
        server.stop()
    assert "# TYPE vigil_xid_events counter" in second
    assert 'vigil_xid_events_total{host="h1",xid="79"} 1.0' in first
    assert 'vigil_xid_events_total{host="h1",xid="79"} 2.0' in second


def test_the_metrics_page_is_current() -> None:
    assert (ROOT / "docs" / "metrics.md").read_text() == page(), "run: python -m vigil.app.reference"


def test_the_readme_lists_every_family_of_every_service_and_is_current() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme(text) == text, "README.md's metrics list is stale: run python -m vigil.app.reference"
    block = text[text.index(BEGIN):text.index(END)]
    for m in services():
        line = next(ln for ln in block.splitlines() if ln.startswith(f"- {m.service}: "))
        assert {f"`{f.name}`" for f in m.families} == set(line.split(": ", 1)[1].split(", ")), m.service
    stale = text.replace("`vigil_goodput_lost_seconds_total`, ", "")
    assert stale != text and readme(stale) == text  # a family missing from the list is put back, so the check fails
    with pytest.raises(ValueError, match="metrics:begin"):
        spliced("no block", summary(services()))


def member(job: str, steps: int, step_ms: float | None) -> Member:
    return Member(job_id=job, host="h0", ts=T0, state="training", steps=steps, step_ms=step_ms)


def resumed(eid: str, job: str, category: str = "host_fault") -> Outcome:
    return Outcome.model_validate({
        "event_id": f"outcome-{eid}", "job_id": job, "host": "ctl", "ts": T0 + timedelta(seconds=5),
        "incident_id": eid, "result": "resumed", "category": category, "resumed_at": T0 + timedelta(seconds=4),
        "detect_s": 2.0, "decide_s": 1.0, "pause_s": 1.5, "diagnose_s": 4.0, "restart_s": 20.0,
        "checkpoint_load_s": 5.0, "steps_lost": 3})


def test_what_a_recovery_cost_is_counted_once_by_the_ledgers_categories_and_jobs_are_capped() -> None:
    m = RecoveryMetrics(settings(jobs=1), started=T0)
    hw = {"class_of": lambda cid: "hardware"}
    m.folded([member("j", 40, 500.0)], leading=False, **hw)  # a standby learns the pace too
    m.folded([member("j", 2, 900.0)], leading=True, **hw)  # a new generation's first steps are not its pace
    m.folded([resumed("c1", "j"), resumed("c1", "j")], leading=True, **hw)
    m.folded([resumed("c1", "j")], leading=True, **hw)  # re-delivered

    def lost(job: str) -> dict[str, float]:
        found = {c: value(m, "vigil_goodput_lost_seconds_total", job=job, category=c) for c in RECOVERY_CATEGORIES}
        return {c: v for c, v in found.items() if v is not None}

    want = {"detect": 2.0, "decide": 1.0, "pause": 1.5, "diagnose": 4.0, "restart": 15.0, "restore": 5.0,
            "steps_redone": 1.5}
    assert lost("j") == want
    as_ledger = ledger(wall_s=100.0, ideal_ms=500.0, step_ms=[], outcomes=[resumed("c1", "j").model_dump()])
    assert {c: v for c, v in as_ledger.seconds.items() if v and c != "idle"} == want  # the ledger's split
    m.folded([resumed("c2", "k", category="silent_data_corruption")], leading=True, **hw)  # no pace known for k
    assert lost(OTHER) == {"sdc": 1.5 + 15.0 + 5.0 + 4.0}  # past the job cap; all of an SDC case to sdc
    m.folded([resumed("c3", "j", category="start")], leading=True, class_of=lambda cid: "start")  # a job's start
    m.folded([resumed("c4", "j").model_copy(update={"resumed_at": None, "result": "paged"})], leading=True, **hw)
    m.folded([resumed("c5", "j")], leading=False, **hw)  # a standby's fold
    assert lost("j") == want


class _Hosted:
    def __init__(self, name: str, metrics: Metrics | None) -> None:
        self.name = name
        if metrics is not None:
            self.metrics = metrics

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def health(self) -> dict[str, object]:
        return {"ok": True}


def test_the_control_port_serves_every_hosted_services_metrics_with_the_token_only(tmp_path: Path) -> None:
    from vigil.app.stack.control import ControlServer
    from vigil.app.stack.runner import hosted_metrics

    analyzer, recovery = AnalyzerMetrics(settings()), RecoveryMetrics(settings())
    analyzer.stored(log_lines(("h0", 79, 1)))
    registry = hosted_metrics([_Hosted("analyzer", analyzer), _Hosted("recovery", recovery), _Hosted("x", None)])
    server = ControlServer(port=0, dsn=f"chdb://{tmp_path / 'unused'}", health=lambda: {"ok": True},
                           migrate=lambda: {}, metrics=registry)
    server.start()
    try:
        assert httpx.get(f"{server.url}/metrics", timeout=10).status_code == 401
        got = httpx.get(f"{server.url}/metrics", timeout=10, headers={
            "Authorization": f"Bearer {server.token}", "Accept": "application/openmetrics-text; version=1.0.0"})
        assert got.status_code == 200 and got.headers["content-type"].startswith("application/openmetrics-text")
        assert 'vigil_xid_events_total{host="h0",xid="79"} 1.0' in got.text
        assert "# TYPE vigil_recovery_duration_seconds histogram" in got.text
    finally:
        server.stop()


def test_the_notifiers_figures_are_read_per_receiver_and_channel_when_scraped() -> None:
    from types import SimpleNamespace

    from vigil.notify.dispatch import ReceiverStats
    from vigil.notify.metrics import NotifyMetrics

    m = NotifyMetrics(settings())
    assert generate_latest(m.registry).count(b"vigil_") == 0  # nothing before the service is wired
    refusals = SimpleNamespace(kinds={("silence", "unsigned"): 2})
    m.source = SimpleNamespace(
        decided=5, receivers={"oncall": SimpleNamespace(kind="slack"), "hook": SimpleNamespace(kind="webhook")},
        dispatcher=SimpleNamespace(stats={"oncall": ReceiverStats(delivered=3, failed=1, retries=4),
                                          "hook": ReceiverStats(delivered=1)}, pending=lambda name: 2),
        decider=SimpleNamespace(alerts_by_state={"paging": 1, "silenced": 2, "inhibited": 3}),
        silences_active=lambda: 1, gate=SimpleNamespace(refusals=refusals))
    assert value(m, "vigil_notifications_sent_total", receiver="oncall", channel="slack") == 3
    assert value(m, "vigil_notifications_failed_total", receiver="oncall", channel="slack") == 1
    assert value(m, "vigil_notification_retries_total", receiver="oncall", channel="slack") == 4
    assert value(m, "vigil_notifications_sent_total", receiver="hook", channel="webhook") == 1
    assert value(m, "vigil_notifications_decided_total") == 5
    assert value(m, "vigil_notify_alerts", state="silenced") == 2
    assert value(m, "vigil_notify_alerts", state="inhibited") == 3
    assert value(m, "vigil_security_refusals_total", what="silence", problem="unsigned") == 2


def test_firing_alerts_are_told_apart_as_paging_silenced_or_inhibited_into_their_incident() -> None:
    from vigil.notify.decider import alert_states
    from vigil.notify.grouping import Member

    def group(*members: Member, muted: str | None = None) -> object:
        from types import SimpleNamespace
        return SimpleNamespace(members=members, muted_by=muted)

    a, resolved = alert("j", "x"), alert("j", "y").model_copy(update={"status": "resolved"})
    groups = [group(Member(alert=a, role="alert"), Member(alert=resolved, role="alert")),
              group(Member(alert=a, role="victim"), Member(alert=a, role="listed", muted_by="s1")),
              group(Member(alert=a, role="listed"), muted="s2")]
    assert alert_states(groups) == {"paging": 1, "silenced": 2, "inhibited": 1}  # type: ignore[arg-type]


def test_refusals_are_kept_by_what_and_problem_for_the_refusals_metric() -> None:
    from vigil.signing.policy import Refusal, Refusals
    from vigil.signing.seal import Problem

    r = Refusals(reporter="controller")
    for i, problem in enumerate((Problem.UNSIGNED, Problem.UNSIGNED, Problem.WRONG_ROLE)):
        r.refuse(Refusal(what="incident", problem=problem, detail="", job_id="j", host="h", event_id=f"e{i}"), T0)
    assert dict(r.kinds) == {("incident", "unsigned"): 2, ("incident", "wrong role"): 1} and r.count == 3

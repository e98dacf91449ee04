"""A real Prometheus scrapes the live analyzer and controller while a real job meets an Xid and recovers.

Two `vigil run --nodes 1:2` agents run tests/recovery/job_worker.py (DDP over gloo); host h1's rank
prints an Xid 79 line at step 12 and dies (once). The analyzer (`vigil analyzer`, tests/support/services.py)
and the controller (`vigil recovery run`, tests/support/live.py) serve /metrics on free ports they
print; Debian's Prometheus scrapes both every second. Asserted over PromQL: the Xid counter is 1 for
(h1, 79), one per Xid line the agent published, and stays so after the recovery; the recovery duration
was observed once per case that ended, and each ended case counted once by outcome. (One Xid cannot tell a
counter from a last-value gauge: that a second Xid of the same host and code reads 2 through the endpoint is
tests/metrics/test_rules.py's; a second fault here would cost a second recovery.)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.metrics.prometheus import BINARY, Prometheus
from tests.support.live import Live, worker
from tests.support.services import analyzer_service
from tests.support.waiting import wait_until
from vigil.contract import LogLine, Outcome
from vigil.recovery.controller.metrics import LIFECYCLE
from vigil.settings import VigilSettings

pytestmark = [pytest.mark.prometheus, pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(600),
              pytest.mark.skipif(BINARY is None, reason="prometheus not installed (Debian's prometheus: `make test` "
                                 "installs it as root)")]
JOB = "job-prom"
URL = re.compile(r"metrics (http://\S+/metrics)")


def printed_url(log: Path) -> str | None:
    found = URL.findall(log.read_text(errors="replace")) if log.exists() else []
    return found[-1] if found else None


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Prometheus]:
    p = Prometheus(tmp=tmp_path / "prom")
    p.tmp.mkdir()
    yield p
    p.stop()


def test_prometheus_counts_one_xid_and_observes_one_recovery_per_case(
        topics: VigilSettings, broker_bootstrap: str, tmp_path: Path, prometheus: Prometheus) -> None:
    live = Live(settings=topics, bootstrap=broker_bootstrap, tmp=tmp_path, recovery_env={
        "VIGIL_RECOVERY_POLICY_CORDON_SLOW": "false", "VIGIL_RECOVERY_DIAGNOSTICS_ROUND_TIMEOUT_S": "90"})
    analyzer, _dsn = analyzer_service(live.env, tmp_path)
    try:
        analyzer.start()
        wait_until(analyzer.ready, 300, "the analyzer to run")
        args = ["--ckpt", str(tmp_path / "ckpt"), "--fault", "xid", "--fault-host", "h1", "--fault-step", "12",
                "--once", str(tmp_path / "xid.once")]
        for h in ("h0", "h1"):
            live.start_agent(h, worker(*args), nodes="1:2", job=JOB)
        live.start_controller()
        wait_until(lambda: printed_url(tmp_path / "controller.log"), 60, "the controller's metrics URL")
        targets = {"analyzer": printed_url(analyzer.log), "recovery": printed_url(tmp_path / "controller.log")}
        assert all(targets.values()), targets
        prometheus.start({k: str(v) for k, v in targets.items()})

        def ended() -> list[Outcome]:
            return [e for e in live.events if isinstance(e, Outcome) and e.job_id == JOB]

        def recovered(o: Outcome) -> bool:
            return (c := live.state.cases.get(o.incident_id)) is not None and c.cls not in LIFECYCLE

        live.wait_for(lambda s: any(o.result == "resumed" and recovered(o) for o in ended()), 300,
                      "the Xid's recovery to resume the job")
        xids = {e.event_id for e in live.events if isinstance(e, LogLine) and e.category == "xid"}
        assert len(xids) == 1, "the job prints one Xid line"
        key = (("host", "h1"), ("xid", "79"))
        wait_until(lambda: prometheus.query("vigil_xid_events_total") == {key: 1.0}, 120,
                   "Prometheus to read one Xid of h1 from the analyzer")
        outcomes = {o.event_id: o for o in ended()}
        durations = sum(1 for o in outcomes.values() if o.total_s is not None and recovered(o))
        by_outcome = {(("outcome", r),): float(sum(1 for o in outcomes.values() if o.result == r))
                      for r in {o.result for o in outcomes.values()}}
        wait_until(lambda: prometheus.query("sum by (outcome) (vigil_recovery_cases_total)") == by_outcome, 60,
                   f"Prometheus to read the cases by outcome {by_outcome}")
        assert prometheus.query("sum(vigil_recovery_duration_seconds_count)") == {(): float(durations)} and durations
        assert prometheus.query("max(vigil_recovery_leading)") == {(): 1.0}
        assert prometheus.query("sum(vigil_recovery_hosts_cordoned_total)") == {(): 1.0}
        # the counter stays at one Xid while the job trains on and the services are scraped again
        steps = prometheus.query("sum(vigil_ingest_events_total)")[()]
        wait_until(lambda: prometheus.query("sum(vigil_ingest_events_total)")[()] > steps, 60, "more events scraped")
        assert prometheus.query("vigil_xid_events_total") == {key: 1.0}
        print(f"\nprometheus: 1 Xid counted; {len(outcomes)} cases ({by_outcome}), {durations} durations observed")
    finally:
        live.close()
        analyzer.stop()

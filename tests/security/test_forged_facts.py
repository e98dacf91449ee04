"""Forged facts through the real broker into a real controller and agent: none decides, one alert names each.

The attacker holds one training job: it produces to Kafka without a platform key, and may even hold
the key of the one host it runs on (a compromised node). It announces made-up hosts (`member`
reports: unattested, and attested by its own host's key but speaking for another), ends the job's
case with a forged `halted` outcome, and prints an Xid line naming a machine outside the job (the
analyzer then signs a genuine critical `error_log:xid` alert naming it). The controller must admit
no made-up host to a world (no scale-up, no start command to it), must not take the forged outcome
as the case's end (the next fault is recovered, not "skipped: job halted"), and must page instead
of cordoning the outside machine, while the job restarts on its own host.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.support.forgery import forge, security_alerts, signer_of
from tests.support.live import Live, fake_train
from vigil.contract import Alert, Command, Member, Outcome
from vigil.cordons import CordonRegistry
from vigil.recovery.controller.state import alert_key
from vigil.signing import Role

pytestmark = pytest.mark.kafka
JOB = "facts-job"


@pytest.mark.recovery_env({"VIGIL_RECOVERY_POLICY_SCALE_UP_WAIT_S": "0"})
def test_forged_members_outcomes_and_outside_culprits_decide_nothing(live: Live) -> None:
    live.start_job(JOB, ["h1"], fake_train(), nodes="1:2")  # room for one more host: a scale-up at once
    start_case = f"{JOB}/start/g1"
    live.wait_for(lambda _s: any(isinstance(e, Outcome) and e.incident_id == start_case for e in live.events), 60,
                  "the start's outcome")

    waiting = {"job_id": JOB, "state": "waiting", "nodes_min": 1, "nodes_max": 2, "ip": "10.6.6.6", "ports": [29400]}
    forge(live, "recovery", [Member(host="evil-1", **waiting),  # type: ignore[arg-type]
                             signer_of(live, Role.AGENT, "h1").seal(Member(host="evil-2", **waiting))])  # type: ignore[arg-type]
    live.wait_for(lambda _s: len(security_alerts(live, "controller").get("member", [])) == 2, 60,
                  "the forged members' alerts")
    forge(live, "recovery", [Outcome(job_id=JOB, host="controller", incident_id=start_case, result="halted")])
    live.wait_for(lambda _s: "outcome" in security_alerts(live, "controller"), 60, "the forged outcome's alert")

    now = datetime.now(UTC)
    xid = Alert(job_id=JOB, host="kube-master-0", fingerprint=f"{JOB}/error_log/xid/kube-master-0", alert="error_log",
                subject="xid", status="firing", severity="critical", first_seen=now, last_seen=now,
                summary="NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus",
                evidence={"category": "xid", "host": "kube-master-0"})
    live.publish([xid])  # the analyzer's genuine alert on the job's forged log line
    case = alert_key(xid)
    live.wait_for(lambda _s: any(isinstance(e, Outcome) and e.incident_id == case and e.signature
                                 for e in live.events), 120, "the xid case's outcome")

    (ended,) = [e for e in live.events if isinstance(e, Outcome) and e.incident_id == case]
    assert ended.result == "resumed" and ended.cordoned == [] and ended.hosts == ["h1"]  # restarted, on its own host
    assert "kube-master-0" not in CordonRegistry(live.home / "cordons.json").read()
    assert not live.actions(action="cordon", target="kube-master-0")
    (paged,) = [e for e in live.events if isinstance(e, Alert) and e.alert == "recovery"
                and e.evidence.get("outside_job")]
    assert paged.evidence["outside_job"] == ["kube-master-0"] and paged.evidence["incident_id"] == case
    assert not live.actions(incident_id=case, action="plan", status="skipped")  # not "job halted"

    assert not [e for e in live.events if isinstance(e, Command) and e.host.startswith("evil")]
    assert not [a for a in live.actions(actor="controller") if a.incident_id.startswith(f"{JOB}/scale")]
    alerts = security_alerts(live, "controller")
    assert sorted(alerts) == ["member", "outcome"]
    assert sorted((a.host, a.evidence["problem"]) for a in alerts["member"]) == [
        ("evil-1", "unattested"), ("evil-2", "signed by another host")]
    assert len(alerts["outcome"]) == 1 and alerts["outcome"][0].evidence["problem"] == "unsigned"

"""A deposed leader's late steps are not folded as decisions by the new leader (real controller, real broker).

An earlier leader held epoch 1 (its claim, of the form before epochs were recorded, is the lease
topic's first record), so the controller started here leads with a later epoch. Once it leads and has acted on a genuine operator request, a
controller-signed step of epoch 1 arrives, recording that operator request B was carried out:
folded, it would mark B done and the controller would never cordon B's host. It is refused
(one `security` alert, `stale epoch`) and B is carried out.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from tests.support.live import Live
from vigil.contract import Alert, Event, Member, RecoveryAction, encode_batch
from vigil.contract.decisions import operator_request
from vigil.cordons import CordonRegistry
from vigil.kafka.admin import ensure_topics
from vigil.recovery.controller.lease import LEASE_TOPIC
from vigil.signing import KeyStore, Role
from vigil.signing.seal import Ed25519Signer

pytestmark = pytest.mark.kafka
JOB = "fenced-job"


def send(live: Live, topic: str, events: list[Event], role: Role) -> None:
    kid, key = KeyStore(live.home / "keys").private_key(role)
    signer = Ed25519Signer(role=role, key_id=kid, key=key)
    p = Producer({"bootstrap.servers": live.bootstrap})
    for e in events:
        p.produce(live.settings.topic(topic), value=encode_batch([signer.seal(e)]), key=e.host.encode())
    assert p.flush(15) == 0


def test_a_new_leader_refuses_a_deposed_leaders_late_steps(live: Live) -> None:
    ensure_topics(live.settings, live.bootstrap, [LEASE_TOPIC], partitions=1)
    p = Producer({"bootstrap.servers": live.bootstrap})
    p.produce(live.settings.topic(LEASE_TOPIC), value=b"claim", key=b"earlier-leader")  # epoch 1
    assert p.flush(15) == 0
    live.start_controller()
    registry = CordonRegistry(live.home / "cordons.json")
    store = KeyStore(live.home / "keys")
    for h in ("host-a", "host-b"):  # the hosts belong to the job: their agents announced themselves and left
        kid = store.issue(h)
        agent = Ed25519Signer(role=Role.AGENT, key_id=kid, key=store.private_key(Role.AGENT, h)[1])
        p.produce(live.settings.topic("recovery"), key=h.encode(),
                  value=encode_batch([agent.seal(Member(job_id=JOB, host=h, state="left"))]))
    assert p.flush(15) == 0
    first = operator_request(action="cordon", host="host-a", job_id=JOB, reason="genuine", actor="user:ops")
    send(live, "recovery", [first], Role.OPERATOR)
    live.wait_for(lambda _s: "host-a" in registry.read(), 120, "the leader to carry out the first request")
    live.wait_for(lambda _s: live.actions(command_id=first.command_id, status="succeeded"), 60,
                  "the leader's record of it")  # the cordon is made before its event is published
    (done,) = live.actions(command_id=first.command_id, status="succeeded")
    assert done.epoch > 1  # the leader's epoch: after the earlier claim's

    second = operator_request(action="cordon", host="host-b", job_id=JOB, reason="genuine", actor="user:ops")
    late = RecoveryAction(job_id=JOB, host="host-b", action="cordon", target="host-b", status="succeeded",
                          actor="controller", command_id=second.command_id, epoch=1, reason="deposed leader")
    send(live, "recovery", [late], Role.CONTROLLER)  # same partition as the request (key host-b): read before it
    send(live, "recovery", [second], Role.OPERATOR)
    live.wait_for(lambda _s: "host-b" in registry.read(), 120, "the leader to carry out the second request")
    live.wait_for(lambda _s: any(isinstance(e, Alert) and e.alert == "security" for e in live.events), 60,
                  "the security alert")
    alerts = [e for e in live.events if isinstance(e, Alert) and e.alert == "security"]
    assert [(a.subject, a.evidence["problem"], a.evidence["event_id"]) for a in alerts] == [
        ("recovery/request", "stale epoch", late.event_id)]
    assert [a.epoch for a in live.actions(command_id=second.command_id) if a.status == "succeeded"] == [1, done.epoch]

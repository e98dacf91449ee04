"""What `vigil notify test RECEIVER` sends: a real notification document about a made-up alert.

It goes through the same builder and receiver format as every notification (so a receiver
that accepts it accepts the real ones), with reason `test`, job `vigil-test` and a group key
of its own, so it never touches a real group's sequence; one attempt, and its verdict.
"""

from __future__ import annotations

import socket
import uuid
from datetime import datetime

from vigil.contract import Alert
from vigil.notify.formats import render
from vigil.notify.grouping import Group, Member
from vigil.notify.links import Links
from vigil.notify.payload import Notification, build
from vigil.notify.planner import Decision
from vigil.notify.sender import Outcome, Sender
from vigil.notify.settings import Receiver, Timing
from vigil.notify.state import NotifyState

TEST_JOB = "vigil-test"


def make_test_notification(receiver: str, links: Links, now: datetime) -> Notification:
    host = socket.gethostname() or "localhost"
    alert = Alert(job_id=TEST_JOB, host=host, ts=now, fingerprint=f"{TEST_JOB}/test/{host}", alert="test",
                  subject=host, status="firing", severity="info", first_seen=now, last_seen=now,
                  summary=f"vigil test notification from {host}: if you read this, {receiver} receives vigil's",
                  evidence={"sent_by": "vigil notify test"})
    key = f"test|{uuid.uuid4().hex[:12]}"
    group = Group(key=key, route="test", receivers=(receiver,), labels={"job": TEST_JOB}, job_id=TEST_JOB,
                  timing=Timing(group_wait_s=0, group_interval_s=0, repeat_interval_s=1),
                  members=(Member(alert=alert, role="alert"),))
    d = Decision(group_key=key, receiver=receiver, seq=1, status="firing", reason="test", group=group, previous=None,
                 anchor=now.timestamp())
    return build(d, NotifyState(), links, now)


def send_test(receiver: Receiver, sender: Sender, links: Links, now: datetime) -> tuple[Notification, Outcome]:
    n = make_test_notification(receiver.name, links, now)
    return n, sender.send(receiver, n.key, render(receiver.kind, n.doc))

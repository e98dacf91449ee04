"""Services announce their metrics URL on the real broker; `read_services` keeps the newest per instance.

A record that is not a valid announcement (a URL with credentials, an unknown kind of service) is
never read back as one: the contract refuses it.
"""

from __future__ import annotations

import json

import pytest

from tests.support.waiting import wait_until
from vigil.contract.services import SERVICES_TOPIC, ServiceKind
from vigil.kafka.announce import Announcer, reachable, read_services
from vigil.kafka.producer import EventProducer
from vigil.settings import VigilSettings

pytestmark = pytest.mark.kafka


def test_up_then_down_newest_per_instance_and_forged_records_refused(topics: VigilSettings,
                                                                   broker_bootstrap: str) -> None:
    url = "http://0.0.0.0:9102/metrics"
    a = Announcer(topics, broker_bootstrap, ServiceKind.CONTROLLER, metrics_url=lambda: url, instance="c-1")
    b = Announcer(topics, broker_bootstrap, ServiceKind.NOTIFIER, metrics_url=lambda: "", instance="n-1")
    a.start()
    b.start()
    wait_until(lambda: {(str(e.service), e.state) for e in read_services(topics, broker_bootstrap)}
               == {("controller", "up"), ("notifier", "up")}, 60, "both services up")
    (c,) = [e for e in read_services(topics, broker_bootstrap) if e.service == "controller"]
    assert c.metrics_url == reachable(url) and "0.0.0.0" not in c.metrics_url and c.instance == "c-1"
    a.announce("up")  # a second announcement of the same instance replaces the first
    a.stop()
    got = {str(e.service): e for e in read_services(topics, broker_bootstrap)}
    assert len(got) == 2 and got["controller"].state == "down" and got["notifier"].metrics_url == ""
    b.stop()

    # forged records on the topic: a URL with credentials, a service kind outside the enum
    raw = EventProducer(settings=topics, bootstrap=broker_bootstrap)
    base = {"kind": "service", "schema_version": 1, "job_id": "vigil", "host": "x", "ts": c.ts.isoformat(),
            "event_id": "forged-0001", "service": "controller", "instance": "evil", "metrics_url": "http://u:p@evil/m"}
    good = {**base, "event_id": "fine-0003", "instance": "n-2", "metrics_url": "http://n-2:1/metrics"}
    for doc in (base, {**base, "event_id": "forged-0002", "service": "dashboard", "metrics_url": ""}, good):
        body = {"kind": "service", "schema_version": 1, "events": [doc]}  # the wire's row form (encode_batch)
        raw.produce_raw(topics.topic(SERVICES_TOPIC), json.dumps(body).encode())
    raw.flush()
    wait_until(lambda: "n-2" in {e.instance for e in read_services(topics, broker_bootstrap)}, 30,
               "the valid record read")  # the record form is right: only the forged ones are refused
    assert {e.instance for e in read_services(topics, broker_bootstrap)} == {"c-1", "n-1", "n-2"}

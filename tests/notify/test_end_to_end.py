"""From telemetry to on-call: a simulated job with a straggler and an Xid streams through the real broker into
the live analyzer (ingest + detectors) and the notifier; a webhook receiver gets each alert once, signed, and
its resolve once the fault ends. (Simulated time runs 10x faster than the wall clock; the Xid's alert resolves
after 60 s of quiet, seconds of wall clock: longer than the group wait, else it would resolve before it paged,
and a notifier rightly pages nothing for what fired and ended within its group wait.)"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.support.notifier import SECRET
from tests.support.receiver import Receiver, signed_by
from tests.support.waiting import wait_until
from vigil.service import StackContext

pytestmark = [pytest.mark.kafka, pytest.mark.clickhouse, pytest.mark.slow]


def test_simulated_straggler_and_xid_page_once_each_then_resolve(ctx: StackContext, notifier: Any,
                                                                  receiver: Receiver) -> None:
    from tests.support.signed import attested
    from vigil.analyzer.service import AnalyzerService
    from vigil.analyzer.settings import AnalyzerSettings
    from vigil.analyzer.simulator.faults import parse_fault
    from vigil.analyzer.simulator.layout import Layout
    from vigil.analyzer.simulator.model import SimConfig, Simulation
    from vigil.analyzer.simulator.runner import run
    from vigil.kafka.producer import EventProducer

    analyzer = AnalyzerService(ctx, AnalyzerSettings(group_id=f"a-{ctx.settings.topic_prefix}", batch_s=0.3,
                                                     detect_interval_s=0.5, log_resolve_s=60))
    analyzer.start()
    try:
        svc = notifier(routes=[{"name": "faults", "kind": ["straggler", "error_log"], "receivers": ["oncall"]}],
                       default_receivers=[])
        faults = ["straggler:host=sim-host-0003,start=20,duration=40,magnitude=0.10", "xid:host=sim-host-0005,start=25"]
        sim = Simulation(SimConfig(job="e2e", layout=Layout(hosts=8, gpus_per_host=2, pp=1), seed=3,
                                   faults=[parse_fault(f) for f in faults], start=datetime.now(UTC)))
        producer = EventProducer(settings=ctx.settings, bootstrap=ctx.bootstrap)
        run(sim, 110, lambda evs: producer.send(attested(ctx.settings.home, evs)), speed=10.0)  # agents attest
        producer.flush()
        wait_until(lambda: len(receiver.delivered()) == 4, 120, "two pages and two resolves")
        wait_until(lambda: analyzer.health()["lag"].get(ctx.settings.topic("steps"), 1) == 0, 60, "ingest caught up")
        target = svc.ticks + 10
        wait_until(lambda: svc.ticks >= target, 30, "the notifier to settle")
    finally:
        analyzer.stop()
    docs = [r.json() for r in receiver.all()]
    assert len(docs) == 4 and len({d["key"] for d in docs}) == 4
    assert sorted((d["alerts"][0]["fingerprint"], d["status"]) for d in docs) == [
        ("e2e/error_log/sim-host-0005/xid", "firing"), ("e2e/error_log/sim-host-0005/xid", "resolved"),
        ("e2e/straggler/sim-host-0003/forward", "firing"), ("e2e/straggler/sim-host-0003/forward", "resolved")]
    first = {d["alerts"][0]["alert"]: i for i, d in reversed(list(enumerate(docs)))}
    assert all(docs[first[d["alerts"][0]["alert"]]]["status"] == "firing" for d in docs), "each page before its resolve"
    assert all(signed_by(SECRET.encode(), r) for r in receiver.all())
    straggler = next(d for d in docs if d["alerts"][0]["alert"] == "straggler" and d["status"] == "firing")
    assert straggler["links"]["dashboard"] == "http://dash.example/heatmap?job=e2e"
    assert "sim-host-0003" in straggler["title"] and straggler["alerts"][0]["evidence"]

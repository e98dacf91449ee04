"""The notifier's two costs: deciding (every tick, over everything it knows) and delivering (HTTP + a saved state).

1. Planning: a Decider holding the alerts of a 1024-host fleet (`--firing` firing across job x kind
   groups and incidents, `--resolved` resolved ones kept for a day), 50 silences and 10 routes;
   time of one `decide()` when nothing is due (what every tick costs) and when every group
   becomes due at once (a fleet-wide event's first notifications).
2. Delivery: `--deliveries` notifications queued for a real HTTP receiver on a loopback port,
   each saved to an embedded ClickHouse before it is queued and after it is delivered (as the
   service does); wall time to drain the queue, with 1 and 4 lanes.

    python bench/notify_throughput.py [--firing 3000] [--resolved 20000] [--deliveries 1000] [--no-append]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from analyzer_common import append_results, machine_info

from vigil.app.components import migrate_all
from vigil.clickhouse.client import connect
from vigil.contract import Alert, Incident, RankRef
from vigil.notify.decider import Decider
from vigil.notify.dispatch import Dispatcher
from vigil.notify.formats import render
from vigil.notify.links import Links
from vigil.notify.outbox import Delivery, Outbox
from vigil.notify.sender import HttpSender
from vigil.notify.settings import NotifySettings
from vigil.notify.silences import new_silence

KINDS = ("straggler", "error_log", "heartbeat_loss", "traffic_stall", "process_exit")


def fleet(firing: int, resolved: int, now: datetime) -> list[Alert | Incident]:
    out: list[Alert | Incident] = []
    for i in range(firing + resolved):
        job, kind, host = f"job-{i % 16:02d}", KINDS[i % len(KINDS)], f"node-{i % 1024:04d}"
        status = "firing" if i < firing else "resolved"
        out.append(Alert(job_id=job, host=host, ts=now, fingerprint=f"{job}/{kind}/{host}/{i}", alert=kind,
                         subject=f"{host}/{i}", status=status, severity="error", summary=f"{kind} on {host}",
                         first_seen=now, last_seen=now, evidence={"n": i}))
    listed = [a.fingerprint for a in out[:200] if isinstance(a, Alert) and a.alert == "process_exit"]
    for k in range(4):
        out.append(Incident(job_id=f"job-{k:02d}", host="node-0001", ts=now, incident_id=f"inc-{k}",
                            category="crash_cascade", cause="hardware", status="open", severity="critical",
                            summary="crash", culprits=[RankRef(host="node-0001", rank=1)],
                            victims=[RankRef(host=f"node-{v:04d}") for v in range(2, 60)],
                            alerts=listed[k::4], first_sign=now, detected=now))
    return out


def bench_planning(firing: int, resolved: int) -> tuple[str, dict[str, float]]:
    now = datetime.now(UTC)
    routes = [{"name": f"r{i}", "job": f"job-{i:02d}", "kind": [KINDS[i % 5]], "receivers": ["a"]} for i in range(9)]
    routes.append({"name": "rest", "receivers": ["a"]})
    s = NotifySettings(receivers={"a": {"url": "http://127.0.0.1:9/x"}}, routes=routes, group_wait_s=0)
    d = Decider(settings=s, links=Links("http://dash"))
    for e in fleet(firing, resolved, now):
        d.state.apply(e)
    for i in range(50):
        d.state.apply(new_silence({"job": f"job-{i % 16:02d}", "host": f"node-{i:04d}"}, timedelta(hours=1), "b",
                                  "bench", now))
    t = time.perf_counter()
    due = d.decide(time.time())
    first = time.perf_counter() - t
    d.record(due)
    idle = []
    for _ in range(7):
        t = time.perf_counter()
        assert d.decide(time.time()) == []
        idle.append(time.perf_counter() - t)
    return (f"{firing:,} firing + {resolved:,} resolved alerts, 4 incidents, 50 silences, 10 routes: "
            f"{d.groups_firing} groups"), {"idle": statistics.median(idle), "all_due": first, "due": len(due)}


class _Ok(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *_a: Any) -> None:
        pass


def bench_delivery(n: int, lanes: int, client: Any) -> float:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    s = NotifySettings(receivers={"a": {"url": url, "secret": "k", "concurrency": lanes}}, group_wait_s=0)
    d = Decider(settings=s, links=Links("http://dash"))
    now = datetime.now(UTC)
    for i in range(n):  # one group each: job x kind
        job = f"bench-{lanes}-{i}"
        d.state.apply(Alert(job_id=job, host="node-0001", ts=now, fingerprint=f"{job}/xid/node-0001", alert="error_log",
                            subject="node-0001/xid", status="firing", severity="critical", summary="Xid 79",
                            first_seen=now, last_seen=now, evidence={"xid": 79}))
    due = d.decide(time.time())
    outbox = Outbox(client)
    deliveries = [Delivery.of(x, "webhook", render("webhook", x.doc)) for x in due]
    outbox.save(deliveries)
    sender = HttpSender()
    dispatcher = Dispatcher(d.settings.resolved_receivers(), outbox, sender, s)
    t = time.perf_counter()
    dispatcher.start(deliveries)
    while dispatcher.stats["a"].delivered < len(deliveries):
        time.sleep(0.01)
    took = time.perf_counter() - t
    dispatcher.stop()
    sender.close()
    server.shutdown()
    server.server_close()
    return len(deliveries) / took


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--firing", type=int, default=3000)
    ap.add_argument("--resolved", type=int, default=20000)
    ap.add_argument("--deliveries", type=int, default=1000)
    ap.add_argument("--no-append", dest="append", action="store_false", help="print only; do not add to bench/RESULTS.md")
    args = ap.parse_args(argv)
    what, plan = bench_planning(args.firing, args.resolved)
    client = connect(f"chdb://{tempfile.mkdtemp(prefix='vigil-bench-notify-')}", database="bench")
    migrate_all(client, 30)
    rates = {lanes: bench_delivery(args.deliveries, lanes, client) for lanes in (1, 4)}
    body = (f"{machine_info()}\n\nPlanning over {what}.\n\n"
            "| what | figure |\n|---|---:|\n"
            f"| decide(), nothing due (every tick) | {plan['idle'] * 1000:.0f} ms |\n"
            f"| decide(), all {plan['due']:.0f} groups due at once | {plan['all_due'] * 1000:.0f} ms |\n"
            f"| delivery, 1 lane (HTTP on loopback + 2 saved revisions each, chdb) | {rates[1]:.0f} notifications/s |\n"
            f"| delivery, 4 lanes | {rates[4]:.0f} notifications/s |\n"
            f"\n{args.deliveries:,} notifications per delivery run, signed, to a local receiver answering 200.\n")
    print(body)
    if args.append:
        append_results("notify_throughput.py", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())

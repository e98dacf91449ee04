"""`vigil notify [run | status | test RECEIVER]` and `vigil silence add | list | expire`.

`notify run` is the notifier on its own (production: exactly one per cluster; `vigil up`
hosts it otherwise). `notify status` reads the delivery log from ClickHouse (through a running
`vigil up` when it holds the embedded engine). `notify test` sends one test notification
straight to a receiver and prints its answer. Silences are events: `silence add` and
`silence expire` publish them to the silences topic, `silence list` folds them back (with the
notifier's copy in ClickHouse, for silences older than the topic's retention).
"""

from __future__ import annotations

import argparse
import getpass
import json
import logging
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from vigil.app.cli.analyzer import parse_time
from vigil.app.cli.serving import serve
from vigil.redact import shown_dsn
from vigil.settings import VigilSettings

log = logging.getLogger(__name__)
MAX_SILENCE = timedelta(days=365)


def register(sub: Any) -> None:
    nt = sub.add_parser("notify", help="on-call notifications: run the notifier, its delivery status, a test send")
    nt.set_defaults(handler=cmd_run)
    nt_sub = nt.add_subparsers(dest="notify_command", metavar="SUBCOMMAND")
    nt_sub.add_parser("run", help="run the notifier standalone (the default; exactly one per cluster)") \
        .set_defaults(handler=cmd_run)
    st = nt_sub.add_parser("status", help="receivers and their deliveries, from the delivery log")
    st.add_argument("--range", dest="range_s", type=float, default=24.0, metavar="HOURS",
                    help="count deliveries decided in the last HOURS (default 24; 0 = all)")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.set_defaults(handler=cmd_status)
    te = nt_sub.add_parser("test", help="send a test notification to one receiver and print its answer")
    te.add_argument("receiver", help="receiver name ([notify.receivers.NAME], or 'webhook')")
    te.set_defaults(handler=cmd_test)

    si = sub.add_parser("silence", help="mute notifications that match, for a while, with a reason")
    si.set_defaults(handler=lambda _args: si.print_help() or 2)
    si_sub = si.add_subparsers(dest="silence_command", metavar="SUBCOMMAND")
    add = si_sub.add_parser("add", help="add a silence")
    add.add_argument("--match", action="append", required=True, metavar="LABEL=GLOB",
                     help="what to mute (repeatable, or comma-separated; all must match): job, kind, severity, "
                          "host, subject, category, incident_id, ...")
    add.add_argument("--for", dest="duration", required=True, metavar="DURATION", help="how long: 30m, 2h, 1d")
    add.add_argument("--reason", required=True, help="why (shown with the silence)")
    add.add_argument("--by", default=None, help="who (default: the login name)")
    add.add_argument("--start", type=parse_time, default=None, metavar="T", help="from when (default now)")
    add.set_defaults(handler=cmd_silence_add)
    ls = si_sub.add_parser("list", help="silences, active and pending (and expired with --all)")
    ls.add_argument("--all", action="store_true", help="include expired silences")
    ls.add_argument("--json", action="store_true", help="a JSON list of silence events")
    ls.set_defaults(handler=cmd_silence_list)
    ex = si_sub.add_parser("expire", help="end a silence now")
    ex.add_argument("silence_id", help="the id `silence add` printed (`silence list` shows them)")
    ex.set_defaults(handler=cmd_silence_expire)


def cmd_run(args: argparse.Namespace) -> int:
    from vigil.app.stack.runner import prepare
    from vigil.app.stack.state import resolve_bootstrap
    from vigil.notify.service import NotifyService
    from vigil.notify.settings import NotifySettings

    settings = VigilSettings.load()
    notify = NotifySettings.load()
    bootstrap = resolve_bootstrap(settings)
    ctx = prepare(settings, bootstrap)
    service = NotifyService(ctx, notify)
    names = ", ".join(f"{r!r}" for r in service.receivers.values()) or "none configured"

    def report() -> str:
        h = service.health()
        pending = sum(r["pending"] for r in h["receivers"].values())
        return (f"events={h['events']} firing_groups={h['groups_firing']} decided={h['decided']} pending={pending} "
                f"silences={h['silences_active']} {h['last_error']}")

    return serve(service, name="notifier", report=report,
                 banner=lambda: f"notifier running: kafka {bootstrap}, clickhouse {shown_dsn(ctx.clickhouse_dsn)}; "
                                f"receivers: {names}; metrics {service.health()['metrics_url'] or 'off'}. Ctrl-C stops it.")


def cmd_status(args: argparse.Namespace) -> int:
    import time

    from vigil.app.stack.access import clickhouse_for_cli
    from vigil.dashboard.queries import notifications as q
    from vigil.dashboard.store import Store
    from vigil.notify.settings import NotifySettings

    notify = NotifySettings.load()
    receivers = notify.resolved_receivers()
    store = Store(client=clickhouse_for_cli(VigilSettings.load()))
    rows = {r["receiver"]: r for r in q.summary(store, range_s=int(args.range_s * 3600))}
    silences = q.silences(store)
    now_ms = time.time() * 1000
    out: list[dict[str, Any]] = []
    for name in sorted(set(receivers) | set(rows)):
        r = rows.get(name, {})
        behind_s = (now_ms - float(r["oldest_pending_ms"])) / 1000 if r.get("pending") else 0.0
        cfg = receivers.get(name)
        out.append({"receiver": name, "configured": cfg is not None, "kind": cfg.kind if cfg else r.get("kind"),
                    "where": cfg.where if cfg else "", "signed": bool(cfg and cfg.secret),
                    **{k: int(r.get(k, 0)) for k in ("pending", "delivered", "failed", "lost", "attempts")},
                    "oldest_pending_s": round(behind_s, 1), "last_error": r.get("last_error", ""),
                    "ok": behind_s <= notify.stuck_after_s})
    ok = all(x["ok"] for x in out)
    if args.json:
        print(json.dumps({"ok": ok, "receivers": out, "silences_active": len(silences)}, indent=2))
    else:
        if not out:
            print("no receivers configured (VIGIL_NOTIFY_WEBHOOK_URL, or [notify.receivers.NAME] in VIGIL_CONFIG)")
        for x in out:
            flag = "ok " if x["ok"] else "BAD"
            print(f"{flag} {x['receiver']:<12} {x['kind'] or '?':<12} {x['where'] or '(not configured)':<32} "
                  f"delivered={x['delivered']} pending={x['pending']} failed={x['failed']} lost={x['lost']}"
                  + (f" oldest_pending={x['oldest_pending_s']:.0f}s" if x["pending"] else "")
                  + (f"  last error: {x['last_error']}" if x["last_error"] else ""))
        print(f"{len(silences)} silences active or pending (`vigil silence list`)")
    return 0 if ok else 1


def cmd_test(args: argparse.Namespace) -> int:
    from vigil.dashboard.settings import DashboardSettings
    from vigil.notify import NotificationRefused
    from vigil.notify.links import Links
    from vigil.notify.selftest import send_test
    from vigil.notify.sender import HttpSender
    from vigil.notify.settings import NotifySettings

    notify = NotifySettings.load()
    receivers = notify.resolved_receivers()
    receiver = receivers.get(args.receiver)
    if receiver is None:
        raise ValueError(f"no receiver named {args.receiver!r}; configured: {', '.join(sorted(receivers)) or 'none'}")
    sender = HttpSender()
    try:
        n, outcome = send_test(receiver, sender, Links(notify.dashboard_url or DashboardSettings.load().base_url()),
                               datetime.now(UTC))
    finally:
        sender.close()
    if outcome.verdict != "delivered":
        raise NotificationRefused(f"{receiver!r} did not accept the test notification ({outcome.error}; "
                                  f"{'would be retried' if outcome.verdict == 'retry' else 'not retryable'})")
    print(f"delivered to {receiver!r}: HTTP {outcome.http_status} in {outcome.elapsed_ms:.0f} ms (key {n.key})")
    return 0


def _kafka() -> tuple[VigilSettings, str]:
    from vigil.app.stack.state import resolve_bootstrap

    settings = VigilSettings.load()
    return settings, resolve_bootstrap(settings)


def _publish(settings: VigilSettings, bootstrap: str, events: list[Any]) -> None:
    from vigil.kafka.admin import ensure_topics
    from vigil.kafka.producer import EventProducer
    from vigil.signing import Role
    from vigil.signing.setup import signer

    ensure_topics(settings, bootstrap, ["silences"])
    producer = EventProducer(settings=settings, bootstrap=bootstrap, signer=signer(Role.OPERATOR, settings.home))
    producer.send(events)
    producer.flush()


def known_silences(settings: VigilSettings, bootstrap: str) -> Any:
    """The silences topic folded, with the notifier's ClickHouse copy when it can be read."""
    from vigil.contract import Silence
    from vigil.contract.wire import decode_batch
    from vigil.kafka.reader import read_topics
    from vigil.notify.silences import SilenceBook

    book = SilenceBook()
    try:
        from vigil.app.stack.access import clickhouse_for_cli

        for (event,) in clickhouse_for_cli(settings).query("SELECT event FROM notify_silences FINAL").result_rows:
            book.apply(Silence.model_validate_json(event))
    except Exception as exc:  # no notifier tables yet, or ClickHouse unreachable: the topic alone
        log.debug("silences from ClickHouse unavailable: %s", exc)
    from vigil.signing.readers import verified

    read = [e for rec in read_topics(settings, bootstrap, [settings.topic("silences")], timeout=10)
            for e in decode_batch(rec.value).events if isinstance(e, Silence)]
    kept, forged = verified(read, settings.home, "silences")  # a forged silence is a claim, never listed as one
    if forged:
        print(f"({forged} unverified silences left out: not signed by the operator key)", file=sys.stderr)
    for e in kept:
        book.apply(e)
    return book


def cmd_silence_add(args: argparse.Namespace) -> int:
    from vigil.notify.silences import new_silence, parse_duration, parse_matchers

    matchers = parse_matchers(args.match)
    duration = parse_duration(args.duration)
    if duration > MAX_SILENCE:
        raise ValueError(f"--for {args.duration}: a silence lasts at most 365 days")
    now = datetime.now(UTC)
    start = args.start or now
    if start < now - timedelta(minutes=5):
        raise ValueError("--start lies in the past; a silence starts now or later")
    silence = new_silence(matchers, duration, args.reason, args.by or getpass.getuser(), now)
    silence = silence.model_copy(update={"starts_at": start, "ends_at": start + duration})
    settings, bootstrap = _kafka()
    _publish(settings, bootstrap, [silence])
    print(f"silence {silence.silence_id}: {_describe(silence)}")
    return 0


def _describe(s: Any) -> str:
    matchers = ", ".join(f"{k}={v}" for k, v in s.matchers.items())
    return (f"{matchers}  from {s.starts_at:%Y-%m-%d %H:%M} until {s.ends_at:%Y-%m-%d %H:%M} UTC  "
            f"by {s.created_by}: {s.reason}")


def cmd_silence_list(args: argparse.Namespace) -> int:
    from vigil.notify.silences import state_of

    settings, bootstrap = _kafka()
    now = datetime.now(UTC)
    rows = known_silences(settings, bootstrap).listing(now, include_expired=args.all)
    if args.json:
        print(json.dumps([{**s.model_dump(mode="json"), "state": state_of(s, now)} for s in rows], indent=2))
    else:
        for s in rows:
            print(f"{s.silence_id}  {state_of(s, now):<8} {_describe(s)}")
        if not rows:
            print("(no silences)", file=sys.stderr)
    return 0


def cmd_silence_expire(args: argparse.Namespace) -> int:
    from vigil.notify.silences import expired, state_of

    settings, bootstrap = _kafka()
    now = datetime.now(UTC)
    held = known_silences(settings, bootstrap).silences.get(args.silence_id)
    if held is None:
        raise ValueError(f"no silence {args.silence_id!r} (`vigil silence list --all` shows them)")
    if state_of(held, now) == "expired":
        print(f"silence {args.silence_id} had already expired")
        return 0
    _publish(settings, bootstrap, [expired(held, now)])
    print(f"silence {args.silence_id} expired")
    return 0

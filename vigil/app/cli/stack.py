"""`vigil up | status | down | migrate`: the embedded stack's lifecycle and health."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from vigil.app.components import SERVICES
from vigil.errors import MigrationError, StackError, Unreachable, VigilError
from vigil.redact import shown_dsn
from vigil.service import ServiceSpec
from vigil.settings import VigilSettings


def register(sub: Any) -> None:
    names = ", ".join(s.name for s in SERVICES)
    up = sub.add_parser("up", help=f"start the embedded stack (broker, ClickHouse, {names})")
    up.add_argument("--detach", action="store_true", help="return once everything is ready; stop with `vigil down`")
    for spec in SERVICES:
        up.add_argument(f"--no-{spec.name}", action="store_true", help=f"do not host the {spec.name} ({spec.help})")
    up.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for readiness with --detach")
    up.set_defaults(handler=cmd_up)

    st = sub.add_parser("status", help="health of each part; non-zero exit when something is down")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.set_defaults(handler=cmd_status)

    down = sub.add_parser("down", help="stop the embedded stack and everything it started")
    down.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for a clean stop before killing")
    down.set_defaults(handler=cmd_down)

    mig = sub.add_parser("migrate", help="apply pending ClickHouse migrations (idempotent)")
    mig.set_defaults(handler=cmd_migrate)

    from vigil.app.cli import tail

    tail.register(sub)


def _services(args: argparse.Namespace) -> list[ServiceSpec]:
    return [spec for spec in SERVICES if not getattr(args, f"no_{spec.name}")]


def cmd_up(args: argparse.Namespace) -> int:
    settings = VigilSettings.load()
    if args.detach:
        return _up_detached(settings, args)
    from vigil.app.stack.runner import Stack
    from vigil.runtime import tune_gc

    stack = Stack(settings=settings, services=_services(args))
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    state = stack.start()
    tune_gc()  # this process hosts the services from here on
    _print_ready(settings, state.bootstrap, state.clickhouse_dsn, state.control_url, state.urls)
    print("Ctrl-C or `vigil down` stops it.", flush=True)
    try:
        stack.wait(stop)
    finally:
        stack.stop()
        print("vigil stack stopped.", flush=True)
    return 0


def _up_detached(settings: VigilSettings, args: argparse.Namespace) -> int:
    from vigil.app.stack.runner import wait_for_state
    from vigil.app.stack.state import read_state

    if (running := read_state(settings)) is not None:
        raise StackError(f"a stack is already running under VIGIL_HOME={settings.home} (pid {running.pid})")
    settings.home.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "vigil", "up"]
    argv += [f"--no-{s.name}" for s in SERVICES if getattr(args, f"no_{s.name}")]
    with open(settings.home / "up.log", "ab") as logf:
        child = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True, env=os.environ.copy())
    try:
        state = wait_for_state(settings, child.pid, args.timeout, lambda: child.poll() is None)
    except StackError:
        if child.poll() is None:
            child.terminate()
        tail = (settings.home / "up.log").read_text(errors="replace").strip().splitlines()[-5:]
        raise StackError("the stack did not come up: " + (" | ".join(tail) or "no output")) from None
    _print_ready(settings, state.bootstrap, state.clickhouse_dsn, state.control_url, state.urls)
    print(f"running in the background (pid {state.pid}); `vigil down` stops it.")
    return 0


def _print_ready(settings: VigilSettings, bootstrap: str, dsn: str, control: str, urls: dict[str, str]) -> None:
    print(f"vigil stack is up (VIGIL_HOME={settings.home})")
    print(f"  kafka       {bootstrap}   (export VIGIL_KAFKA_BOOTSTRAP={bootstrap} to reach it from elsewhere)")
    print(f"  clickhouse  {shown_dsn(dsn)}")
    print(f"  control     {control}")
    for name, url in urls.items():
        print(f"  {name:<11} {url}")
    sys.stdout.flush()


def cmd_status(args: argparse.Namespace) -> int:
    settings = VigilSettings.load()
    report = stack_health(settings)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print(f"vigil: {'OK' if report['ok'] else 'DOWN'}  ({report.get('mode')})")
        for name, part in report.get("parts", {}).items():
            detail = ", ".join(f"{k}={v}" for k, v in part.items() if k not in ("ok", "metrics_url", "shards"))
            print(f"  {'ok ' if part.get('ok') else 'BAD'} {name:<11} {detail}")
            for shard in part.get("shards", []):
                print(f"      shard {shard_line(shard)}")
        for name, part in report.get("parts", {}).items():
            if part.get("metrics_url"):
                print(f"  metrics {name:<11} {part['metrics_url']}")
        if report.get("metrics_url"):
            print(f"  metrics {'(all)':<11} {report['metrics_url']} (Authorization: Bearer <token from stack.json>)")
        for svc in report.get("services", []):  # external: what each service announced on the log
            if svc.get("error"):
                print(f"  services    not read: {svc['error']}")
            elif svc["state"] == "up":
                print(f"  metrics {svc['service']:<11} {svc['metrics_url'] or 'off'}  ({svc['instance']}, announced "
                      f"{svc['age_s']:.0f} s ago{', STALE' if svc['stale'] else ''})")
        if report.get("error"):
            print(f"  {report['error']}")
    return 0 if report["ok"] else 1


def shard_line(s: dict[str, Any]) -> str:
    """One detect shard as `vigil status` prints it (analyzer/shardreport.py's fields)."""
    turn = "no turn yet" if s["last_turn_s_ago"] is None else f"last turn {s['last_turn_s_ago']} s ago"
    more = f" (+{s['jobs_total'] - len(s['jobs'])})" if s["jobs_total"] > len(s["jobs"]) else ""
    return (f"{s['shard']}: partitions {','.join(map(str, s['partitions'])) or '-'}; jobs "
            f"{','.join(s['jobs']) or '-'}{more}; {turn}, behind {s['behind_s']} s, backlog {s['backlog']}; "
            f"reported {s['age_s']} s ago")


def stack_health(settings: VigilSettings) -> dict[str, Any]:
    import httpx

    from vigil.app.stack.state import read_state

    state = read_state(settings)
    if state is not None:
        try:
            doc: dict[str, Any] = httpx.get(f"{state.control_url}/health", headers=state.control_headers,
                                            timeout=10).json()
        except httpx.HTTPError as exc:
            return {"ok": False, "mode": "embedded", "error": f"control port {state.control_url}: {exc}"}
        doc["mode"] = f"stack pid {state.pid}"
        return doc
    if settings.kafka_bootstrap is None:
        return {"ok": False, "mode": "embedded", "parts": {},
                "error": f"no stack running under VIGIL_HOME={settings.home}; `vigil up --detach` starts one"}
    return _direct_health(settings)


def _direct_health(settings: VigilSettings) -> dict[str, Any]:
    from vigil.clickhouse.client import check, connect
    from vigil.kafka.admin import check_reachable

    parts: dict[str, dict[str, Any]] = {}
    bootstrap = str(settings.kafka_bootstrap)
    try:
        parts["kafka"] = {"ok": True, "bootstrap": bootstrap, "topics": len(check_reachable(settings, bootstrap))}
    except Unreachable as exc:
        parts["kafka"] = {"ok": False, "error": str(exc)}
    dsn = settings.effective_clickhouse_dsn
    try:
        parts["clickhouse"] = {"ok": True, "dsn": shown_dsn(dsn), "version": check(connect(dsn, explicit=True))}
    except VigilError as exc:
        parts["clickhouse"] = {"ok": False, "error": str(exc)}
    if parts["kafka"]["ok"]:
        for spec in SERVICES:
            if spec.probe is not None:
                parts[spec.name] = spec.probe(settings, bootstrap)
    report: dict[str, Any] = {"ok": all(p["ok"] for p in parts.values()), "mode": "external", "parts": parts}
    if parts["kafka"]["ok"]:
        report["services"] = _announced(settings, bootstrap)
    return report


def _announced(settings: VigilSettings, bootstrap: str) -> list[dict[str, Any]]:
    """Each service instance's newest announcement (`vigil.kafka.announce`): kind, instance, metrics URL, age;
    stale when it missed three of its announcements."""
    from vigil.contract.base import utcnow
    from vigil.kafka.announce import age_s, read_services

    try:
        found = read_services(settings, bootstrap)
    except VigilError as exc:
        return [{"service": "?", "instance": "?", "state": "unknown", "error": str(exc)}]
    now = utcnow()
    return [{"service": str(e.service), "instance": e.instance, "host": e.host, "state": e.state,
             "metrics_url": e.metrics_url, "age_s": round(age_s(e, now), 1),
             "stale": age_s(e, now) > 3 * e.interval_s} for e in found]


def cmd_down(args: argparse.Namespace) -> int:
    from vigil.app.stack.state import clear_state, pid_alive, read_state

    settings = VigilSettings.load()
    state = read_state(settings)
    if state is None:
        print(f"no stack running under VIGIL_HOME={settings.home}")
        clear_state(settings)
        return 0
    os.kill(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + args.timeout
    while pid_alive(state.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if pid_alive(state.pid):
        os.kill(state.pid, signal.SIGKILL)
    if state.broker_pid and pid_alive(state.broker_pid):
        os.kill(state.broker_pid, signal.SIGKILL)
    clear_state(settings)
    print(f"vigil stack (pid {state.pid}) stopped.")
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    import httpx

    from vigil.app.components import migrate_all
    from vigil.app.stack.state import read_state
    from vigil.clickhouse.client import connect

    settings = VigilSettings.load()
    dsn = settings.effective_clickhouse_dsn
    state = read_state(settings)
    if dsn.startswith("chdb://") and state is not None and state.clickhouse_dsn == dsn:
        try:  # the running stack holds this engine (one per process): it migrates for us
            resp = httpx.post(f"{state.control_url}/migrate", headers=state.control_headers, timeout=120)
            report = resp.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise Unreachable(f"vigil up control port {state.control_url}: {exc}") from None
        if resp.status_code == 409:
            raise MigrationError(f"{report.get('error')}. This `vigil up` hosts the ingest: `vigil down`, then "
                                 "`vigil up` (it applies it before hosting any service) or `vigil migrate`")
        if resp.status_code != 200:
            raise Unreachable(f"migrating via {state.control_url}: {report.get('error', resp.status_code)}")
    else:
        from dataclasses import asdict

        report = asdict(migrate_all(connect(dsn, explicit=settings.clickhouse_dsn is not None),
                                    settings.retention_days))
    for label in report["applied"]:
        print(f"applied   {label}")
    for label in report["already"]:
        print(f"ok        {label}")
    for label in report["changed"]:
        print(f"CHANGED   {label} (applied earlier with different content; not re-run)")
    for label in report.get("retention", []):
        print(f"retention {label}")
    return 0

"""`vigil recovery run|status|history|approve` and `vigil cordon|uncordon HOST`.

The controller (`run`) and the operator's view of it; see recovery/README.md. `status` and
`history` fold the recovery log the way the controller does (no consumer group); `approve`
and `cordon`/`uncordon` publish their decision as a `recovery` event with who made it.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from datetime import UTC, datetime
from typing import Any

from vigil.app.cli.serving import serve
from vigil.settings import VigilSettings


def register(sub: Any) -> None:
    rec = sub.add_parser("recovery", help="the recovery controller: run it, see what it does, approve its plans")
    rsub = rec.add_subparsers(dest="recovery_command", metavar="SUBCOMMAND", required=True)
    run = rsub.add_parser("run", help="run the controller (one instance leads; the others stand by)")
    run.add_argument("--mode", choices=("auto", "dry-run", "manual"),
                     help="auto: act; dry-run: decide and publish only; manual: wait for approval "
                          "(default: VIGIL_RECOVERY_MODE, else auto)")
    run.add_argument("--duration", type=float, metavar="S", help="stop after S seconds (default: until SIGTERM)")
    run.set_defaults(handler=cmd_run)
    for name, helptext, handler in (("status", "jobs under control, open recoveries, cordoned hosts", cmd_status),
                                    ("history", "every recovery with its steps, timings and costs", cmd_history)):
        p = rsub.add_parser(name, help=helptext)
        p.add_argument("--job", help="only this job")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.add_argument("--timeout", type=float, default=15.0, help="seconds to read the log")
        p.set_defaults(handler=handler)
    ap = rsub.add_parser("approve", help="let a recovery waiting for approval go on, or resume a halted job")
    ap.add_argument("id", metavar="ID", help="the recovery's id or short id (see `vigil recovery status`)")
    ap.add_argument("--by", default=None, help="who approves (default: the user name)")
    ap.set_defaults(handler=cmd_approve)

    cordon = sub.add_parser("cordon", help="take a host out of service (the node backend; audited)")
    cordon.add_argument("host", help="the host (as its agent names it: `vigil run --host`)")
    cordon.add_argument("--reason", required=True, help="why (kept with the cordon and in the recovery log)")
    cordon.add_argument("--job", default="*", help="the job it concerns, for the log (default *)")
    cordon.set_defaults(handler=cmd_cordon)
    uncordon = sub.add_parser("uncordon", help="put a host back in service")
    uncordon.add_argument("host", help="the host to put back")
    uncordon.add_argument("--reason", default="", help="why")
    uncordon.add_argument("--job", default="*", help="the job it concerns, for the log (default *)")
    uncordon.set_defaults(handler=cmd_uncordon)


def _bootstrap(core: VigilSettings) -> str:
    from vigil.app.stack.state import resolve_bootstrap

    return resolve_bootstrap(core)


def _user(given: str | None = None) -> str:
    try:
        return given or os.environ.get("VIGIL_USER") or getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def cmd_run(args: argparse.Namespace) -> int:
    from vigil.recovery.controller.service import RecoveryService
    from vigil.recovery.settings import RecoverySettings

    core = VigilSettings.load()
    settings = RecoverySettings.load(**({"mode": args.mode} if args.mode else {}))
    service = RecoveryService(core, _bootstrap(core), settings)
    return serve(service, name="controller", duration=args.duration,
                 banner=lambda: f"controller running: metrics {service.health()['metrics_url'] or 'off'}")


def _state(args: argparse.Namespace) -> tuple[VigilSettings, str, Any]:
    """The folded recovery log; the events the controller's gate refuses are left out, and counted (stderr)."""
    from vigil.recovery.controller.report import read_state_checked
    from vigil.signing.readers import left_out

    core = VigilSettings.load()
    bootstrap = _bootstrap(core)
    state, refused = read_state_checked(core, bootstrap, timeout=getattr(args, "timeout", 15.0))
    if refused:
        print(left_out(refused, "recovery events"), file=sys.stderr)
    return core, bootstrap, state


def _print(doc: dict[str, Any], as_json: bool, text: str) -> None:
    print(json.dumps(doc, indent=2, default=str) if as_json else text)


def cmd_status(args: argparse.Namespace) -> int:
    from vigil.recovery.backends import select
    from vigil.recovery.controller.faulthistory import fault_history, format_faults
    from vigil.recovery.controller.report import format_status, status
    from vigil.recovery.settings import RecoverySettings

    core, _, state = _state(args)
    settings = RecoverySettings.load()
    backend = select(settings, core)
    now, cordoned = datetime.now(UTC), backend.cordoned()
    doc = status(state, now, cordoned, args.job)
    doc["faults"] = fault_history(state, cordoned, now, window_s=settings.policy.repeat_window_s,
                                  repeat_faults=settings.policy.repeat_faults)
    quarantined = backend.quarantined()  # single GPUs out, their hosts in service
    doc["quarantined_gpus"] = {h: {"gpus": list(q.gpus), "reason": q.reason, "incident_id": q.incident_id, "at": q.at}
                               for h, q in sorted(quarantined.items())}
    text = "\n".join([format_status(doc), "quarantined GPUs: " + (", ".join(
        f"{h} GPU {','.join(map(str, q.gpus))} ({q.reason[:60]})" for h, q in sorted(quarantined.items())) or "none"),
        *format_faults(doc["faults"])])
    if (others := getattr(backend, "drained_by_others", None)) is not None:  # Slurm: others' drains are evidence
        doc["drained_by_others"] = others()
        text += "\ndrained by others (evidence; vigil never resumes them): " + (", ".join(
            f"{n} ({d['reason'][:60]}, {d['by'] or '?'})" for n, d in doc["drained_by_others"].items()) or "none")
    _print(doc, args.json, text)
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    from vigil.recovery.controller.report import format_history, history

    core, _, state = _state(args)
    doc = history(state, datetime.now(UTC), args.job, ettr=_ettr(core, args.job))
    _print(doc, args.json, format_history(doc))
    return 0


def _ettr(core: VigilSettings, job: str | None) -> dict[str, dict[str, Any]] | None:
    """Per job the effective training time ratio as the dashboard reads it (vigil.contract.goodput over the
    ranks' step records in ClickHouse); None, said on stderr, where ClickHouse cannot be read."""
    from vigil.app.stack.access import clickhouse_for_cli
    from vigil.dashboard.queries.overview import job_health
    from vigil.dashboard.store import Store
    from vigil.errors import VigilError

    try:
        health = job_health(Store(client=clickhouse_for_cli(core)), job)
    except (VigilError, OSError) as exc:
        print(f"effective training time not read: {exc}", file=sys.stderr)
        return None
    return {j: {"effective_ratio": h.ettr, "iterations": h.steps, "step_ms": h.ideal_step_ms, "wall_s": h.wall_s}
            for j, h in health.items() if h.ettr is not None}


def _publish(core: VigilSettings, bootstrap: str, events: list[Any]) -> None:
    from vigil.kafka.admin import ensure_topics
    from vigil.kafka.producer import EventProducer
    from vigil.signing import Role
    from vigil.signing.setup import signer

    ensure_topics(core, bootstrap, ["recovery"])
    key = signer(Role.OPERATOR, core.home)
    producer = EventProducer(settings=core, bootstrap=bootstrap, signer=key)
    producer.send(with_identity(events, f"key:operator/{key.key_id}" if key is not None else "unsigned"))
    producer.flush(15)


def with_identity(events: list[Any], identity: str) -> list[Any]:
    """The operator's recovery events recording who asked: the operator key that signs them (`details.identity`)."""
    from vigil.contract import RecoveryAction

    return [e.model_copy(update={"details": {**e.details, "identity": identity}}) if isinstance(e, RecoveryAction)
            else e for e in events]


def cmd_approve(args: argparse.Namespace) -> int:
    from vigil.contract import RecoveryAction
    from vigil.recovery.controller.engine import halted_by
    from vigil.recovery.controller.report import find_case
    from vigil.recovery.errors import NotFound

    core, bootstrap, state = _state(args)
    case = find_case(state, args.id)
    if case is None:
        raise NotFound(f"no recovery {args.id!r} (or more than one starts so); see `vigil recovery status`")
    user = _user(args.by)
    waiting = case.open and "approve" in case.plan and not (
        (step := case.step("approve", case.job_id)) is not None and step.ended)
    if waiting:
        target, what = case.case_id, "approved"
    elif halted_by(state, state.job(case.job_id)) is case:
        target, what = f"{case.case_id}/resume", "resumes the halted job"
    else:
        raise NotFound(f"recovery {args.id} waits for no approval and halted nothing (it is "
                       f"{'open' if case.open else case.outcome.result if case.outcome else 'skipped'})")
    _publish(core, bootstrap, [RecoveryAction(job_id=case.job_id, host="controller", action="approve",
                                              target=case.job_id, status="succeeded", incident_id=target,
                                              actor=f"user:{user}", reason=f"approved by {user}")])
    print(f"{case.case_id}: {what} (by {user})")
    return 0


def _backend(core: VigilSettings) -> Any:
    from vigil.recovery.backends import select
    from vigil.recovery.settings import RecoverySettings

    return select(RecoverySettings.load(), core)


def _log_change(core: VigilSettings, event: Any) -> None:
    """Put the operator's decision in the recovery log; the backend already holds it."""
    from vigil.errors import VigilError

    try:
        _publish(core, _bootstrap(core), [event])
    except VigilError as exc:
        print(f"warning: not in the recovery log ({exc})")


def cmd_cordon(args: argparse.Namespace) -> int:
    return _host_change(args, "cordon")


def cmd_uncordon(args: argparse.Namespace) -> int:
    return _host_change(args, "uncordon")


def _host_change(args: argparse.Namespace, action: str) -> int:
    """`vigil cordon` / `vigil uncordon`: the node backend first (it is the truth), then the recovery log."""
    from vigil.contract import RecoveryAction

    core = VigilSettings.load()
    user = _user()
    backend = _backend(core)
    if action == "cordon":
        change = backend.cordon(args.host, reason=args.reason, incident_id="", actor=f"user:{user}")
        done, undone = "cordoned", "was already cordoned"
    else:
        change = backend.uncordon(args.host, reason=args.reason, actor=f"user:{user}")
        done, undone = "uncordoned", "was not cordoned"
    print(f"{args.host}: {done if change.changed else undone} ({change.detail})")
    _log_change(core, RecoveryAction(job_id=args.job, host=args.host, action=action, target=args.host,  # type: ignore[arg-type]
                                     status="succeeded" if change.changed else "skipped", reason=args.reason,
                                     actor=f"user:{user}", details={"backend": backend.name, "changed": change.changed,
                                                                    "detail": change.detail}))
    return 0

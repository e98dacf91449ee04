"""`vigil analyzer [replay]`, `vigil alerts`, `vigil simulate`.

Handlers import their heavy modules lazily so `vigil --help` stays fast. The broker is
resolved with `resolve_bootstrap` (the configured cluster, else the running embedded
stack); ClickHouse reads from the CLI go through `clickhouse_for_cli`, which proxies to
a running `vigil up` when it holds the embedded engine.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from vigil.app.cli.serving import serve
from vigil.redact import shown_dsn
from vigil.settings import VigilSettings


def register(sub: Any) -> None:
    an = sub.add_parser("analyzer", help="run ingest + detectors standalone, or replay detectors over history")
    an.add_argument("--ingest-only", action="store_true",
                    help="ingest without running the detectors (scale-out instances; detection: one analyzer, or shards)")
    an.set_defaults(handler=cmd_analyzer)
    an_sub = an.add_subparsers(dest="analyzer_command", metavar="SUBCOMMAND")
    rp = an_sub.add_parser("replay", help="re-run the detectors over stored history; print the alerts they raise")
    rp.add_argument("--job", required=True, help="job id")
    rp.add_argument("--from", dest="start", type=parse_time, default=None, metavar="T",
                    help="start (ISO 8601 with zone, or unix seconds); default: the job's first event")
    rp.add_argument("--to", dest="end", type=parse_time, default=None, metavar="T", help="end; default: its last event")
    rp.add_argument("--json", action="store_true", help="a JSON list of alert events")
    rp.add_argument("--incidents", action="store_true", help="print the incidents the replay opens instead")
    rp.set_defaults(handler=cmd_replay)

    al = sub.add_parser("alerts", help="current alerts, folded from the alerts topic")
    al.add_argument("--job", default=None, help="only this job")
    al.add_argument("--all", action="store_true", help="include resolved alerts")
    al.add_argument("--json", action="store_true", help="a JSON list")
    al.add_argument("--timeout", type=float, default=10.0, help="seconds to read the topic")
    al.set_defaults(handler=cmd_alerts)

    sim = sub.add_parser("simulate", help="stream a simulated job's telemetry through the broker, with faults")
    sim.add_argument("--hosts", type=int, default=64, help="hosts in the simulated job (8 GPUs each)")
    sim.add_argument("--gpus", type=int, default=8, help="GPUs per host (= tensor-parallel size)")
    sim.add_argument("--pp", type=int, default=None, help="pipeline stages; default 4 when it divides --hosts, else 1")
    sim.add_argument("--steps", type=int, default=300, help="training steps to simulate")
    sim.add_argument("--step-ms", type=float, default=1000.0, help="nominal step time")
    sim.add_argument("--speed", type=float, default=1.0, help="simulated seconds per wall second; 0 = as fast as possible")
    sim.add_argument("--seed", type=int, default=0, help="random seed (same seed, same events)")
    sim.add_argument("--job", default=None, help="job id; default sim-<utc timestamp>")
    sim.add_argument("--host-prefix", default="sim-host-", help="host names are this prefix + a number")
    sim.add_argument("--nics", type=int, default=2, help="RDMA NICs per host")
    sim.add_argument("--start", type=parse_time, default=None, metavar="T", help="simulated start time; default now in real "
                     "time, else so that the run ends about now (events ahead of the clock are refused)")
    sim.add_argument("--fault", action="append", default=[], metavar="KIND:host=NAME[,start=STEP][,magnitude=X]",
                     help="inject a fault (repeatable); kinds: straggler, nic_drop, traffic_stop, mfu_decay, "
                          "heartbeat_loss, xid, process_exit")
    sim.add_argument("--json", action="store_true", help="print the hosts and the injected faults (ground truth)")
    sim.set_defaults(handler=cmd_simulate)


def parse_time(text: str) -> datetime:
    """ISO 8601 with a zone (or `Z`), or unix seconds; ValueError otherwise."""
    try:
        return datetime.fromtimestamp(float(text), UTC)
    except ValueError:
        pass
    try:
        ts = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a time: {text!r} (ISO 8601 with zone, or unix seconds)") from None
    if ts.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no zone; add Z or +00:00")
    return ts.astimezone(UTC)


def cmd_analyzer(args: argparse.Namespace) -> int:

    from vigil.analyzer.service import AnalyzerService
    from vigil.analyzer.settings import AnalyzerSettings
    from vigil.app.stack.runner import prepare
    from vigil.app.stack.state import resolve_bootstrap
    from vigil.runtime import tune_gc

    settings = VigilSettings.load()
    bootstrap = resolve_bootstrap(settings)
    ctx = prepare(settings, bootstrap)
    analyzer = AnalyzerSettings.load()
    if getattr(args, "ingest_only", False):
        analyzer = analyzer.model_copy(update={"detect": False})
    service = AnalyzerService(ctx, analyzer)
    role = "ingest + detectors" if analyzer.detect else "ingest only"

    def banner() -> str:
        tune_gc()  # this process hosts the service from here on
        return (f"analyzer running ({role}): kafka {bootstrap}, clickhouse {shown_dsn(ctx.clickhouse_dsn)}; "
                f"metrics {service.health()['metrics_url'] or 'off'}; Ctrl-C stops it.")

    def report() -> str:
        h = service.health()
        return (f"events={h['events']} rate={h['events_per_s']}/s rejected={h['rejected']} "
                f"lag={sum(h['lag'].values())} firing={h['alerts_firing']} {h['last_error']}")

    # a stopped ingest ends the process, non-zero
    return serve(service, name="analyzer", banner=banner, report=report, failed=lambda: service.failed or "")


def cmd_replay(args: argparse.Namespace) -> int:
    from vigil.analyzer.alerts.view import as_json, format_line
    from vigil.analyzer.engine import replay
    from vigil.analyzer.incidents.stage import IncidentStage
    from vigil.analyzer.settings import AnalyzerSettings
    from vigil.app.stack.access import clickhouse_for_cli

    settings = VigilSettings.load()
    client = clickhouse_for_cli(settings)
    analyzer = AnalyzerSettings.load()
    stage = IncidentStage(analyzer)
    alerts = replay(client, analyzer, args.job, args.start, args.end, stages=[stage])  # type: ignore[arg-type]
    if args.incidents:
        from vigil.app.cli.incidents import show

        return show(stage.drain(), json_out=args.json)
    if args.json:
        print(json.dumps([as_json(a) for a in alerts], indent=2))
    else:
        for a in alerts:
            print(f"{a.ts:%Y-%m-%d %H:%M:%S} " + format_line(a))
        if not alerts:
            print("(no alerts)", file=sys.stderr)
    return 0


def cmd_alerts(args: argparse.Namespace) -> int:
    from vigil.analyzer.alerts.view import as_json, current, format_line, read_alerts_checked
    from vigil.app.stack.state import resolve_bootstrap
    from vigil.signing.readers import left_out

    settings = VigilSettings.load()
    events, refused = read_alerts_checked(settings, resolve_bootstrap(settings), timeout=args.timeout)
    if refused:
        print(left_out(refused, "alert events"), file=sys.stderr)
    alerts = current(events, job=args.job, include_resolved=args.all)
    if args.json:
        print(json.dumps([as_json(a) for a in alerts], indent=2))
    else:
        for a in alerts:
            print(format_line(a))
        if not alerts:
            print("(no alerts)", file=sys.stderr)
    return 0


SPAN_FACTOR = 1.1  # a simulated step lasts its step_ms plus jitter, waiting and the odd checkpoint


def default_start(now: datetime, steps: int, step_ms: float, speed: float) -> datetime:
    """Where a simulation starts by default: now in real time (or slower); faster than real time, far enough in
    the past that its last step lands about now, since events stamped ahead of the clock are refused
    (`VIGIL_CONTRACT_CLOCK_SKEW_S`)."""
    span = timedelta(seconds=steps * step_ms / 1000 * SPAN_FACTOR)
    if speed == 0:
        return now - span
    return now - span * (1 - 1 / speed) if speed > 1 else now


def cmd_simulate(args: argparse.Namespace) -> int:
    from vigil.analyzer.simulator.faults import parse_fault
    from vigil.analyzer.simulator.layout import Layout
    from vigil.analyzer.simulator.model import SimConfig, Simulation
    from vigil.analyzer.simulator.runner import ground_truth, run
    from vigil.app.stack.state import resolve_bootstrap
    from vigil.kafka.producer import EventProducer

    if args.hosts < 1 or args.steps < 1 or args.step_ms <= 0 or args.nics < 1:
        raise ValueError("--hosts, --steps, --nics must be >= 1 and --step-ms > 0")
    pp = args.pp if args.pp is not None else (4 if args.hosts % 4 == 0 and args.hosts >= 8 else 1)
    layout = Layout(hosts=args.hosts, gpus_per_host=args.gpus, pp=pp, host_prefix=args.host_prefix)
    faults = [parse_fault(spec) for spec in args.fault]
    start = args.start or default_start(datetime.now(UTC), args.steps, args.step_ms, args.speed)
    job = args.job or f"sim-{start:%Y%m%d-%H%M%S}"
    sim = Simulation(SimConfig(job=job, layout=layout, faults=faults, seed=args.seed, start=start,
                               step_ms=args.step_ms, nics=args.nics))
    settings = VigilSettings.load()
    producer = EventProducer(settings=settings, bootstrap=resolve_bootstrap(settings), batch_events=500)

    def progress(i: int) -> None:
        if not args.json and (i + 1) % 50 == 0:
            print(f"  step {i + 1}/{args.steps}  simulated {sim.now:%H:%M:%S}", file=sys.stderr, flush=True)

    if not args.json:
        print(f"simulating {job}: {layout.hosts} hosts x {layout.gpus_per_host} GPUs (tp={layout.tp} pp={layout.pp} "
              f"dp={layout.dp}), {args.steps} steps, speed {args.speed or 'max'}", file=sys.stderr, flush=True)
    events = run(sim, args.steps, producer.send, speed=args.speed, progress=progress)
    producer.flush(60)
    truth = ground_truth(sim, args.steps, events)
    if args.json:
        print(json.dumps(truth, indent=2))
    else:
        print(f"{events} events sent for job {job} ({truth['started']} .. {truth['ended']})")
        for f in truth["faults"]:
            print(f"  fault {f['kind']} on {f['host']} from step {f['start']} -> expect {f['expected']['fingerprint']}")
    return 0

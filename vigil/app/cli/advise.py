"""`vigil advise --job J [--nodes MIN:MAX] [--json]`: the resource advisor's recommendation for a job.

Reads the job's stored history (ClickHouse, through `vigil up`'s proxy when the embedded engine
is in use), prints the node count to run at, hot or starved hosts and the data loader's cost,
each with its reason, and how the job's previous advice fared (its prediction at the node count
the job then ran at, against what it measured). `--publish` records the recommendation as an
`advice` event on the `recovery` topic, signed with the operator key: the recovery controller cites
the latest one in its start and scale decisions, and the next `vigil advise` scores it.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from vigil.settings import VigilSettings

log = logging.getLogger(__name__)


def register(sub: Any) -> None:
    p = sub.add_parser("advise", help="recommend a job's node count, flag hot/starved hosts, cost the data loader")
    p.add_argument("--job", required=True, help="job id")
    p.add_argument("--nodes", type=parse_range, default=None, metavar="MIN:MAX",
                   help="the job's node range: only counts within it are recommended")
    p.add_argument("--json", action="store_true", help="the recommendation as JSON")
    p.add_argument("--publish", action="store_true", help="record it as an `advice` event (signed, topic recovery)")
    p.set_defaults(handler=cmd_advise)


def parse_range(text: str) -> tuple[int, int]:
    lo, sep, hi = text.partition(":")
    if not sep or not lo.strip().isdigit() or not hi.strip().isdigit() or not 0 < int(lo) <= int(hi):
        raise argparse.ArgumentTypeError(f"not a node range: {text!r} (expected MIN:MAX, 0 < MIN <= MAX)")
    return int(lo), int(hi)


def as_json(rec: Any, scored: Any = None) -> dict[str, Any]:
    return {"scored_previous": None if scored is None else scored.model_dump(mode="json"), "job_id": rec.job_id, "nodes": rec.nodes, "predicted": rec.predicted, "current": rec.current,
            "still_scaling": rec.still_scaling, "hot": list(rec.hot), "starved": list(rec.starved),
            "data_share": rec.data_share, "reasons": list(rec.reasons),
            "curve": [{"nodes": p.nodes, "throughput": p.throughput, "steps": p.steps, "efficiency": p.efficiency}
                      for p in rec.curve]}


def format_score(scored: Any) -> str:
    return (f"  previous advice {scored.advice_id}: predicted {scored.predicted:,.0f}/s on {scored.nodes} nodes, "
            f"measured {scored.measured:,.0f}/s ({scored.error_pct:+.1f} %)")


def format_recommendation(rec: Any) -> str:
    if rec.nodes is None:
        head = f"{rec.job_id}: no recommendation yet"
    else:
        head = (f"{rec.job_id}: run on {rec.nodes} nodes (now {rec.current}); predicted throughput "
                f"{rec.predicted:,.0f}/s")
    return "\n".join([head, *(f"  {r}" for r in rec.reasons)])


def cmd_advise(args: argparse.Namespace) -> int:
    from vigil.analyzer.advisor.query import recommend
    from vigil.app.stack.access import clickhouse_for_cli

    settings = VigilSettings.load()
    client = clickhouse_for_cli(settings)
    rec = recommend(client, args.job, nodes_range=args.nodes)
    scored = previous_score(client, args.job)
    if args.json:
        print(json.dumps(as_json(rec, scored), indent=2))
    else:
        print(format_recommendation(rec) + ("\n" + format_score(scored) if scored is not None else ""))
    if args.publish:
        publish(settings, rec, scored)
    return 0 if rec.nodes is not None else 1


def previous_score(client: Any, job: str) -> Any:
    from vigil.analyzer.advisor.query import score_latest
    from vigil.analyzer.advisor.settings import AdvisorSettings

    try:
        return score_latest(client, job, AdvisorSettings.load())
    except Exception as exc:  # no advice table yet (not migrated): nothing to score
        log.debug("no previous advice to score: %s", exc)
        return None


def publish(settings: VigilSettings, rec: Any, scored: Any) -> None:
    from vigil.analyzer.advisor.record import advice_event
    from vigil.app.stack.state import resolve_bootstrap
    from vigil.contract import utcnow
    from vigil.kafka.admin import ensure_topics
    from vigil.kafka.producer import EventProducer
    from vigil.signing import Role
    from vigil.signing.setup import signer

    bootstrap = resolve_bootstrap(settings)
    ensure_topics(settings, bootstrap, ["recovery"])
    event = advice_event(rec, utcnow(), scored)
    producer = EventProducer(settings=settings, bootstrap=bootstrap, signer=signer(Role.OPERATOR, settings.home))
    producer.send([event])
    producer.flush()
    print(f"published advice {event.advice_id}", file=sys.stderr)

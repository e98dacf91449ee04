"""`vigil incidents [--job J] [--open] [--json]`: incidents folded from the incidents topic.

An incident groups the alerts that share one cause: the culprit (host, rank, its own
message), the victims, the cause class and the evidence; its victims' alerts are linked and
demoted, so the incident is what pages.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from vigil.settings import VigilSettings


def register(sub: Any) -> None:
    p = sub.add_parser("incidents", help="incidents (culprit, victims, cause), folded from the incidents topic")
    p.add_argument("--job", default=None, help="only this job")
    p.add_argument("--open", action="store_true", help="only incidents still open")
    p.add_argument("--json", action="store_true", help="a JSON list")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to read the topic")
    p.set_defaults(handler=cmd_incidents)


def show(events: Sequence[Any], *, json_out: bool, job: str | None = None, only_open: bool = False) -> int:
    from vigil.analyzer.incidents.view import as_json, current, format_incident

    incidents = current(events, job=job, include_resolved=not only_open)
    if json_out:
        print(json.dumps([as_json(i) for i in incidents], indent=2))
    else:
        for i in incidents:
            print(format_incident(i))
        if not incidents:
            print("(no incidents)", file=sys.stderr)
    return 0


def cmd_incidents(args: argparse.Namespace) -> int:
    from vigil.analyzer.incidents.view import read_incidents_checked
    from vigil.app.stack.state import resolve_bootstrap
    from vigil.signing.readers import left_out

    settings = VigilSettings.load()
    events, refused = read_incidents_checked(settings, resolve_bootstrap(settings), timeout=args.timeout)
    if refused:
        print(left_out(refused, "incident events"), file=sys.stderr)
    return show(events, json_out=args.json, job=args.job, only_open=args.open)

"""`vigil tail`: print vigil events from the log, like kcat for vigil events."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from vigil.contract.registry import DEAD_LETTER_TOPIC, LATEST, TOPICS
from vigil.contract.wire import decode_batch
from vigil.settings import VigilSettings

_SUMMARY_FIELDS = ("rank", "step", "step_ms", "device", "tx_bps", "rx_bps", "category", "severity", "exit_code",
                   "alert", "status", "subject", "action", "target", "phase", "message", "summary")


def register(sub: Any) -> None:
    p = sub.add_parser("tail", help="print events from the log (embedded broker or a production cluster)")
    p.add_argument("--kind", action="append", choices=[*sorted(LATEST), "deadletter"],
                   help="only these event kinds (repeatable); default all")
    p.add_argument("--json", action="store_true", help="one JSON event per line")
    p.add_argument("--from-beginning", action="store_true", help="start at the oldest retained event (default: new ones)")
    p.add_argument("--max", type=int, default=None, metavar="N", help="stop after N events")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="stop after S seconds (default: follow until Ctrl-C; with --from-beginning and no --max: at the end of the log)")
    p.set_defaults(handler=cmd_tail)


def format_event(doc: dict[str, Any]) -> str:
    fields = " ".join(f"{k}={doc[k]}" for k in _SUMMARY_FIELDS if doc.get(k) not in (None, "", {}))
    return f"{doc.get('ts', '')} {doc.get('kind', '?'):<10} {doc.get('job_id', '')} {doc.get('host', '')} {fields}"


def cmd_tail(args: argparse.Namespace) -> int:
    from vigil.app.stack.state import resolve_bootstrap
    from vigil.kafka.reader import read_topics

    settings = VigilSettings.load()
    bootstrap = resolve_bootstrap(settings)
    kinds = set(args.kind or [])
    logical = sorted({LATEST[k].topic for k in kinds if k in LATEST} | ({DEAD_LETTER_TOPIC} if "deadletter" in kinds else set())) \
        if kinds else list(TOPICS)
    follow = args.timeout is None and not (args.from_beginning and args.max is None)
    timeout = args.timeout if args.timeout is not None else (10.0 if not follow else 365 * 86400.0)
    deadline = time.monotonic() + timeout
    printed = 0
    records = read_topics(settings, bootstrap, [settings.topic(t) for t in logical],
                          from_beginning=args.from_beginning, timeout=timeout, until_end=not follow)
    for rec in records:
        docs: list[dict[str, Any]]
        if rec.topic == settings.topic(DEAD_LETTER_TOPIC):
            letter = json.loads(rec.value or b"{}")
            docs = [{"kind": "deadletter", **letter}]
        else:
            decoded = decode_batch(rec.value)
            docs = [e.model_dump(mode="json") for e in decoded.events]
        for doc in docs:
            if kinds and doc.get("kind") not in kinds:
                continue
            print(json.dumps(doc) if args.json else format_event(doc), flush=True)
            printed += 1
            if args.max is not None and printed >= args.max:
                return 0
        if time.monotonic() > deadline:
            break
    if printed == 0 and not args.json:
        print("(no events)", file=sys.stderr)
    return 0

"""`vigil diagnostics publish --host H`: a node's own diagnostic results, attested by its host key, onto the log.

For checks that run outside an agent, such as a Slurm prolog (deploy/slurm/prolog.sh): the JSON lines that
`python -m vigil.recovery.diagnostics` prints are read from standard input, each validated as a `diagnostic`
event of host H (a line of another kind or host, or one that does not validate, is refused and named on stderr),
sealed with H's agent key (`vigil keys issue H`: without it nothing is published, since the controller refuses an
unattested result) and published to the `recovery` topic. Exit 0 when every line was published, 1 when some
were refused, 2 without the key.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from vigil.settings import VigilSettings


def register(sub: Any) -> None:
    diag = sub.add_parser("diagnostics", help="node diagnostics run outside an agent (a Slurm prolog)")
    dsub = diag.add_subparsers(dest="diagnostics_command", metavar="SUBCOMMAND", required=True)
    pub = dsub.add_parser("publish", help="publish this host's diagnostic results (JSON lines on stdin), attested")
    pub.add_argument("--host", required=True, help="the host the results speak for (its agent key signs them)")
    pub.set_defaults(handler=cmd_publish)


def cmd_publish(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from vigil.app.stack.state import resolve_bootstrap
    from vigil.contract.control import Diagnostic
    from vigil.kafka.producer import EventProducer
    from vigil.signing import Role
    from vigil.signing.setup import signer

    core = VigilSettings.load()
    key = signer(Role.AGENT, core.home, host=args.host)
    if key is None:
        print(f"vigil diagnostics publish: no agent key for {args.host} (`vigil keys issue {args.host}`)", file=sys.stderr)
        return 2
    results: list[Diagnostic] = []
    refused = 0
    for n, line in enumerate(sys.stdin, 1):
        if not line.strip().startswith("{"):
            continue  # the diagnostics' own log lines
        try:
            doc = json.loads(line)
            event = Diagnostic.model_validate({**doc, "signature": ""}) if doc.get("kind") == "diagnostic" else None
        except (ValueError, ValidationError) as exc:
            event, why = None, str(exc).splitlines()[0]
        else:
            why = "not a diagnostic event" if event is None else f"speaks for {event.host}, not {args.host}"
        if event is None or event.host != args.host:
            refused += 1
            print(f"line {n} refused: {why}", file=sys.stderr)
            continue
        results.append(key.seal(event))
    producer = EventProducer(settings=core, bootstrap=resolve_bootstrap(core))
    producer.send(results)
    producer.flush()
    print(f"published {len(results)} diagnostic result(s) of {args.host}" + (f"; refused {refused}" if refused else ""))
    return 1 if refused else 0

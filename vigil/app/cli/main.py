"""The `vigil` command: one entry point; each module of `vigil.app.cli` registers its subcommands.

Every command module exposes `register(subparsers)`; its handlers import heavy modules
lazily so `vigil --help` stays fast. A handler
returns the exit code. VigilError (and ValueError from bad input) print one line
on stderr and exit 2, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from vigil.app.cli import (
    advise,
    analyzer,
    collector,
    dashboard,
    demo,
    diagnostics,
    goodput,
    incidents,
    keys,
    notify,
    recovery,
    stack,
    trace,
)
from vigil.errors import VigilError

COMMAND_MODULES = (stack, demo, collector, analyzer, incidents, recovery, goodput, diagnostics, dashboard, trace, notify,
                   keys, advise)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vigil", description="Fault diagnosis and recovery for large training jobs.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug output")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if not args.verbose:  # their connection retries are reported by us as one clear line
        for noisy in ("urllib3.connectionpool", "clickhouse_connect"):  # clickhouse_connect resets "urllib3"
            logging.getLogger(noisy).setLevel(logging.ERROR)
    try:
        return int(args.handler(args))
    except (VigilError, ValueError) as exc:
        print(f"vigil {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""`vigil demo`: the main job on embedded defaults (see vigil/app/demo/run.py)."""

from __future__ import annotations

import argparse
from typing import Any

from vigil.settings import VigilSettings


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="run the stack with a real PyTorch job and a simulated 256-host job")
    p.add_argument("--duration", type=float, default=None, help="stop after S seconds (default: until Ctrl-C)")
    p.add_argument("--sim-hosts", type=int, default=256, help="hosts of the simulated job")
    p.add_argument("--sim-speed", type=float, default=1.0, help="simulated steps per real second factor")
    p.set_defaults(handler=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from vigil.app.demo.run import run_demo

    return run_demo(VigilSettings.load(), duration=args.duration, sim_hosts=args.sim_hosts, sim_speed=args.sim_speed)

"""Shared by the analyzer/ingest/broker benchmarks: machine facts, appending to RESULTS.md, what a detection score counts."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")

SEVERE = ("warning", "error", "critical")
"""The alert severities a detection score counts, as the issues score: an info event (the job-level \"the job is
quiet\" of a pause or a restart gap) pages no one."""


def machine_info() -> str:
    mem = ""
    try:
        with open("/proc/meminfo") as fh:
            kb = int(next(line for line in fh if line.startswith("MemTotal")).split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, StopIteration, ValueError):
        pass
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(line for line in fh if line.startswith("model name")).split(":", 1)[1].strip()
    except (OSError, StopIteration):
        pass
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=Path(__file__).parent).stdout.strip()
    return (f"Machine: {os.cpu_count()} CPU ({cpu}){mem}, Python {platform.python_version()}, "
            f"{platform.system()} {platform.release()}; commit {rev or '?'}")


def append_results(title: str, body: str) -> None:
    """Append a dated section; never rewrites what others wrote."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    with RESULTS.open("a") as fh:
        fh.write(f"\n## {title} — {stamp}\n\n{body.rstrip()}\n")

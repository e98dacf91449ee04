"""Shared helpers of the timer tests: reading a spool back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def spool_files(root: Path) -> list[Path]:
    """Every spool file under `root`, ordered by (stem, seq)."""

    def key(p: Path) -> tuple[str, int]:
        stem, seq, _ = p.name.rsplit(".", 2)
        return str(p.parent / stem), int(seq)

    return sorted(root.rglob("*.jsonl"), key=key)


def read_records(root: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in spool_files(root):
        data = path.read_bytes()
        assert not data or data.endswith(b"\n"), f"{path} ends in a torn line"
        out.extend(json.loads(line) for line in data.splitlines())
    return out


SPOOL_KEYS = {"max_file_bytes", "keep_files", "queue_size", "flush_interval_s", "retry_s"}


def timer_config(*, spool_dir: Any = None, **kw: Any) -> Any:
    """A TimerConfig from flat keywords, the spool's own going to its SpoolConfig."""
    from vigil.timer import SpoolConfig, TimerConfig

    spool = SpoolConfig(directory=spool_dir, **{k: v for k, v in kw.items() if k in SPOOL_KEYS})
    return TimerConfig(spool=spool, **{k: v for k, v in kw.items() if k not in SPOOL_KEYS})

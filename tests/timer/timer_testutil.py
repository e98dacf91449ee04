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

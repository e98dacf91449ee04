"""Prometheus naming, checked when a family is declared (a bad name fails the service's tests, not a scrape).

https://prometheus.io/docs/practices/naming/: a `vigil_` prefix, snake case, base units
(`_seconds`, `_bytes`; never milliseconds or minutes), counters ending `_total`, no label
that is unbounded by nature (an id, a message, a step).
"""

from __future__ import annotations

import re

PREFIX = "vigil_"
_NAME = re.compile(r"^[a-z][a-z0-9_]*[a-z0-9]$")
NOT_BASE_UNITS = ("_ms", "_milliseconds", "_microseconds", "_minutes", "_hours", "_days", "_kb", "_mb",
                  "_kib", "_mib", "_gib", "_percent", "_pct")
UNBOUNDED_LABELS = frozenset({"event_id", "incident_id", "case_id", "command_id", "message", "summary", "step",
                              "fingerprint", "reason_text", "pid", "rank"})
KINDS = ("counter", "gauge", "histogram")


def problems(name: str, kind: str, labels: tuple[str, ...]) -> list[str]:
    """What is wrong with a family's name and labels ([] when it follows the rules)."""
    out: list[str] = []
    if kind not in KINDS:
        out.append(f"{name}: kind {kind!r} is not one of {KINDS}")
    if not name.startswith(PREFIX):
        out.append(f"{name}: must start with {PREFIX!r}")
    if not _NAME.match(name) or "__" in name:
        out.append(f"{name}: must be snake case ([a-z0-9_], no double underscore)")
    words = "_" + name
    for unit in NOT_BASE_UNITS:
        if words.endswith(unit) or f"{unit}_" in words:
            out.append(f"{name}: {unit[1:]} is not a base unit (seconds, bytes, ratios)")
    if kind == "counter" and not name.endswith("_total"):
        out.append(f"{name}: a counter's name ends with _total")
    if kind != "counter" and name.endswith("_total"):
        out.append(f"{name}: only counters end with _total")
    if kind == "histogram" and name.endswith(("_count", "_sum", "_bucket")):
        out.append(f"{name}: a histogram's own series take the _count, _sum and _bucket suffixes")
    for label in labels:
        if not _NAME.match(label) or label.startswith("__"):
            out.append(f"{name}: label {label!r} is not snake case")
        if label in UNBOUNDED_LABELS:
            out.append(f"{name}: label {label!r} is unbounded (one series per value)")
    if len(set(labels)) != len(labels):
        out.append(f"{name}: a label repeats")
    return out

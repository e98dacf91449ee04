"""What the user is looking at, kept in the URL's query string and shared by every page.

`?job=J&range=1h` is common to all pages; pages add their own keys (`host`, `view`,
`phase`, `rows`, `kind`, `severity`, `status`, `rank`). Parsing is forgiving: unknown keys and bad
values fall back to defaults, so a hand-edited URL never breaks a page. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any
from urllib.parse import parse_qsl, urlencode

from vigil.contract.severity import WORST_FIRST

# range key -> seconds before the job's latest event (None: the job's whole history)
RANGES: dict[str, int | None] = {"15m": 900, "1h": 3600, "6h": 6 * 3600, "24h": 24 * 3600, "all": None}
RANGE_LABELS = {"15m": "last 15 min", "1h": "last hour", "6h": "last 6 hours", "24h": "last 24 hours",
                "all": "whole job"}
HEATMAP_VIEWS = ("phase", "window")
HEATMAP_ROWS = ("worst", "all", "name")
SEVERITIES = WORST_FIRST
STATUSES = ("firing", "resolved")

# the keys every page link keeps; page-specific keys are dropped when moving between pages
SHARED_KEYS = ("job", "range")


@dataclass(frozen=True, kw_only=True)
class Selection:
    job: str | None = None
    range: str = "1h"
    host: str | None = None
    view: str = "phase"
    phase: str | None = None
    rows: str = "worst"
    kind: str | None = None
    severity: str | None = None
    status: str | None = None
    rank: str | None = None  # the 3D view's selected rank

    @classmethod
    def from_search(cls, search: str | None, *, default_range: str = "1h") -> Selection:
        raw = dict(parse_qsl((search or "").lstrip("?"), keep_blank_values=False))
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {k: v.strip() for k, v in raw.items() if k in known and v.strip()}
        if values.get("range") not in RANGES:
            values["range"] = default_range if default_range in RANGES else "1h"
        if values.get("view") not in HEATMAP_VIEWS:
            values.pop("view", None)
        if values.get("rows") not in HEATMAP_ROWS:
            values.pop("rows", None)
        if values.get("severity") not in SEVERITIES:
            values.pop("severity", None)
        if values.get("status") not in STATUSES:
            values.pop("status", None)
        if not str(values.get("rank", "")).isdigit():
            values.pop("rank", None)
        return cls(**values)

    def to_search(self, *, keys: tuple[str, ...] | None = None) -> str:
        """`?k=v&...` with non-default values only (all keys, or just `keys`)."""
        defaults = Selection()
        pairs = []
        for f in fields(self):
            if keys is not None and f.name not in keys:
                continue
            value = getattr(self, f.name)
            if value is None or (value == getattr(defaults, f.name) and f.name != "range"):
                continue
            pairs.append((f.name, str(value)))
        return "?" + urlencode(pairs) if pairs else ""

    def shared(self) -> Selection:
        """Only the keys that follow the user from page to page."""
        return Selection(job=self.job, range=self.range)

    def with_(self, **changes: Any) -> Selection:
        return replace(self, **changes)

    @property
    def range_seconds(self) -> int | None:
        return RANGES[self.range]


def page_href(path: str, sel: Selection, **changes: Any) -> str:
    """Link to another page keeping the shared selection plus `changes`."""
    target = sel.shared().with_(**changes)
    return path + target.to_search()

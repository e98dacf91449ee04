"""docs/metrics.md, rendered from the families each service declares (so the page cannot drift from the code)."""

from __future__ import annotations

from collections.abc import Sequence

from vigil.metrics.registry import Metrics

HEADER = """# Metrics

Generated from the code by `python -m vigil.app.reference` (a test fails when this page is stale).
Every service serves its own `/metrics` (OpenMetrics text) on its metrics port
(`VIGIL_ANALYZER_METRICS_PORT`, `VIGIL_RECOVERY_METRICS_PORT`, `VIGIL_NOTIFY_METRICS_PORT`; 0 = a
free one; `vigil status` shows each URL); `vigil up` also serves every hosted service's families
on its control port (`/metrics`, with the control token).
Job and host label values are bounded (`VIGIL_METRICS_MAX_JOBS`, `VIGIL_METRICS_MAX_HOSTS`): the
rest are counted under `other`. Alert rules and a Grafana dashboard: `deploy/prometheus/`.
"""


def render(services: Sequence[Metrics]) -> str:
    lines = [HEADER]
    for m in services:
        lines += [f"## {m.service}", "", "| name | type | labels | help |", "|---|---|---|---|"]
        for f in sorted(m.families, key=lambda f: f.name):
            labels = ", ".join(f"`{label}`" for label in f.labels)
            lines.append(f"| `{f.name}` | {f.kind} | {labels} | {f.help.replace('|', '/')} |")
        lines.append("")
    return "\n".join(lines)

"""docs/metrics.md, and README.md's list of names, rendered from the families each service declares (so neither
can drift from the code)."""

from __future__ import annotations

from collections.abc import Sequence

from vigil.metrics.registry import Metrics

HEADER = """# Metrics

Generated from the code by `python -m vigil.app.reference` (a test fails when this page is stale).
Every service serves its own `/metrics` (OpenMetrics text when the scraper asks for it, the classic
text format otherwise) from a registry of its own, on its metrics port (`VIGIL_ANALYZER_METRICS_PORT`,
`VIGIL_RECOVERY_METRICS_PORT`, `VIGIL_NOTIFY_METRICS_PORT`; 0 = a free one; each service's start-up
line and `vigil status` show the URL: against an external cluster, `VIGIL_KAFKA_BOOTSTRAP` set, it reads
each service's newest announcement from the `services` topic, a `service` event every instance sends at
start, every 300 s and at stop, a wildcard bind named by its host; stale after three missed); `vigil up`
also serves every hosted service's families on its control port (`/metrics`, with the control token).
Shared settings (`VIGIL_METRICS_*`, `[metrics]`):
`enabled`, `bind` (127.0.0.1; 0.0.0.0 where Prometheus scrapes from another host, as in deploy/k8s),
`max_jobs` and `max_hosts`: label values past them are counted under `other` (the first values seen
keep their own series for a counter; the largest, for a gauge), and Xid codes past the first 64 too.

How facts are counted: where they are made, per batch or per turn, never per event. An Xid line is
counted once when the ingest stores it (re-sends are deduplicated first; a flood summary counts its
repeats). A recovery's outcome is counted once, by the controller instance that leads when it folds
it, and only an outcome dated after that process started (the log is folded from its beginning at
every start: history counted again would read as a burst). A job's start, scale-up and resume are
cases (their `class`), not recoveries from a fault: only faults feed the durations, phases, steps
lost and cordons. What each recovery that resumed cost its job (`vigil_goodput_lost_seconds_total`) is
split as the goodput ledger splits it (`vigil goodput`, the Goodput page: phases, steps redone, or all of it
to a resize or an SDC replay), its steps redone priced at the job's step time as its agents last reported
it (the ledger's ideal step time needs the step records; none reported: not counted); a job's ETTR is the
ledger's, read from ClickHouse, not a metric. Counters restart from zero with their process, as Prometheus
expects.

Alert rules for vigil's own health (ingest behind, detector turns over the interval, no controller
holding the lease, dead letters rising, security refusals, notifications failing) with promtool unit
tests, a scrape configuration and a Grafana dashboard: `deploy/prometheus/`.
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


BEGIN, END = "<!-- metrics:begin -->", "<!-- metrics:end -->"
"""The markers around README.md's generated list."""


def summary(services: Sequence[Metrics]) -> str:
    """Per service one line naming its families, between the markers (README.md's list)."""
    lines = [BEGIN]
    for m in services:
        lines.append(f"- {m.service}: " + ", ".join(f"`{f.name}`" for f in sorted(m.families, key=lambda f: f.name)))
    return "\n".join([*lines, END])


def spliced(text: str, block: str) -> str:
    """`text` with what lies between its markers (the markers included) replaced by `block`."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"no {BEGIN} ... {END} block")
    return text[:start] + block + text[end + len(END):]

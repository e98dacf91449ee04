"""The unverified-claims panel of the alerts and recovery pages (`queries.claims`).

Each row is marked as a claim: a decision that failed the signing gate is shown for what it is
(who claims what, unsigned or signed by a key that may not make it), never as what happened, and
never acted on by any service.
"""

from __future__ import annotations

from dash import html
from dash.development.base_component import Component

from vigil.dashboard.components import panel, table
from vigil.dashboard.pages.base import PageView
from vigil.dashboard.queries import claims as q
from vigil.dashboard.queries.window import to_dt

TITLE = "Unverified claims (failed the signing gate: never acted on)"


def _when(ms: object) -> str:
    return to_dt(int(str(ms))).strftime("%m-%d %H:%M:%S")


def _table(v: PageView, sources: tuple[str, ...], job: str | None) -> Component:
    rows = [[_when(r["t_ms"]), html.Span("unverified claim", className="claim-unverified"), r["source"], r["job"],
             r["what"], r["detail"], "signed by a key that may not" if r["signed"] else "unsigned"]
            for r in q.unverified(v.store, sources, job)]
    return table(["time (UTC)", "", "kind", "job", "claims", "detail", "signature"], rows, id="unverified-claims",
                 empty="no unverified claims")


def claims_panel(v: PageView, sources: tuple[str, ...], job: str | None) -> Component:
    return panel(TITLE, lambda: _table(v, sources, job), id="claims-panel")

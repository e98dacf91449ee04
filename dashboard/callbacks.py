"""Callbacks: URL <-> pickers, page rendering on URL change and on the refresh tick, click-through.

    sync_pickers   the URL's job/range into the header pickers, and picker changes back into the URL
    page_controls  any page control `{"type": "sel", "key": K}` writes its value to `?K=`
    open_host      a click on a heatmap cell navigates to that host's page; on the 3D view it selects the rank
    trace          the 3D view's download: the job's last steps as a Chrome/Perfetto trace
    nav_links      navigation links carry the shared selection (job, range)
    render         the page body: pure function of (path, query string) plus the store's current data
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from dash import ALL, Dash, Input, Output, State, ctx, html, no_update
from dash.development.base_component import Component

from vigil.dashboard.components import guarded, store_error
from vigil.dashboard.layout import PAGES, PageSpec, nav_id
from vigil.dashboard.pages.base import PageView
from vigil.dashboard.queries import timeline
from vigil.dashboard.queries.jobs import list_jobs, pick_job
from vigil.dashboard.queries.parallel import host_at, rank_at
from vigil.dashboard.selection import SHARED_KEYS, Selection, page_href
from vigil.dashboard.settings import DashboardSettings
from vigil.dashboard.store import Store, StoreError
from vigil.dashboard.trace import chrome_trace

TRACE_STEPS = 20  # steps in the 3D view's trace download: the job's last ones

Renderer = Callable[[PageView], Component]


def spec_for(path: str | None) -> PageSpec:
    for p in PAGES:
        if p.path == (path or "/").rstrip("/"):
            return p
    return PAGES[0]


def render_page(store: Store, settings: DashboardSettings, renderers: dict[str, Renderer], path: str | None,
                search: str | None, *, actions: bool = False) -> tuple[Component, str]:
    """(page body, page title): what the `render` callback shows."""
    spec = spec_for(path)
    sel = Selection.from_search(search, default_range=settings.default_range)
    try:
        jobs = list_jobs(store)
    except StoreError as exc:
        return store_error(str(exc)), spec.label
    view = PageView(store=store, settings=settings, sel=sel, jobs=jobs, job=pick_job(jobs, sel.job), actions=actions)
    return guarded(lambda: renderers[spec.path](view)), f"{spec.label} — {spec.question}"


def job_options(store: Store, wanted: str | None) -> list[dict[str, str]]:
    """The job picker's options; the URL's job stays listed even when unknown (or the store is down)."""
    try:
        ids = [j.job_id for j in list_jobs(store)]
    except StoreError:
        ids = []
    if wanted and wanted not in ids:
        ids.insert(0, wanted)
    return [{"label": j, "value": j} for j in ids]


def clicked_host(store: Store, sel: Selection, page: str, point: dict[str, Any]) -> str | None:
    """The host behind a clicked cell: the heatmap's row label, or the rank at the 3D view's coordinates."""
    if page != "parallel":
        return str(point["y"]) if point.get("y") else None
    match = re.fullmatch(r"pp(\d+) tp(\d+)", str(point.get("y", "")))
    if not match or point.get("x") is None:
        return None
    try:
        job = pick_job(list_jobs(store), sel.job)
        if job is None:
            return None
        return host_at(store, job.job_id, dp=int(point["x"]), pp=int(match[1]), tp=int(match[2]))
    except (StoreError, ValueError):
        return None


def clicked_rank(store: Store, sel: Selection, point: dict[str, Any]) -> str | None:
    """The rank behind a clicked 3D cell: its customdata (host, rank, ...), else the rank at its coordinates."""
    data = point.get("customdata")
    if isinstance(data, list) and len(data) > 1 and str(data[0]):
        return str(int(data[1]))
    match = re.fullmatch(r"pp(\d+) tp(\d+)", str(point.get("y", "")))
    if not match or point.get("x") is None:
        return None
    try:
        job = pick_job(list_jobs(store), sel.job)
        rank = rank_at(store, job.job_id, dp=int(point["x"]), pp=int(match[1]), tp=int(match[2])) if job else None
    except (StoreError, ValueError):
        return None
    return str(rank) if rank is not None else None


def trace_file(store: Store, sel: Selection) -> dict[str, Any] | None:
    """The download of the selected job's last `TRACE_STEPS` steps (of the range) as a Chrome trace."""
    job = pick_job(list_jobs(store), sel.job)
    if job is None:
        return None
    last = timeline.last_step(store, job.job_id)
    if last is None:
        return None
    steps = timeline.step_window(store, job.job_id, last - TRACE_STEPS + 1, last)
    first = max(0, last - TRACE_STEPS + 1)
    return {"content": json.dumps(chrome_trace(steps, job=job.job_id)), "base64": False, "type": "application/json",
            "filename": f"{job.job_id}-steps-{first}-{last}.trace.json"}  # what dcc.Download takes


def register(app: Dash, store: Store, settings: DashboardSettings, renderers: dict[str, Renderer], *,
             actions: bool = False) -> None:
    @app.callback(Output("url", "search"), Output("job-select", "value"), Output("job-select", "options"),
                  Output("range-select", "value"),
                  Input("url", "search"), Input("job-select", "value"), Input("range-select", "value"),
                  Input("tick", "n_intervals"))
    def sync_pickers(search: str | None, job: str | None, rng: str | None, _tick: int) -> tuple[Any, ...]:
        sel = Selection.from_search(search, default_range=settings.default_range)
        if ctx.triggered_id == "job-select":
            if job == sel.job:
                return no_update, no_update, no_update, no_update
            return Selection(job=job, range=sel.range).to_search(), no_update, no_update, no_update
        if ctx.triggered_id == "range-select":
            if rng == sel.range or not rng:
                return no_update, no_update, no_update, no_update
            return sel.with_(range=rng).to_search(), no_update, no_update, no_update
        # value and options change together: a dropdown drops a value missing from its options
        return no_update, sel.job, job_options(store, sel.job), sel.range

    @app.callback(Output("url", "search", allow_duplicate=True), Input({"type": "sel", "key": ALL}, "value"),
                  State("url", "search"), prevent_initial_call=True)
    def page_controls(values: list[Any], search: str | None) -> Any:
        trig = ctx.triggered_id
        if not isinstance(trig, dict):
            return no_update
        key = str(trig["key"])
        value = next((i.get("value") for i in ctx.inputs_list[0] if i["id"] == trig), None)
        sel = Selection.from_search(search, default_range=settings.default_range)
        if getattr(sel, key, None) == (value or None):
            return no_update
        changes: dict[str, Any] = {key: value or None}
        if key == "view":
            changes["phase"] = None
        return sel.with_(**changes).to_search()

    @app.callback(Output("url", "pathname", allow_duplicate=True), Output("url", "search", allow_duplicate=True),
                  Input({"type": "host-click", "page": ALL}, "clickData"), State("url", "search"),
                  prevent_initial_call=True)
    def open_host(clicks: list[Any], search: str | None) -> tuple[Any, Any]:
        trig = ctx.triggered_id
        data = ctx.triggered[0]["value"] if ctx.triggered else None
        if not isinstance(trig, dict) or not data or not data.get("points"):
            return no_update, no_update
        sel = Selection.from_search(search, default_range=settings.default_range)
        if trig.get("page") == "parallel":
            rank = clicked_rank(store, sel, data["points"][0])
            return (no_update, sel.with_(rank=rank).to_search()) if rank is not None else (no_update, no_update)
        host = clicked_host(store, sel, str(trig.get("page")), data["points"][0])
        if not host:
            return no_update, no_update
        return "/host", page_href("", sel, host=host)

    @app.callback(Output("trace-download", "data"), Input("trace-download-button", "n_clicks"),
                  State("url", "search"), prevent_initial_call=True)
    def trace(n_clicks: int | None, search: str | None) -> Any:
        if not n_clicks:
            return no_update
        try:
            return trace_file(store, Selection.from_search(search, default_range=settings.default_range)) or no_update
        except StoreError:
            return no_update

    @app.callback([Output(nav_id(p), "href") for p in PAGES] + [Output(nav_id(p), "className") for p in PAGES],
                  Input("url", "pathname"), Input("url", "search"))
    def nav_links(path: str | None, search: str | None) -> list[str]:
        sel = Selection.from_search(search, default_range=settings.default_range)
        active = spec_for(path).path
        hrefs = [p.path + sel.to_search(keys=SHARED_KEYS) for p in PAGES]
        classes = ["nav-link active" if p.path == active else "nav-link" for p in PAGES]
        return hrefs + classes

    @app.callback(Output("page", "children"), Output("page-title", "children"),
                  Output("updated", "children"),
                  Input("url", "pathname"), Input("url", "search"), Input("tick", "n_intervals"))
    def render(path: str | None, search: str | None, _tick: int) -> tuple[Component, str, Component]:
        body, title = render_page(store, settings, renderers, path, search, actions=actions)
        stamp = html.Span(f"updated {datetime.now(UTC).strftime('%H:%M:%S')} UTC · every {settings.refresh_s:g} s")
        return body, title, stamp

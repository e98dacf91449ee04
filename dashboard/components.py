"""Small shared UI pieces: panels that turn store errors into messages, stat cards, tables.

`panel(title, build)` calls `build()` and shows what it returns; when the store fails
it shows the error text in a visible box instead, so one broken query never blanks a
page (or another panel).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import plotly.graph_objects as go
from dash import dcc, html
from dash.development.base_component import Component

from vigil.dashboard.store import StoreError
from vigil.errors import VigilError

GRAPH_CONFIG = {"displaylogo": False, "responsive": True}
SPARK_BARS = "▁▂▃▄▅▆▇█"


def store_error(message: str) -> Component:
    return html.Div([html.Strong("ClickHouse error: "), html.Span(message)], className="store-error", role="alert")


def notice(message: str) -> Component:
    return html.Div(message, className="notice")


def guarded(build: Callable[[], Any]) -> Any:
    """`build()`, or a readable message when the store (or anything under it) fails."""
    try:
        return build()
    except (StoreError, VigilError) as exc:
        return store_error(str(exc))
    except Exception as exc:  # a page must never go blank: show what broke
        return store_error(f"{type(exc).__name__}: {exc}")


def panel(title: str | None, build: Callable[[], Any], *, class_name: str = "panel", id: str | None = None) -> Component:
    body = guarded(build)
    children = [html.H3(title)] if title else []
    children.append(body)
    kwargs: dict[str, Any] = {"className": class_name}
    if id is not None:
        kwargs["id"] = id
    return html.Section(children, **kwargs)


def graph(fig: go.Figure, *, id: str | dict[str, str] | None = None) -> Component:
    kwargs: dict[str, Any] = {"figure": fig, "config": GRAPH_CONFIG}
    if id is not None:
        kwargs["id"] = id
    return dcc.Graph(**kwargs)


def stat(label: str, value: str, *, tone: str = "", title: str | None = None) -> Component:
    return html.Div([html.Div(value, className="stat-value"), html.Div(label, className="stat-label")],
                    className=f"stat tone-{tone}" if tone else "stat", title=title or "")


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, class_name: str = "grid",
          empty: str = "nothing to show", id: str | None = None) -> Component:
    if not rows:
        return notice(empty)
    head = html.Thead(html.Tr([html.Th(c) for c in columns]))
    body = html.Tbody([html.Tr([html.Td(cell) for cell in row]) for row in rows])
    kwargs: dict[str, Any] = {"className": class_name}
    if id is not None:
        kwargs["id"] = id
    return html.Table([head, body], **kwargs)


def selector(key: str, options: Sequence[tuple[str, str]], value: str | None, *, kind: str = "dropdown",
             placeholder: str = "any", label: str = "") -> Component:
    """A control whose value is written to the URL's `key` (see callbacks.register)."""
    opts = [{"label": lbl, "value": val} for val, lbl in options]
    if value is not None and all(o["value"] != value for o in opts):
        opts.insert(0, {"label": value, "value": value})  # a dropdown would silently drop an unlisted value
    cid = {"type": "sel", "key": key}
    control: Component
    if kind == "radio":
        control = dcc.RadioItems(id=cid, options=opts, value=value, inline=True, className="radio")
    else:
        control = dcc.Dropdown(id=cid, options=opts, value=value, placeholder=placeholder, clearable=True,
                               className="dropdown")
    return html.Label([html.Span(label, className="control-label"), control], className="control")


def fmt_ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f} ms"


def fmt_pct(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{100 * v:.{digits}f}%"


def sparkline(values: Sequence[float | None], *, min_span: float = 0.1) -> str:
    """One bar character per value (None: a space), scaled from the smallest to the largest value.

    The scale spans at least `min_span` x the largest value, so a flat series with a few
    percent of noise stays low and flat instead of filling the full height.
    """
    known = [v for v in values if v is not None]
    if not known:
        return ""
    lo, hi = min(known), max(known)
    span = max(hi - lo, min_span * abs(hi)) or 1.0
    top = len(SPARK_BARS) - 1
    return "".join(" " if v is None else SPARK_BARS[min(top, int((v - lo) / span * (top + 1)))] for v in values)

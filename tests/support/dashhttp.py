"""A page of a running dashboard, fetched over HTTP the way the browser gets it.

The page body is the output of the `render` callback (see dashboard/callbacks.py), so
`render_page` POSTs that callback to Dash's `_dash-update-component` endpoint and returns
the component tree as JSON; `find` and `figure_of` pick components out of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx

_OUTPUTS = (("page", "children"), ("page-title", "children"), ("updated", "children"))


def render_page(base_url: str, path: str, search: str = "", timeout: float = 60) -> Any:
    """The page body (Dash component JSON) that `base_url` renders for `path` + `search`."""
    payload = {
        "output": ".." + "...".join(f"{cid}.{prop}" for cid, prop in _OUTPUTS) + "..",  # Dash's multi-output key
        "outputs": [{"id": cid, "property": prop} for cid, prop in _OUTPUTS],
        "inputs": [{"id": "url", "property": "pathname", "value": path},
                   {"id": "url", "property": "search", "value": search},
                   {"id": "tick", "property": "n_intervals", "value": 0}],
        "changedPropIds": ["url.search"], "state": [],
    }
    resp = httpx.post(base_url.rstrip("/") + "/_dash-update-component", json=payload, timeout=timeout)
    resp.raise_for_status()
    return resp.json()["response"]["page"]["children"]


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, list):
        for child in node:
            yield from _walk(child)
    elif isinstance(node, dict) and "props" in node:
        yield node
        yield from _walk(node["props"].get("children"))


def find(tree: Any, cid: str | dict[str, str]) -> dict[str, Any] | None:
    """The component whose id is `cid`, if the page has one."""
    return next((n for n in _walk(tree) if n["props"].get("id") == cid), None)


def figure_of(tree: Any, cid: str | dict[str, str]) -> dict[str, Any]:
    """The plotly figure of the graph `cid` ({"data": [], ...} when the page has no such graph)."""
    node = find(tree, cid)
    fig: dict[str, Any] = node["props"]["figure"] if node else {}
    return fig if fig.get("data") is not None else {"data": [], **fig}


def texts(tree: Any) -> list[str]:
    """Every string child in the tree (table cells, labels, headings)."""
    out: list[str] = []
    for n in _walk(tree):
        child = n["props"].get("children")
        for c in child if isinstance(child, list) else [child]:
            if isinstance(c, str):
                out.append(c)
    return out

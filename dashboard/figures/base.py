"""Shared figure styling: one template, stable `uirevision` (zoom survives refreshes), empty states."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import plotly.graph_objects as go

TEMPLATE = "plotly_white"
SEVERITY_COLORS = {"critical": "#b2182b", "error": "#ef6548", "warning": "#fdae61", "info": "#74add1"}
DEVIATION_SCALE = "RdBu_r"


def times(t_ms: Sequence[int]) -> npt.NDArray[np.datetime64]:
    """UTC instants as one array: plotly validates and serialises it whole, not item by item."""
    return np.asarray(t_ms, dtype="datetime64[ms]")


def instant(t_ms: int) -> str:
    """One UTC instant as the axes above show it (ISO, no offset)."""
    return str(np.datetime64(int(t_ms), "ms"))


def styled(fig: go.Figure, *, title: str, height: int = 320, key: str = "", **layout: Any) -> go.Figure:
    settings: dict[str, Any] = {
        "template": TEMPLATE, "title": {"text": title, "x": 0.01, "font": {"size": 14}}, "height": height,
        "margin": {"l": 60, "r": 20, "t": 40, "b": 40}, "uirevision": key or title,
        "legend": {"orientation": "h", "y": -0.2},
    }
    settings.update(layout)
    fig.update_layout(**settings)
    return fig


def empty(title: str, message: str, height: int = 240) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                       font={"size": 13, "color": "#666"})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return styled(fig, title=title, height=height)

"""Heatmap figures: hosts x phases (or step windows), colour = deviation from the peer median.

Rows keep the query's order (worst host first, at the top); the colour scale is
diverging around 0 and clipped at +-`clip` so one extreme host does not wash out the
rest; the hover shows the exact numbers. `customdata` carries the host so a click can
open the host page. In a waiting phase (grad_sync, bubble, ...) the colour is the waiting
the host caused: red = the others waited that much longer than it did (it is the slow
one), and the hover says so.
"""

from __future__ import annotations

import plotly.graph_objects as go

from vigil.dashboard.figures.base import DEVIATION_SCALE, empty, styled
from vigil.dashboard.queries.heatmap import Matrix


def heatmap_figure(m: Matrix, *, title: str, clip: float = 20.0) -> go.Figure:
    if not m.cells:
        return empty(title, "no phase timings in this time range")
    row = {h: i for i, h in enumerate(m.hosts)}
    col = {c: j for j, c in enumerate(m.cols)}
    z: list[list[float | None]] = [[None] * len(m.cols) for _ in m.hosts]
    custom: list[list[list[object]]] = [[["", 0.0, 0.0, 0.0, 0, ""] for _ in m.cols] for _ in m.hosts]
    for c in m.cells:
        i, j = row[c.host], col[c.col]
        z[i][j] = round(100 * c.dev, 3)
        note = (f"waiting phase: the others waited {100 * c.dev:+.1f}% vs this host" if c.waiting
                else f"deviation {100 * c.dev:+.2f}%")
        custom[i][j] = [c.host, round(c.mean_ms, 3), round(c.median_ms, 3), round(c.max_ms, 3), c.n, note]
    fig = go.Figure(go.Heatmap(
        z=z, x=m.cols, y=m.hosts, customdata=custom, colorscale=DEVIATION_SCALE, zmid=0, zmin=-clip, zmax=clip,
        colorbar={"title": {"text": "vs peers (%)"}, "ticksuffix": "%"}, xgap=1 if len(m.cols) < 40 else 0,
        ygap=1 if len(m.hosts) <= 64 else 0,
        hovertemplate=("<b>%{y}</b> · %{x}<br>%{customdata[5]}<br>mean %{customdata[1]:.2f} ms"
                       "<br>peer median %{customdata[2]:.2f} ms<br>max %{customdata[3]:.2f} ms"
                       "<br>samples %{customdata[4]}<extra>click to open host</extra>")))
    rows = len(m.hosts)
    height = int(min(2400, max(260, 90 + rows * (18 if rows <= 64 else 3))))
    fig.update_yaxes(autorange="reversed", type="category", showticklabels=rows <= 128, title_text=None)
    fig.update_xaxes(type="category", side="top")
    return styled(fig, title=title, height=height, key=f"heatmap/{title}", margin={"l": 110, "r": 20, "t": 70, "b": 20})

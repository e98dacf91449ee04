"""3D-parallel figure: one cell per rank, x = data-parallel index, y = (pipeline stage, tensor rank).

Colour is the rank's time vs the median rank. On top of it: the culprit of the job's
incident is outlined in red and labelled, its victims (and exited ranks) are dimmed under a
grey veil, and a selected rank's groups are outlined (its tensor-parallel group along y,
its data-parallel group along x, its pipeline group across stages). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go

from vigil.dashboard.figures.base import DEVIATION_SCALE, empty, styled
from vigil.dashboard.queries.parallel import ParallelView, RankState

MAX_LABELLED = 256  # cells get a text label up to this many ranks
MARK = {"culprit": "✖ culprit", "victim": "waits", "exited": "exited", "slow": "slow", "training": ""}
GROUP_COLORS = {"tp": "#1b7837", "pp": "#762a83", "dp": "#2166ac"}


def _cell(j: int, i: int, **kw: Any) -> dict[str, Any]:
    return {"type": "rect", "xref": "x", "yref": "y", "x0": j - 0.5, "x1": j + 0.5, "y0": i - 0.5, "y1": i + 0.5, **kw}


def parallel_figure(v: ParallelView, *, job: str, clip: float = 20.0, states: Mapping[int, RankState] | None = None,
                    selected: int | None = None, groups: Mapping[str, list[int]] | None = None) -> go.Figure:
    what = f"'{v.phase}'" + (" (stands out most)" if v.auto else "") if v.phase else "step time"
    every = f", every {v.stride}th" if v.stride > 1 else ""
    title = f"{job}: {what} per rank vs median, steps {v.first_step}-{v.last_step}{every} (x = dp, y = pp/tp)"
    if not v.ranks:
        return empty(title, "no step timings for this job in this time range")
    states = states or {}
    dps = sorted({r.dp for r in v.ranks})
    rows = sorted({(r.pp, r.tp) for r in v.ranks})
    xi = {d: j for j, d in enumerate(dps)}
    yi = {k: i for i, k in enumerate(rows)}
    z: list[list[float | None]] = [[None] * len(dps) for _ in rows]
    text: list[list[str]] = [[""] * len(dps) for _ in rows]
    custom: list[list[list[object]]] = [[["", 0, 0.0, "", ""] for _ in dps] for _ in rows]
    where: dict[int, tuple[int, int]] = {}
    for r in v.ranks:
        i, j = yi[(r.pp, r.tp)], xi[r.dp]
        where[r.rank] = (i, j)
        st = states.get(r.rank)
        z[i][j] = round(100 * r.dev, 3)
        label = MARK.get(st.state, "") if st else ""
        text[i][j] = f"r{r.rank}" + (f" {label}" if label else "")
        custom[i][j] = [r.host, r.rank, round(r.mean_ms, 3), st.state if st else "", (st.message if st else "")[:160]]
    labelled = len(v.ranks) <= MAX_LABELLED
    fig = go.Figure(go.Heatmap(
        z=z, x=[str(d) for d in dps], y=[f"pp{p} tp{t}" for p, t in rows], customdata=custom,
        text=text if labelled else None, texttemplate="%{text}" if labelled else None,
        colorscale=DEVIATION_SCALE, zmid=0, zmin=-clip, zmax=clip, colorbar={"ticksuffix": "%"},
        hovertemplate="rank %{customdata[1]} on %{customdata[0]}<br>dp %{x} · %{y}<br>%{customdata[2]:.2f} ms "
                      "(%{z:+.2f}%)<br>%{customdata[3]} %{customdata[4]}<extra>click to select</extra>"))
    shapes: list[dict[str, Any]] = []
    for rank, st in states.items():
        if rank not in where:
            continue
        i, j = where[rank]
        if st.state in ("victim", "exited"):
            shapes.append(_cell(j, i, fillcolor="rgba(90,90,90,0.55)", line={"width": 0}, name=f"dim-{rank}"))
    for kind, members in (groups or {}).items():
        for rank in members:
            if rank in where and rank != selected:
                i, j = where[rank]
                shapes.append(_cell(j, i, line={"color": GROUP_COLORS.get(kind, "#444"), "width": 2, "dash": "dot"},
                                    name=f"group-{kind}-{rank}"))
    for rank, st in states.items():
        if st.state == "culprit" and rank in where:
            i, j = where[rank]
            shapes.append(_cell(j, i, line={"color": "#b2182b", "width": 5}, name=f"culprit-{rank}"))
    if selected is not None and selected in where:
        i, j = where[selected]
        shapes.append(_cell(j, i, line={"color": "#111", "width": 3}, name=f"selected-{selected}"))
    fig.update_layout(shapes=shapes)
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(type="category", title_text="data-parallel index", showticklabels=len(dps) <= 64)
    return styled(fig, title=title, height=int(min(900, max(260, 80 + 22 * len(rows)))), key=f"3d/{job}")

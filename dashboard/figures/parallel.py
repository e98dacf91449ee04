"""3D-parallel figure: one cell per rank, x = data-parallel index, y = (pipeline stage, tensor rank)."""

from __future__ import annotations

import plotly.graph_objects as go

from vigil.dashboard.figures.base import DEVIATION_SCALE, empty, styled
from vigil.dashboard.queries.parallel import ParallelView


def parallel_figure(v: ParallelView, *, job: str, clip: float = 20.0) -> go.Figure:
    what = f"'{v.phase}'" if v.phase else "step time"
    every = f", every {v.stride}th" if v.stride > 1 else ""
    versus = "the waiting each rank caused" if v.waiting else "vs median"
    title = f"{job}: {what} per rank, {versus}, steps {v.first_step}-{v.last_step}{every} (x = dp, y = pp/tp)"
    if not v.ranks:
        return empty(title, "no step timings for this job in this time range")
    dps = sorted({r.dp for r in v.ranks})
    rows = sorted({(r.pp, r.tp) for r in v.ranks})
    xi = {d: j for j, d in enumerate(dps)}
    yi = {k: i for i, k in enumerate(rows)}
    z: list[list[float | None]] = [[None] * len(dps) for _ in rows]
    custom: list[list[list[object]]] = [[["", 0, 0.0] for _ in dps] for _ in rows]
    for r in v.ranks:
        i, j = yi[(r.pp, r.tp)], xi[r.dp]
        z[i][j] = round(100 * r.dev, 3)
        custom[i][j] = [r.host, r.rank, round(r.mean_ms, 3)]
    fig = go.Figure(go.Heatmap(
        z=z, x=[str(d) for d in dps], y=[f"pp{p} tp{t}" for p, t in rows], customdata=custom,
        colorscale=DEVIATION_SCALE, zmid=0, zmin=-clip, zmax=clip, colorbar={"ticksuffix": "%"},
        hovertemplate="rank %{customdata[1]} on %{customdata[0]}<br>dp %{x} · %{y}<br>%{customdata[2]:.2f} ms "
                      "(%{z:+.2f}%)<extra>click to open host</extra>"))
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(type="category", title_text="data-parallel index", showticklabels=len(dps) <= 64)
    return styled(fig, title=title, height=int(min(900, max(260, 80 + 22 * len(rows)))), key=f"3d/{job}")

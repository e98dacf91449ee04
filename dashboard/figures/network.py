"""Network figure: the most-dropped NICs against the fleet median, with stalls marked."""

from __future__ import annotations

import plotly.graph_objects as go

from vigil.dashboard.figures.base import empty, instant, styled, times
from vigil.dashboard.queries.network import NetworkView

STALL_COLORS = {"stop": "rgba(178,24,43,0.18)", "drop": "rgba(253,174,97,0.25)"}


def network_figure(v: NetworkView, *, title: str) -> go.Figure:
    if not v.fleet:
        return empty(title, "no NIC samples in this time range")
    fx = times([int(r["t_ms"]) for r in v.fleet])
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=fx, y=[float(r["p10_bps"]) / 1e9 for r in v.fleet], name="fleet p10", mode="lines",
                             line={"width": 0}, showlegend=False, hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=fx, y=[float(r["median_bps"]) / 1e9 for r in v.fleet], name="fleet median (p10 band)",
                             mode="lines", line={"color": "#666", "width": 2}, fill="tonexty",
                             fillcolor="rgba(150,150,150,0.2)",
                             hovertemplate="%{x}<br>%{y:.2f} GB/s<extra>fleet median per NIC</extra>"))
    stalled = {(s.host, s.device) for s in v.stalls}
    for s in v.series:
        name = f"{s.host}/{s.device}"
        fig.add_trace(go.Scatter(
            x=times(s.t_ms), y=[b / 1e9 for b in s.bps], name=name, mode="lines",
            line={"width": 2.5 if (s.host, s.device) in stalled else 1.2},
            customdata=[None if r is None else 100 * r for r in s.ratio],
            hovertemplate="%{x}<br>%{y:.2f} GB/s (%{customdata:.0f}% of median)<extra>" + name + "</extra>"))
        low = [(t, b) for t, b, r in zip(s.t_ms, s.bps, s.ratio, strict=True) if r is not None and r < v.drop]
        if low:
            fig.add_trace(go.Scatter(x=times([t for t, _ in low]), y=[b / 1e9 for _, b in low], mode="markers",
                                     marker={"symbol": "x", "size": 9, "color": "#b2182b"}, name=f"stall {name}",
                                     showlegend=False, hovertemplate="%{x}<br>stalled<extra>" + name + "</extra>"))
    for st in v.stalls[:30]:
        fig.add_vrect(x0=instant(st.start_ms), x1=instant(st.end_ms), fillcolor=STALL_COLORS.get(st.kind, "#ccc"),
                      line_width=0, layer="below",
                      annotation_text=f"{st.kind}: {st.host}/{st.device}", annotation_position="top left",
                      annotation_font_size=10)
    fig.update_yaxes(title_text="GB/s per NIC", rangemode="tozero")
    return styled(fig, title=title, height=420, key=f"net/{title}")

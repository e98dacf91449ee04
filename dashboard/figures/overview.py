"""Overview figures: a job's step time and MFU over time."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from vigil.dashboard.figures.base import empty, styled, times
from vigil.dashboard.queries.overview import StepSeries


def step_figure(series: StepSeries, job: str) -> go.Figure:
    title = f"{job}: step time and MFU ({series.bucket_s} s buckets)"
    if not series.t_ms:
        return empty(title, "no steps in this time range")
    x = times(series.t_ms)
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Scatter(x=x, y=series.step_ms, name="step time (mean of ranks)", mode="lines",
                             line={"color": "#2166ac"}, hovertemplate="%{x}<br>%{y:.1f} ms<extra>step time</extra>"))
    fig.add_trace(go.Scatter(x=x, y=series.max_step_ms, name="slowest rank", mode="lines",
                             line={"color": "#92c5de", "dash": "dot"},
                             hovertemplate="%{x}<br>%{y:.1f} ms<extra>slowest rank</extra>"))
    mfu = [None if m is None else 100 * m for m in series.mfu]
    if any(m is not None for m in mfu):
        fig.add_trace(go.Scatter(x=x, y=mfu, name="MFU", mode="lines", line={"color": "#b2182b"},
                                 hovertemplate="%{x}<br>%{y:.2f} %<extra>MFU</extra>"), secondary_y=True)
    fig.update_yaxes(title_text="step time (ms)", secondary_y=False, rangemode="tozero")
    fig.update_yaxes(title_text="MFU (%)", secondary_y=True, rangemode="tozero", showgrid=False)
    return styled(fig, title=title, height=300, key=f"steps/{job}")

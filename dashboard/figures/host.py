"""Host figures: heartbeats, NIC throughput per port, GPU state per GPU and throttle reasons, phase deviation."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from vigil.dashboard.figures.base import DEVIATION_SCALE, empty, styled, times
from vigil.dashboard.queries.heatmap import Cell
from vigil.dashboard.queries.host import HostView


def heartbeat_figure(v: HostView) -> go.Figure:
    hb = v.heartbeats
    title = f"heartbeats received per {v.bucket_s} s"
    if not hb.t_ms:
        return empty(title, "no heartbeats from this host in this time range")
    interval = max((float(i) for i in hb.values["interval_s"] if i), default=0.0)
    fig = go.Figure(go.Bar(x=times(hb.t_ms), y=hb.values["beats"], name="heartbeats", marker_color="#4393c3",
                           hovertemplate="%{x}<br>%{y} heartbeats<extra></extra>"))
    if interval > 0 and v.bucket_s >= interval:
        fig.add_hline(y=v.bucket_s / interval, line_dash="dot", line_color="#999",
                      annotation_text=f"expected ({interval:g} s interval)")
    fig.add_trace(go.Scatter(x=times(hb.t_ms), y=hb.values["procs_running"], name="training processes running",
                             mode="lines", line={"color": "#1b7837"}))
    return styled(fig, title=title, height=260, key=f"hb/{v.host}")


def nic_figure(v: HostView) -> go.Figure:
    title = "NIC throughput per port (tx + rx)"
    if not v.nics:
        return empty(title, "no NIC samples from this host in this time range")
    traces = []
    for s in v.nics:
        split = [[float(t) / 1e9, float(r) / 1e9]
                 for t, r in zip(s.values["tx_mean_bps"], s.values["rx_mean_bps"], strict=True)]
        traces.append(go.Scatter(x=times(s.t_ms), y=[b / 1e9 for b in s.values["bps"]], name=s.name, mode="lines",
                                 customdata=split, hovertemplate="%{x}<br>%{y:.2f} GB/s (tx %{customdata[0]:.2f}, "
                                 "rx %{customdata[1]:.2f})<extra>" + s.name + "</extra>"))
    fig = go.Figure(traces)  # one call: adding traces one by one re-validates the figure each time
    fig.update_yaxes(title_text="GB/s", rangemode="tozero")
    return styled(fig, title=title, height=280, key=f"nic/{v.host}")


def gpu_figure(v: HostView) -> go.Figure:
    title = "GPUs: utilisation, temperature, SM clock, throttling"
    if not v.gpus:
        return empty(title, "no GPU readings from this host in this time range")
    throttle_title = "throttle reasons (GPU samples)" if v.throttle else "throttle reasons: none reported"
    fig = make_subplots(rows=4, cols=1, shared_xaxes=True, vertical_spacing=0.04,
                        subplot_titles=("utilisation %", "temperature °C", "SM clock MHz", throttle_title))
    traces: list[go.Scatter | go.Bar] = []
    rows: list[int] = []
    for s in v.gpus:
        x = times(s.t_ms)
        name = f"GPU {s.name}"
        for row, key in enumerate(("util_pct", "temp_c", "sm_clock_mhz"), start=1):
            values = s.values[key]
            if all(val is None for val in values):
                continue
            traces.append(go.Scatter(x=x, y=values, name=name, legendgroup=name, showlegend=row == 1, mode="lines",
                                     hovertemplate="%{x}<br>%{y}<extra>" + name + "</extra>"))
            rows.append(row)
    for s in v.throttle:  # stacked: one colour per NVML reason
        traces.append(go.Bar(x=times(s.t_ms), y=s.values["samples"], name=s.name, legendgroup="throttle",
                             customdata=s.values["gpus"],
                             hovertemplate="%{x}<br>%{y} samples, GPUs %{customdata}<extra>" + s.name + "</extra>"))
        rows.append(4)
    fig.add_traces(traces, rows=rows, cols=[1] * len(rows))
    fig.update_layout(barmode="stack")
    return styled(fig, title=title, height=560, key=f"gpu/{v.host}")


def phase_figure(cells: list[Cell], host: str) -> go.Figure:
    title = "phase time vs peer median"
    if not cells:
        return empty(title, "no phase timings from this host in this time range", height=220)
    devs = [100 * c.dev for c in cells]
    fig = go.Figure(go.Bar(
        x=[c.col for c in cells], y=devs, marker={"color": devs, "colorscale": DEVIATION_SCALE, "cmid": 0,
                                                  "cmin": -20, "cmax": 20},
        customdata=[[c.mean_ms, c.median_ms] for c in cells],
        hovertemplate="%{x}: %{y:+.2f}%<br>host %{customdata[0]:.2f} ms<br>peers %{customdata[1]:.2f} ms"
                      "<extra></extra>"))
    fig.update_yaxes(title_text="deviation (%)", ticksuffix="%")
    return styled(fig, title=title, height=240, key=f"phases/{host}")

"""Pure figure builders: plain query results in, plotly figures out (no I/O, no Dash)."""

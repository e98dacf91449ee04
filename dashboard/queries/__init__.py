"""ClickHouse queries of the dashboard, one module per page; each returns plain dataclasses.

Every aggregation runs in ClickHouse over the analyzer's rollups (or, for the 3D view,
over a primary-key-pruned slice of `step_timings`); user input is bound only as
server-side parameters. Timestamps travel as epoch milliseconds so the query-only proxy
of `vigil up` (JSON) and a direct client give identical results.
"""

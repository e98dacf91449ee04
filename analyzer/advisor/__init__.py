"""The resource advisor: node count, hot/starved hosts and data-loader cost from a job's stored history.

`core` and `hosts` are pure (rows in, `Recommendation` out); `query` reads the rows from
ClickHouse; `vigil advise --job J` (vigil/app) prints the answer and can publish it as an
`advice` event, which the recovery controller cites in its scale decisions.
"""

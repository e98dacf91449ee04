"""docs/tables.md: every ClickHouse table and view the components' migrations create, read from the engine.

The page is the migrated schema itself (`system.tables`, `system.columns` of a fresh in-process engine after
every component's migrations ran), so it cannot drift from the numbered DDL: a new migration changes it.
"""

from __future__ import annotations

import re
import tempfile
from typing import Any

from vigil.app.components import MIGRATIONS, migrate_all
from vigil.clickhouse.client import connect


def _owner(table: str) -> str:
    """The component whose migrations create `table` (`CREATE ... [IF NOT EXISTS] table`)."""
    made = re.compile(rf"CREATE\s+(?:OR\s+REPLACE\s+)?(?:MATERIALIZED\s+)?(?:TABLE|VIEW)\s+(?:IF\s+NOT\s+EXISTS\s+)?"
                      rf"`?{re.escape(table)}`?[\s(]", re.I)
    owners = [s.owner for s in MIGRATIONS if any(made.search(m.sql) for m in s.discover())]
    return ", ".join(owners) or ("the kernel's migration ledger" if table == "vigil_migrations" else "?")


def page(client: Any | None = None) -> str:
    if client is None:
        with tempfile.TemporaryDirectory(prefix="vigil-reference-") as tmp:
            return page(connect(f"chdb://{tmp}"))
    migrate_all(client, ttl_days=30)
    tables = client.query("SELECT name, engine, comment FROM system.tables WHERE database = currentDatabase() "
                          "AND name NOT LIKE '.inner%' ORDER BY name").result_rows
    columns = client.query("SELECT table, name, type, comment FROM system.columns "
                           "WHERE database = currentDatabase() ORDER BY table, position").result_rows
    by_table: dict[str, list[tuple[str, str, str]]] = {}
    for table, name, type_, comment in columns:
        by_table.setdefault(table, []).append((name, type_, comment))
    out = ["# Tables reference", "",
           "Generated from the migrated schema by `python -m vigil.app.reference`; do not edit by hand. Each",
           "component owns its tables and their numbered migrations (analyzer/migrations, notify/migrations).", ""]
    for name, engine, comment in tables:
        out += [f"## `{name}` ({engine}; {_owner(name)})", "", *([comment, ""] if comment else []),
                "| column | type |", "|---|---|",
                *[f"| `{c}` | `{t}` |" for c, t, _ in by_table.get(name, [])], ""]
    return "\n".join(out)

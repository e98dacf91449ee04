"""Numbered, idempotent ClickHouse migrations recorded in a ledger table: the runner, not the DDL.

Each component owns its tables: its migrations are `NNNN_name.sql` files in its own
`migrations/` folder, declared as a `MigrationSet` with the number range it owns (the
analyzer 0001-0199 and, once that was used up, 1000-1199; recovery 0200-0299, the dashboard
0300-0399), so numbers never
collide across components and the ledger stays keyed by number. The application layer
passes every component's set to `migrate`. Statements are split on `;` at line end and
may use `{ttl_days}` style placeholders filled from settings. Each applied migration is
recorded in `vigil_migrations` with a checksum; a changed file that was already applied
is reported, not re-run.

A migration that rebuilds tables (a line `-- rebuilds: table ...`: it copies them under a
new layout and swaps them in) must run with every writer of those tables stopped and one
migrator. `migrate(..., rebuild=False)` (a service migrating at start, a running stack
asked to migrate) refuses one whose tables hold rows, naming it and what to do: stop every
ingest and run `vigil migrate`. On empty tables (a fresh store) it is run like any other.

Retention is a setting, not history: after the migrations, every table whose TTL is
`<expr> + INTERVAL n DAY` is brought to the configured `ttl_days` (ALTER ... MODIFY TTL),
so changing `VIGIL_RETENTION_DAYS` and running `vigil migrate` applies it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vigil.errors import MigrationError, one_line

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_REBUILDS = re.compile(r"^-- rebuilds: ([a-z0-9_ ]+)$", re.M)

LEDGER = """
CREATE TABLE IF NOT EXISTS vigil_migrations (
    id UInt32, name String, checksum String, applied_at DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = ReplacingMergeTree ORDER BY id
"""


@dataclass(frozen=True, kw_only=True)
class Migration:
    id: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()[:16]

    @property
    def rebuilds(self) -> tuple[str, ...]:
        """The tables it copies and swaps (its `-- rebuilds:` line): every writer of them must be stopped."""
        m = _REBUILDS.search(self.sql)
        return tuple(m.group(1).split()) if m else ()

    def statements(self, params: dict[str, object]) -> list[str]:
        text = self.sql
        for k, v in params.items():
            text = text.replace("{" + k + "}", str(v))
        return [s.strip() for s in re.split(r";\s*$", text, flags=re.M) if s.strip() and not _only_comments(s)]


def _only_comments(s: str) -> bool:
    return all(not line.strip() or line.strip().startswith("--") for line in s.splitlines())


@dataclass(frozen=True, kw_only=True)
class MigrationSet:
    """The migrations one component owns: a folder of `NNNN_name.sql` files numbered in `ids`."""

    owner: str
    directory: Path
    ids: range
    more: tuple[range, ...] = ()  # further ranges it owns, once `ids` is used up

    @property
    def ranges(self) -> tuple[range, ...]:
        return (self.ids, *self.more)

    def discover(self) -> list[Migration]:
        found: list[Migration] = []
        for path in sorted(self.directory.glob("*.sql")):
            m = _NAME.match(path.name)
            if not m:
                raise MigrationError(f"{path}: migration files are named NNNN_lower_snake.sql")
            number = int(m.group(1))
            if not any(number in r for r in self.ranges):
                raise MigrationError(f"{path}: {self.owner} owns migration numbers "
                                     + ", ".join(f"{r.start:04d}-{r.stop - 1:04d}" for r in self.ranges))
            found.append(Migration(id=number, name=m.group(2), sql=path.read_text()))
        ids = [m.id for m in found]
        if len(ids) != len(set(ids)):
            raise MigrationError(f"duplicate migration number in {self.directory}")
        return found


def discover(sets: Sequence[MigrationSet]) -> list[Migration]:
    """Every migration of `sets` in number order; MigrationError when two owners' ranges overlap."""
    for i, a in enumerate(sets):
        for b in sets[i + 1:]:
            if any(x.start < y.stop and y.start < x.stop for x in a.ranges for y in b.ranges):
                raise MigrationError(f"migration ranges of {a.owner} and {b.owner} overlap")
    return sorted((m for s in sets for m in s.discover()), key=lambda m: m.id)


@dataclass(frozen=True, kw_only=True)
class MigrationReport:
    applied: list[str]
    already: list[str]
    changed: list[str]
    retention: list[str] = field(default_factory=list)  # tables whose TTL was brought to the setting


_TTL = re.compile(r"\bTTL (.+?) \+ toIntervalDay\((\d+)\)(?= SETTINGS|$)")


def apply_retention(client: Any, days: int) -> list[str]:
    """ALTER every table of the current database whose day-interval TTL differs from `days`."""
    rows = client.query("SELECT name, engine_full FROM system.tables WHERE database = currentDatabase() "
                        "AND engine_full LIKE '%TTL %'").result_rows
    changed = []
    for name, engine in rows:
        m = _TTL.search(str(engine))
        if m is None or int(m.group(2)) == days:
            continue
        try:
            client.command(f"ALTER TABLE `{name}` MODIFY TTL {m.group(1)} + INTERVAL {int(days)} DAY")
        except Exception as exc:
            raise MigrationError(f"retention of {name} to {days} days failed: {one_line(exc)}") from None
        changed.append(f"{name}: {m.group(2)} -> {days} days")
    return changed


def _holding_rows(client: Any, tables: Sequence[str]) -> list[str]:
    """Those of `tables` that hold rows, in their order."""
    rows = client.query("SELECT name, total_rows FROM system.tables WHERE database = currentDatabase() "
                        "AND name IN {names:Array(String)}", parameters={"names": list(tables)}).result_rows
    full = {str(n) for n, total in rows if total}
    return [t for t in tables if t in full]


def migrate(client: Any, sets: Sequence[MigrationSet], params: dict[str, object] | None = None, *,
            rebuild: bool = True) -> MigrationReport:
    """Apply every migration of `sets` not yet recorded; safe to run any number of times. `rebuild=False` refuses a
    pending migration that rebuilds tables holding rows (MigrationError, before it changes anything)."""
    client.command(LEDGER)
    done = {int(r[0]): str(r[1]) for r in client.query("SELECT id, checksum FROM vigil_migrations FINAL").result_rows}
    applied: list[str] = []
    already: list[str] = []
    changed: list[str] = []
    for mig in discover(sets):
        label = f"{mig.id:04d}_{mig.name}"
        if mig.id in done:
            (changed if done[mig.id] != mig.checksum else already).append(label)
            continue
        full = _holding_rows(client, mig.rebuilds) if mig.rebuilds and not rebuild else []
        if full:
            raise MigrationError(f"migration {label} rebuilds {', '.join(full)} (copies and swaps them), which hold "
                                 "rows: a service does not run it at start. Stop every ingest (every `vigil "
                                 "analyzer`, `vigil up`), run `vigil migrate`, then start them again")
        for stmt in mig.statements(params or {}):
            try:
                client.command(stmt)
            except Exception as exc:
                raise MigrationError(f"migration {label} failed: {one_line(exc)}") from None
        client.insert("vigil_migrations", [[mig.id, mig.name, mig.checksum]], column_names=["id", "name", "checksum"])
        applied.append(label)
    days = (params or {}).get("ttl_days")
    retention = apply_retention(client, int(str(days))) if days is not None else []
    return MigrationReport(applied=applied, already=already, changed=changed, retention=retention)

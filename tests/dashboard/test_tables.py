"""The dashboard's declared view of the analyzer's tables agrees with the migrated schema."""

from __future__ import annotations

import importlib
import pkgutil
import re
from typing import Any

import pytest

import vigil.dashboard.queries as queries
from vigil.clickhouse.client import connect
from vigil.dashboard.tables import ALL, Table

pytestmark = pytest.mark.clickhouse
_WORD = re.compile(r"[a-z_][a-z0-9_]*")


def schema(client: Any) -> dict[str, set[str]]:
    return {t.name: {str(r[0]) for r in client.query(f"DESCRIBE TABLE {t.name}").result_rows} for t in ALL}


def query_texts() -> list[tuple[str, str]]:
    """Every SQL string the query modules define (module-level constants), as (where, text)."""
    out = []
    for info in pkgutil.iter_modules(queries.__path__):
        module = importlib.import_module(f"{queries.__name__}.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, str) and re.search(r"\b(FROM|JOIN)\b", value):
                out.append((f"{info.name}.{name}", value))
    return out


def test_declared_tables_and_columns_exist(clickhouse_dsn: str, database: str) -> None:
    columns = schema(connect(clickhouse_dsn, database=database))
    for table in ALL:
        missing = set(table.columns) - columns[table.name]
        assert not missing, f"the dashboard reads {table.name}.{sorted(missing)}, which the schema lacks"


def test_queries_use_only_declared_columns_of_the_tables_they_read(clickhouse_dsn: str, database: str) -> None:
    columns = schema(connect(clickhouse_dsn, database=database))
    texts = query_texts()
    assert len(texts) >= 20
    for where, sql in texts:
        read: list[Table] = [t for t in ALL if re.search(rf"\b(FROM|JOIN)\s+{t.name}\b", sql)]
        words = set(_WORD.findall(sql))
        declared = {c for t in read for c in t.columns}
        for t in read:
            undeclared = (words & columns[t.name]) - declared
            assert not undeclared, f"{where} uses {t.name}.{sorted(undeclared)} without declaring it"

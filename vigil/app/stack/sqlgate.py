"""Read-only SQL for the control port: one plain read statement, judged on ClickHouse's own parser.

Layers (each measured against an escape corpus, tests/backbone/test_control_port.py):

1. A dedicated client whose session is `readonly = 1` with limits (time, result rows,
   memory), opened once; the queries it runs cannot lift any of them. readonly alone
   blocks DDL, DML, SET, SYSTEM and every table function, but *not* `INTO OUTFILE`, the
   scalar `file()`, `DESCRIBE file(...)`, or the statements before the last one of a
   multi-statement text.
2. The gate. The text is canonicalised by `formatQuerySingleLine({q:String})`, the SQL
   travelling as a bound parameter (parsed, never executed; a multi-statement text is a
   syntax error); then `EXPLAIN AST <canonical>` must show a SELECT (or SHOW TABLES,
   DESCRIBE, SHOW CREATE, EXISTS) with nothing else at its root (INTO OUTFILE, a
   union-level SETTINGS or FORMAT are refused), no table function outside a small
   allowlist anywhere in the tree, no `file()`, no Identifier-typed parameter. What runs is
   the canonical text that was checked.
3. A handle that raised is replaced: a chdb handle can hand a failed query's leftover
   output to the next query on it.

A trailing `SETTINGS join_use_nulls = 1` (the dashboard's overview query) runs on a second
read-only handle opened with that setting; readonly accepts a SETTINGS clause that changes
nothing and refuses every other one.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

from vigil.errors import one_line

SAFE_TABLE_FUNCTIONS = frozenset({"numbers", "numbers_mt", "zeros", "zeros_mt", "values", "null", "generateseries",
                                  "generate_series", "one"})
DENIED_FUNCTIONS = frozenset({"file", "catboostevaluate", "naivebayesclassifier"})  # scalar, with outside effects
ROOTS = ("SelectWithUnionQuery", "ShowTables", "DescribeQuery", "ShowCreateTableQuery", "ShowColumns",
         "ExistsTableQuery")
# max_rows_to_read stops a runaway scan at once (max_execution_time alone let one finish on a loaded engine)
LIMITS: dict[str, Any] = {"max_execution_time": 30, "max_result_rows": 1_000_000, "result_overflow_mode": "throw",
                          "max_rows_to_read": 2_000_000_000, "read_overflow_mode": "throw",
                          "max_memory_usage": 4_000_000_000, "max_query_size": 262_144}
SHAPES: dict[str, dict[str, Any]] = {" SETTINGS join_use_nulls = 1": {"join_use_nulls": 1}}
_CLIENT_FORMAT = " Identifier Native"  # clickhouse-connect appends FORMAT Native to what it sends


class Refused(ValueError):
    """The text is not one plain read statement; the message says what it is instead."""


def check(explain: list[str]) -> None:
    """Refuse unless the EXPLAIN AST lines show one plain read statement."""
    root = explain[0].strip().split(" ")[0] if explain else ""
    if not root.startswith(ROOTS):
        raise Refused(f"only SELECT, SHOW TABLES, DESCRIBE, SHOW CREATE are served (got {root or 'nothing'})")
    extra = [ln.strip() for ln in explain[1:] if re.match(r"^ \S", ln) and ln != _CLIENT_FORMAT
             and not (root.startswith("SelectWithUnionQuery") and ln.startswith(" ExpressionList"))
             and not (not root.startswith("SelectWithUnionQuery") and ln.startswith((" TableExpression", " Identifier ")))]
    if extra:
        raise Refused(f"INTO OUTFILE, SETTINGS or FORMAT on the whole query is not served ({extra[0].split(' ')[0]})")
    for i, line in enumerate(explain):
        node = line.strip()
        depth = len(line) - len(line.lstrip(" "))
        if node.startswith("Function "):
            name = node.split(" ")[1].lower()
            if name in DENIED_FUNCTIONS:
                raise Refused(f"function {name}() is not served")
            parent = next((explain[j].strip() for j in range(i - 1, -1, -1)
                           if len(explain[j]) - len(explain[j].lstrip(" ")) < depth), "")
            if parent.startswith("TableExpression") and name not in SAFE_TABLE_FUNCTIONS:
                raise Refused(f"table function {name}() is not served")
        if node.startswith("QueryParameter") and ":Identifier" in node.replace(" ", ""):
            raise Refused("Identifier parameters are not served")


class ReadOnlySql:
    """Runs vetted read-only SQL on handles of its own; `open_client(options)` opens one."""

    def __init__(self, open_client: Callable[[dict[str, Any]], Any]) -> None:
        self._open = open_client
        self._handles: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _handle(self, shape: str) -> Any:
        if shape not in self._handles:  # readonly last: once set, the handle cannot change it or the limits
            self._handles[shape] = self._open({**LIMITS, **SHAPES.get(shape, {}), "readonly": 1})
        return self._handles[shape]

    def _drop(self, shape: str) -> None:
        handle = self._handles.pop(shape, None)
        if handle is not None:
            try:
                handle.close()
            except Exception:
                pass

    def vet(self, sql: str, parameters: dict[str, Any]) -> tuple[str, str]:
        """(canonical text, handle shape) of `sql`; Refused when it is not one plain read statement."""
        if "\x00" in sql:
            raise Refused("NUL byte in the query")
        try:
            canon = str(self._handle("").query("SELECT formatQuerySingleLine({q:String})",
                                               parameters={"q": sql}).result_rows[0][0])
        except Exception as exc:
            self._drop("")
            raise Refused(f"not one statement: {one_line(exc, 160)}") from None
        shape = next((s for s in SHAPES if canon.endswith(s)), "")
        try:
            explain = [str(r[0]) for r in self._handle(shape).query("EXPLAIN AST " + canon, parameters=parameters).result_rows]
        except Exception as exc:
            self._drop(shape)
            raise Refused(f"does not parse: {one_line(exc, 160)}") from None
        check(explain)
        return canon, shape

    def query(self, sql: str, parameters: dict[str, Any] | None = None) -> Any:
        """The result of `sql` if it passes the gate; Refused, or the engine's error, otherwise."""
        params = parameters or {}
        with self._lock:
            canon, shape = self.vet(sql, params)
            try:
                return self._handle(shape).query(canon, parameters=params)
            except Exception:
                self._drop(shape)
                raise

    def close(self) -> None:
        with self._lock:
            for shape in list(self._handles):
                self._drop(shape)

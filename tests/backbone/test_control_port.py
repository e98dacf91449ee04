"""The control port: nothing without the token, and really read-only (an escape corpus, each effect checked).

Each attempt is sent as a local user would, with the token; it must be refused *and* leave no effect
behind: the victim table unchanged, no file written, no connection made to a loopback listener, no
secret (a file, an sqlite db, a Python global) in the answer, and the next query on the port still
answering right (a failed chdb query can leave output for the next one on its handle).
"""

from __future__ import annotations

import socket
import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from vigil.app.stack.control import ControlServer
from vigil.app.stack.state import StackState, state_path, write_state
from vigil.clickhouse.client import connect
from vigil.settings import VigilSettings

pytestmark = [pytest.mark.clickhouse]
SECRET = "TOPSECRET-4f1c"
secret_frame = {"v": [SECRET]}  # what chdb's Python() table function could read from the caller's frames


class Listener:
    """Counts connections on a loopback port (a query that reaches out is an escape)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(50)
        self.port, self.hits = self.sock.getsockname()[1], 0
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.hits += 1
            conn.close()


def corpus(root: Path, port: int) -> list[tuple[str, str]]:
    secret, db, out = root / "secret.txt", root / "secret.sqlite", root / "out.csv"
    return [
        ("insert", "INSERT INTO victim VALUES (99)"),
        ("with-insert", "WITH 1 AS x INSERT INTO victim SELECT 99"),
        ("create", "CREATE TABLE evil (x UInt8) ENGINE = Memory"),
        ("alter-delete", "ALTER TABLE victim DELETE WHERE 1"),
        ("lightweight-delete", "DELETE FROM victim WHERE 1"),
        ("drop", "DROP TABLE victim"),
        ("truncate", "TRUNCATE TABLE victim"),
        ("multi-stmt-drop", "SELECT 1; DROP TABLE victim; SELECT 1"),
        ("multi-stmt-insert", "SELECT 1; INSERT INTO victim VALUES (99); SELECT 1"),
        ("optimize", "OPTIMIZE TABLE victim FINAL"),
        ("detach", "DETACH TABLE victim"),
        ("insert-into-function", f"INSERT INTO FUNCTION file('{root}/fn_out.csv', 'CSV') SELECT 1"),
        ("into-outfile", f"SELECT * FROM victim INTO OUTFILE '{out}'"),
        ("into-outfile-with", f"WITH 1 AS a SELECT a INTO OUTFILE '{out}' TRUNCATE FORMAT CSV"),
        ("file-table-fn", f"SELECT * FROM file('{secret}', 'LineAsString')"),
        ("file-quoted-name", f"SELECT * FROM `file`('{secret}', 'LineAsString')"),
        ("file-in-view-fn", f"SELECT * FROM view(SELECT * FROM file('{secret}', 'LineAsString'))"),
        ("file-in-subquery", f"SELECT (SELECT any(line) FROM file('{secret}', 'LineAsString'))"),
        ("file-scalar", f"SELECT file('{secret}')"),
        ("file-scalar-upper", f"SELECT FILE('{secret}')"),
        ("describe-file", f"DESCRIBE file('{secret}', 'CSVWithNames')"),
        ("sqlite", f"SELECT * FROM sqlite('{db}', 's')"),
        ("python-fn", "SELECT * FROM Python(secret_frame)"),
        ("url", f"SELECT * FROM url('http://127.0.0.1:{port}/x', 'LineAsString')"),
        ("url-describe", f"DESCRIBE url('http://127.0.0.1:{port}/y', 'LineAsString')"),
        ("explain-url", f"EXPLAIN SELECT * FROM url('http://127.0.0.1:{port}/z', 'LineAsString')"),
        ("explain-syntax", f"EXPLAIN SYNTAX SELECT (SELECT count() FROM url('http://127.0.0.1:{port}/w', 'LineAsString'))"),
        ("s3", f"SELECT * FROM s3('http://127.0.0.1:{port}/bucket/key.csv', 'CSV', 'x String')"),
        ("remote", f"SELECT * FROM remote('127.0.0.1:{port}', system.one)"),
        ("mysql", f"SELECT * FROM mysql('127.0.0.1:{port}', 'db', 't', 'u', 'p')"),
        ("postgresql", f"SELECT * FROM postgresql('127.0.0.1:{port}', 'db', 't', 'u', 'p')"),
        ("hdfs", f"SELECT * FROM hdfs('hdfs://127.0.0.1:{port}/x.csv', 'CSV', 'x String')"),
        ("mongodb", f"SELECT * FROM mongodb('127.0.0.1:{port}', 'db', 'c', 'u', 'p', 'x String')"),
        ("redis", f"SELECT * FROM redis('127.0.0.1:{port}', 'k', 'k String, v String')"),
        ("executable", "SELECT * FROM executable('id', 'LineAsString', 'x String')"),
        ("jdbc", "SELECT * FROM jdbc('jdbc:mysql://127.0.0.1/db', 't')"),
        ("odbc", "SELECT * FROM odbc('DSN=x', 't')"),
        ("input", "SELECT * FROM input('x String')"),
        ("dictionary-ddl", "CREATE DICTIONARY d (k UInt64, v String) PRIMARY KEY k SOURCE(NULL()) LAYOUT(FLAT()) LIFETIME(0)"),
        ("dictionary-fn", "SELECT * FROM dictionary('nope')"),
        ("set-readonly-0", "SET readonly = 0"),
        ("settings-clause-ro0", f"SELECT * FROM file('{secret}', 'LineAsString') SETTINGS readonly = 0"),
        ("settings-lift-limits", "SELECT count() FROM numbers(10) SETTINGS max_execution_time = 1000, max_result_rows = 0"),
        ("use-db", "USE system"),
        ("multi-stmt-use", "SELECT 1; USE system; SELECT 1"),
        ("multi-stmt-set", "SELECT 1; SET readonly = 0; SELECT 1"),
        ("unterminated-comment", f"SELECT * FROM file('{secret}', 'LineAsString') /*"),
        ("trailing-line-comment", f"SELECT * FROM file('{secret}', 'LineAsString') --"),
        ("system-cmd", "SYSTEM STOP MERGES"),
        ("kill-query", "KILL QUERY WHERE 1 SYNC"),
        ("backup", f"BACKUP TABLE victim TO File('{root}/bk')"),
        ("create-temp", "CREATE TEMPORARY TABLE tt (x UInt8)"),
        ("nul-byte", "SELECT 1\x00; DROP TABLE victim"),
        ("sleep", "SELECT sleepEachRow(1) FROM numbers(40)"),
        ("dos-scan", "SELECT sum(number) FROM numbers_mt(100000000000)"),
        ("huge-result", "SELECT number FROM numbers(5000000)"),
    ]


LEGIT: list[tuple[str, dict[str, Any], list[list[Any]]]] = [
    ("SELECT count(), sum(x) FROM victim", {}, [[3, 6]]),
    ("WITH 2 AS k SELECT x * k FROM victim ORDER BY x", {}, [[2], [4], [6]]),
    ("SELECT x FROM victim WHERE x >= {lo:UInt64} ORDER BY x", {"lo": 2}, [[2], [3]]),
    ("SELECT a.x FROM victim AS a INNER JOIN (SELECT x FROM victim) AS b ON a.x = b.x ORDER BY a.x", {}, [[1], [2], [3]]),
    ("SELECT number FROM numbers(3)", {}, [[0], [1], [2]]),
    ("SELECT 1 UNION ALL SELECT 2 ORDER BY 1", {}, [[1], [2]]),
    ("SELECT ';' AS s -- trailing ; comment", {}, [[";"]]),
    ("SELECT a.x, b.y FROM victim AS a LEFT JOIN (SELECT 1 AS x, 5 AS y) AS b ON a.x = b.x ORDER BY a.x "
     "SETTINGS join_use_nulls = 1", {}, [[1, 5], [2, None], [3, None]]),
]


@pytest.fixture
def port(clickhouse_dsn: str, database: str, tmp_path: Path) -> Iterator[tuple[ControlServer, Any, Listener]]:
    (tmp_path / "secret.txt").write_text(SECRET + "\n1\n")
    db = sqlite3.connect(tmp_path / "secret.sqlite")
    db.execute("CREATE TABLE s (v TEXT)")
    db.execute("INSERT INTO s VALUES (?)", (SECRET,))
    db.commit()
    db.close()
    writer = connect(clickhouse_dsn, database=database)
    writer.command("CREATE TABLE victim (x UInt64) ENGINE = MergeTree ORDER BY x")
    writer.command("INSERT INTO victim VALUES (1), (2), (3)")
    server = ControlServer(port=0, dsn=clickhouse_dsn, database=database, health=lambda: {"ok": True},
                           migrate=lambda: {"applied": []})
    server.start()
    yield server, writer, Listener()
    server.stop()


def test_requests_without_the_token_get_401(port: tuple[ControlServer, Any, Listener]) -> None:
    server = port[0]
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": server.token}):
        assert httpx.get(f"{server.url}/health", headers=headers).status_code == 401
        assert httpx.post(f"{server.url}/sql", json={"sql": "SELECT 1"}, headers=headers).status_code == 401
        assert httpx.post(f"{server.url}/migrate", headers=headers).status_code == 401
    ok = {"Authorization": f"Bearer {server.token}"}
    assert httpx.get(f"{server.url}/health", headers=ok).json() == {"ok": True}
    assert httpx.post(f"{server.url}/sql", json={"sql": "SELECT 1"}, headers=ok).json()["rows"] == [[1]]


def test_stack_json_holding_the_token_is_private(tmp_path: Path) -> None:
    settings = VigilSettings(home=tmp_path / "home")
    write_state(settings, StackState(pid=1, bootstrap="b", clickhouse_dsn="chdb:///x", control_url="u", token="t0k"))
    assert stat.S_IMODE(state_path(settings).stat().st_mode) == 0o600
    assert '"token": "t0k"' in state_path(settings).read_text()


def test_escape_corpus_is_refused_without_effect(port: tuple[ControlServer, Any, Listener], tmp_path: Path) -> None:
    server, writer, listener = port
    ok = {"Authorization": f"Bearer {server.token}"}
    attempts = corpus(tmp_path, listener.port)
    served = []
    for name, sql in attempts:
        resp = httpx.post(f"{server.url}/sql", json={"sql": sql, "parameters": {"t": "victim"}}, headers=ok, timeout=60)
        body = resp.text
        if resp.status_code == 200:
            served.append(name)
        assert SECRET not in body, f"{name}: secret read"
        assert not (tmp_path / "out.csv").exists() and not (tmp_path / "fn_out.csv").exists(), f"{name}: file written"
        assert listener.hits == 0, f"{name}: connected out"
        assert writer.query("SELECT count(), sum(x) FROM victim").result_rows == [(3, 6)], f"{name}: table changed"
        assert not writer.query("SELECT count() FROM system.tables WHERE database = currentDatabase() "
                                "AND name IN ('evil', 'd')").result_rows[0][0], f"{name}: created"
        after = httpx.post(f"{server.url}/sql", json={"sql": "SELECT 4242"}, headers=ok, timeout=60).json()
        assert after.get("rows") == [[4242]], f"{name}: the next query got {after}"
    assert served == [], f"served instead of refused: {served}"
    assert len(attempts) >= 55


def test_what_vigil_sends_is_served(port: tuple[ControlServer, Any, Listener]) -> None:
    server = port[0]
    ok = {"Authorization": f"Bearer {server.token}"}
    for sql, params, rows in LEGIT:
        resp = httpx.post(f"{server.url}/sql", json={"sql": sql, "parameters": params}, headers=ok, timeout=60)
        assert resp.status_code == 200 and resp.json()["rows"] == rows, (sql, resp.text)
    for sql in ("SHOW TABLES", "DESCRIBE TABLE victim", "SHOW CREATE TABLE victim",
                "SELECT table, count() FROM system.parts WHERE database = currentDatabase() GROUP BY table"):
        assert httpx.post(f"{server.url}/sql", json={"sql": sql}, headers=ok, timeout=60).status_code == 200, sql


def test_a_migration_the_running_stack_must_not_apply_answers_409_with_its_reason(clickhouse_dsn: str,
                                                                                  database: str) -> None:
    """`vigil migrate` against a running `vigil up` (it ingests) is refused a migration that rebuilds tables holding
    rows: the port says why (409), not a server error."""
    from vigil.errors import MigrationError

    def refuse() -> dict[str, Any]:
        raise MigrationError("migration 0198_time_bucketed_raw rebuilds nic_counters (copies and swaps them)")

    server = ControlServer(port=0, dsn=clickhouse_dsn, database=database, health=lambda: {"ok": True}, migrate=refuse)
    server.start()
    try:
        resp = httpx.post(f"{server.url}/migrate", headers={"Authorization": f"Bearer {server.token}"})
        assert resp.status_code == 409
        assert "0198_time_bucketed_raw rebuilds nic_counters" in resp.json()["error"]
    finally:
        server.stop()

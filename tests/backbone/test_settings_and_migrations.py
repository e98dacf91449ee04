"""Settings precedence and errors; ClickHouse migrations are recorded and idempotent."""

from __future__ import annotations

from pathlib import Path

import pytest

from vigil.app.components import MIGRATIONS, migrate_all
from vigil.clickhouse.client import connect
from vigil.clickhouse.migrations import MigrationSet, discover, migrate
from vigil.errors import MigrationError
from vigil.settings import SettingsError, VigilSettings


@pytest.mark.pure
def test_env_beats_config_file_and_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "vigil.toml"
    cfg.write_text('topic_prefix = "file."\ntopic_partitions = 8\n[analyzer]\nx = 1\n')
    monkeypatch.setenv("VIGIL_CONFIG", str(cfg))
    monkeypatch.setenv("VIGIL_TOPIC_PARTITIONS", "3")
    monkeypatch.setenv("VIGIL_HOME", str(tmp_path / "h"))
    s = VigilSettings.load()
    assert s.topic_prefix == "file." and s.topic_partitions == 3
    assert s.effective_clickhouse_dsn == f"chdb://{tmp_path / 'h' / 'clickhouse'}"
    assert s.embedded_kafka


@pytest.mark.pure
@pytest.mark.parametrize(
    ("env", "value", "message"),
    [
        ("VIGIL_KAFKA_BOOTSTRAP", "localhost", "VIGIL_KAFKA_BOOTSTRAP"),
        ("VIGIL_CLICKHOUSE_DSN", "mysql://x", "VIGIL_CLICKHOUSE_DSN"),
        ("VIGIL_TOPIC_PARTITIONS", "0", "VIGIL_TOPIC_PARTITIONS"),
    ],
)
def test_bad_settings_name_the_variable(monkeypatch: pytest.MonkeyPatch, env: str, value: str, message: str) -> None:
    monkeypatch.setenv(env, value)
    with pytest.raises(SettingsError, match=message):
        VigilSettings.load()


@pytest.mark.pure
def test_unreadable_config_file_is_a_settings_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("this is = = not toml")
    monkeypatch.setenv("VIGIL_CONFIG", str(bad))
    with pytest.raises(SettingsError, match="not valid TOML"):
        VigilSettings.load()


@pytest.mark.clickhouse
def test_migrations_run_twice_without_change(clickhouse_dsn: str) -> None:
    client = connect(clickhouse_dsn, database="t_migrate_twice")
    first = migrate_all(client, 7)
    tables = sorted(r[0] for r in client.query("SHOW TABLES").result_rows)
    second = migrate_all(client, 7)
    assert first.applied and not first.already
    assert second.applied == [] and second.already == first.applied and second.changed == []
    assert sorted(r[0] for r in client.query("SHOW TABLES").result_rows) == tables
    ledger = client.query("SELECT count() FROM vigil_migrations FINAL").result_rows[0][0]
    assert ledger == len(discover(MIGRATIONS))


@pytest.mark.clickhouse
def test_changed_retention_setting_is_applied_by_the_next_migrate(clickhouse_dsn: str) -> None:
    client = connect(clickhouse_dsn, database="t_migrate_retention")
    assert migrate_all(client, 7).retention == []
    changed = migrate_all(client, 30).retention
    assert "step_timings: 7 -> 30 days" in changed and "phase_host_windows: 7 -> 30 days" in changed
    ttl = {str(r[0]): str(r[1]) for r in client.query(
        "SELECT name, engine_full FROM system.tables WHERE database = 't_migrate_retention'").result_rows}
    assert "toIntervalDay(30)" in ttl["step_timings"] and "toIntervalDay(7)" not in "".join(ttl.values())
    assert migrate_all(client, 30).retention == []


@pytest.mark.clickhouse
def test_failed_migration_names_itself_and_is_not_recorded(clickhouse_dsn: str, tmp_path: Path) -> None:
    (tmp_path / "0001_ok.sql").write_text("CREATE TABLE IF NOT EXISTS ok_t (x UInt8) ENGINE = MergeTree ORDER BY x;")
    (tmp_path / "0002_broken.sql").write_text("CREATE TABLE nonsense (;")
    client = connect(clickhouse_dsn, database="t_migrate_broken")
    with pytest.raises(MigrationError, match="0002_broken"):
        migrate(client, [MigrationSet(owner="t", directory=tmp_path, ids=range(1, 10))])
    recorded = [r[0] for r in client.query("SELECT name FROM vigil_migrations FINAL").result_rows]
    assert recorded == ["ok"]


@pytest.mark.pure
def test_components_own_disjoint_migration_numbers(tmp_path: Path) -> None:
    (tmp_path / "0150_x.sql").write_text("SELECT 1;")
    with pytest.raises(MigrationError, match="owns migration numbers 0200-0299"):
        MigrationSet(owner="recovery", directory=tmp_path, ids=range(200, 300)).discover()
    overlapping = [MigrationSet(owner="a", directory=tmp_path, ids=range(100, 200)),
                   MigrationSet(owner="b", directory=tmp_path, ids=range(150, 250))]
    with pytest.raises(MigrationError, match="ranges of a and b overlap"):
        discover(overlapping)


@pytest.mark.pure
def test_model_level_validation_error_is_a_settings_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import model_validator

    class Pair(VigilSettings):
        @model_validator(mode="after")
        def _check(self) -> Pair:
            if self.topic_partitions < self.topic_replication:
                raise ValueError("partitions must be >= replication")
            return self

    monkeypatch.setenv("VIGIL_TOPIC_REPLICATION", "3")
    monkeypatch.setenv("VIGIL_TOPIC_PARTITIONS", "2")
    with pytest.raises(SettingsError, match="Pair: Value error, partitions must be >= replication"):
        Pair.load()

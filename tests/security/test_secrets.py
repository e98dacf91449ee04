"""Secrets are never printed: the ClickHouse DSN's password and Kafka extras, in `vigil status`,
`Unreachable` errors, setting errors, health reports and the settings' own repr.

`vigil status` runs as a real process against a ClickHouse and a Kafka that refuse the
connection, with a password in the DSN and a SASL password in the Kafka extras; its whole
output is grepped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vigil.app.stack.store_health import StoreHealth
from vigil.clickhouse.client import connect
from vigil.errors import Unreachable
from vigil.kafka.admin import client_config
from vigil.kafka.broker import free_port
from vigil.redact import scrub, shown_dsn
from vigil.settings import SettingsError, VigilSettings

PASSWORD = "Pa55-w0rd-s3cret"
KAFKA_PASSWORD = "Kafka-SASL-s3cret"


def secret_env(home: Path, dsn: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIGIL_")}
    env.update(VIGIL_HOME=str(home), VIGIL_KAFKA_BOOTSTRAP=f"127.0.0.1:{free_port()}", VIGIL_CLICKHOUSE_DSN=dsn,
               VIGIL_KAFKA_EXTRA=json.dumps({"sasl.username": "agent", "sasl.password": KAFKA_PASSWORD}))
    return env


@pytest.mark.pure
def test_vigil_status_against_unreachable_stores_prints_no_password(tmp_path: Path) -> None:
    dsn = f"http://vigil:{PASSWORD}@127.0.0.1:{free_port()}"
    done = subprocess.run([sys.executable, "-m", "vigil", "status"], env=secret_env(tmp_path, dsn),
                          capture_output=True, text=True, timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "BAD clickhouse" in output and "http://vigil:***@127.0.0.1:" in output
    assert PASSWORD not in output and KAFKA_PASSWORD not in output


@pytest.mark.pure
def test_a_bad_dsn_setting_is_reported_without_its_password(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "vigil", "status"],
                          env=secret_env(tmp_path, f"ftp://vigil:{PASSWORD}@db:21"),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "ftp://vigil:***@db:21" in done.stderr
    assert PASSWORD not in done.stdout + done.stderr
    with pytest.raises(SettingsError) as err:
        VigilSettings.load(clickhouse_dsn=f"ftp://u:{PASSWORD}@db")
    assert PASSWORD not in str(err.value)


@pytest.mark.pure
def test_settings_hold_secrets_typed_and_unwrap_them_only_for_clients(tmp_path: Path) -> None:
    dsn = f"https://vigil:{PASSWORD}@ch.example:8443/db"
    settings = VigilSettings(home=tmp_path, clickhouse_dsn=dsn, kafka_extra={"sasl.password": KAFKA_PASSWORD})
    shown = f"{settings!r} {settings} {settings.model_dump()}"
    assert PASSWORD not in shown and KAFKA_PASSWORD not in shown
    assert settings.effective_clickhouse_dsn == dsn
    assert client_config(settings, "k:9092")["sasl.password"] == KAFKA_PASSWORD


@pytest.mark.pure
def test_unreachable_errors_and_health_reports_mask_the_password() -> None:
    dsn = f"http://vigil:{PASSWORD}@127.0.0.1:{free_port()}"
    with pytest.raises(Unreachable) as err:
        connect(dsn)
    assert PASSWORD not in str(err.value) and "vigil:***@" in str(err.value)

    def refuse() -> str:
        raise ConnectionRefusedError(f"cannot reach {dsn}")

    health = StoreHealth(check=refuse, dsn=dsn)
    health.start()
    health.stop()
    assert PASSWORD not in json.dumps(health.report()) and "vigil:***@" in json.dumps(health.report())


@pytest.mark.pure
def test_shown_dsn_masks_only_the_password() -> None:
    assert shown_dsn(f"http://alice:{PASSWORD}@h:8123/x?y=1") == "http://alice:***@h:8123/x?y=1"
    assert shown_dsn("https://token@h") == "https://***@h"
    assert shown_dsn("http://h:8123") == "http://h:8123"
    assert shown_dsn("chdb:///var/lib/vigil/ch") == "chdb:///var/lib/vigil/ch"
    assert scrub(f"refused: {PASSWORD}", f"http://a:{PASSWORD}@h") == "refused: ***"

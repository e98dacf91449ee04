"""Dashboard fixtures: one simulated job in a session database, headless Chromium for dash[testing].

Browser tests (marker `browser`) are skipped when chromedriver or chromium is missing.
selenium 3.141 (what dash[testing] pins) passes a sentinel timeout that urllib3 2
rejects; giving RemoteConnection a real timeout fixes that without touching packages.
"""

from __future__ import annotations

import os
import shutil
import uuid
from typing import Any

import pytest

from tests.dashboard.simdata import SimRun, populate

CHROMIUM = os.environ.get("VIGIL_TEST_CHROMIUM", "/usr/bin/chromium")
HAVE_BROWSER = shutil.which("chromedriver") is not None and os.path.exists(CHROMIUM)


def pytest_setup_options() -> Any:
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.remote.remote_connection import RemoteConnection

    RemoteConnection.set_timeout(120)
    options = Options()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", "--window-size=1400,1000"):
        options.add_argument(flag)
    return options


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAVE_BROWSER:
        return
    skip = pytest.mark.skip(reason="headless browser not available (chromedriver / chromium missing)")
    for item in items:
        if "browser" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def sim_client(clickhouse_dsn: str) -> Any:
    """A client on a session database holding the simulated job (see simdata.py)."""
    from vigil.app.components import migrate_all
    from vigil.clickhouse.client import connect

    client = connect(clickhouse_dsn, database=f"t_dash_{uuid.uuid4().hex[:8]}")
    migrate_all(client, 30)
    return client


@pytest.fixture(scope="session")
def sim_run(sim_client: Any) -> SimRun:
    return populate(sim_client)

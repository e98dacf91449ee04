"""The live recovery tests' fixture: `live`, a recovery setup (live.py) on the test's topics, torn down after it.

A test marked `@pytest.mark.recovery_env({...})` gives the controller those extra environment variables."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.recovery.live import Live
from vigil.settings import VigilSettings


@pytest.fixture
def live(topics: VigilSettings, broker_bootstrap: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Live]:
    marker = request.node.get_closest_marker("recovery_env")
    setup = Live(settings=topics, bootstrap=broker_bootstrap, tmp=tmp_path,
                 recovery_env=dict(marker.args[0]) if marker else {})
    try:
        yield setup
    finally:
        setup.close()

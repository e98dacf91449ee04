"""`vigil status` answers while ClickHouse is busy (the embedded engine runs one query at a time)."""

from __future__ import annotations

import threading

import httpx
import pytest

from vigil.app.stack.runner import Stack
from vigil.settings import VigilSettings

pytestmark = [pytest.mark.kafka, pytest.mark.clickhouse]


def test_health_does_not_wait_behind_a_busy_engine(topics: VigilSettings) -> None:
    stack = Stack(settings=topics, services=())
    state = stack.start()
    try:
        assert stack.ctx is not None
        client = stack.ctx.clickhouse
        blocker = threading.Thread(target=lambda: client.query(  # ~8 s of the engine, as a large ingest batch
            "SELECT sleepEachRow(0.5) FROM numbers(16) SETTINGS max_block_size = 1"))
        blocker.start()
        while True:  # wait until the engine is busy: a trivial query no longer comes back at once
            canary = threading.Thread(target=lambda: client.query("SELECT 1"))
            canary.start()
            canary.join(0.3)
            if canary.is_alive():
                break
        doc = httpx.get(f"{state.control_url}/health", timeout=30,
                        headers={"Authorization": f"Bearer {state.token}"}).json()
        assert blocker.is_alive(), "the health answer waited for the busy engine"
        assert doc["parts"]["clickhouse"]["ok"] and doc["parts"]["clickhouse"]["version"]
        assert "checked_s_ago" in doc["parts"]["clickhouse"]
        blocker.join()
        canary.join()
    finally:
        stack.stop()

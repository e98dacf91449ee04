"""Issue "done when", as a user runs it: `vigil up --detach`, `vigil simulate ... --json`,
then `vigil alerts --json` shows one straggler alert for that host and phase and nothing else."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.clickhouse, pytest.mark.slow]

HOST = "sim-host-0011"


def vigil(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vigil", *args], env=env, capture_output=True, text=True, timeout=timeout)


def sql(env: dict[str, str], query: str) -> list[list[object]]:
    """Rows of a read-only query through the stack's control port (its URL and token in stack.json)."""
    state = json.loads((Path(env["VIGIL_HOME"]) / "stack.json").read_text())
    resp = httpx.post(f"{state['control_url']}/sql", json={"sql": query}, timeout=30,
                      headers={"Authorization": f"Bearer {state['token']}"})
    resp.raise_for_status()
    rows: list[list[object]] = resp.json()["rows"]
    return rows


def judged_to_the_end(env: dict[str, str], job: str) -> bool:
    """Whether the live analyzer's saved position on `job` reached its last step (within one evaluation step)."""
    rows = sql(env, f"SELECT (SELECT max(position) FROM detect_positions WHERE job_id = '{job}') + INTERVAL 2 SECOND >= "
                    f"(SELECT max(ts) FROM step_timings WHERE job_id = '{job}')")
    return bool(rows and rows[0][0])


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIGIL_")}
    env["VIGIL_HOME"] = str(tmp_path)
    up = vigil(env, "up", "--detach", "--no-dashboard")
    assert up.returncode == 0, up.stdout + up.stderr
    yield env
    vigil(env, "down")


def test_simulated_straggler_is_the_only_alert(stack: dict[str, str]) -> None:
    sim = vigil(stack, "simulate", "--hosts", "64", "--steps", "300", "--job", "flow", "--speed", "0", "--json",
                "--fault", f"straggler:host={HOST},start=100,magnitude=0.08")
    assert sim.returncode == 0, sim.stderr
    truth = json.loads(sim.stdout)
    assert HOST in truth["hosts"] and len(truth["hosts"]) == 64
    assert [f["kind"] for f in truth["faults"]] == ["straggler"]

    alerts: list[dict[str, object]] = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        res = vigil(stack, "alerts", "--job", "flow", "--json")
        assert res.returncode == 0, res.stderr
        alerts = json.loads(res.stdout)
        if alerts:
            break
        time.sleep(3)
    wait_until(lambda: judged_to_the_end(stack, "flow"), 180, "the analyzer judged the job's last step")
    alerts = json.loads(vigil(stack, "alerts", "--job", "flow", "--json").stdout)
    assert [(a["alert"], a["subject"], a["status"]) for a in alerts] == [("straggler", f"{HOST}/forward", "firing")]
    ever = json.loads(vigil(stack, "alerts", "--job", "flow", "--all", "--json").stdout)
    assert {a["fingerprint"] for a in ever} == {f"flow/straggler/{HOST}/forward"}, "a transient false alert fired"

    replay = vigil(stack, "analyzer", "replay", "--job", "flow", "--json")
    assert replay.returncode == 0, replay.stderr
    assert {a["fingerprint"] for a in json.loads(replay.stdout)} == {f"flow/straggler/{HOST}/forward"}

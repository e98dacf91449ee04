"""Driving a real node agent in tests: its environment and subprocess, spool lines to feed it, what reached
Kafka."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vigil.contract import Event
from vigil.contract.wire import decode_batch
from vigil.kafka.reader import read_topics
from vigil.settings import VigilSettings

PYTHON = sys.executable


def step_line(*, job: str, host: str, rank: int, step: int, phases: int = 3) -> dict[str, Any]:
    return {"kind": "step", "schema_version": 1, "event_id": uuid.uuid4().hex, "job_id": job, "host": host,
            "ts": time.time(), "rank": rank, "local_rank": rank, "world_size": 8, "step": step,
            "step_ms": 100.0, "coords": {"dp": rank, "tp": 0, "pp": 0},
            "phases": {f"phase{i}": 100.0 / phases for i in range(phases)}}


def append_lines(path: Path, docs: Iterable[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fh.write("".join(json.dumps(d) + "\n" for d in docs))


def agent_env(settings: VigilSettings, bootstrap: str, home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIGIL_", "TORCH_FR"))}
    env.update(VIGIL_HOME=str(home), VIGIL_KAFKA_BOOTSTRAP=bootstrap, VIGIL_TOPIC_PREFIX=settings.topic_prefix,
               VIGIL_TOPIC_PARTITIONS=str(settings.topic_partitions), **extra)
    return env


def start_agent(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    out = open(log, "ab")  # noqa: SIM115
    try:
        return subprocess.Popen([PYTHON, "-m", "vigil", *args], env=env, stdout=out, stderr=subprocess.STDOUT)
    finally:
        out.close()


def read_events(settings: VigilSettings, bootstrap: str, logical: Iterable[str], timeout: float = 10.0) -> list[Event]:
    events: list[Event] = []
    for rec in read_topics(settings, bootstrap, [settings.topic(t) for t in logical], timeout=timeout):
        events += decode_batch(rec.value).events
    return events

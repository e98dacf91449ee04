"""deploy/kafka-acls.sh is generated from the code's topic and group names, and grants each service what it uses."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from vigil.analyzer.shard import DETECT_GROUP, DETECT_TOPIC
from vigil.app import acls
from vigil.recovery.controller.lease import LEASE_TOPIC
from vigil.recovery.controller.state import INPUT_TOPICS
from vigil.recovery.settings import RecoverySettings

pytestmark = pytest.mark.pure
SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "kafka-acls.sh"


def test_the_shipped_acl_script_is_the_generated_one() -> None:
    assert SCRIPT.read_text() == acls.script(), "regenerate: python -m vigil.app.acls > deploy/kafka-acls.sh"


def test_every_topic_is_written_and_read_by_some_role_and_the_controller_may_take_its_lease() -> None:
    roles = acls.roles()
    written = {t for r in roles.values() for t in r["write"]}
    read = {t for r in roles.values() for t in r["read"]}
    assert acls.topics() <= written | {"deadletter"} and acls.topics() - {"deadletter"} <= read
    recovery = roles["recovery"]
    assert LEASE_TOPIC in recovery["read"] and LEASE_TOPIC in recovery["write"]
    assert set(INPUT_TOPICS) <= set(recovery["read"])
    assert RecoverySettings().lease_group in recovery["prefixed_groups"]
    analyzer = roles["analyzer"]  # a detect shard: the group over detect-jobs, its lease records, the topic made
    assert DETECT_TOPIC in analyzer["read"] and DETECT_TOPIC in analyzer["write"] and DETECT_TOPIC in analyzer["create"]
    assert DETECT_GROUP in analyzer["prefixed_groups"]


def test_the_script_runs_the_acls_it_says(tmp_path: Path) -> None:
    """Run against a stub `kafka-acls.sh` that records its arguments: the lease topic and group are granted."""
    stub = tmp_path / "kafka-acls.sh"
    stub.write_text('#!/bin/sh\necho "$@" >> "$LOG"\n')
    stub.chmod(0o755)
    log = tmp_path / "log"
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "BOOTSTRAP": "k:9093", "ADMIN_CONFIG": "a", "LOG": str(log),
           "VIGIL_TOPIC_PREFIX": "p."}
    subprocess.run(["bash", str(SCRIPT)], env=env, check=True, timeout=60)
    calls = [shlex.split(line) for line in log.read_text().splitlines()]
    recovery = [c for c in calls if "User:vigil-recovery" in c]
    assert any(c[-4:] == ["--operation", "Write", "--topic", "p.recovery-lease"] for c in recovery)
    assert any(c[-2:] == ["--group", f"p.{RecoverySettings().lease_group}"] for c in recovery)
    analyzer = [c for c in calls if "User:vigil-analyzer" in c]
    for op in ("Read", "Write", "Create"):
        assert any(c[-4:] == ["--operation", op, "--topic", f"p.{DETECT_TOPIC}"] for c in analyzer), op
    assert any(c[-2:] == ["--group", f"p.{DETECT_GROUP}"] for c in analyzer)

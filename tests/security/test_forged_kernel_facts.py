"""A hardware fact decides only attested by its own host's agent key (attacker's review: anyone who can produce to
Kafka could send a `log` line with `source: kernel` and an Xid, and the analyzer took it as the kernel's word). The
read side stores an unattested one as what it is, a claim: `source` process, no action; an attested Xid's action is
the catalog's for its code, whatever the line says."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from vigil.analyzer.ingest.loop import gate
from vigil.analyzer.ingest.processors import process
from vigil.contract import LogLine
from vigil.contract.xid import XidAction
from vigil.signing import KeyStore, Role
from vigil.signing.setup import signer, verifier

pytestmark = pytest.mark.pure


def _xid(host: str, action: XidAction) -> LogLine:
    return LogLine(job_id="j", host=host, ts=datetime.now(UTC), category="xid", severity="critical", xid=79,
                   message="NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.", source="kernel",
                   action=action, gpu_index=0)


def _stored(line: LogLine, home: Path) -> tuple[str, str]:
    ((_table, row),) = process(line, gate(line, verifier(home)))
    return str(row["source"]), str(row["action"])


def test_only_an_attested_hardware_fact_decides(tmp_path: Path) -> None:
    home = tmp_path / "home"
    store = KeyStore(home / "keys")
    store.ensure()
    store.issue("h1")
    store.issue("h2")
    h1 = signer(Role.AGENT, home, host="h1")
    h2 = signer(Role.AGENT, home, host="h2")
    assert h1 is not None and h2 is not None
    assert _stored(_xid("h1", XidAction.CORDON), home) == ("process", "")  # produced by anyone: a claim
    assert _stored(h2.seal(_xid("h1", XidAction.CORDON)), home) == ("process", "")  # another host's key: a claim
    assert _stored(h1.seal(_xid("h1", XidAction.RESTART_JOB)), home) == ("kernel", "reboot_then_check")  # the catalog's
    printed = LogLine(job_id="j", host="h1", ts=datetime.now(UTC), category="xid", severity="critical", xid=79,
                      message="NVRM: Xid 79 printed by the job", source="process")
    assert _stored(printed, home) == ("process", "")

"""The agent's outbox is no signing oracle (attacker's review): the agent seals its host's facts where it makes them,
before the outbox, so a member report the job (same uid) appends to an outbox segment ships unattested and the
controller's gate refuses it, while what the agent itself emitted passes."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support.waiting import wait_until
from vigil.collector.agent import Agent
from vigil.collector.control.attest import Attester
from vigil.collector.settings import CollectorSettings, resolve_paths
from vigil.collector.sink import MemorySink
from vigil.contract.control import Member
from vigil.signing import KeyStore, Role, check
from vigil.signing.setup import signer, verifier

pytestmark = pytest.mark.pure


def _member(host: str, job: str, **kw: object) -> Member:
    now = datetime.now(UTC)
    return Member(job_id=job, host=host, ts=now, state="exited", since=now, generation=3, **kw)  # type: ignore[arg-type]


def test_a_line_the_job_appends_to_the_outbox_ships_unattested(tmp_path: Path) -> None:
    home = tmp_path / "home"
    KeyStore(home / "keys").ensure()
    KeyStore(home / "keys").issue("h1")
    key = signer(Role.AGENT, home, host="h1")
    assert key is not None
    settings = CollectorSettings(host="h1", job_id="j", heartbeat_interval=3600, nic_interval=3600, poll_interval=0.05,
                                 sysfs_root=tmp_path / "none", procfs_root=tmp_path / "none", kmsg_path="")
    sink = MemorySink()
    agent = Agent(settings=settings, paths=resolve_paths(settings, tmp_path), sink=sink, spool_roots=[])
    agent.attest = agent.spool.attest = Attester(host="h1", job_id="j", seal=key.seal).attest
    agent.emit([_member("h1", "j", exit_code=0)])  # the agent's own word
    forged = _member("h1", "j", exit_code=1, fault="xid")
    segment = sorted(agent.paths.outbox_dir.glob("seg-*.jsonl"))[-1]
    with segment.open("a") as fh:  # the job, as the agent's uid, appends to the active segment
        fh.write(forged.model_dump_json() + "\n")
    agent.emit([_member("h1", "other-job", exit_code=0)])  # another job's fact is not this agent's to attest
    agent.start()
    try:
        wait_until(lambda: len([e for e in sink.events if isinstance(e, Member)]) >= 3, 30, "the members shipped")
    finally:
        agent.stop(drain_timeout_s=5)
    ring = verifier(home)
    verdicts = {(e.job_id, e.exit_code): check(e, ring) is None for e in sink.events if isinstance(e, Member)}
    assert verdicts == {("j", 0): True, ("j", 1): False, ("other-job", 0): False}

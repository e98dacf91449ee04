"""A signed command re-published long after it was issued is refused: its lifetime runs against the log's clock.

The agent's done-ids memory is bounded (2,000 ids) and a restarted agent may have lost it, so an old signed
command re-published later (its epoch as current as the leader that still leads) must not run again: it is dated
more than its lifetime before the newest command the agent read for its host, refused with one security alert.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from vigil.collector.control.commands import CommandFeed
from vigil.contract import Alert, Command, Event
from vigil.signing import KeyStore, Role
from vigil.signing.gate import Gate
from vigil.signing.policy import Refusals
from vigil.signing.seal import Ed25519Signer, KeyRing

pytestmark = pytest.mark.pure
T0 = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def test_a_replayed_command_older_than_its_lifetime_is_refused_with_one_alert(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    store.ensure()
    kid, key = store.private_key(Role.CONTROLLER)
    signer = Ed25519Signer(role=Role.CONTROLLER, key_id=kid, key=key)

    def dump(cid: str, at: datetime) -> Command:
        return signer.seal(Command(job_id="j", host="h1", ts=at, command_id=cid, action="dump", epoch=5))

    old, later = dump("old-dump", T0), dump("later-dump", T0 + timedelta(hours=2))
    batches: list[list[Event]] = [[old, later], [old.model_copy()], [dump("fresh", T0 + timedelta(hours=2, seconds=5))]]
    alerts: list[Event] = []
    feed = CommandFeed(poll_events=lambda _t: batches.pop(0), job_id="j", host="h1", since=T0 - timedelta(minutes=1),
                       done_file=tmp_path / "done.json", emit=alerts.extend,
                       gate=Gate(verifier=KeyRing(load=store.public_keys), refusals=Refusals(reporter="agent:h1")))
    assert [c.command_id for c in feed.poll()] == ["old-dump", "later-dump"]  # in log order: both current then
    (tmp_path / "done.json").unlink()
    feed._seen.clear()  # its id out of the bounded memory (or an agent restarted without it)
    assert feed.poll() == []  # re-published after the log moved on two hours
    assert [c.command_id for c in feed.poll()] == ["fresh"]
    (alert,) = alerts
    assert isinstance(alert, Alert) and alert.evidence["problem"] == "expired" and alert.subject == "command/dump"

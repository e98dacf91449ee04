"""Forged events signed by the wrong key, the signer of an event, and the security alerts the analyzer raised."""

from __future__ import annotations

from confluent_kafka import Producer

from tests.support.live import Live
from vigil.contract import Alert, Event, encode_batch
from vigil.signing import KeyStore, Role
from vigil.signing.seal import Ed25519Signer


def forge(live: Live, topic: str, events: list[Event]) -> None:
    """What the attacker can do: a plain producer, records in the wire format, no key."""
    p = Producer({"bootstrap.servers": live.bootstrap})
    for e in events:
        p.produce(live.settings.topic(topic), value=encode_batch([e]), key=e.host.encode())
    assert p.flush(15) == 0


def signer_of(live: Live, role: Role, host: str = "") -> Ed25519Signer:
    """The key of `role` (an agent's: of `host`, issued here when it has none)."""
    store = KeyStore(live.home / "keys")
    if host:
        store.issue(host)
    kid, key = store.private_key(role, host)
    return Ed25519Signer(role=role, key_id=kid, key=key)


def security_alerts(live: Live, reporter: str) -> dict[str, list[Alert]]:
    out: dict[str, list[Alert]] = {}
    for e in live.events:
        if isinstance(e, Alert) and e.alert == "security" and e.evidence.get("reporter") == reporter:
            out.setdefault(e.subject, []).append(e)
    return out

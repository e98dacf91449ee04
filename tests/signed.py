"""Signing in tests: a test that plays the analyzer or an operator signs what it publishes as they would."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from vigil.contract import Event
from vigil.signing import KeyStore, expected_roles
from vigil.signing.seal import Ed25519Signer


def sealed(home: Path, events: Sequence[Event]) -> list[Event]:
    """`events`, each decision signed by the first role that may make it (the key set under `home`, made if missing)."""
    store = KeyStore(home / "keys")
    store.ensure()
    out: list[Event] = []
    for e in events:
        roles = sorted(expected_roles(e))
        if roles:
            kid, key = store.private_key(roles[0])
            e = Ed25519Signer(role=roles[0], key_id=kid, key=key).seal(e)
        out.append(e)
    return out

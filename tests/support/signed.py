"""Signing in tests: a test that plays the analyzer or an operator signs what it publishes as they would."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from vigil.contract import Event
from vigil.signing import KeyStore, Role, expected_roles
from vigil.signing.policy import attested_kind
from vigil.signing.seal import Ed25519Signer


def sealed(home: Path, events: Sequence[Event]) -> list[Event]:
    """`events`, each decision signed by the first role that may make it (the key set under `home`, made if missing),
    each hardware fact attested by its host's agent key (`attested`)."""
    store = KeyStore(home / "keys")
    store.ensure()
    out: list[Event] = []
    for e in events:
        roles = sorted(expected_roles(e))
        if roles:
            kid, key = store.private_key(roles[0])
            e = Ed25519Signer(role=roles[0], key_id=kid, key=key).seal(e)
        out.append(e)
    return attested(home, out)


def attested(home: Path, events: Sequence[Event]) -> list[Event]:
    """`events`, each hardware fact (a `log` line of source kernel, nvml or sysfs) attested by its own host's agent
    key, issued under `home` when missing: what that host's agent would ship (a simulator or a test standing in for
    the agents' kernel logs); other events as they are."""
    store = KeyStore(home / "keys")
    store.ensure()
    out: list[Event] = []
    for e in events:
        if attested_kind(e) and e.kind == "log":
            store.issue(e.host)
            kid, key = store.private_key(Role.AGENT, e.host)
            e = Ed25519Signer(role=Role.AGENT, key_id=kid, key=key).seal(e)
        out.append(e)
    return out


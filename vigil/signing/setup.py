"""Building a service's signer and verifier from its settings.

`signer(role, home)` signs with the role's current private key (`VIGIL_SIGNING_PRIVATE_KEY` when
given, else the key file; an agent's `signer(Role.AGENT, home, host=...)` with its own host's key); a service whose role has no key gets None and logs it once: its
decisions then go unsigned and every verifier refuses them. `verifier(home)` holds the public
keys of the key directory only.
"""

from __future__ import annotations

import logging
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from vigil.signing.keys import KeyStore, KeyStoreError, Role, host_of
from vigil.signing.seal import Ed25519Signer, KeyRing
from vigil.signing.settings import SigningSettings

log = logging.getLogger(__name__)


def key_store(home: Path, settings: SigningSettings | None = None) -> KeyStore:
    s = settings or SigningSettings.load()
    return KeyStore(s.directory(home))


def signer(role: Role, home: Path, settings: SigningSettings | None = None, *,
           host: str = "") -> Ed25519Signer | None:
    s = settings or SigningSettings.load()
    if s.private_key is not None:
        try:
            key = serialization.load_pem_private_key(s.private_key.get_secret_value().encode(), password=None)
        except ValueError:
            raise KeyStoreError("VIGIL_SIGNING_PRIVATE_KEY is not a PEM private key") from None
        if not isinstance(key, Ed25519PrivateKey) or not s.key_id:
            raise KeyStoreError("VIGIL_SIGNING_PRIVATE_KEY must be Ed25519, with VIGIL_SIGNING_KEY_ID set")
        if role is Role.AGENT and host_of(s.key_id) != host:
            raise KeyStoreError(f"VIGIL_SIGNING_KEY_ID {s.key_id} is not a key of host {host}")
        return Ed25519Signer(role=role, key_id=s.key_id, key=key)
    store = KeyStore(s.directory(home))
    try:
        kid, key = store.private_key(role, host)
    except KeyStoreError as exc:
        what = ("the agent's member reports, acks and results go unattested: the controller refuses them"
                if role is Role.AGENT else f"decisions of the {role.value} go unsigned and will be refused")
        log.warning("%s: %s", what, exc)
        return None
    return Ed25519Signer(role=role, key_id=kid, key=key)


def verifier(home: Path, settings: SigningSettings | None = None) -> KeyRing:
    s = settings or SigningSettings.load()
    return KeyRing(load=KeyStore(s.directory(home)).public_keys, reload_s=s.reload_s, refresh_s=s.refresh_s)

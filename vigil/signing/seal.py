"""Signing an event and checking its signature.

`canonical(event, role, key_id)` is what is signed: the event's JSON without its `signature`
field and without the fields that hold their default (`kind` and `schema_version` always in), keys
sorted, no whitespace, then the role and key id, so a signature cannot be moved to another event,
role or key, and covers what the signer sent, not what a reader's model fills in: a kind that gains
a defaulted field keeps every earlier signature valid (rolling upgrades, a controller refolding its
own log). `legacy` is the form signed before that (every field, defaults included), still accepted
by verifiers so that what older signers published verifies; upgrade verifiers before signers. The signature travels in the event as ``<role>/<key id>/<base64>``.
`Signer` and `Verifier` are the two tiny protocols services depend on; `Ed25519Signer` holds one
private key, `KeyRing` public keys only (reloaded from the key store when an unknown key id
arrives, at most every `reload_s`, which is how a rotation reaches running verifiers, and every
`refresh_s` whatever arrives, which is how a retired key stops being trusted by a running one).
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, TypeVar

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from vigil.contract.base import Event
from vigil.signing.keys import Role

E = TypeVar("E", bound=Event)


class Problem(StrEnum):
    """Why a signature was not accepted."""

    UNSIGNED = "unsigned"
    MALFORMED = "malformed signature"
    UNKNOWN_KEY = "unknown key"
    BAD_SIGNATURE = "bad signature"
    WRONG_ROLE = "wrong role"
    WRONG_HOST = "signed by another host"  # an attested fact under the key of a host it does not speak for
    UNATTESTED = "unattested"  # a fact that decides, without its host's attestation
    STALE_EPOCH = "stale epoch"
    EXPIRED = "expired"  # older than its lifetime against the log's clock (a replay)


class Unverified(Exception):
    def __init__(self, problem: Problem, detail: str = "") -> None:
        super().__init__(f"{problem.value}{': ' + detail if detail else ''}")
        self.problem = problem


def canonical(event: Event, role: Role, key_id: str) -> bytes:
    doc = {**event.model_dump(mode="json", exclude={"signature"}, exclude_defaults=True),
           "kind": event.kind, "schema_version": event.schema_version}
    body = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return f"{body}\n{role.value}/{key_id}".encode()


def legacy(event: Event, role: Role, key_id: str) -> bytes:
    """The canonical form signed before defaults were left out: every field, as the reader's model has it."""
    body = json.dumps(event.model_dump(mode="json", exclude={"signature"}), sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False)
    return f"{body}\n{role.value}/{key_id}".encode()


def parse_signature(value: str) -> tuple[Role, str, bytes]:
    role_name, _, rest = value.partition("/")
    key_id, _, sig = rest.partition("/")
    try:
        raw = base64.b64decode(sig, validate=True)
        role = Role(role_name)
    except (ValueError, binascii.Error):
        raise Unverified(Problem.MALFORMED) from None
    if not key_id or len(raw) != 64:
        raise Unverified(Problem.MALFORMED)
    return role, key_id, raw


class Signer(Protocol):
    @property
    def role(self) -> Role: ...

    def seal(self, event: E) -> E:
        """`event` with its signature (events of kinds without a `signature` field unchanged)."""
        ...


class Verifier(Protocol):
    def signer_of(self, event: Event) -> Role:
        """The role whose valid signature `event` carries; Unverified otherwise."""
        ...

    def signed_by(self, event: Event) -> tuple[Role, str]:
        """The role and key id whose valid signature `event` carries; Unverified otherwise."""
        ...


@dataclass(frozen=True)
class Ed25519Signer:
    role: Role
    key_id: str
    key: Ed25519PrivateKey = field(repr=False)

    def seal(self, event: E) -> E:
        if "signature" not in type(event).model_fields:
            return event
        from vigil.signing.freshness import stamp  # freshness reads the policy, which reads this module

        unsigned = stamp(event).model_copy(update={"signature": ""})
        sig = self.key.sign(canonical(unsigned, self.role, self.key_id))
        return unsigned.model_copy(
            update={"signature": f"{self.role.value}/{self.key_id}/{base64.b64encode(sig).decode()}"})


@dataclass
class KeyRing:
    load: Callable[[], dict[tuple[Role, str], Ed25519PublicKey]]
    reload_s: float = 2.0
    refresh_s: float = 30.0  # the key set is re-read at least this often: retired keys are dropped
    _keys: dict[tuple[Role, str], Ed25519PublicKey] = field(default_factory=dict, init=False, repr=False)
    _loaded: float = field(default=float("-inf"), init=False, repr=False)

    def __post_init__(self) -> None:
        self._reload()

    def _reload(self) -> None:
        self._keys, self._loaded = self.load(), time.monotonic()

    def signer_of(self, event: Event) -> Role:
        return self.signed_by(event)[0]

    def signed_by(self, event: Event) -> tuple[Role, str]:
        value = str(getattr(event, "signature", "") or "")
        if not value:
            raise Unverified(Problem.UNSIGNED)
        role, key_id, raw = parse_signature(value)
        age = time.monotonic() - self._loaded
        if age >= self.refresh_s:
            self._reload()
        key = self._keys.get((role, key_id))
        if key is None and age < self.refresh_s and age >= self.reload_s:
            self._reload()
            key = self._keys.get((role, key_id))
        if key is None:
            raise Unverified(Problem.UNKNOWN_KEY, f"{role.value}/{key_id}")
        for form in (canonical, legacy):
            try:
                key.verify(raw, form(event, role, key_id))
            except InvalidSignature:
                continue
            return role, key_id
        raise Unverified(Problem.BAD_SIGNATURE, f"{role.value}/{key_id}")

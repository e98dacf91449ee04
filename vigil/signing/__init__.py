"""Signed decisions: Ed25519 keys per role, a canonical encoding of an event, sign and verify.

Decisions (commands, controller steps and plans, incidents and alerts, operator requests,
approvals, silences) carry `signature` = ``<role>/<key id>/<base64 signature>`` over the
canonical encoding of the event (`seal.canonical`); facts carry none. A service signs with the
private key of its role (`keys.KeyStore.signer`); a verifier holds public keys only and acts on
a decision only when `policy.check` says it is signed by the role that may make it.
"""

from vigil.signing.keys import KeyStore, Role
from vigil.signing.policy import Refusal, check, expected_roles, needs_signature
from vigil.signing.seal import Signer, Verifier, canonical, parse_signature
from vigil.signing.settings import SigningSettings

__all__ = ["KeyStore", "Refusal", "Role", "Signer", "SigningSettings", "Verifier", "canonical", "check",
           "expected_roles", "needs_signature", "parse_signature"]

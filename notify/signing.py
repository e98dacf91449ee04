"""Signed webhooks: HMAC-SHA256 over the timestamp and the body, as Stripe and GitHub sign theirs.

    X-Vigil-Timestamp: 1793534400
    X-Vigil-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>." + body)>
    Idempotency-Key:   vn1-...   (the same on every retry of one notification)

A receiver recomputes the HMAC over the raw body bytes with its copy of the secret, compares
in constant time, and rejects timestamps more than a few minutes from its clock (a replayed
request keeps its old timestamp, and changing it breaks the signature). `verify` is that
check, for receivers written in Python; docs/notifications.md shows it in a few lines of any language.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

SIGNATURE_HEADER = "X-Vigil-Signature"
TIMESTAMP_HEADER = "X-Vigil-Timestamp"
KEY_HEADER = "Idempotency-Key"
SCHEME = "v1"
TOLERANCE_S = 300


def signature(secret: bytes, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret, str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"{SCHEME}={mac}"


def signed_headers(secret: bytes, timestamp: int, body: bytes) -> dict[str, str]:
    return {TIMESTAMP_HEADER: str(timestamp), SIGNATURE_HEADER: signature(secret, timestamp, body)}


def verify(secret: bytes, headers: Mapping[str, str], body: bytes, now: float, tolerance_s: float = TOLERANCE_S) -> bool:
    """True when the request carries a valid signature of `body` made within `tolerance_s` of `now`."""
    lower = {k.lower(): v for k, v in headers.items()}
    stamp, given = lower.get(TIMESTAMP_HEADER.lower(), ""), lower.get(SIGNATURE_HEADER.lower(), "")
    if not stamp.isdigit() or abs(now - int(stamp)) > tolerance_s:
        return False
    return hmac.compare_digest(signature(secret, int(stamp), body), given)

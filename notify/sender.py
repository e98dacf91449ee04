"""One delivery attempt over HTTP, and what to do next: delivered, retry later, or failed for good.

    2xx                                   delivered
    429, 5xx, timeout, connection error   retry, after an exponential backoff with jitter
                                          (429's Retry-After is honoured, within the cap)
    any other status (3xx, 4xx)           failed: the request itself is wrong; reported, not retried

Every request carries `Idempotency-Key` and, when the receiver has a secret, the signature
headers (signing.py), made at send time over the exact bytes sent. The URL is never
logged or reported (webhook URLs carry tokens): errors name the receiver.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from typing import Literal, Protocol

import httpx

from vigil.errors import one_line
from vigil.notify.formats import finalize
from vigil.notify.settings import Receiver
from vigil.notify.signing import KEY_HEADER, signed_headers

# httpx logs every request's URL at INFO, and webhook URLs carry tokens: only its warnings, please.
logging.getLogger("httpx").setLevel(logging.WARNING)

Verdict = Literal["delivered", "retry", "failed"]
USER_AGENT = "vigil-notify/1"


@dataclass(frozen=True, kw_only=True)
class Outcome:
    verdict: Verdict
    http_status: int = 0
    error: str = ""
    retry_after_s: float | None = None
    elapsed_ms: float = 0.0


class Sender(Protocol):
    def send(self, receiver: Receiver, key: str, body: bytes) -> Outcome: ...


def verdict_of(status: int) -> Verdict:
    if 200 <= status < 300:
        return "delivered"
    if status == 429 or status >= 500:
        return "retry"
    return "failed"


def backoff_s(attempt: int, base_s: float, max_s: float, rng: random.Random | None = None) -> float:
    """Delay before retry number `attempt` (1, 2, ...): doubling from `base_s`, capped at `max_s`, the
    upper half jittered so receivers coming back are not hit by every sender at once."""
    ceiling = min(max_s, base_s * 2.0 ** max(0, attempt - 1))
    return ceiling / 2 + (rng or random).uniform(0, ceiling / 2)


def _retry_after(resp: httpx.Response) -> float | None:
    value = resp.headers.get("retry-after", "")
    return float(value) if value.strip().isdigit() else None


class HttpSender:
    """Real HTTP, one connection pool per receiver."""

    def __init__(self) -> None:
        self._clients: dict[str, httpx.Client] = {}

    def _client(self, r: Receiver) -> httpx.Client:
        if r.name not in self._clients:
            timeout = httpx.Timeout(r.timeout_s, connect=min(5.0, r.timeout_s))
            self._clients[r.name] = httpx.Client(timeout=timeout, follow_redirects=False,
                                                 headers={"User-Agent": USER_AGENT})
        return self._clients[r.name]

    def send(self, receiver: Receiver, key: str, body: bytes) -> Outcome:
        data = finalize(receiver, body)
        headers = {"Content-Type": "application/json", KEY_HEADER: key}
        if receiver.secret is not None:
            headers.update(signed_headers(receiver.secret, int(time.time()), data))
        started = time.monotonic()
        try:
            resp = self._client(receiver).post(receiver.url, content=data, headers=headers)
        except httpx.TimeoutException:
            return Outcome(verdict="retry", error=f"timed out after {receiver.timeout_s:g} s",
                           elapsed_ms=(time.monotonic() - started) * 1000)
        except httpx.HTTPError as exc:
            reason = one_line(exc, 200).replace(receiver.url, receiver.where)
            return Outcome(verdict="retry", error=f"{type(exc).__name__}: {reason}",
                           elapsed_ms=(time.monotonic() - started) * 1000)
        elapsed = (time.monotonic() - started) * 1000
        verdict = verdict_of(resp.status_code)
        error = "" if verdict == "delivered" else f"HTTP {resp.status_code}: {one_line(Exception(resp.text), 200)}"
        return Outcome(verdict=verdict, http_status=resp.status_code, error=error,
                       retry_after_s=_retry_after(resp) if resp.status_code == 429 else None, elapsed_ms=elapsed)

    def close(self) -> None:
        for c in self._clients.values():
            c.close()
        self._clients.clear()


"""The Recovery page's buttons, server side: cordon, uncordon, evict a host, approve a recovery.

Read-only unless `VIGIL_DASHBOARD_ACTION_TOKEN` is set *and* the dashboard has a publisher (`vigil
up` gives it one; `create_app(client)` alone has none). `Actions.perform` is the only way an
action leaves the dashboard, and it checks on every call, whatever the page showed: a dashboard
without a token refuses everything, a wrong or missing token is refused (constant-time compare),
a request without a reason is refused; a refusal publishes nothing. An accepted action is one
`recovery` event on the `recovery` topic with its reason and who asked (``dashboard`` or
``dashboard:<name>``). Who asked: with `VIGIL_DASHBOARD_USER_HEADER` set, the user the reverse
proxy authenticated (that request header; an action without it is refused, and the name typed
in is ignored), recorded as ``details.identity = "header:<name>"``; unset, the name typed in
(``typed``: a claim). The controller rate-limits requests per identity and checks their targets
(recovery/controller/admission.py):

    approve            the same event `vigil recovery approve ID` publishes (the controller goes on)
    cordon / uncordon  an operator request (`vigil.contract.operator_request`) that the leading
    / evict            controller executes against its node backend: the dashboard holds no
                       backend and no cluster credentials

    ActionRefused (VigilError)  the action was not allowed; nothing was published
"""

from __future__ import annotations

import hmac
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from pydantic import SecretStr

from vigil.contract import Event, RecoveryAction, operator_request
from vigil.errors import VigilError
from vigil.settings import VigilSettings

ActionName = Literal["cordon", "uncordon", "evict", "approve"]
ACTIONS: tuple[ActionName, ...] = ("cordon", "uncordon", "evict", "approve")
_NOT_NAME = re.compile(r"[^A-Za-z0-9@._+-]")


class ActionRefused(VigilError):
    """The dashboard did not act: read-only, a wrong token, or an incomplete request."""


class Publisher(Protocol):
    def publish(self, events: Sequence[Event]) -> None:
        """Deliver the events durably before returning; raise when the broker did not take them."""
        ...


@dataclass(kw_only=True)
class KafkaPublisher:
    """Publishes through the kernel's producer, created on first use (a read-only dashboard never connects)."""

    settings: VigilSettings
    bootstrap: str
    flush_s: float = 15.0
    _producer: object | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def publish(self, events: Sequence[Event]) -> None:
        from vigil.kafka.admin import ensure_topics
        from vigil.kafka.producer import EventProducer
        from vigil.signing import Role
        from vigil.signing.setup import signer

        with self._lock:
            if self._producer is None:
                ensure_topics(self.settings, self.bootstrap, ["recovery"])
                # the dashboard's buttons are operator decisions: signed with the operator key
                self._producer = EventProducer(settings=self.settings, bootstrap=self.bootstrap,
                                               signer=signer(Role.OPERATOR, self.settings.home))
            producer = self._producer
            assert isinstance(producer, EventProducer)
            producer.send(events)
            producer.flush(self.flush_s)


@dataclass(frozen=True, kw_only=True)
class ActionRequest:
    """What a button asks: `target` is a host (cordon, uncordon, evict) or the recovery to approve
    (its id, or `<id>/resume` for a halted job)."""

    action: ActionName
    job_id: str
    target: str


@dataclass(kw_only=True)
class Actions:
    token: SecretStr | None
    publisher: Publisher | None
    user_header: str | None = None  # the reverse proxy's authenticated-user header

    @property
    def enabled(self) -> bool:
        return self.token is not None and bool(self.token.get_secret_value()) and self.publisher is not None

    def perform(self, req: ActionRequest, *, token: str | None, reason: str, who: str = "",
                headers: Mapping[str, str] | None = None) -> RecoveryAction:
        """Check, build and publish the action's event; `ActionRefused` (nothing published) otherwise.

        `headers`: the HTTP request's (the authenticated user is read from them when `user_header` is set)."""
        if not self.enabled or self.token is None or self.publisher is None:
            raise ActionRefused("read-only dashboard: set VIGIL_DASHBOARD_ACTION_TOKEN to allow actions")
        if not token or not hmac.compare_digest(token.encode(), self.token.get_secret_value().encode()):
            raise ActionRefused("wrong or missing action token")
        if req.action not in ACTIONS or not req.target or not req.job_id:
            raise ActionRefused(f"not an action the dashboard takes: {req.action} {req.target!r}")
        reason = reason.strip()
        if not reason:
            raise ActionRefused("say why (the reason is kept with the action)")
        identity = "typed"
        if self.user_header:
            wanted = self.user_header.lower()
            user = next((v for k, v in (headers or {}).items() if k.lower() == wanted), "")
            who = _NOT_NAME.sub("_", user.strip())[:200]
            if not who:
                raise ActionRefused(f"no authenticated user: the reverse proxy's {self.user_header} header is missing")
            identity = f"header:{self.user_header}"
        actor = f"dashboard:{who.strip()}"[:256] if who.strip() else "dashboard"
        event = build(req, reason=reason[:2000], actor=actor, identity=identity)
        self.publisher.publish([event])
        return event


def build(req: ActionRequest, *, reason: str, actor: str, identity: str = "typed") -> RecoveryAction:
    if req.action == "approve":
        return RecoveryAction(job_id=req.job_id, host="controller", action="approve", target=req.job_id,
                              status="succeeded", incident_id=req.target, actor=actor,
                              reason=f"approved by {actor}: {reason}", details={"identity": identity})
    return operator_request(action=req.action, host=req.target, job_id=req.job_id, reason=reason, actor=actor,
                            details={"identity": identity})

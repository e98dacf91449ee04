"""A vigil service says where it is: `service` events on the `services` topic, for `vigil status` elsewhere.

Each long-running service (the analyzer, a detect shard, the recovery controller, the notifier)
publishes a `ServiceAnnouncement` when it starts, every `interval_s` while it runs, and `down` when
it stops: its kind (a closed enum), its instance, and the URL of its Prometheus `/metrics`. `vigil
status` against an external cluster reads the newest per instance. An announcement decides
nothing (it is shown, never acted on) and is validated and bounded: an http(s) URL of at most 512
characters without credentials or control characters, an instance name of at most 128.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from vigil.contract.base import NO_CONTROL, Event, NonNegFloat, UtcDatetime

SERVICE_JOB = "vigil"  # the job_id of every announcement: the platform itself, no training job
SERVICES_TOPIC = "services"
MAX_URL = 512


class ServiceKind(StrEnum):
    ANALYZER = "analyzer"
    DETECT = "detect"
    CONTROLLER = "controller"
    NOTIFIER = "notifier"


class ServiceAnnouncement(Event):
    """One service instance: up (with its metrics URL) or down."""

    kind: Literal["service"] = "service"
    schema_version: Literal[1] = 1
    service: ServiceKind
    instance: str = Field(min_length=1, max_length=128, pattern=NO_CONTROL,
                          description="which one of its kind: host:pid, or the shard's name")
    state: Literal["up", "down"] = "up"
    metrics_url: str = Field(default="", max_length=MAX_URL, description="its Prometheus /metrics (empty: off)")
    interval_s: NonNegFloat = Field(default=300.0, ge=1, le=86_400, description="it announces again within this")
    started_at: UtcDatetime | None = None

    @field_validator("instance")
    @classmethod
    def _printable(cls, v: str) -> str:
        if not v.isprintable():  # C1 controls and bidi overrides: `vigil status` prints it to a terminal
            raise ValueError("an instance name of printable characters (no controls or format characters)")
        return v

    @field_validator("metrics_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        if not v:
            return v
        if not v.isascii() or any(ch.isspace() or not ch.isprintable() for ch in v):
            raise ValueError("a URL of printable ASCII (no spaces, controls, bidi or other format characters)")
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
            raise ValueError("an http(s) URL with a host and no credentials")
        try:
            parts.port  # noqa: B018 - raises on a bad port
        except ValueError as exc:
            raise ValueError(f"a URL with a valid port ({exc})") from None
        return v

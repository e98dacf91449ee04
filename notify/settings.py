"""Notifier settings: receivers, routes, grouping times, delivery retries.

Environment `VIGIL_NOTIFY_<NAME>` or the `[notify]` table of the `VIGIL_CONFIG` file, where
receivers and routes naturally live:

    [notify]
    group_wait_s = 30

    [notify.receivers.oncall]
    kind = "webhook"                     # webhook | slack | pagerduty | alertmanager
    url = "https://hooks.example.com/vigil"
    secret_file = "/etc/vigil/oncall.secret"

    [[notify.routes]]
    job = "llama-*"
    min_severity = "error"
    receivers = ["oncall"]

One receiver without a file (the demo's case): `VIGIL_NOTIFY_WEBHOOK_URL` (with
`VIGIL_NOTIFY_WEBHOOK_SECRET` or `..._SECRET_FILE`, and `..._KIND`) adds a receiver named
`webhook`. Secrets (`secret`, `routing_key`, and every `url`, since webhook URLs carry tokens)
come from settings or from `..._file` paths, are held as `SecretStr` and never appear in a
repr, a log line or an error: errors name the setting and the file, not the value.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import SettingsConfigDict

from vigil.contract.telemetry import Severity
from vigil.settings import VigilBaseSettings

ReceiverKind = Literal["webhook", "slack", "pagerduty", "alertmanager"]
PAGERDUTY_URL = "https://events.pagerduty.com/v2/enqueue"
_SECRETS = ("url", "secret", "routing_key")


def _read_secret(path: Any, setting: str) -> str:
    try:
        value = Path(str(path)).expanduser().read_text().strip()
    except OSError as exc:
        raise ValueError(f"{setting}_file={path}: cannot read ({exc.strerror})") from None
    if not value:
        raise ValueError(f"{setting}_file={path}: the file is empty")
    return value


class ReceiverConfig(BaseModel):
    """One place notifications go; secrets are read from their `_file` at load time."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    kind: ReceiverKind = "webhook"
    url: SecretStr | None = None
    url_file: Path | None = None
    secret: SecretStr | None = Field(default=None, description="HMAC key of X-Vigil-Signature (webhook, alertmanager)")
    secret_file: Path | None = None
    routing_key: SecretStr | None = Field(default=None, description="PagerDuty Events v2 integration key")
    routing_key_file: Path | None = None
    timeout_s: float = Field(default=10.0, gt=0, le=120)
    concurrency: int = Field(default=1, ge=1, le=32, description="requests in flight at most; order is kept per group")
    max_pending: int = Field(default=10_000, ge=1, description="queued notifications at most; the oldest is dropped")

    @model_validator(mode="before")
    @classmethod
    def _files(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for name in _SECRETS:
            path = data.get(f"{name}_file")
            if path is not None:
                if data.get(name) is not None:
                    raise ValueError(f"give {name} or {name}_file, not both")
                data[name] = _read_secret(path, name)
        return data

    @model_validator(mode="after")
    def _complete(self) -> ReceiverConfig:
        if self.kind == "pagerduty" and self.routing_key is None:
            raise ValueError("a pagerduty receiver needs routing_key or routing_key_file")
        if self.kind != "pagerduty" and self.url is None:
            raise ValueError(f"a {self.kind} receiver needs url or url_file")
        if self.url is not None and urlparse(self.url.get_secret_value()).scheme not in ("http", "https"):
            raise ValueError("url must be http(s)://...")
        return self


@dataclass(frozen=True, kw_only=True, repr=False)
class Receiver:
    """A configured receiver with its secrets resolved; its repr shows no secret."""

    name: str
    kind: ReceiverKind
    url: str
    secret: bytes | None
    routing_key: str | None
    timeout_s: float
    concurrency: int
    max_pending: int

    @property
    def where(self) -> str:
        """scheme://host of the URL: safe to print (paths and queries of webhook URLs carry tokens)."""
        u = urlparse(self.url)
        return f"{u.scheme}://{u.netloc.rpartition('@')[2]}"

    def __repr__(self) -> str:
        return f"Receiver({self.name!r}, {self.kind}, {self.where}, signed={self.secret is not None})"


class RouteConfig(BaseModel):
    """Which notifications go to which receivers; every string is a glob (`*`, `?`, `[...]`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: str = ""
    job: str = "*"
    host: str = Field(default="*", description="the alert's host; for an incident, any culprit's host")
    kind: list[str] = Field(default_factory=list, description="alert kinds (straggler, error_log, ...) or 'incident'")
    severity: list[Severity] = Field(default_factory=list)
    min_severity: Severity | None = None
    labels: dict[str, str] = Field(default_factory=dict, description="any other label: category, cause, subject, "
                                   "or a scalar of the alert's evidence")
    receivers: list[str] = Field(min_length=1)
    continue_: bool = Field(default=False, alias="continue", description="also try the routes after this one")
    group_by: list[str] | None = None
    group_wait_s: float | None = Field(default=None, ge=0)
    group_interval_s: float | None = Field(default=None, ge=0)
    repeat_interval_s: float | None = Field(default=None, gt=0)


@dataclass(frozen=True, kw_only=True)
class Timing:
    group_wait_s: float
    group_interval_s: float
    repeat_interval_s: float


class NotifySettings(VigilBaseSettings):
    config_section: ClassVar[str | None] = "notify"
    model_config = SettingsConfigDict(env_prefix="VIGIL_NOTIFY_", extra="ignore", hide_input_in_errors=True)

    receivers: dict[str, ReceiverConfig] = Field(default_factory=dict)
    routes: list[RouteConfig] = Field(default_factory=list, description="first match wins unless `continue`")
    default_receivers: list[str] | None = Field(default=None, description="what no route matched goes here; "
                                                "unset: every receiver when there are no routes, else none")
    group_by: list[str] = Field(default_factory=lambda: ["job", "kind"], description="labels that make an "
                                "alert group (alerts of an incident are grouped by the incident)")
    group_wait_s: float = Field(default=30.0, ge=0, description="wait this long to gather a new group's alerts")
    group_interval_s: float = Field(default=300.0, ge=0, description="at most one update per group this often")
    repeat_interval_s: float = Field(default=4 * 3600.0, gt=0, description="re-send what keeps firing this often")
    tick_s: float = Field(default=1.0, gt=0, le=60, description="how often groups are re-evaluated")
    retry_base_s: float = Field(default=1.0, gt=0, description="first retry delay; doubles each attempt")
    retry_max_s: float = Field(default=60.0, gt=0, description="retry delay at most (jittered)")
    max_age_s: float = Field(default=24 * 3600.0, gt=0, description="a notification undelivered this long expires")
    stuck_after_s: float = Field(default=300.0, gt=0, description="status is bad when a receiver is this far behind")
    resolved_keep_s: float = Field(default=24 * 3600.0, gt=0, description="forget resolved alerts after this long")
    group_id: str = Field(default="vigil-notify", min_length=1, description="Kafka consumer group")
    metrics_port: int = Field(default=0, ge=0, le=65535, description="port of the notifier's /metrics; 0 = a free "
                              "one (`vigil status` shows it)")
    dashboard_url: str = Field(default="", description="base URL of the dashboard in links; default: "
                               "http://VIGIL_DASHBOARD_HOST:PORT (set it when on-call reaches the dashboard under "
                               "another name, or its port is 0)")
    webhook_url: SecretStr | None = Field(default=None, description="shortcut: one receiver named 'webhook'")
    webhook_kind: ReceiverKind = "webhook"
    webhook_secret: SecretStr | None = None
    webhook_secret_file: Path | None = None

    @model_validator(mode="after")
    def _known_receivers(self) -> NotifySettings:
        names = set(self.all_receivers())
        for i, route in enumerate(self.routes):
            unknown = sorted(set(route.receivers) - names)
            if unknown:
                raise ValueError(f"route {route.name or i}: unknown receivers {unknown}; configured: {sorted(names)}")
        unknown = sorted(set(self.default_receivers or []) - names)
        if unknown:
            raise ValueError(f"default_receivers: unknown receivers {unknown}; configured: {sorted(names)}")
        return self

    def all_receivers(self) -> dict[str, ReceiverConfig]:
        out = dict(self.receivers)
        if self.webhook_url is not None:
            fields: dict[str, Any] = {"kind": self.webhook_kind}
            fields["routing_key" if self.webhook_kind == "pagerduty" else "url"] = self.webhook_url
            if self.webhook_secret is not None:
                fields["secret"] = self.webhook_secret
            if self.webhook_secret_file is not None:
                fields["secret_file"] = self.webhook_secret_file
            out.setdefault("webhook", ReceiverConfig.model_validate(fields))
        return out

    def resolved_receivers(self) -> dict[str, Receiver]:
        out = {}
        for name, r in self.all_receivers().items():
            url = r.url.get_secret_value() if r.url else PAGERDUTY_URL
            out[name] = Receiver(name=name, kind=r.kind, url=url,
                                 secret=r.secret.get_secret_value().encode() if r.secret else None,
                                 routing_key=r.routing_key.get_secret_value() if r.routing_key else None,
                                 timeout_s=r.timeout_s, concurrency=r.concurrency, max_pending=r.max_pending)
        return out

    def default_route_receivers(self) -> list[str]:
        if self.default_receivers is not None:
            return list(self.default_receivers)
        return [] if self.routes else sorted(self.all_receivers())

    def timing(self, route: RouteConfig | None) -> Timing:
        def pick(own: float | None, default: float) -> float:
            return default if own is None else own

        if route is None:
            return Timing(group_wait_s=self.group_wait_s, group_interval_s=self.group_interval_s,
                          repeat_interval_s=self.repeat_interval_s)
        return Timing(group_wait_s=pick(route.group_wait_s, self.group_wait_s),
                      group_interval_s=pick(route.group_interval_s, self.group_interval_s),
                      repeat_interval_s=pick(route.repeat_interval_s, self.repeat_interval_s))

"""Dashboard settings: where it listens, how often pages refresh, and whether it may act.

Environment variables use the prefix `VIGIL_DASHBOARD_` (`VIGIL_DASHBOARD_PORT=8050`);
the `[dashboard]` table of the `VIGIL_CONFIG` file supplies defaults.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from vigil.settings import VigilBaseSettings


class DashboardSettings(VigilBaseSettings):
    """Listening address, refresh interval and page limits of the dashboard."""

    config_section: ClassVar[str | None] = "dashboard"
    model_config = SettingsConfigDict(env_prefix="VIGIL_DASHBOARD_", extra="ignore")

    host: str = Field(default="127.0.0.1", description="address to listen on")
    port: int = Field(default=8050, ge=0, le=65535, description="port; 0 = a free one")
    refresh_s: float = Field(default=10.0, ge=1.0, description="pages re-query the store this often")
    default_range: str = Field(default="1h", description="time range when the URL names none")
    heatmap_rows: int = Field(default=48, ge=4, le=4096, description="hosts shown in the 'worst' heatmap view")
    max_points: int = Field(default=400, ge=20, le=5000, description="time buckets per series at most")
    action_token: SecretStr | None = Field(
        default=None, description="token the Recovery page's cordon / uncordon / evict / approve buttons ask for; "
                                  "unset (the default): the dashboard is read-only")
    user_header: str | None = Field(
        default=None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9-]+$",
        description="the reverse proxy's authenticated-user header (e.g. X-Forwarded-User): set, every action "
                    "carries that user as its identity and one without it is refused; unset, the name typed in")

    def base_url(self) -> str:
        """The dashboard's own address as a browser on this machine reaches it (links from the notifier)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.port}"

"""Settings every service's metrics share: `VIGIL_METRICS_<NAME>` or the `[metrics]` table of `VIGIL_CONFIG`.

Each service's own port is its own setting (`VIGIL_ANALYZER_METRICS_PORT`,
`VIGIL_RECOVERY_METRICS_PORT`; 0 = a free one, shown by `vigil status`).
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from vigil.settings import VigilBaseSettings


class MetricsSettings(VigilBaseSettings):
    model_config = SettingsConfigDict(env_prefix="VIGIL_METRICS_")
    config_section = "metrics"

    enabled: bool = Field(default=True, description="serve /metrics on each service's metrics port")
    bind: str = Field(default="127.0.0.1", description="address the metrics ports listen on (0.0.0.0: every one)")
    max_jobs: int = Field(default=20, ge=1, description="jobs with a label value of their own; the rest are "
                          "counted under job=\"other\"")
    max_hosts: int = Field(default=1000, ge=1, description="hosts with a label value of their own; the rest are "
                           "counted under host=\"other\"")

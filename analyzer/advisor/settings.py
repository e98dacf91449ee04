"""The resource advisor's thresholds (`VIGIL_ADVISOR_...`, or `[advisor]` in the `VIGIL_CONFIG` file)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from vigil.contract.ledger import DATA_PHASES
from vigil.settings import VigilBaseSettings


class AdvisorSettings(VigilBaseSettings):
    config_section: ClassVar[str | None] = "advisor"
    model_config = SettingsConfigDict(env_prefix="VIGIL_ADVISOR_")

    knee_fraction: float = Field(default=0.5, gt=0, lt=1, description="a node count is past the knee when the "
                                 "throughput each added node brings falls below this fraction of linear scaling")
    min_steps: int = Field(default=5, ge=1, description="steps measured at a node count before it is a point of "
                           "the curve")
    warmup_steps: int = Field(default=3, ge=0, description="the first steps measured at each node count are skipped")
    host_z: float = Field(default=3.5, gt=0, description="robust z-score (MAD) that flags a host hot or starved")
    min_host_excess_pct: float = Field(default=5.0, ge=0, description="... and at least this much above the median")
    data_phases: tuple[str, ...] = Field(default=DATA_PHASES,
                                         description="phases that are the data loader's (waiting for input)")
    max_steps: int = Field(default=20_000, ge=100, description="newest steps read per job (bounds the query)")

"""Analyzer settings: ingest batching, detector cadence and every detector threshold.

Environment `VIGIL_ANALYZER_<NAME>` or the `[analyzer]` table of the `VIGIL_CONFIG` file.
Durations are seconds of *event time* (the clock carried by the telemetry) unless they
say wall clock, so replays and faster-than-real-time simulations behave like live runs.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import SettingsConfigDict

from vigil.settings import VigilBaseSettings

ROLLUP_WINDOW_STEPS = 5
"""Steps per window of the `phase_host_windows` rollup (fixed by migration 0100)."""


class AnalyzerSettings(VigilBaseSettings):
    model_config = SettingsConfigDict(env_prefix="VIGIL_ANALYZER_", extra="ignore")
    config_section = "analyzer"

    # ingest
    group_id: str = Field(default="vigil-analyzer", min_length=1)
    batch_events: int = Field(default=20_000, ge=1, description="flush a batch at this many events")
    batch_s: float = Field(default=1.0, gt=0, description="... or when it is this old (wall clock)")
    # detector cadence
    detect: bool = Field(default=True, description="run the detectors; exactly one analyzer per cluster should "
                         "(more instances with detect off scale the ingest)")
    detect_interval_s: float = Field(default=2.0, gt=0, description="wall-clock period of the detector loop")
    eval_step_s: float = Field(default=2.0, gt=0, description="event-time spacing of evaluation points")
    max_catchup: int = Field(default=60, ge=1, description="most evaluation points per job per loop turn")
    job_idle_s: float = Field(default=600.0, gt=0, description="wall clock: a job with no ingest for this long is not evaluated")
    watermark_idle_s: float = Field(default=5.0, gt=0, description="wall clock: a host's source with no ingest for this "
                                    "long stops holding the job's event-time watermark back")
    watermark_max_lag_s: float = Field(default=120.0, gt=0, description="the watermark never trails the job's "
                                       "newest event time by more than this")
    refresh_s: float = Field(default=60.0, gt=0, description="re-publish a firing alert at most this often")
    # straggler
    straggler_min_slowdown_pct: float = Field(default=3.0, gt=0)
    straggler_min_excess_ms: float = Field(default=1.0, ge=0,
                                           description="a flagged window is also this many ms above the median")
    straggler_z: float = Field(default=4.0, gt=0, description="robust z-score (MAD) a window must also exceed")
    straggler_k: int = Field(default=3, ge=1, description="flagged windows out of the last n to fire")
    straggler_n: int = Field(default=5, ge=1)
    straggler_min_hosts: int = Field(default=4, ge=3, description="hosts reporting a phase before it is judged")
    straggler_lag_steps: int = Field(default=2, ge=0, description="a window is complete this many steps after it ends")
    # traffic
    traffic_drop_pct: float = Field(default=50.0, gt=0, lt=100)
    traffic_stall_s: float = Field(default=10.0, gt=0, description="zero traffic this long -> critical")
    traffic_recent_s: float = Field(default=10.0, gt=0)
    traffic_baseline_s: float = Field(default=120.0, gt=0)
    traffic_min_baseline_bps: float = Field(default=1e6, ge=0, description="quieter NICs are not judged")
    traffic_zero_bps: float = Field(default=1e3, ge=0, description="at or below this a sample counts as zero")
    traffic_fleet_min_nics: int = Field(default=4, ge=2, description="NICs judged before half of them down "
                                        "together counts as the whole job pausing (one alert, not one per NIC)")
    # mfu drift
    mfu_drop_pct: float = Field(default=5.0, gt=0)
    mfu_warmup_steps: int = Field(default=20, ge=0)
    mfu_baseline_steps: int = Field(default=50, ge=5)
    mfu_current_steps: int = Field(default=20, ge=5)
    mfu_phase_growth_pct: float = Field(default=3.0, gt=0, description="a phase this much slower fleet-wide is named")
    mfu_trend_steps: int = Field(default=200, ge=10)
    mfu_trend_pct: float = Field(default=3.0, gt=0, description="projected decline over mfu_trend_steps that fires")
    # heartbeat
    heartbeat_miss_intervals: float = Field(default=3.0, gt=0)
    heartbeat_quiet_s: float = Field(default=2.0, ge=0, description="wall clock: nothing of the host ingested for this long (live only)")
    # logs and exits
    log_min_severity: Literal["warning", "error", "critical"] = "error"
    log_resolve_s: float = Field(default=600.0, gt=0, description="an error-log alert resolves after this long quiet")

    @field_validator("straggler_n")
    @classmethod
    def _k_of_n(cls, n: int, info: ValidationInfo) -> int:
        k = info.data.get("straggler_k", 0)
        if k > n:
            raise ValueError(f"straggler_k ({k}) must not exceed straggler_n ({n})")
        return n

"""Analyzer settings: ingest batching, detector cadence, and one small section per detector.

Environment `VIGIL_ANALYZER_<NAME>` or the `[analyzer]` table of the `VIGIL_CONFIG` file.
A detector's thresholds are its own section (`settings.straggler.k`) but keep their flat
names where users set them: `VIGIL_ANALYZER_STRAGGLER_K`, `straggler_k = 3` in
`[analyzer]` (or `k = 3` in `[analyzer.straggler]`). Each detector's `judge` takes only
its section. Durations are seconds of *event time* (the clock carried by the telemetry)
unless they say wall clock, so replays and faster-than-real-time simulations behave like
live runs.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import SettingsConfigDict

from vigil.settings import VigilBaseSettings


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StragglerSettings(_Section):
    min_slowdown_pct: float = Field(default=3.0, gt=0)
    min_excess_ms: float = Field(default=1.0, ge=0, description="a flagged window is also this many ms above the median")
    z: float = Field(default=4.0, gt=0, description="robust z-score (MAD) a window must also exceed")
    k: int = Field(default=3, ge=1, description="flagged windows out of the last n to fire")
    n: int = Field(default=5, ge=1)
    min_hosts: int = Field(default=4, ge=3, description="hosts reporting a phase before it is judged")
    lag_steps: int = Field(default=2, ge=0, description="a window is complete this many steps after it ends")
    k_long: int = Field(default=5, ge=1, description="... or flagged in this many of the last n_long windows (and "
                        "in one of the last n): a host slow on a fraction of its steps")
    n_long: int = Field(default=12, ge=1)
    pair_slowdown_pct: float = Field(default=10.0, gt=0, description="jobs of 2-3 ranks: slowdown that, mirrored by "
                                     "the others' waiting, flags a rank")
    gpu_clock_drop_pct: float = Field(default=3.0, gt=0, description="a GPU's SM clock this much below its host's "
                                      "median names it as the slow one")
    gpu_lookback_s: float = Field(default=20.0, gt=0, description="GPU readings (heartbeats) looked at for evidence")
    warmup_steps: int = Field(default=10, ge=0, description="a job's first steps (compilation, caches, allocator "
                              "warm-up) are not judged")
    self_windows: int = Field(default=24, ge=0, description="windows before the judged ones from which a host's usual "
                              "time relative to its stage is read (0: hosts are compared with their peers only)")
    self_min_windows: int = Field(default=6, ge=2, description="... at least this many, else it is not compared "
                                  "with itself yet")

    @model_validator(mode="after")
    def _k_of_n(self) -> StragglerSettings:
        if self.k > self.n:
            raise ValueError(f"straggler_k ({self.k}) must not exceed straggler_n ({self.n})")
        if self.k_long > self.n_long or self.n_long < self.n:
            raise ValueError(f"straggler_k_long ({self.k_long}) must not exceed straggler_n_long ({self.n_long}), "
                             f"which must be >= straggler_n ({self.n})")
        return self


class TrafficSettings(_Section):
    drop_pct: float = Field(default=50.0, gt=0, lt=100)
    stall_s: float = Field(default=10.0, gt=0, description="zero traffic this long -> critical")
    recent_s: float = Field(default=10.0, gt=0)
    baseline_s: float = Field(default=120.0, gt=0)
    min_baseline_bps: float = Field(default=1e6, ge=0, description="quieter NICs are not judged")
    zero_bps: float = Field(default=1e3, ge=0, description="at or below this a sample counts as zero")
    fleet_min_nics: int = Field(default=4, ge=2, description="NICs judged before half of them down together "
                                "counts as the whole job pausing (one alert, not one per NIC)")
    quiet_frac: float = Field(default=0.25, gt=0, lt=1, description="the job is quiet in a 2 s bucket when its median "
                              "NIC carries less than this fraction of its busy level")
    quiet_ref_s: float = Field(default=300.0, gt=0, description="history whose busy level (90th percentile of the "
                               "job's median NIC) quiet is measured against")
    suspect_lead_s: float = Field(default=1.5, ge=0, description="a host quiet this long before the rest of the job "
                                  "is named as the suspect of a job-wide stall")
    suspect_max_lead_s: float = Field(default=30.0, gt=0, description="... but not longer: a host quiet long before is "
                                      "not what stopped the job (its own alerts say so)")


class FlapSettings(_Section):
    window_s: float = Field(default=180.0, gt=0, description="flaps are counted over this much history")
    min_flaps: int = Field(default=3, ge=2, description="flaps in the window that fire (one keeps it firing)")
    down_frac: float = Field(default=0.1, gt=0, lt=1, description="a sample below this fraction of the job's median "
                             "NIC at that moment counts as down")
    max_down_s: float = Field(default=30.0, gt=0, description="a longer outage is a stop, not a flap")


class MfuSettings(_Section):
    drop_pct: float = Field(default=5.0, gt=0)
    warmup_steps: int = Field(default=20, ge=0)
    baseline_steps: int = Field(default=50, ge=5)
    current_steps: int = Field(default=20, ge=5)
    phase_growth_pct: float = Field(default=3.0, gt=0, description="a phase this much slower fleet-wide is named")
    trend_steps: int = Field(default=200, ge=10)
    trend_pct: float = Field(default=3.0, gt=0, description="projected decline over trend_steps that fires")
    release_z: float = Field(default=2.0, ge=0, description="a firing drift resolves once its drop is this many "
                             "standard errors (from the steps' spread) below drop_pct / 2, or at most drop_pct / 4, "
                             "and its trend under trend_pct")


class NumericSettings(_Section):
    """The cross-rank numerical detector (detect/numeric.py): grad-norm outliers, non-finite values, loss spikes."""

    window_steps: int = Field(default=20, ge=2, description="the newest steps judged at each instant; a rank must be "
                              "out `hits` times within them")
    z: float = Field(default=6.0, gt=0, description="a rank is out when log(its local grad norm) is this many "
                     "(scaled) MADs from its peers' median (peers: the ranks of its pp/tp coordinates)")
    hits: int = Field(default=2, ge=1, description="steps out within `window_steps` that make a numeric fault")
    min_ranks: int = Field(default=4, ge=3, description="peers a group needs for a robust centre (smaller: not judged)")
    min_mad: float = Field(default=0.05, gt=0, description="floor on the MAD of log(grad norm): peers that agree "
                           "closer than this (about 5%) are not told apart by their noise")
    loss_history_steps: int = Field(default=200, ge=10, description="the job's own loss history a step is judged "
                                    "against (median/MAD of the rises of the job's per-step median loss over the 5 "
                                    "steps before each)")
    loss_min_history: int = Field(default=30, ge=5, description="history steps a loss spike needs to be judged")
    loss_z: float = Field(default=10.0, gt=0, description="a step's loss rise this many MADs above its history's is a spike")
    loss_rise_pct: float = Field(default=20.0, ge=0, description="... and at least this much above the steps before it")


class ReplicaSettings(_Section):
    """The replica-digest detector (detect/replicas.py): data-parallel replicas' parameter digests, by majority."""

    window_steps: int = Field(default=500, ge=2, description="the newest steps (back from the last complete one) whose "
                              "digests are judged; the first step a replica differed is remembered for the run")
    min_replicas: int = Field(default=2, ge=2, description="a majority must be at least this many replicas (and more "
                              "than half of those that reported) to name the others; else the disagreement is "
                              "reported unblamed")


class HeartbeatSettings(_Section):
    miss_intervals: float = Field(default=3.0, gt=0)


class EpochSettings(_Section):
    """When a job's steps begin a new run (epoch): every baseline starts afresh after warm-up."""

    gap_s: float = Field(default=120.0, gt=0, description="steps resuming after this long without any is a new run")
    back_steps: int = Field(default=2, ge=1, description="a step this many below the run's newest so far: a restart")
    jump_steps: int = Field(default=1000, ge=1, description="a step this many above the run's newest so far: a new run")


class LogSettings(_Section):
    min_severity: Literal["warning", "error", "critical"] = "error"
    hardware_min_severity: Literal["warning", "error", "critical"] = Field(
        default="warning", description="what the hardware reported (source kernel, nvml, sysfs: attested facts) "
        "alerts from this severity: InfiniBand symbol errors growing, a corrected ECC or AER error (warnings, "
        "rate-limited by the agent) are each their own alert, which starts no recovery")
    resolve_s: float = Field(default=600.0, gt=0, description="an error-log alert resolves after this long quiet")


class HangSettings(_Section):
    episode_s: float = Field(default=60.0, gt=0, description="Flight Recorder dumps this close to the newest belong "
                             "to one hang")
    gather_s: float = Field(default=10.0, ge=0, description="a hang is judged once every member dumped, or this long "
                            "after its first dump")
    lookback_s: float = Field(default=3600.0, gt=0, description="how far back dumps are read")
    stall_s: float = Field(default=120.0, gt=0, description="no Flight Recorder culprit: steps stopped this long while "
                           "the job's processes live is a hang (weak evidence)")


class IncidentSettings(_Section):
    window_s: float = Field(default=120.0, gt=0, description="rank failures this close in time form one cascade")
    settle_s: float = Field(default=20.0, ge=0, description="a cascade of peer errors only (no culprit yet) waits this "
                            "long for its culprit's exit before naming the first failure")
    hardware_settle_s: float = Field(default=8.0, ge=0, description="a hardware line (Xid, ECC, NVLink) no crash has "
                                     "claimed yet waits this long for the crash it may cause before it pages alone "
                                     "(a dying rank exits within seconds; a GPU that fell off the bus must page fast)")
    hardware_window_s: float = Field(default=300.0, ge=0, description="hardware error lines on the culprit's host "
                                     "this long before its failure make it a host fault")
    victim_severity: Literal["info", "warning", "error"] = Field(default="warning", description="severity a "
                                                                 "victim's alert is demoted to (it no longer pages)")


class AnalyzerSettings(VigilBaseSettings):
    model_config = SettingsConfigDict(env_prefix="VIGIL_ANALYZER_")
    config_section = "analyzer"

    metrics_port: int = Field(default=0, ge=0, le=65535, description="port of the analyzer's /metrics; 0 = a free "
                              "one (`vigil status` shows it)")
    # ingest
    group_id: str = Field(default="vigil-analyzer", min_length=1)
    batch_events: int = Field(default=100_000, ge=1, description="flush a batch at this many events (so large only while ingest is behind: fewer, larger inserts catch up faster)")
    batch_s: float = Field(default=1.0, gt=0, description="... or when it is this old (wall clock)")
    write_thread: bool = Field(default=True, description="write each batch on a thread of its own while the next "
                               "one is read and decoded")
    decode_process: bool | None = Field(default=None, description="decode step and NIC records, build and encode "
                                        "their columns in a child process, off the analyzer's GIL (the same "
                                        "decisions and rows; a child that fails is restarted and its batches decoded "
                                        "in the analyzer); unset: when the analyzer may run on more than 2 CPUs (on "
                                        "2 it only moves the work: bench/RESULTS.md)")
    dedup_window_s: float = Field(default=60.0, gt=0, description="event time: re-sends of step/heartbeat/NIC events "
                                  "this recent are caught in memory; older ones are looked up in ClickHouse")
    # detector cadence
    detect: bool = Field(default=True, description="run the detectors; one analyzer per cluster, or several "
                         "with `detect_shards` on (instances with detect off scale the ingest)")
    detect_shards: bool = Field(default=False, description="share detection with the other detecting analyzers: "
                                "join the `vigil-detect` group and judge only the jobs of the partitions it assigns "
                                "(analyzer/shard.py); off: this analyzer judges every job")
    detect_partitions: int = Field(default=64, ge=1, le=1024, description="partitions of `detect-jobs` the jobs "
                                   "are spread over (the most detect shards that get work); the same on every shard")
    detect_interval_s: float = Field(default=2.0, gt=0, description="wall-clock period of the detector loop")
    eval_step_s: float = Field(default=2.0, gt=0, description="event-time spacing of evaluation points")
    max_catchup: int = Field(default=60, ge=1, description="most evaluation points per job per loop turn (the rest "
                             "waits for the next turn, which follows at once: nothing is skipped)")
    turn_budget_s: float = Field(default=2.0, gt=0, description="wall clock: a turn stops starting evaluations after "
                                 "this long and publishes; the next turn goes on where it stopped")
    live_history_s: float = Field(default=3600.0, gt=0, description="a job first seen (no stored position) is judged "
                                  "live from at most this far behind its watermark; replay covers older history")
    job_idle_s: float = Field(default=600.0, gt=0, description="wall clock: a job with no ingest for this long is not evaluated")
    watermark_idle_s: float = Field(default=5.0, gt=0, description="wall clock: a host's source with nothing ingested "
                                    "for this long before the ingest frontier (everything produced before it is "
                                    "stored) stops holding the job's event-time watermark back: its agent is silent")
    watermark_gone_lag_s: float = Field(default=10.0, ge=0, description="event time: a host's source silent for "
                                        "`watermark_idle_s` still holds the watermark back until the job's other "
                                        "sources are this far ahead of it (bursty delivery is waited for; a lost "
                                        "host is let go: heartbeat loss is then paged ~this long after its last "
                                        "beat); live, the most a source is waited for (see watermark_gone_min_s)")
    watermark_gone_min_s: float = Field(default=6.0, ge=0, description="event time: live, a silent source is waited "
                                        "for as long as its own recent delivery needs (how far it lagged its job: "
                                        "its cadence and delays, plus 2 s), at least this (a source level with its "
                                        "job is let go after ~this long without delivery; 6 s: 3 heartbeat "
                                        "intervals) and at most `watermark_gone_lag_s`; at or above it: every "
                                        "source waits `watermark_gone_lag_s`")
    watermark_max_lag_s: float = Field(default=120.0, gt=0, description="the watermark never trails the job's "
                                       "newest event time by more than this")
    refresh_s: float = Field(default=60.0, gt=0, description="re-publish a firing alert at most this often")
    # one section per detector
    straggler: StragglerSettings = StragglerSettings()
    traffic: TrafficSettings = TrafficSettings()
    flap: FlapSettings = FlapSettings()
    mfu: MfuSettings = MfuSettings()
    numeric: NumericSettings = NumericSettings()
    replicas: ReplicaSettings = ReplicaSettings()
    heartbeat: HeartbeatSettings = HeartbeatSettings()
    epoch: EpochSettings = EpochSettings()
    log: LogSettings = LogSettings()
    hang: HangSettings = HangSettings()
    incidents: IncidentSettings = IncidentSettings()

"""Recovery controller settings: mode, node backend, policy, safety limits, diagnostics, timeouts.

Environment `VIGIL_RECOVERY_<NAME>` or the `[recovery]` table of the `VIGIL_CONFIG` file;
sections keep flat names where users set them (`VIGIL_RECOVERY_BREAKER_MAX_CORDONS_PER_HOUR`,
`breaker_max_cordons_per_hour = 3` in `[recovery]`, or `max_cordons_per_hour = 3` in
`[recovery.breaker]`). The `kubernetes` and `slurm` sections configure those node backends
(`backends.kubernetes.settings`, `backends.slurm.settings`). Durations are wall-clock seconds. See recovery/README.md.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import SettingsConfigDict

from vigil.recovery.backends.kubernetes.settings import KubernetesSettings
from vigil.recovery.backends.slurm.settings import SlurmSettings
from vigil.settings import VigilBaseSettings

PolicyClass = Literal["hardware", "software", "hang"]
Mode = Literal["auto", "dry-run", "manual"]


DEFAULT_ALERT_TRIGGERS: dict[str, PolicyClass] = {
    "error_log:xid": "hardware", "error_log:ecc": "hardware", "error_log:nvlink": "hardware",
    "error_log:gpu_lost": "hardware", "error_log:gpu_health": "hardware",
    "error_log:sxid": "hardware", "error_log:pcie_aer": "hardware", "error_log:host_memory": "hardware",
    "error_log:mce": "hardware",
    "error_log:ib_port_down": "hardware", "error_log:ib_port_polling": "hardware",
    "error_log:ib_symbol_errors": "hardware",
    "heartbeat_loss": "hardware", "traffic_stall": "hang",
}
"""Every hardware fault the agent attests whose catalog action can take the GPU or host out: the kernel log's
(xid, sxid, pcie_aer, host_memory, mce), NVML's (xid, ecc, gpu_lost: a GPU gone from NVML), DCGM's (ecc, nvlink,
pcie_aer, gpu_health) and the InfiniBand ports' (down, stuck in Polling, symbol errors condemned). A category
whose facts are only ever `watch` (nic_link_down, ib_link_flap, ib_link_recovery, ib_rcv_errors) or an
application's (oom: restart_job) starts nothing here; an attested `Member.fault` starts a hardware recovery
only when its `error_log:<fault>` is hardware."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PolicySettings(_Section):
    """What each kind of fault gets (see recovery/README.md, "Policy")."""

    diagnose_hardware: bool = Field(default=True, description="hardware incidents: run diagnostics before cordoning")
    diagnose_explicit: bool = Field(default=False, description="hardware incidents with a strong culprit (an "
                                    "explicit hardware error naming its host: Xid, ECC, NVLink): diagnose anyway "
                                    "before cordoning (off: that host is cordoned at once; diagnostics run where the "
                                    "culprit is weak or unknown, which is when they decide who goes)")
    diagnose_hang: bool = Field(default=True, description="hangs and traffic stops: run diagnostics")
    cordon_slow: bool = Field(default=True, description="cordon hosts the diagnostics find slow (not only faulty)")
    quarantine_gpus: bool = Field(default=True, description="an attested fault whose Xid catalog action is a GPU "
                                  "reset and that names its GPU quarantines that GPU (the host keeps its others) "
                                  "where the node backend can (local, kubernetes); off, or on slurm: cordon the host")
    crash_loops: int = Field(default=3, ge=1, description="software faults: after this many restarts without "
                             "checkpoint progress, stop the job and page")
    other_as: PolicyClass = Field(default="hang", description="network and unknown causes are handled as this")
    exit_as: PolicyClass = Field(default="software", description="a rank exit no incident explains within "
                                 "exit_grace_s is handled as this")
    exit_grace_s: float = Field(default=30.0, gt=0, description="how long an exit waits for the analyzer's incident "
                                "(it holds a crash's hardware lines ~20 s to tie them to the crash)")
    attested_exit_grace_s: float = Field(default=0.0, ge=0, description="an exit its agent attested (signed member "
                                         "report) waits this long, not exit_grace_s: the case opens at once and "
                                         "the analyzer's verdict refines it while the pause runs")
    escalate_window_s: float = Field(default=120.0, ge=0, description="a stronger verdict (an incident) on the failure "
                                     "a finished recovery took as weaker, first sign within this of that recovery's: "
                                     "recover again as the stronger class (a hardware culprit still in the job gets cordoned)")
    settle_s: float = Field(default=2.0, ge=0, description="triggers of one job within this window open one "
                            "recovery (the strongest class, every culprit)")
    alert_triggers: dict[str, PolicyClass] = Field(
        default_factory=lambda: dict(DEFAULT_ALERT_TRIGGERS),
        description="critical alerts that start a recovery: `alert` or `alert:category` -> class")
    max_trigger_age_s: float = Field(default=900.0, gt=0, description="older incidents and alerts are history, "
                                     "never acted on")
    repeat_faults: int = Field(default=3, ge=0, description="a host suspected by this many hardware or hang "
                               "recoveries within repeat_window_s is cordoned whatever its diagnostics say "
                               "(fleet memory); 0: off")
    repeat_window_s: float = Field(default=86_400.0, gt=0, le=86_400.0, description="the window of repeat_faults "
                                   "(at most a day: the controller keeps a day of finished recoveries)")
    sdc_rollback: bool = Field(default=True, description="a silent_data_corruption incident naming its replica rolls "
                               "the job back (pause, restart restoring no snapshot newer than the suspect's last agreed "
                               "step, then the replay verdict); off: handled as other_as")
    sdc_rollbacks: int = Field(default=3, ge=1, description="a job rolled back this many times for silent data "
                               "corruption within repeat_window_s is paused and a human paged (halt) instead of "
                               "rolled back again: digests are the job's claims, never an endless loop")
    sdc_replay_intervals: int = Field(default=2, ge=1, description="the replay is judged once every rank passed the "
                                      "first bad step by this many digest intervals (and sdc_settle_s more)")
    sdc_settle_s: float = Field(default=30.0, ge=0, description="after the ranks passed the replayed steps, how long "
                                "the replica detector's verdict may take to arrive (its incident)")
    sdc_replay_timeout_s: float = Field(default=600.0, gt=0, description="a replay that has not reached its steps by "
                                        "then is undecided")
    scale_up: bool = Field(default=True, description="restart with more nodes when an eligible host waits")
    scale_up_wait_s: float = Field(default=30.0, ge=0, description="how long a new host waits before a scale-up")


class BreakerSettings(_Section):
    """Storm protection (NVSentinel, medik8s NodeHealthCheck): beyond a limit, stop acting and page."""

    max_cordons_per_hour: int = Field(default=3, ge=0, description="cordons in any rolling hour, cluster-wide")
    max_job_fraction: float = Field(default=0.5, gt=0, le=1, description="most of a job's hosts cordoned at once")


class DiagnosticsSettings(_Section):
    round_timeout_s: float = Field(default=60.0, gt=0, description="time limit of one diagnostics round per host")
    slow_factor: float = Field(default=2.0, gt=1, description="slower than this x the fleet median is slow")
    gemm_size: int = Field(default=384, ge=16, description="matrix size of the GEMM test")
    gemm_iters: int = Field(default=100, ge=1)
    alltoall_procs: int = Field(default=2, ge=1, description="local devices in the all-to-all (CPU: in-process)")
    allreduce_mb: float = Field(default=1.0, gt=0)
    allreduce_iters: int = Field(default=5, ge=1)


class RecoverySettings(VigilBaseSettings):
    model_config = SettingsConfigDict(env_prefix="VIGIL_RECOVERY_")
    config_section = "recovery"

    mode: Mode = Field(default="auto", description="auto: act; dry-run: decide and publish only; manual: wait for "
                       "`vigil recovery approve`")
    backend: Literal["local", "kubernetes", "slurm"] = Field(default="local", description="who cordons and evicts hosts")
    metrics_port: int = Field(default=0, ge=0, le=65535, description="port of the controller's /metrics; 0 = a free "
                              "one (`vigil status` shows it)")
    lease_group: str = Field(default="vigil-recovery", min_length=1, description="consumer group of the leader "
                             "lease (prefixed with the topic prefix): one active controller per cluster")
    tick_s: float = Field(default=0.25, gt=0, description="how often open recoveries are advanced")
    member_stale_s: float = Field(default=45.0, gt=0, description="a member silent this long is gone")
    form_wait_s: float = Field(default=10.0, ge=0, description="a new job starts once nodes_max agents wait, or "
                               "nodes_min have waited this long")
    pause_timeout_s: float = Field(default=60.0, gt=0, description="stop commands unanswered this long: go on")
    dump_timeout_s: float = Field(default=15.0, gt=0)
    restart_timeout_s: float = Field(default=300.0, gt=0, description="start commands to the first step")
    restart_wait_s: float = Field(default=120.0, ge=0, description="fewer eligible hosts than the job's minimum: "
                                  "wait this long for one, then page")
    requests_per_minute: float = Field(default=6.0, gt=0, description="operator requests (dashboard buttons) one "
                                       "identity may have carried out per minute, on average")
    requests_burst: int = Field(default=5, ge=1, description="... and at most this many at once")
    policy: PolicySettings = PolicySettings()
    breaker: BreakerSettings = BreakerSettings()
    diagnostics: DiagnosticsSettings = DiagnosticsSettings()
    kubernetes: KubernetesSettings = KubernetesSettings()
    slurm: SlurmSettings = SlurmSettings()

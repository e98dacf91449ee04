"""The tables the dashboard reads (the analyzer's, and its notifier's): names and the columns its queries use.

The dashboard does not import the analyzer (components depend on the kernel only), so it
declares here what it relies on, and every query names its tables through these objects
(`f"FROM {STEP_TIMINGS}"`). The test suite checks the declarations against the migrated
schema (columns, and the time bucket a table sorts by first) and that the queries use no
column of these tables left undeclared and bound every read of a minute-first table by its
bucket, so a change to the analyzer's schema fails there, not on a page.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[str, ...]
    time_key: str = ""  # the time bucket the sorting key starts with after job_id, over `{}` (the time column)

    def __format__(self, spec: str) -> str:
        return self.name

    def buckets(self, lo: str, hi: str = "") -> str:
        """`lo` (and `hi`), SQL bounds of `ts`, as bounds of the table's time bucket: what lets a read bounded in time
        skip the granules of the job's other minutes (the engine does not derive them from bounds on `ts`)."""
        if not self.time_key:
            return "1"
        key = self.time_key.format("ts")
        return f"{key} >= {self.time_key.format(lo)}" + (f" AND {key} <= {self.time_key.format(hi)}" if hi else "")

    def __str__(self) -> str:
        return self.name


def _t(name: str, columns: str, time_key: str = "") -> Table:
    return Table(name, tuple(columns.split()), time_key)


_MINUTE = "toStartOfMinute({})"  # analyzer migration 0198


JOBS = _t("jobs", "job_id ts name world_size tp pp dp gpus_per_host gpu_model hosts")
JOB_RANKS = _t("job_ranks", "job_id rank host dp tp pp ts")
STEP_TIMINGS = _t("step_timings", "job_id host rank world_size dp tp pp step ts step_ms phases tokens mfu failed dropped")
HEARTBEATS = _t("heartbeats", "job_id host ts ip pod node agent_version interval_s procs_total procs_running gpus "
                              "gpu_ecc_uncorrected gpus_throttled dropped_events", _MINUTE)
GPU_STATS = _t("gpu_stats", "job_id host gpu ts name util_pct temp_c power_w sm_clock_mhz throttle_reasons")
NIC_COUNTERS = _t("nic_counters", "job_id host device port ts tx_bps rx_bps interval_s", _MINUTE)
LOG_LINES = _t("log_lines", "job_id host ts rank category severity message xid repeats source action gpu_index")
PROCESS_EXITS = _t("process_exits", "job_id host ts rank exit_code signal summary failed_at launcher")
ALERT_EVENTS = _t("alert_events", "ts job_id host fingerprint alert subject status severity summary first_seen "
                                  "last_seen evidence verified signature")
ALERTS_CURRENT = _t("alerts_current", "job_id fingerprint alert subject host status severity summary first_seen "
                                      "last_seen evidence updated")
PHASE_HOST_WINDOWS = _t("phase_host_windows", "job_id phase window host sum_ms n max_ms first_ts last_ts")
JOB_STEP_RUNS = _t("job_step_runs", "job_id step bucket ranks sum_step_ms phase_ms phase_n first_ts last_ts")
JOB_STEPS = _t("job_steps", "job_id step ranks sum_step_ms max_step_ms sum_mfu n_mfu sum_tokens failed first_ts last_ts")
NIC_WINDOWS = _t("nic_windows", "job_id bucket host device sum_bps n")
HOST_PRESENCE = _t("host_presence", "job_id host first_ts last_ts interval_s")
JOB_CLOCK = _t("job_clock", "job_id first_ts last_ts last_ingested")
HOST_CLOCK = _t("host_clock", "job_id host source last_ts")
JOB_PHASE_KINDS = _t("job_phase_kinds", "job_id phase source phase_kind ts")
INCIDENTS_CURRENT = _t("incidents_current", "job_id incident_id category cause status severity confidence summary "
                                            "culprit_host culprit_rank culprits victims alerts first_sign detected "
                                            "updated")
CHECKPOINTS = _t("checkpoints", "job_id ts step phase path blocked_ms duration_ms bytes error")
RECOVERY_ACTIONS = _t("recovery_actions", "ts job_id action target status reason details incident_id actor command_id "
                                          "generation duration_ms dry_run verified signature")
RECOVERY_OUTCOMES = _t("recovery_outcomes", "ts job_id incident_id result category detect_s decide_s pause_s diagnose_s "
                                            "restart_s checkpoint_load_s total_s checkpoint_step last_step "
                                            "steps_lost first_step cordoned hosts reason resumed_at verified signature")
RECOVERY_MEMBERS = _t("recovery_members", "ts job_id host state generation last_step step_ms last_step_at repl_buddy "
                      "repl_pushed repl_pushed_bytes repl_staged repl_refused repl_last_step verified")

# the notifier's own tables (notify/migrations)
NOTIFY_DELIVERIES = _t("notify_deliveries", "key receiver receiver_kind group_key seq job_id status reason severity "
                                            "title state attempts http_status error latency_ms created updated")
NOTIFY_SILENCES = _t("notify_silences", "silence_id ts matchers starts_at ends_at created_by reason status")

ALL: tuple[Table, ...] = (JOBS, JOB_RANKS, STEP_TIMINGS, HEARTBEATS, GPU_STATS, NIC_COUNTERS, LOG_LINES, PROCESS_EXITS,
                          ALERT_EVENTS, ALERTS_CURRENT, PHASE_HOST_WINDOWS, JOB_STEP_RUNS, JOB_STEPS, NIC_WINDOWS, HOST_PRESENCE,
                          JOB_CLOCK, HOST_CLOCK, JOB_PHASE_KINDS, INCIDENTS_CURRENT, CHECKPOINTS, RECOVERY_ACTIONS, RECOVERY_OUTCOMES, RECOVERY_MEMBERS,
                          NOTIFY_DELIVERIES, NOTIFY_SILENCES)
ADVICE_EVENTS = _t("advice_events", "job_id ts advice_id nodes current predicted still_scaling curve hot starved "
                                    "data_share reasons scored verified")

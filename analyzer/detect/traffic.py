"""Traffic stall: each NIC's throughput against its own baseline and its peers, and a quiet job as one signal.

Training traffic is periodic, so a NIC's median rate over `traffic.recent_s` is stable
against its median over the `traffic.baseline_s` before that (medians: a short flap or a
spike moves neither; flaps are flap.py's). A drop of at least `traffic.drop_pct` is a
warning only if the NIC also moved at least that much less than its peers over the same
recent window (its mean rate against the mean of the job's other hosts' NICs of that
device; `Peers`): in synchronous training they all move the same bytes per step, and a
NIC's own history alone misleads early in a run (a baseline of a few seconds) or when its
host samples at its own phase of the step (a slow beat, each host at its own point of it).
A job of one host is judged against its own history alone. Zero traffic (<=
`traffic.zero_bps`) for at least `traffic.stall_s` while the host's training processes
run -> critical. NICs whose baseline is below `traffic.min_baseline_bps` (idle management
ports) are not judged. While an alert fires, the reference is the larger of the NIC's own
baseline and the fleet median for that device, so a lasting drop does not become its own
new normal, and half of `traffic.drop_pct` below both keeps it firing.

One quiet job, one signal (quiet.py): buckets where the job's median NIC is quiet are
left out of every NIC's recent and baseline samples, so a pause neither alerts per NIC
nor drags a baseline down. While the job is quiet now, one finding with subject `job`:
severity info (a pause: evaluation, checkpoint, hang, the job stopped; the evidence says
which it looks like) unless a host went quiet at least `traffic.suspect_lead_s` (and at
most `traffic.suspect_max_lead_s`) before the rest — then warning, naming that host
(`host`) as the suspect. NIC alerts already
firing are held through the pause. When at least half of the judged NICs (and
`traffic.fleet_min_nics` or more) drop together (against their own baselines) without the
job being quiet, that is the job too: one job-level finding instead of one per NIC.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from vigil.analyzer.detect.base import AT, EPOCH, RAW_WINDOW, EvalContext, Finding, as_utc, ch_time, median
from vigil.analyzer.detect.heartbeat import running_procs
from vigil.analyzer.detect.quiet import BUCKET_MS, JobQuiet, job_quiet
from vigil.analyzer.settings import TrafficSettings

_NOT_QUIET = f"NOT has({{quiet:Array(UInt64)}}, intDiv(toUnixTimestamp64Milli(ts), {BUCKET_MS}))"
NIC_SQL = f"""
SELECT host, device,
       max(ts) AS last_ts,
       maxIf(ts, tx_bps + rx_bps > {{zero:Float64}}) AS last_nonzero,
       maxIf(ts, tx_bps + rx_bps >= {{active:Float64}}) AS last_active,
       quantileExactIf(0.5)(tx_bps + rx_bps, ts > {{recent:DateTime64(3, 'UTC')}} AND {_NOT_QUIET}) AS recent_bps,
       countIf(ts > {{recent:DateTime64(3, 'UTC')}} AND {_NOT_QUIET}) AS n_recent,
       sumIf(tx_bps + rx_bps, ts > {{recent:DateTime64(3, 'UTC')}} AND {_NOT_QUIET}) AS recent_sum,
       quantileExactIf(0.5)(tx_bps + rx_bps, ts <= {{recent:DateTime64(3, 'UTC')}} AND {_NOT_QUIET}) AS base_bps,
       countIf(ts <= {{recent:DateTime64(3, 'UTC')}} AND {_NOT_QUIET}) AS n_base,
       sumIf(tx_bps + rx_bps, ts <= {{recent:DateTime64(3, 'UTC')}} AND {_NOT_QUIET}) AS base_sum
FROM nic_counters
WHERE job_id = {{job:String}} AND {RAW_WINDOW}
GROUP BY host, device
"""

_STEPS_SINCE_SQL = f"""
SELECT count() AS steps FROM job_steps
WHERE job_id = {{job:String}} AND last_ts > {{since:DateTime64(3, 'UTC')}} + toIntervalSecond(2) AND last_ts <= {AT}
"""


class TrafficDetector:
    name = "traffic_stall"
    false_alarms_per_hour = 0.2  # every NIC against its baseline and its peers every 4 s
    cadence_s = 4.0  # NIC rates over 10 s against 120 s: every other instant (a stop still pages within ~14 s)

    def detect(self, ctx: EvalContext) -> list[Finding]:
        s = ctx.settings.traffic
        q = job_quiet(ctx, s)
        rows = ctx.rows(NIC_SQL, zero=s.zero_bps, active=s.quiet_frac * q.busy_bps, recent=ctx.ago(s.recent_s),
                        lo=ctx.ago_in_run(s.recent_s + s.baseline_s), quiet=sorted(q.quiet))
        running = running_procs(ctx)
        firing = {subj.split(":", 1)[1] for subj in ctx.firing if subj.startswith("traffic_stall:")}
        steps = None
        if q.paused_since is not None:
            steps = int(ctx.rows(_STEPS_SINCE_SQL, since=ch_time(q.paused_since))[0]["steps"])
        return judge(rows, running, s, ctx.at, firing, q, steps_since_quiet=steps)


def judge(rows: Sequence[Mapping[str, Any]], running: Mapping[str, int], s: TrafficSettings, at: datetime,
          firing: set[str] | frozenset[str] = frozenset(), quiet: JobQuiet | None = None,
          steps_since_quiet: int | None = None) -> list[Finding]:
    q = quiet or JobQuiet()
    if q.paused_since is not None:
        # a suspect is only named while the run-up to the pause is in view
        in_view = q.paused_since - at + timedelta(seconds=s.recent_s + s.baseline_s) >= timedelta(seconds=10)
        return [paused(rows, running, s, q, steps_since_quiet, name_suspect=in_view),
                *held(rows, s, firing, q.paused_since)]
    if q.going_quiet:  # the job may be going quiet: nothing new per NIC until that is clear
        return held(rows, s, firing, at)
    fleet: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if int(r["n_base"]) and float(r["base_bps"]) >= s.min_baseline_bps:
            fleet[str(r["device"])].append(float(r["base_bps"]))
    fleet_median = {d: median(v) for d, v in fleet.items()}
    peers = Peers()
    judged: list[tuple[Mapping[str, Any], float, bool]] = []  # (row, reference, firing)
    for r in rows:
        if int(r["n_recent"]) == 0:
            continue  # no fresh samples: a silent host is the heartbeat detector's call
        base = float(r["base_bps"]) if int(r["n_base"]) else 0.0
        was = f"{r['host']}/{r['device']}" in firing
        ref = max(base, fleet_median.get(str(r["device"]), 0.0)) if was else base
        if ref >= s.min_baseline_bps or was:
            judged.append((r, ref, was))
            peers.add(r)
    down: list[Finding] = []  # below their own baseline (or stopped), whatever their peers do
    out: list[Finding] = []  # ... and, unless stopped, below their peers too: the culprits
    for r, ref, was in judged:
        host, device = str(r["host"]), str(r["device"])
        recent = float(r["recent_bps"])
        last, nonzero = as_utc(r["last_ts"]), as_utc(r["last_nonzero"])
        stalled_s = (last - nonzero).total_seconds() if nonzero > EPOCH else None
        evidence: dict[str, Any] = {"host": host, "device": device, "recent_bps": round(recent),
                                    "baseline_bps": round(ref), "recent_s": s.recent_s}
        procs = running.get(host, 1)
        if procs > 0 and ((stalled_s is not None and stalled_s >= s.stall_s) or (stalled_s is None and was)):
            down.append(_stopped(host, device, evidence, nonzero, stalled_s, s, at))
            out.append(down[-1])
            continue
        need = s.drop_pct / 2 if was else s.drop_pct
        drop = (1 - recent / ref) * 100 if ref > 0 else 0.0
        if drop < need:
            continue
        peer = peers.below(r)  # (the other hosts' mean rate, % this NIC is below it); None: no peers
        peer_drop = peer[1] if peer is not None else None
        if peer is not None:
            evidence.update(peer_bps=round(peer[0]), peer_drop_pct=round(peer[1], 1))
        finding = Finding(
            alert="traffic_stall", subject=f"{host}/{device}", host=host, severity="warning", since=at,
            summary=f"{host} {device}: traffic {drop:.0f}% below its baseline" + (
                f" and {peer_drop:.0f}% below the job's other {device} NICs" if peer_drop is not None else ""),
            evidence={**evidence, "drop_pct": round(drop, 1)})
        down.append(finding)
        if peer_drop is None or peer_drop >= need:
            out.append(finding)
    if len(judged) >= s.fleet_min_nics and len(down) * 2 >= len(judged):
        return [job_wide(down, len(judged))]
    return out


SHARE_MIN_SAMPLES = 60
"""A baseline of at least this many samples (a minute at 1 Hz) averages over the step's beat: a NIC's usual
share of its peers' traffic is read from it; a shorter one takes the share as 1 (every NIC moves the same)."""


class Peers:
    """The traffic each device of the job moved over the recent window, per host: a NIC against its peers.

    In synchronous training every NIC of a device (one rail) moves about the same bytes per step,
    so at any instant the job's other hosts' NICs of that device are the reference a NIC is held
    to: their mean rate over the same window (samples pooled), scaled by the NIC's usual share of
    it when that is above 1 (its mean over its baseline against theirs, once the baseline is long
    enough: a pipeline stage that always moves more is held to its own level), against the NIC's
    own mean.
    """

    def __init__(self) -> None:
        self.sums: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)
        self.base_sums: dict[str, float] = defaultdict(float)
        self.base_counts: dict[str, int] = defaultdict(int)
        self.hosts: dict[str, int] = defaultdict(int)

    def add(self, r: Mapping[str, Any]) -> None:
        device = str(r["device"])
        self.sums[device] += float(r["recent_sum"])
        self.counts[device] += int(r["n_recent"])
        self.base_sums[device] += float(r["base_sum"] or 0.0)
        self.base_counts[device] += int(r["n_base"])
        self.hosts[device] += 1

    def share(self, r: Mapping[str, Any]) -> float:
        """The NIC's usual traffic relative to its peers', if it usually moves more (else, and until its baseline
        is long enough, 1.0: a NIC that usually moves less is held to no less than its own baseline already, and
        a lasting drop that has become its baseline still shows against its peers)."""
        device, n, own = str(r["device"]), int(r["n_base"]), float(r["base_sum"] or 0.0)
        others = self.base_counts[device] - n
        if n < SHARE_MIN_SAMPLES or others <= 0:
            return 1.0
        level = (self.base_sums[device] - own) / others
        return max(1.0, own / n / level) if level > 0 else 1.0

    def below(self, r: Mapping[str, Any]) -> tuple[float, float] | None:
        """(what the NIC would move at its usual share of its peers' rate, how many % its mean is below that);
        None without peers (one host)."""
        device, n, own = str(r["device"]), int(r["n_recent"]), float(r["recent_sum"])
        others = self.counts[device] - n
        if self.hosts[device] < 2 or others <= 0 or n <= 0:
            return None
        level = (self.sums[device] - own) / others * self.share(r)
        return level, (1 - own / n / level) * 100 if level > 0 else 0.0


def _stopped(host: str, device: str, evidence: dict[str, Any], nonzero: datetime, stalled_s: float | None,
             s: TrafficSettings, at: datetime) -> Finding:
    since = nonzero + timedelta(seconds=s.stall_s) if stalled_s is not None else at
    zero_for = f"{stalled_s:.0f} s" if stalled_s is not None else "the whole lookback"
    return Finding(alert="traffic_stall", subject=f"{host}/{device}", host=host, severity="critical", since=since,
                   summary=f"{host} {device}: no traffic for {zero_for} while training runs",
                   evidence={**evidence, "zero_s": stalled_s,
                             "last_traffic": nonzero.isoformat() if nonzero > EPOCH else None})


def held(rows: Sequence[Mapping[str, Any]], s: TrafficSettings, firing: set[str] | frozenset[str],
         since: datetime) -> list[Finding]:
    """NIC alerts firing when the job went quiet stay as they were (critical if the NIC stopped before)."""
    out = []
    for r in rows:
        host, device = str(r["host"]), str(r["device"])
        if f"{host}/{device}" not in firing:
            continue
        nonzero = as_utc(r["last_nonzero"])
        stopped = nonzero <= since - timedelta(seconds=s.stall_s)
        out.append(Finding(
            alert="traffic_stall", subject=f"{host}/{device}", host=host, severity="critical" if stopped else "warning",
            since=since, summary=f"{host} {device}: {'no traffic' if stopped else 'traffic low'} since before the job "
                                 "went quiet (held while the job is quiet)",
            evidence={"host": host, "device": device, "held": True,
                      "last_traffic": nonzero.isoformat() if nonzero > EPOCH else None}))
    return out


def paused(rows: Sequence[Mapping[str, Any]], running: Mapping[str, int], s: TrafficSettings, q: JobQuiet,
           steps_since: int | None, name_suspect: bool = True) -> Finding:
    """The job-level finding of a quiet job, naming a host that went quiet before the rest."""
    assert q.paused_since is not None
    onset = q.paused_since
    last: dict[str, datetime] = {}
    for r in rows:
        host = str(r["host"])
        last[host] = max(last.get(host, EPOCH), as_utc(r["last_active"]))
    hosts = sorted(last)
    active = sorted(t for t in last.values() if t > EPOCH)
    typical = active[len(active) // 2] if active else onset  # when most hosts went quiet (sample resolution)
    lead, longest = timedelta(seconds=s.suspect_lead_s), timedelta(seconds=s.suspect_max_lead_s)
    suspects = sorted((t, h) for h, t in last.items() if typical - longest <= t < typical - lead)
    stopped = bool(running) and sum(1 for v in running.values() if v > 0) * 2 < len(running)
    kind = ("stopped" if stopped else "paused, steps continue" if steps_since else
            "paused (evaluation, checkpoint or a hang: no steps)")
    evidence: dict[str, Any] = {
        "quiet_since": onset.isoformat(), "traffic_level": round(q.level, 4), "busy_bps": round(q.busy_bps),
        "hosts": len(hosts), "state": kind, "steps_since_quiet": steps_since,
        "processes_running_hosts": sum(1 for v in running.values() if v > 0)}
    if name_suspect and suspects and len(suspects) <= max(1, len(hosts) // 10):
        first_t, first = suspects[0]
        evidence.update(suspect=first, suspects=[h for _, h in suspects][:8],
                        suspect_quiet_since=first_t.isoformat(),
                        suspect_lead_s=round((typical - first_t).total_seconds(), 1))
        return Finding(alert="traffic_stall", subject="job", host=first, severity="warning", since=onset,
                       summary=f"the whole job went quiet ({kind}); {first} went quiet "
                               f"{(typical - first_t).total_seconds():.0f} s before the rest: the suspect",
                       evidence=evidence)
    return Finding(alert="traffic_stall", subject="job", host="*", severity="info", since=onset,
                   summary=f"the whole job is quiet: traffic at {q.level:.1%} of its busy level on most NICs ({kind})",
                   evidence=evidence)


def job_wide(down: Sequence[Finding], judged: int) -> Finding:
    stopped = sorted(f.subject for f in down if f.severity == "critical")
    return Finding(
        alert="traffic_stall", subject="job", host="*", severity="info", since=min(f.since for f in down),
        summary=f"traffic down on {len(down)} of {judged} NICs at once ({len(stopped)} stopped): "
                f"the whole job slowed or paused",
        evidence={"nics_down": len(down), "nics_judged": judged, "nics_stopped": len(stopped),
                  "examples": sorted(f.subject for f in down)[:8]})

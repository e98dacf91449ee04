"""The steps of a recovery, each re-entrant: run it again on the same state and it takes up where
the log says it is, never doing twice what already happened.

Every step is one umbrella `recovery` event pair `(step, job)`: `started`, then `succeeded`,
`failed` or `skipped`; what it does to hosts is recorded per host (`(cordon, host)`) or per
command (`command_id`, acknowledged by the agent). A handler returns True once its step has
ended. Commands carry stable ids (`<case>/pause/<host>`, `<job>/g<N>/start/<host>`), so one
re-sent after a controller restart is recognised by the agent and not executed again; a
cordon re-done is idempotent at the backend. A GPU quarantine (`(quarantine, host)`, `quarantines`) is done by
the cordon step in place of its host's cordon; the next start commands carry each host's quarantined GPUs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from vigil.contract import Alert, Command, DiagnoseParams, Event, RecoveryAction, World
from vigil.contract.xid import XidAction
from vigil.recovery.backends.base import CordonInfo
from vigil.recovery.controller.effects import Effects
from vigil.recovery.controller.fleetmemory import repeat_offenders
from vigil.recovery.controller.plan import alive, cordon_allowance, job_hosts, plan_world
from vigil.recovery.controller.state import Case, ClusterState, Step
from vigil.recovery.errors import BackendError
from vigil.recovery.settings import RecoverySettings

log = logging.getLogger(__name__)
ACTOR = "controller"
SETTLED = ("waiting", "exited", "cordoned", "left")


@dataclass(kw_only=True)
class Ctx:
    state: ClusterState
    settings: RecoverySettings
    fx: Effects
    now: datetime
    epoch: int = 0  # the lease epoch this leader holds (fencing): on every command and step it publishes
    _cordoned: dict[str, CordonInfo] | None = field(default=None, init=False)

    def publish(self, events: list[Event]) -> None:
        self.fx.publish(events)
        self.state.apply(events)

    def cordoned(self) -> dict[str, CordonInfo]:
        if self._cordoned is None:
            self._cordoned = self.fx.backend.cordoned()
        return self._cordoned

    def act(self, case: Case, action: str, target: str, status: str, *, reason: str = "",
            details: dict[str, Any] | None = None, generation: int | None = None, command_id: str = "",
            started_at: datetime | None = None, host: str | None = None) -> RecoveryAction:
        duration = None if started_at is None else round((self.now - started_at).total_seconds() * 1000, 1)
        return RecoveryAction(
            job_id=case.job_id, host=host or "controller", ts=self.now, action=action,  # type: ignore[arg-type]
            target=target, status=status, reason=reason[:4096], incident_id=case.case_id,  # type: ignore[arg-type]
            command_id=command_id, actor=ACTOR, generation=generation, started_at=started_at,
            duration_ms=max(0.0, duration) if duration is not None else None, details=details or {},
            dry_run=case.dry_run, epoch=self.epoch)

    def command(self, case: Case, host: str, action: str, command_id: str, *, generation: int = 0,
                reason: str = "", world: World | None = None, diagnose: DiagnoseParams | None = None,
                timeout_s: float = 60.0) -> Command:
        return Command(job_id=case.job_id, host=host, ts=self.now, command_id=command_id, action=action,  # type: ignore[arg-type]
                       incident_id=case.case_id, reason=reason[:2048], generation=generation, world=world,
                       diagnose=diagnose, timeout_s=timeout_s, epoch=self.epoch)

    def since(self, at: datetime | None) -> float:
        return 0.0 if at is None else (self.now - at).total_seconds()


def umbrella(case: Case, name: str) -> Step | None:
    return case.step(name, case.job_id)


def begin(ctx: Ctx, case: Case, name: str, details: dict[str, Any], extra: list[Event] | None = None,
           generation: int | None = None) -> None:
    ctx.publish([ctx.act(case, name, case.job_id, "started", details=details, generation=generation),
                 *(extra or [])])


def end(ctx: Ctx, case: Case, name: str, status: str, reason: str = "", details: dict[str, Any] | None = None,
         generation: int | None = None) -> bool:
    step = umbrella(case, name)
    ctx.publish([ctx.act(case, name, case.job_id, status, reason=reason, details=details, generation=generation,
                         started_at=step.started_at if step else None)])
    return True


# ---- approve -----------------------------------------------------------------------------------
def approve(ctx: Ctx, case: Case) -> bool:
    step = umbrella(case, "approve")
    if step is None or step.planned_at is None:
        ctx.publish([ctx.act(case, "approve", case.job_id, "planned",
                             reason=f"mode manual: `vigil recovery approve {short_id(case.case_id)}` to go on")])
    return False  # `vigil recovery approve` publishes (approve, job) succeeded


# ---- dump ----------------------------------------------------------------------------------------
def dump(ctx: Ctx, case: Case) -> bool:
    job = ctx.state.job(case.job_id)
    step = umbrella(case, "dump")
    if step is None or step.started_at is None:
        hosts = [h for h, m in job.members.items() if m.state in ("starting", "training")
                 and alive(m, ctx.now, ctx.settings.member_stale_s)]
        cmds = [ctx.command(case, h, "dump", f"{case.case_id}/dump/{h}", generation=job.generation,
                            reason="record the training processes before stopping them") for h in hosts]
        begin(ctx, case, "dump", {"hosts": hosts}, list(cmds))
        return False
    hosts = list(step.started_details.get("hosts", []))
    acked = [h for h in hosts if _acked(ctx, f"{case.case_id}/dump/{h}", h)]
    if len(acked) == len(hosts) or ctx.since(step.started_at) >= ctx.settings.dump_timeout_s:
        return end(ctx, case, "dump", "succeeded", details={"dumped": acked,
                                                              "unanswered": sorted(set(hosts) - set(acked))})
    return False


def _acked(ctx: Ctx, command_id: str, host: str) -> bool:
    a = ctx.state.ack(command_id, host)
    return a is not None and a.status in ("succeeded", "failed", "skipped")


# ---- pause ---------------------------------------------------------------------------------------
def pause(ctx: Ctx, case: Case) -> bool:
    job = ctx.state.job(case.job_id)
    step = umbrella(case, "pause")
    if step is None or step.started_at is None:
        hosts = sorted(set(job.world) | {h for h, m in job.members.items()
                                         if m.state in ("starting", "training", "stopping")})
        last = {h: m.last_step for h, m in job.members.items() if m.last_step is not None
                and m.generation == job.generation}
        cmds = [ctx.command(case, h, "stop", f"{case.case_id}/pause/{h}", generation=job.generation,
                            reason=f"pause: {case.details.get('summary', '')}"[:2048],
                            timeout_s=ctx.settings.pause_timeout_s) for h in hosts]
        begin(ctx, case, "pause", {"hosts": hosts, "generation": job.generation, "last_steps": last},
               list(cmds), generation=job.generation)
        return False
    hosts = list(step.started_details.get("hosts", []))
    assert step.started_at is not None
    settled = []
    for h in hosts:
        m = job.members.get(h)
        if _acked(ctx, f"{case.case_id}/pause/{h}", h) or m is None or (
                m.state in SETTLED and m.ts >= step.started_at) or not alive(m, ctx.now, ctx.settings.member_stale_s):
            settled.append(h)
    if len(settled) == len(hosts) or ctx.since(step.started_at) >= ctx.settings.pause_timeout_s:
        last = {h: m.last_step for h, m in job.members.items() if m.last_step is not None
                and m.generation == job.generation}  # the stopped ranks' last steps have arrived by now
        return end(ctx, case, "pause", "succeeded", generation=job.generation,
                    details={"stopped": settled, "unresponsive": sorted(set(hosts) - set(settled)),
                             "last_steps": last})
    return False


# ---- cordon --------------------------------------------------------------------------------------
def condemned(ctx: Ctx, case: Case) -> list[str]:
    """Hosts this case takes out: strong hardware culprits (without diagnostics, every hardware culprit but
    the victims: weak ones only an exit named, beside a strong one — a peer that exited because the
    culprit's GPU fell off), then suspects whose faults repeat (`fleetmemory`), then the diagnostics' faulty hosts, then slow ones (`policy.cordon_slow`)."""
    out: list[str] = []
    if case.cls == "hardware":
        culprits = case.details.get("culprits", [])
        strong = any(c.get("strong") for c in culprits)
        diagnosed = "diagnose" in case.plan
        spared = quarantines(ctx, case)  # a bad GPU goes, not its host
        out += [str(c["host"]) for c in culprits if str(c["host"]) not in spared
                and (c.get("strong") or not (diagnosed or (strong and c.get("from_exit"))))]
    out += repeat_offenders(ctx.state, case, ctx.settings.policy)  # fleet memory: whatever a self-test says
    verdicts = verdicts_of(case)
    out += sorted(h for h, v in verdicts.items() if v == "faulty")
    if ctx.settings.policy.cordon_slow:
        out += sorted(h for h, v in verdicts.items() if v == "slow")
    return list(dict.fromkeys(out))


def quarantines(ctx: Ctx, case: Case) -> dict[str, list[int]]:
    """GPUs this case takes out instead of their hosts: a hardware case's strong culprit whose attested fault the
    Xid catalog answers with a GPU reset (`reset_gpu`) and names its GPUs, where the policy allows it and the node
    backend can quarantine single GPUs (no backend resets a GPU)."""
    if case.cls != "hardware" or not ctx.settings.policy.quarantine_gpus:
        return {}
    out: dict[str, list[int]] = {}
    for c in case.details.get("culprits", []):
        gpus = [g for g in c.get("gpus") or [] if type(g) is int and 0 <= g < 64]
        if c.get("strong") and c.get("action") == XidAction.RESET_GPU.value and gpus:
            out[str(c["host"])] = sorted(set(gpus))
    return out if out and getattr(ctx.fx.backend, "gpu_quarantine", False) else {}


def verdicts_of(case: Case) -> dict[str, str]:
    step = umbrella(case, "diagnose")
    if step is None or not step.ended:
        return {}
    return {str(h): str(v.get("verdict")) for h, v in step.details.get("verdicts", {}).items()}


def cordon(ctx: Ctx, case: Case) -> bool:
    job = ctx.state.job(case.job_id)
    step = umbrella(case, "cordon")
    if step is None or step.started_at is None:
        already, ours = set(ctx.cordoned()), job_hosts(job)
        outside = [h for h in condemned(ctx, case) if h not in ours]  # a claim about a host the job never ran on
        targets = [h for h in condemned(ctx, case) if h not in already and h in ours]
        allowed, why = cordon_allowance(ctx.state, job, ctx.settings.breaker, ctx.now, already)
        if outside:
            _page_outside(ctx, case, outside)
        gpus = {h: g for h, g in quarantines(ctx, case).items() if h in ours and h not in already}
        begin(ctx, case, "cordon", {"targets": targets, "allowed": allowed, "limit": why, "outside_job": outside,
                                     "already": sorted(already & set(condemned(ctx, case))), "quarantine": gpus})
        step = umbrella(case, "cordon")
        assert step is not None
    targets = list(step.started_details.get("targets", []))
    allowed = int(step.started_details.get("allowed", 0))
    done, failed = [], []
    gpus_out: dict[str, list[int]] = {}
    for host, gpus in dict(step.started_details.get("quarantine", {})).items():
        try:
            if _quarantine_host(ctx, case, str(host), [int(g) for g in gpus]):
                gpus_out[str(host)] = list(gpus)
        except BackendError as exc:
            failed.append(f"{host} GPUs {list(gpus)}: {exc}")
    for host in targets[:allowed]:
        try:
            if _cordon_host(ctx, case, host):
                done.append(host)
        except BackendError as exc:
            failed.append(f"{host}: {exc}")
    if failed:
        return end(ctx, case, "cordon", "failed", reason="; ".join(failed),
                    details={"cordoned": done, "quarantined": gpus_out})
    if len(targets) > allowed:
        return end(ctx, case, "cordon", "failed", details={"cordoned": done, "refused": targets[allowed:],
                                                            "breaker": True},
                    reason=f"circuit breaker: {len(targets)} hosts to cordon, {allowed} allowed "
                           f"({step.started_details.get('limit', '')}); stopping and paging")
    return end(ctx, case, "cordon", "succeeded", details={"cordoned": done, "quarantined": gpus_out},
                reason="nothing to cordon" if not targets and not gpus_out else "")


def _page_outside(ctx: Ctx, case: Case, hosts: list[str]) -> None:
    """A culprit outside the job's hosts is paged, never cordoned: whatever named it (a log line the job
    printed, an alert on it) is the job's claim about a machine it does not run on."""
    why = (f"{case.job_id}: recovery {short_id(case.case_id)} names {', '.join(hosts)[:500]}, not a host of the "
           f"job: not cordoned; check who named it ({case.details.get('summary', '')})")[:2048]
    ctx.publish([Alert(job_id=case.job_id, host="controller", ts=ctx.now, alert="recovery", subject=case.job_id,
                       fingerprint=f"{case.job_id}/recovery/{short_id(case.case_id)}/outside", status="firing",
                       severity="critical", summary=why, first_seen=ctx.now, last_seen=ctx.now,
                       evidence={"incident_id": case.case_id, "outside_job": hosts[:64], "class": case.cls})])


def _cordon_host(ctx: Ctx, case: Case, host: str) -> bool:
    step = case.step("cordon", host)
    if step is not None and step.ended:
        return step.status == "succeeded"
    redo = step is not None and step.started_at is not None  # started in a previous life of the controller
    why = f"{case.cls} fault: {case.details.get('summary', '')}"[:1000]
    if not redo:
        ctx.publish([ctx.act(case, "cordon", host, "started", reason=why, host=host)])
        step = case.step("cordon", host)
    started_at = step.started_at if step is not None else ctx.now
    change = ctx.fx.backend.cordon(host, reason=why, incident_id=case.case_id, actor=ACTOR)
    evicted = ctx.fx.backend.evict(host, job_id=case.job_id, reason=why, incident_id=case.case_id)
    ctx._cordoned = None
    ctx.publish([ctx.act(case, "cordon", host, "succeeded", reason=change.detail, started_at=started_at, host=host,
                         details={"changed": change.changed or redo, "backend": ctx.fx.backend.name,
                                  "evict": evicted.detail, **change.data})])
    return True


def _quarantine_host(ctx: Ctx, case: Case, host: str, gpus: list[int]) -> bool:
    """`(quarantine, host)`: the backend takes `gpus` of `host` out; the host stays in the job's next world."""
    step = case.step("quarantine", host)
    if step is not None and step.ended:
        return step.status == "succeeded"
    redo = step is not None and step.started_at is not None
    why = f"GPU(s) {', '.join(map(str, gpus))}: {case.details.get('summary', '')}"[:1000]
    if not redo:
        ctx.publish([ctx.act(case, "quarantine", host, "started", reason=why, host=host, details={"gpus": gpus})])
        step = case.step("quarantine", host)
    started_at = step.started_at if step is not None else ctx.now
    change = ctx.fx.backend.quarantine(host, tuple(gpus), reason=why, incident_id=case.case_id, actor=ACTOR)
    ctx._cordoned = None
    ctx.publish([ctx.act(case, "quarantine", host, "succeeded", reason=change.detail, started_at=started_at,
                         host=host, details={"changed": change.changed or redo, "backend": ctx.fx.backend.name,
                                             **change.data, "gpus": gpus})])
    return True


def quarantined_gpus(ctx: Ctx) -> dict[str, list[int]]:
    """Each host's GPUs the backend holds quarantined, for the start commands ({} when it cannot tell)."""
    try:
        return {h: list(q.gpus) for h, q in ctx.fx.backend.quarantined().items()}
    except BackendError as exc:
        log.warning("the node backend's quarantined GPUs: %s", exc)
        return {}


# ---- restart / start -----------------------------------------------------------------------------
def restart(ctx: Ctx, case: Case, name: str = "restart") -> bool:
    job = ctx.state.job(case.job_id)
    step = umbrella(case, name)
    if step is None or step.started_at is None:
        exclude = set(ctx.cordoned()) | set(condemned(ctx, case))
        states = ("waiting",) if name == "start" else ("waiting", "exited")
        plan = plan_world(job, exclude=exclude, now=ctx.now, stale_s=ctx.settings.member_stale_s, states=states)
        if isinstance(plan, str):
            if step is None or step.planned_at is None:
                ctx.publish([ctx.act(case, name, case.job_id, "planned", reason=f"waiting for hosts: {plan}")])
            elif name == "restart" and ctx.since(step.planned_at) >= ctx.settings.restart_wait_s:
                return end(ctx, case, name, "failed", reason=f"not enough healthy hosts: {plan}")
            return False
        gen = job.generation + 1
        cmds: list[Event] = []
        gpus_out = quarantined_gpus(ctx)
        bound = restore_bound(case)
        for rank, host in enumerate(plan.hosts):
            world = World(generation=gen, hosts=plan.hosts, node_rank=rank, master_addr=plan.master_addr,
                          master_port=plan.master_port, quarantined_gpus=gpus_out.get(host, []),
                          restore_max_step=bound)
            cmds.append(ctx.command(case, host, "start", start_id(job.job_id, gen, host), generation=gen,
                                    world=world, reason=f"{name} on {len(plan.hosts)} hosts"))
        begin(ctx, case, name, {"generation": gen, "hosts": plan.hosts, "master_addr": plan.master_addr,
                                 "master_port": plan.master_port, "excluded": sorted(exclude),
                                 "quarantined_gpus": {h: g for h, g in gpus_out.items() if h in plan.hosts},
                                 **({} if bound is None else {"restore_max_step": bound})},
               cmds, generation=gen)
        return False
    gen = int(step.started_details.get("generation", job.generation))
    hosts = list(step.started_details.get("hosts", []))
    if step.started_at is not None and ctx.state.commands.get(start_id(job.job_id, gen, hosts[0])) is None:
        _resend_starts(ctx, case, step, gen, hosts)  # started, then the controller died before sending
    ours = [m for m in (job.members.get(h) for h in hosts) if m is not None and m.generation == gen]
    # came up: trained a step in this generation, even if it has ended since (steps can outrun the
    # controller's turn: a crash right after is a failure of its own, a short remainder a finish,
    # `Engine._finish`), or exited 0 without a step read
    up = [m for m in ours if m.first_step is not None and m.state in ("training", "exited")]
    done = [m for m in ours if m.first_step is None and m.state == "exited" and m.exit_code == 0 and not m.signal]
    if len(up) + len(done) == len(hosts):
        first = min(up, key=lambda m: m.first_step or 0) if up else None
        at = [m.first_step_at for m in up if m.first_step_at]
        return end(ctx, case, name, "succeeded", generation=gen, details={
            "hosts": hosts, "first_step": first.first_step if first else None,
            "first_step_at": (min(at) if at else ctx.now).isoformat(),
            "ended": sorted(m.host for m in (*up, *done) if m.state == "exited")})
    came = {m.host for m in (*up, *done)}
    gone = [m.host for m in ours if m.state in ("exited", "left") and m.host not in came]
    refused = [h for h in hosts if (a := ctx.state.ack(start_id(job.job_id, gen, h), h)) is not None
               and a.status in ("failed", "skipped")]
    if gone or refused:
        return end(ctx, case, name, "failed", generation=gen,
                    reason=f"generation {gen} did not come up: " + ", ".join(
                        [f"{h} exited" for h in gone] + [f"{h} refused" for h in refused]))
    if ctx.since(step.started_at) >= ctx.settings.restart_timeout_s:
        waiting = [h for h in hosts if h not in came]
        return end(ctx, case, name, "failed", generation=gen,
                    reason=f"no first step from {', '.join(waiting)} within {ctx.settings.restart_timeout_s:g} s")
    return False


def _resend_starts(ctx: Ctx, case: Case, step: Step, gen: int, hosts: list[str]) -> None:
    d = step.started_details
    ctx.publish([ctx.command(case, h, "start", start_id(case.job_id, gen, h), generation=gen,
                             reason="restart (re-sent)",
                             world=World(generation=gen, hosts=hosts, node_rank=r, master_addr=str(d["master_addr"]),
                                         master_port=int(d["master_port"]),
                                         quarantined_gpus=list(dict(d.get("quarantined_gpus") or {}).get(h, [])),
                                         restore_max_step=restore_bound(case)))
                 for r, h in enumerate(hosts)])


def restore_bound(case: Case) -> int | None:
    """The newest step a rollback's restart may restore (`controller.replay`: an SDC case and its follow-up)."""
    bound = dict(case.details.get("rollback") or {}).get("restore_max_step")
    return None if bound is None else int(bound)


def start_id(job_id: str, generation: int, host: str) -> str:
    return f"{job_id}/g{generation}/start/{host}"


# ---- halt and page -------------------------------------------------------------------------------
def halt(ctx: Ctx, case: Case) -> bool:
    reason = str(case.details.get("halt_reason", "")) or "stopped: needs a human"
    page(ctx, case, reason)
    return end(ctx, case, "halt", "succeeded", reason=reason)


def page(ctx: Ctx, case: Case, reason: str) -> None:
    """Ask a human, once per case: a critical `recovery` alert (the notifier routes it) and the action."""
    held = case.step("page", case.job_id)
    if held is not None and held.ended:
        return
    summary = f"{case.job_id}: recovery needs a human: {reason}"[:2048]
    alert = Alert(job_id=case.job_id, host="controller", ts=ctx.now, fingerprint=f"{case.job_id}/recovery/"
                  f"{short_id(case.case_id)}", alert="recovery", subject=case.job_id, status="firing",
                  severity="critical", summary=summary, first_seen=ctx.now, last_seen=ctx.now,
                  evidence={"incident_id": case.case_id, "reason": reason[:2000], "class": case.cls})
    ctx.publish([alert, ctx.act(case, "page", case.job_id, "succeeded", reason=summary,
                                details={"alert": alert.fingerprint})])


def short_id(case_id: str) -> str:
    import hashlib

    return hashlib.sha1(case_id.encode()).hexdigest()[:8]

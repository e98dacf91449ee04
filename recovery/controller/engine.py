"""One turn of the controller: triggers -> cases -> the next step of each open case.

`Engine.tick(now)`:

1. **Triggers** (`controller.triggers`) of a job with no open case are gathered for
   `policy.settle_s`, then open one case (the strongest class, every culprit; the others are
   recorded as merged into it). A trigger from before the job's current generation started is
   history (skipped, with the reason) unless it is a hardware verdict on the failure the latest
   recovery took as weaker (`_escalates`: a hardware incident arriving after its exit was
   recovered as software; a late hang or unknown cause is the crash's echo, skipped); one for a
   halted job too. A `prompt` trigger (an exit its agent
   attested) opens its case at once. While a case is open and has not begun to cordon or
   restart, a trigger on the same failure (current generation, first sign within
   `policy.escalate_window_s`, a culprit in the world) **refines** it (`_refine`): a second `plan`
   event with the stronger class, its steps (the steps already taken stand) and every culprit,
   so the analyzer's verdict on a crash the agent reported lands while the pause runs. Other
   triggers wait: those still current when the case ends open the next case.
2. **Starts**: a job whose agents all wait and that runs nothing starts (`start`) once it has
   `nodes_max` eligible hosts or `nodes_min` for `form_wait_s`; in auto mode a job running on
   fewer hosts than it accepts scales up when an eligible host waited `scale_up_wait_s`. Every plan
   cites the job's latest resource advice (`controller.cite`): recommended nodes against the plan's.
   `vigil recovery approve` on a halted case resumes its job (`restart`).
3. **Finish**: a job whose command exited 0 on every host of its current world, with no
   case open, is finished: the controller records it once (`recovery` action `finish`) and
   sends `finish` to every agent of the job (spares and cordoned hosts included; one that
   joins later gets it too); nothing starts or recovers for that run again. The finish ends the
   run (generation) it names: agents of the job id that wait after it, in no generation
   (`state.new_run`), are a new run, started as a new generation once all of them wait.
4. **Steps**: every open case runs its plan in order (`controller.steps`,
   `controller.diagnose`); a step that waits ends the turn for that case. A case ends with its
   `outcome` (resumed, halted, failed, dry_run); a refused cordon (circuit breaker), a restart
   that found too few hosts or no first step, or a halt (crash loop) pages a human once and
   halts the job until `vigil recovery approve`; a restart whose new generation crashed at once
   ends `failed` and the crash is the next case. A restart that finds no host because the job's
   allocation is gone submits the job afresh (`controller.relaunch`): outcome `relaunched`.

A case opened in dry-run mode publishes its plan and every step as `planned` and ends at once;
in manual mode its first step waits for `vigil recovery approve`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from vigil.contract import Command, RecoveryAction
from vigil.recovery.controller import relaunch, replay, requests
from vigil.recovery.controller import steps as st
from vigil.recovery.controller.admission import Admission
from vigil.recovery.controller.cite import citation, phrase
from vigil.recovery.controller.diagnose import diagnose
from vigil.recovery.controller.effects import Effects
from vigil.recovery.controller.goodput import outcome
from vigil.recovery.controller.plan import (
    explicit_culprit,
    node_range,
    plan_world,
    restarts_without_progress,
    steps_for,
)
from vigil.recovery.controller.state import Case, ClusterState, Job, new_run
from vigil.recovery.controller.triggers import (
    SDC_CLASS,
    STRENGTH,
    Culprit,
    Trigger,
    since,
    strongest,
    triggers,
)
from vigil.recovery.settings import RecoverySettings

log = logging.getLogger(__name__)
RUNNING = ("starting", "training", "stopping", "diagnosing")

HANDLERS: dict[str, Callable[[st.Ctx, Case], bool]] = {
    "approve": st.approve, "dump": st.dump, "pause": st.pause, "diagnose": diagnose, "cordon": st.cordon,
    "restart": relaunch.restart, "replay": replay.replay, "halt": st.halt, "start": lambda ctx, case: st.restart(ctx, case, "start"),
}


@dataclass(kw_only=True)
class Engine:
    state: ClusterState
    settings: RecoverySettings
    fx: Effects
    last_error: str = ""
    turns: int = 0
    epoch: int = 0  # the lease epoch of this leader: every command and step carries it (fencing)
    admission: Admission = field(init=False)

    def __post_init__(self) -> None:
        self.admission = Admission(per_minute=self.settings.requests_per_minute, burst=self.settings.requests_burst)

    def tick(self, now: datetime) -> None:
        ctx = st.Ctx(state=self.state, settings=self.settings, fx=self.fx, now=now, epoch=self.epoch)
        self.turns += 1
        for part in (self._requests, self._finish, self._triggers, self._starts, self._cases):
            try:
                part(ctx)
            except Exception as exc:  # retried next turn: every part is re-entrant
                self.last_error = f"{part.__name__}: {type(exc).__name__}: {exc}"[:500]
                log.exception("recovery turn failed in %s", part.__name__)

    # ---- 0. operator requests (the dashboard's buttons) --------------------------------------------
    def _requests(self, ctx: st.Ctx) -> None:
        for req in self.state.pending_requests():
            refusal = self.admission.check(req, self.state, ctx.now)
            if refusal is not None:
                log.warning("operator request %s (%s %s of job %s by %s) refused: %s", req.command_id, req.action,
                            req.target, req.job_id, req.actor, refusal.value)
                ctx.publish([requests.refuse(req, refusal, ctx.now, epoch=ctx.epoch)])
                continue
            ctx.publish([requests.execute(ctx.fx.backend, req, ctx.now, dry_run=self.settings.mode == "dry-run",
                                          epoch=ctx.epoch)])

    # ---- 1. triggers -------------------------------------------------------------------------------
    def _triggers(self, ctx: st.Ctx) -> None:
        by_job: dict[str, list[Trigger]] = {}
        for t in triggers(self.state, self.settings.policy, ctx.now):
            by_job.setdefault(t.job_id, []).append(t)
        for job_id, group in by_job.items():
            job = self.state.job(job_id)
            if job.finished is not None:
                continue
            case = self._open_case(job)
            if case is not None:
                self._refine(ctx, job, case, group)
                continue
            stale = [t for t in group if job.world_started_at is not None and t.first_sign < job.world_started_at
                     and not self._escalates(job, t)]
            halted = halted_by(self.state, job)
            for t in stale:
                self._skip(ctx, t, f"from before generation {job.generation} started: already recovered")
            group = [t for t in group if t not in stale]
            if halted is not None:
                for t in group:
                    self._skip(ctx, t, f"job halted by {halted.case_id}: needs a human "
                               f"(`vigil recovery approve {st.short_id(halted.case_id)}` resumes it)")
                continue
            waited = (ctx.now - min(t.detected for t in group)).total_seconds() if group else 0.0
            if group and (any(t.prompt for t in group) or waited >= self.settings.policy.settle_s):
                top = strongest(group)
                self._open(ctx, job, top, merged=[t.trigger_id for t in group if t.trigger_id != top.trigger_id])

    def _refine(self, ctx: st.Ctx, job: Job, case: Case, group: list[Trigger]) -> None:
        """Fold the triggers on `case`'s failure into it before it cordons or restarts (see the docstring)."""
        first = case.details.get("first_sign")
        if case.cls not in STRENGTH or case.dry_run or job.world_started_at is None or not isinstance(first, str):
            return
        if any((s := st.umbrella(case, n)) is not None and s.started_at is not None for n in ("cordon", "restart")):
            return
        window, began = self.settings.policy.escalate_window_s, datetime.fromisoformat(first)
        near = [t for t in group if t.first_sign >= job.world_started_at
                and abs((t.first_sign - began).total_seconds()) <= window
                and (not t.culprits or any(c.host in job.world for c in t.culprits))]
        if not near:
            return
        top = max(near, key=lambda t: STRENGTH[t.cls])
        stronger = STRENGTH[top.cls] > STRENGTH[case.cls]
        culprits = {str(c["host"]): dict(c) for c in case.details.get("culprits", [])}
        for t in sorted(near, key=lambda t: -STRENGTH[t.cls]):
            for c in t.culprits:
                held = culprits.get(c.host)
                exit_only = c.from_exit and (held is None or bool(held.get("from_exit")))
                if held is None or (c.strong and not held.get("strong")) or (held.get("rank") is None and c.rank is not None):
                    culprits[c.host] = {"host": c.host, "strong": c.strong or bool(held and held.get("strong")),
                                        "rank": c.rank, "message": c.message, "from_exit": exit_only,
                                        **_gpu_fault(c)}
                else:
                    held["from_exit"] = exit_only
        plan = case.plan
        if stronger:
            paused = (p := st.umbrella(case, "pause")) is not None and p.started_at is not None
            diagnosing = (d := st.umbrella(case, "diagnose")) is not None and d.started_at is not None
            explicit = explicit_culprit(top.cls, culprits.values()) and not diagnosing  # a started round ends
            plan = [s for s in steps_for(top.cls, self.settings.mode, self.settings.policy, explicit=explicit)
                    if not (s == "dump" and paused)]  # a dump after the pause finds nothing to dump
        ids = [t.trigger_id for t in near]
        details = {**case.details, "steps": plan, "culprits": list(culprits.values()),
                   "merged": [*case.details.get("merged", []), *ids], "refined_by": ids,
                   "fault_classes": sorted({*case.details.get("fault_classes", []), *(c for t in near
                                                                                      for c in t.fault_classes)})}
        if stronger:
            details.update({"class": top.cls, "cause": top.cause, "category": top.category,
                            "summary": top.summary[:1000]})
        reason = (f"refined to {top.cls} by {top.source} {top.trigger_id}: {top.summary[:300]}" if stronger
                  else f"{top.source} {top.trigger_id} on the same failure: culprits {', '.join(culprits)}")
        ctx.publish([ctx.act(case, "plan", job.job_id, "planned", details=details, reason=reason)])
        log.info("recovery %s of %s %s", case.case_id, job.job_id, reason)

    def _escalates(self, job: Job, t: Trigger) -> bool:
        """`t` is a stronger verdict on the failure the job's latest (finished) recovery took as weaker: an
        incident naming a hardware culprit that arrived after the exit it explains had been recovered as a
        software fault. It is recovered again, as its own class; any other trigger from before the current
        generation is history."""
        latest = self.state.cases.get(job.cases[-1]) if job.cases else None
        if t.cls != "hardware" or latest is None or latest.open or latest.cls not in STRENGTH \
                or STRENGTH[t.cls] <= STRENGTH[latest.cls]:
            return False  # only a hardware culprit is worth a second restart: a late hang is the crash's echo
        first = latest.details.get("first_sign")
        if not isinstance(first, str):
            return False
        near = abs((t.first_sign - datetime.fromisoformat(first)).total_seconds()) <= self.settings.policy.escalate_window_s
        return near and any(c.host in job.world for c in t.culprits)

    def _skip(self, ctx: st.Ctx, t: Trigger, reason: str) -> None:
        case = Case(case_id=t.trigger_id, job_id=t.job_id)
        ctx.publish([ctx.act(case, "plan", t.job_id, "skipped", reason=reason,
                             details={"source": t.source, "category": t.category, "summary": t.summary[:500]})])

    def _rollbacks(self, job_id: str, now: datetime) -> int:
        """The job's SDC rollbacks opened within `policy.repeat_window_s` before `now`."""
        since = now - timedelta(seconds=self.settings.policy.repeat_window_s)
        return sum(1 for c in self.state.cases.values() if c.job_id == job_id and c.details.get("rollback")
                   and "replay" in c.plan and c.opened_at is not None and c.opened_at >= since)

    def _open(self, ctx: st.Ctx, job: Job, t: Trigger, *, merged: list[str] | None = None,
              cls: str | None = None, hosts: int | None = None, rollback: dict[str, Any] | None = None) -> None:
        policy, mode = self.settings.policy, self.settings.mode
        cls = cls or t.cls
        loops = restarts_without_progress(self.state, job) if cls == "software" else 0
        crash_loop = loops >= policy.crash_loops
        explicit = explicit_culprit(cls, [{"strong": c.strong, "from_exit": c.from_exit} for c in t.culprits])
        plan = steps_for(cls, "auto" if cls in ("start", "resume") else mode, policy, crash_loop=crash_loop,
                         explicit=explicit)
        if cls == "resume":
            plan = ["restart"]
        sdc_case = rollback is None and t.category == replay.SDC and policy.sdc_rollback
        if sdc_case and (rollback := replay.rollback_of(self.state.incidents.get(t.trigger_id))) is not None:
            plan = [*(["approve"] if mode == "manual" else []), "pause", "restart", "replay"]  # the rollback
            cls = SDC_CLASS  # its own class, not the `other_as` its cause (unknown) would give it
            if self._rollbacks(job.job_id, ctx.now) >= policy.sdc_rollbacks:
                plan = ["pause", "halt"]  # rolled back too often: a human decides
        dry = mode == "dry-run" and cls not in ("start", "resume")
        details: dict[str, Any] = {
            "class": cls, "steps": plan, "mode": mode, "dry_run": dry, "source": t.source, "category": t.category,
            "cause": t.cause, "summary": t.summary[:1000], "first_sign": t.first_sign.isoformat(),
            "detected": t.detected.isoformat(), "generation": job.generation, "merged": merged or [],
            "culprits": [{"host": c.host, "strong": c.strong, "rank": c.rank, "message": c.message,
                          "from_exit": c.from_exit, **_gpu_fault(c)} for c in t.culprits],
            "fault_classes": list(t.fault_classes)}
        if rollback is not None:
            details["rollback"] = rollback
            details["fault_classes"] = sorted({*t.fault_classes, replay.FAULT_CLASS})  # fleet memory's class sdc
        cited = citation(job.advice, hosts)
        reason = f"{cls}: {t.summary[:500]}"
        if cited is not None:  # the advisor's latest word on the node count, cited (not obeyed)
            details["advice"] = cited
            reason += f"; {phrase(cited)}"
        if crash_loop:
            details["halt_reason"] = (f"{loops} restarts without checkpoint progress (limit {policy.crash_loops}): "
                                      f"{t.summary[:300]}")
        case = Case(case_id=t.trigger_id, job_id=job.job_id, details=details)
        ctx.publish([ctx.act(case, "plan", job.job_id, "planned", details=details, reason=reason)])
        log.info("recovery %s (%s) for %s: %s", t.trigger_id, cls, job.job_id, " -> ".join(plan))
        if dry:
            opened = self.state.cases[t.trigger_id]
            ctx.publish([ctx.act(opened, s, job.job_id, "planned", reason="dry-run") for s in plan])
            ctx.publish([outcome(self.state, opened, "dry_run", ctx.now, "mode dry-run: decided, not acted")])

    def _open_case(self, job: Job) -> Case | None:
        for cid in job.cases:
            case = self.state.cases[cid]
            if case.open:
                return case
        return None

    # ---- 1b. jobs that ended --------------------------------------------------------------------------
    def _finish(self, ctx: st.Ctx) -> None:
        for job in self.state.jobs.values():
            if job.finished is None and job.generation > 0 and job.world and self._open_case(job) is None:
                world = [job.members.get(h) for h in job.world]
                if all(m is not None and m.generation == job.generation and m.state == "exited" and m.exit_code == 0
                       and not m.signal for m in world):
                    last = max((m.last_step for m in world if m is not None and m.last_step is not None), default=None)
                    ctx.publish([RecoveryAction(
                        job_id=job.job_id, host="controller", ts=ctx.now, action="finish", target=job.job_id,
                        status="succeeded", actor=st.ACTOR, generation=job.generation,
                        reason=f"the command exited 0 on all {len(world)} hosts of generation {job.generation}",
                        details={"hosts": list(job.world), "last_step": last}, epoch=ctx.epoch)])
                    log.info("job %s finished (generation %d, last step %s)", job.job_id, job.generation, last)
            done = job.finished
            if done is None:
                continue
            gen = done.generation or 0
            orders = [Command(job_id=job.job_id, host=h, ts=ctx.now, command_id=f"{job.job_id}/g{gen}/finish/{h}",
                              action="finish", generation=gen, reason="the job finished", epoch=ctx.epoch)
                      for h, m in sorted(job.members.items()) if m.state != "left" and not new_run(job, m)
                      and f"{job.job_id}/g{gen}/finish/{h}" not in self.state.commands]
            if orders:
                ctx.publish(list(orders))

    # ---- 2. starts, scale-ups, resumes -------------------------------------------------------------
    def _starts(self, ctx: st.Ctx) -> None:
        for job in self.state.jobs.values():
            if not job.members or self._open_case(job) is not None:
                continue
            if job.finished is not None:  # a new run of the job id starts once every agent of it waits
                live = [m for m in job.members.values() if m.state != "left"
                        and (ctx.now - m.ts).total_seconds() <= self.settings.member_stale_s]
                if live and all(new_run(job, m) for m in live):
                    self._maybe_start(ctx, job)
                continue
            halted = halted_by(self.state, job)
            if halted is not None:
                resume = self.state.cases.get(f"{halted.case_id}/resume")
                if resume is not None and resume.approved_at is not None and resume.opened_at is None:
                    self._open(ctx, job, _synthetic(job, resume.case_id, "resume", ctx.now,
                                                    f"resumed by an operator after {halted.case_id}"), cls="resume")
                continue
            self._maybe_start(ctx, job)

    def _maybe_start(self, ctx: st.Ctx, job: Job) -> None:
        s = self.settings
        live = {h: m for h, m in job.members.items() if (ctx.now - m.ts).total_seconds() <= s.member_stale_s
                and m.state != "left"}
        _lo, hi, multiple = node_range(live.values())
        cordoned = set(ctx.cordoned())
        if live and all(m.state == "waiting" for h, m in live.items() if h not in cordoned):
            plan = plan_world(job, exclude=cordoned, now=ctx.now, stale_s=s.member_stale_s, states=("waiting",))
            if isinstance(plan, str):
                return
            full = len(plan.hosts) == hi // multiple * multiple  # every host the job may use (nodes_max)
            first = job.first_seen or ctx.now
            if full or (ctx.now - first).total_seconds() >= s.form_wait_s:
                cid = f"{job.job_id}/start/g{job.generation + 1}"
                if cid not in self.state.cases:
                    self._open(ctx, job, _synthetic(job, cid, "start", ctx.now, f"start on {len(plan.hosts)} hosts"),
                               cls="start", hosts=len(plan.hosts))
            return
        if s.mode != "auto" or not s.policy.scale_up or job.generation == 0:
            return
        world = [job.members.get(h) for h in job.world]
        if not world or any(m is None or m.state != "training" or m.generation != job.generation for m in world):
            return
        wait = timedelta(seconds=s.policy.scale_up_wait_s)
        extra = [h for h, m in live.items() if h not in job.world and h not in cordoned and m.state == "waiting"
                 and ctx.now - since(m) >= wait]
        bigger = min(hi, len(job.world) + len(extra)) // multiple * multiple
        if bigger > len(job.world):
            cid = f"{job.job_id}/scale/g{job.generation}"
            if cid not in self.state.cases:
                self._open(ctx, job, _synthetic(job, cid, "scale", ctx.now,
                                                f"scale up from {len(job.world)} to {bigger} hosts ({', '.join(extra)} "
                                                "waiting)"), cls="scale", hosts=bigger)

    # ---- 3. steps ----------------------------------------------------------------------------------
    def _cases(self, ctx: st.Ctx) -> None:
        for case in sorted((c for c in self.state.cases.values() if c.open), key=lambda c: c.opened_at or ctx.now):
            self.advance(ctx, case)

    def advance(self, ctx: st.Ctx, case: Case) -> None:
        for name in case.plan:
            step = st.umbrella(case, name)
            if step is None or not step.ended:
                if not HANDLERS[name](ctx, case):
                    return
                step = st.umbrella(case, name)
                assert step is not None and step.ended
            if step.status == "failed" and name in ("cordon", "restart", "start"):
                self._failed(ctx, case, name, step.reason)
                return
        rst = st.umbrella(case, "restart")
        fresh = rst is not None and rst.status == "skipped" and bool(rst.details.get("relaunched"))
        result = "halted" if "halt" in case.plan else "relaunched" if fresh else "resumed"
        ctx.publish([outcome(self.state, case, result, ctx.now, rst.reason if fresh and rst else "")])
        log.info("recovery %s of %s: %s", case.case_id, case.job_id, result)
        if replay.persistent(case):
            self._persistent(ctx, case)

    def _persistent(self, ctx: st.Ctx, case: Case) -> None:
        """The replay found the suspect's hardware: a follow-up case cordons it (within the breaker) and restarts
        without it, restoring within the same bound (the replay's steps hold the corruption again). Once."""
        cid, rb = f"{case.case_id}/persistent", dict(case.details.get("rollback") or {})
        if cid in self.state.cases or not rb:
            return
        job, host = self.state.job(case.job_id), str(rb["suspect"])
        rank = rb.get("rank")
        t = Trigger(trigger_id=cid, job_id=job.job_id, cls="hardware", source="replay", category=str(replay.SDC),
                    cause="hardware", culprits=(Culprit(host=host, strong=True, rank=rank if isinstance(rank, int)
                                                        else None, message="SDC reproduced by the replay"),),
                    first_sign=ctx.now, detected=ctx.now,
                    summary=f"silent data corruption on {host} reproduced by the replay of {case.case_id}: persistent",
                    fault_classes=(replay.FAULT_CLASS,))
        self._open(ctx, job, t, cls="hardware", rollback=rb)

    def _failed(self, ctx: st.Ctx, case: Case, name: str, reason: str) -> None:
        crashed = "did not come up" in reason
        if not crashed:
            st.page(ctx, case, reason)
        result = "failed" if crashed else "halted"
        ctx.publish([outcome(self.state, case, result, ctx.now, f"{name} failed: {reason}")])
        log.warning("recovery %s of %s %s: %s failed: %s", case.case_id, case.job_id, result, name, reason)


def halted_by(state: ClusterState, job: Job) -> Case | None:
    """The case that halted `job` (breaker, crash loop) when no case was opened after it."""
    opened = [state.cases[c] for c in job.cases if state.cases[c].opened_at is not None]
    if not opened:
        return None
    last = max(opened, key=lambda c: c.opened_at or datetime.min)
    return last if last.outcome is not None and last.outcome.result == "halted" else None


def _synthetic(job: Job, case_id: str, source: str, now: datetime, summary: str) -> Trigger:
    return Trigger(trigger_id=case_id, job_id=job.job_id, cls="software", source=source, category=source,
                   cause="", culprits=(), first_sign=now, detected=now, summary=summary)


def _gpu_fault(c: Culprit) -> dict[str, Any]:
    """A culprit's GPUs and catalog action, where its fault named them (what a GPU quarantine reads)."""
    return {"gpus": list(c.gpus), "action": c.action} if c.gpus or c.action else {}

"""The SDC rollback (issue 51): a `silent_data_corruption` incident rolls the job back and the replay decides.

On one machine the rollback IS the replay: the case's restart restores no snapshot or checkpoint newer than the
suspect's last agreed step (`rollback.restore_max_step`, carried by the start commands as
`World.restore_max_step`; the ranks take the newest one at or below it), so the new generation recomputes the
suspect steps. The `replay` step then waits for the replica detector's word on them:

* started once the restart's generation trained its first step: the target step is the first bad step plus
  `policy.sdc_replay_intervals` digest intervals (an interval: first bad - last agreed step);
* judged once every host of that generation reported a step at or past the target (or finished) and
  `policy.sdc_settle_s` passed (the detector's lag: no verdict on data in flight), or at
  `policy.sdc_replay_timeout_s`, or when a host of it crashed (not reached: undecided unless an incident came;
  the crash is the next case's);
* the evidence: `silent_data_corruption` incidents of the job first seen since the restart began. One naming the
  suspect's host -> the suspect reproduced it; one naming another host or none (replicas without a majority) ->
  a "peer" reproduced it too. `controller.sdc` decides: persistent (the suspect only), batch (everyone),
  transient (nothing), undecided (the replay did not reach its steps and nothing came). The analyzer continues
  an open incident rather than opening one when a draft of the same culprit starts within its window: the
  original incident resolves once the new run's window no longer holds its finding, so the replay's finding is a
  new incident, or the case's own re-published with the replayed run's first sign (a finding says which run it was
  judged in: the analyzer re-publishes an incident whose finding comes from another run); both count. Checked live
  by tests/recovery/test_sdc_live.py (a real gloo job, the analyzer and the controller as services).

The step ends with the verdict and its incidents listed as `merged` (they are its evidence, never a recovery of
their own), and `sdc.outcome`'s `diagnose` record on the suspect host is published beside it (signed like every
decision). A persistent verdict opens a follow-up case `<case>/persistent` (engine): hardware, the suspect a strong
culprit, pause, cordon (within the breaker), restart without it, restoring within the same bound. Every decision
is an event the state rebuilds from: replaying the log never judges or opens twice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from vigil.contract import Incident, IncidentCategory
from vigil.recovery.controller import sdc
from vigil.recovery.controller import steps as st
from vigil.recovery.controller.plan import cordon_allowance
from vigil.recovery.controller.state import Case, ClusterState

SDC = IncidentCategory.SILENT_DATA_CORRUPTION
FAULT_CLASS = sdc.FAULT_CLASS


def rollback_of(incident: Incident | None) -> dict[str, Any] | None:
    """What a rollback needs from an SDC incident: the suspect, its steps and the restore bound (None: not one)."""
    if incident is None or incident.category is not SDC or not incident.culprits:
        return None
    ev, culprit = incident.evidence, incident.culprits[0]
    if not isinstance(ev.get("step"), int):
        return None
    bad, good = int(ev["step"]), ev.get("good_step")
    good = int(good) if isinstance(good, int) else None
    bound = good if good is not None else bad - 1
    if bound < 0:
        return None
    return {"suspect": culprit.host, "rank": culprit.rank, "step": bad, "good_step": good,
            "restore_max_step": bound, "interval": max(1, bad - good) if good is not None else 1}


def replay(ctx: st.Ctx, case: Case) -> bool:
    rb = dict(case.details.get("rollback") or {})
    job = ctx.state.job(case.job_id)
    rst, step = st.umbrella(case, "restart"), st.umbrella(case, "replay")
    if rst is None or rst.status != "succeeded":
        return st.end(ctx, case, "replay", "skipped", reason="the rollback's restart did not succeed")
    if step is None or step.started_at is None:
        target = int(rb["step"]) + ctx.settings.policy.sdc_replay_intervals * int(rb.get("interval") or 1)
        st.begin(ctx, case, "replay", {"generation": rst.started_details.get("generation", job.generation),
                                        "target_step": target, "first_step": rst.details.get("first_step"),
                                        **{k: rb.get(k) for k in ("suspect", "rank", "step", "good_step",
                                                                  "restore_max_step")}})
        return False
    d = step.started_details
    gen, target = int(d.get("generation") or job.generation), int(d["target_step"])
    hosts = [str(h) for h in rst.details.get("hosts", [])]
    members = [m for m in (job.members.get(h) for h in hosts) if m is not None and m.generation == gen]
    crashed = [m for m in members if m.state == "exited" and (m.exit_code or m.signal)]
    if crashed:  # the replay ends here: judged on what came (a crash is the next case's)
        return _judge(ctx, case, evidence(ctx.state, case, rst.started_at), reached=False,
                      steps=max((m.last_step or 0) for m in members))
    reached = [m for m in members if (m.last_step or -1) >= target or m.state == "exited"]  # or it finished
    done = len(members) == len(hosts) and len(reached) == len(hosts)
    if done and d.get("reached_at") is None:  # a second `started` adds to the first's details (state.apply)
        ctx.publish([ctx.act(case, "replay", case.job_id, "started", details={"reached_at": ctx.now.isoformat()},
                             reason=f"every host passed step {target}: waiting for the replica detector")])
        return False
    reached_at = d.get("reached_at")
    waited = ctx.since(step.started_at)
    settled = reached_at is not None and (ctx.now - _ts(reached_at)).total_seconds() >= ctx.settings.policy.sdc_settle_s
    if not settled and waited < ctx.settings.policy.sdc_replay_timeout_s:
        return False
    return _judge(ctx, case, evidence(ctx.state, case, rst.started_at), reached=reached_at is not None,
                  steps=max((m.last_step or 0) for m in members) if members else 0)


def evidence(state: ClusterState, case: Case, since: Any) -> list[Incident]:
    """The SDC incidents of `case`'s job first seen since the rollback's restart began (its own too, where the
    analyzer re-opened it with a fresh first sign)."""
    return sorted((i for i in state.incidents.values() if i.job_id == case.job_id and i.category is SDC
                   and since is not None and i.first_sign >= since),
                  key=lambda i: i.incident_id)


def _judge(ctx: st.Ctx, case: Case, seen: list[Incident], *, reached: bool, steps: int) -> bool:
    rb = dict(case.details.get("rollback") or {})
    suspect = str(rb["suspect"])
    named = {c.host for i in seen for c in i.culprits}
    others = sorted(named - {suspect}) or (["*"] if any(not i.culprits for i in seen) else [])
    rst = st.umbrella(case, "restart")
    first = rst.details.get("first_step") if rst else None
    restored = int(first) - 1 if isinstance(first, int) else int(rb["restore_max_step"])
    recomputed = max(0, min(steps, int(rb["step"])) - restored)
    again = suspect in named
    mine = sdc.Replay(host=suspect, reproduced=again if (again or reached) else None, steps=recomputed)
    peer = sdc.Replay(host=others[0], reproduced=True, steps=0) if others else None
    job = ctx.state.job(case.job_id)
    allowed, why = cordon_allowance(ctx.state, job, ctx.settings.breaker, ctx.now, set(ctx.cordoned()))
    ev = {"step": rb["step"], "good_step": rb.get("good_step"), "host": suspect, "rank": rb.get("rank")}
    verdict = sdc.outcome(job_id=case.job_id, incident_id=case.case_id, evidence=ev, snapshot_step=restored,
                          suspect=mine, peer=peer, allowance=allowed, breaker_why=why, epoch=ctx.epoch)
    verdict = verdict.model_copy(update={"ts": ctx.now, "actor": st.ACTOR})
    replayed = dict(verdict.details["replay"])
    ctx.publish([verdict])
    return st.end(ctx, case, "replay", "succeeded", reason=verdict.reason,
                   details={**replayed, "merged": [i.incident_id for i in seen], "skip": verdict.details.get("skip")})


def persistent(case: Case) -> bool:
    """`case` ended with a persistent verdict whose action is a cordon (the follow-up case's to do)."""
    step = st.umbrella(case, "replay")
    return step is not None and step.status == "succeeded" and step.details.get("verdict") == "persistent"


def _ts(value: Any) -> datetime:
    return datetime.fromisoformat(str(value))

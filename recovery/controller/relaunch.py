"""The restart of a job whose allocation is gone: a fresh job through the backend, decided once.

A restart needs hosts; when none is left because the job's allocation ended (Slurm: the batch
job failed or was cancelled, its agents went with it), no restart inside it can happen. If the
backend is a `Relauncher` and says the allocation is gone (`allocation_gone`: known, never
guessed), the restart becomes a `relaunch` step, one umbrella pair `(relaunch, job)`:

1. `started` is published (the decision, signed like every controller step) with what will be
   submitted: the hosts left out (cordoned by the backend and condemned by this case), the job's
   `-N MIN-MAX` and a tag (`vigil-<case>`) the submission carries;
2. the backend submits (`sbatch --no-requeue`, never a requeue of the failed job's id);
3. `succeeded` names the new job id, then the restart ends `skipped` and the case's outcome is
   `relaunched` (its reason names the new job). A refusal ends it `failed`: the case pages.

Replaying the log never submits twice: a `relaunch` that started and did not end (the controller
died, or sbatch timed out) is never submitted again; the backend is asked for the job carrying
the tag (`relaunched`), and when it knows none the step fails and a human is paged.
"""

from __future__ import annotations

from vigil.recovery.backends.base import Relauncher
from vigil.recovery.controller import steps as st
from vigil.recovery.controller.plan import job_hosts, node_range, plan_world
from vigil.recovery.controller.state import Case
from vigil.recovery.errors import BackendError, BackendTimeout


def restart(ctx: st.Ctx, case: Case) -> bool:
    """`steps.restart`, or a relaunch when the job has no host left and its allocation is gone."""
    rst = st.umbrella(case, "restart")
    if rst is None or rst.started_at is None:
        step = st.umbrella(case, "relaunch")
        if step is not None and step.started_at is not None:
            return _go_on(ctx, case, "")
        gone = _gone(ctx, case)
        if gone is not None:
            return _go_on(ctx, case, gone)
    return st.restart(ctx, case)


def _gone(ctx: st.Ctx, case: Case) -> str | None:
    backend = ctx.fx.backend
    if case.dry_run or not isinstance(backend, Relauncher):
        return None
    job = ctx.state.job(case.job_id)
    exclude = set(ctx.cordoned()) | set(st.condemned(ctx, case))  # as `steps.restart` plans
    if not isinstance(plan_world(job, exclude=exclude, now=ctx.now, stale_s=ctx.settings.member_stale_s), str):
        return None  # hosts are there: a restart inside the allocation
    return backend.allocation_gone(case.job_id)


def _excluded(ctx: st.Ctx, case: Case) -> set[str]:
    """vigil's drains, and the hosts of the job this case condemns (a culprit named outside the job is paged,
    never excluded: it may not even be a node of this cluster)."""
    ours = job_hosts(ctx.state.job(case.job_id))
    return set(ctx.cordoned()) | {h for h in st.condemned(ctx, case) if h in ours}


def _go_on(ctx: st.Ctx, case: Case, gone: str) -> bool:
    backend = ctx.fx.backend
    assert isinstance(backend, Relauncher)
    job = ctx.state.job(case.job_id)
    step = st.umbrella(case, "relaunch")
    if step is None or step.started_at is None:
        lo, hi, _ = node_range(job.members.values())
        exclude = sorted(_excluded(ctx, case))
        tag = f"vigil-{st.short_id(case.case_id)}"
        st.begin(ctx, case, "relaunch", {"allocation": gone, "exclude": exclude, "nodes_min": lo, "nodes_max": hi,
                                          "tag": tag, "backend": backend.name})
        try:
            change = backend.relaunch(case.job_id, exclude=exclude, nodes_min=lo, nodes_max=hi, tag=tag)
        except BackendTimeout:
            return False  # submitted or not: the next turn asks for the tag, never submits again
        except (BackendError, ValueError) as exc:
            return _failed(ctx, case, f"allocation {gone} gone; the fresh job was refused: {exc}")
        return _done(ctx, case, str(change.data["new_job_id"]), [str(a) for a in change.data.get("argv", [])])
    d = step.started_details
    try:
        found = backend.relaunched(str(d.get("tag", "")))
    except BackendError as exc:
        found, why = None, f"not known whether it was submitted ({exc})"
    else:
        why = "the backend knows no job with its tag"
    if found is None:
        return _failed(ctx, case, f"allocation {d.get('allocation')} gone; a relaunch started and did not end, "
                                  f"{why}: not submitted again")
    return _done(ctx, case, found, [])


def _done(ctx: st.Ctx, case: Case, new: str, argv: list[str]) -> bool:
    step = st.umbrella(case, "relaunch")
    gone = step.started_details.get("allocation") if step else ""
    why = f"allocation {gone} gone: relaunched as job {new}"
    st.end(ctx, case, "relaunch", "succeeded", reason=why, details={"new_job_id": new, "argv": argv[:64]})
    return st.end(ctx, case, "restart", "skipped", reason=why, details={"relaunched": new})


def _failed(ctx: st.Ctx, case: Case, why: str) -> bool:
    st.end(ctx, case, "relaunch", "failed", reason=why)
    return st.end(ctx, case, "restart", "failed", reason=why)

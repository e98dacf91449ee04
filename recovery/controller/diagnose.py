"""The diagnose step: two rounds of self-checks on the job's hosts, then a verdict per host.

The hosts are the job's world and the eligible spares (a spare must pass before it replaces
a host), alive and not cordoned; a host whose agent is gone is faulty without a test. Round
1 groups them (`diagnostics.grouping`), sends each a `diagnose` command whose typed parameters run
`python -m vigil.recovery.diagnostics` for its group (rank 0 hosts the group's store on a port
it announced), and waits for every host's `check` result — or its agent's failure, or the
round's deadline (a host that never answers failed). Round 2 re-tests the suspects with healthy
partners. The verdicts (`diagnostic` events of test `verdict`, with the numbers) end the step;
its details carry them for the cordon and restart steps.
"""

from __future__ import annotations

from typing import Any

from vigil.contract import DiagnoseParams, Diagnostic, Event
from vigil.recovery.controller.plan import alive
from vigil.recovery.controller.state import Case
from vigil.recovery.controller.steps import Ctx, begin, end, umbrella
from vigil.recovery.diagnostics.grouping import HostResult, judge, round1_groups, round2_groups, suspects

DELIVERY_SLACK_S = 15.0  # command delivery and the child's start, on top of the round's time limit
VALUES = ("gemm_gflops", "alltoall_gbps", "allreduce_gbps")


def diagnose(ctx: Ctx, case: Case) -> bool:
    job = ctx.state.job(case.job_id)
    step = umbrella(case, "diagnose")
    if step is None or step.started_at is None:
        cordoned = set(ctx.cordoned())
        candidates = sorted(h for h, m in job.members.items()
                            if h not in cordoned and (h in job.world or m.state == "waiting"))
        live = [h for h in candidates if alive(job.members[h], ctx.now, ctx.settings.member_stale_s)]
        begin(ctx, case, "diagnose", {"hosts": live, "gone": sorted(set(candidates) - set(live))})
        return False
    hosts = list(step.started_details.get("hosts", []))
    if len(hosts) == 0:
        return end(ctx, case, "diagnose", "skipped", reason="no host to diagnose")
    r1 = _round(ctx, case, 1, lambda: round1_groups(hosts))
    if r1 is None:
        return False
    slow = ctx.settings.diagnostics.slow_factor
    sus = suspects(r1, slow)
    r2: dict[str, HostResult] = {}
    if sus:
        groups1 = _groups(case, 1)
        got = _round(ctx, case, 2, lambda: round2_groups(sus, hosts, groups1))
        if got is None:
            return False
        r2 = got
    verdicts = judge(r1, r2, slow)
    gone = list(step.started_details.get("gone", []))
    events: list[Event] = [Diagnostic(job_id=case.job_id, host=v.host, ts=ctx.now, incident_id=case.case_id,
                                      round=2 if v.host in r2 else 1, test="verdict", ok=v.verdict == "healthy",
                                      verdict=v.verdict, values=v.values, error=v.reason)
                           for v in verdicts.values()]
    events += [Diagnostic(job_id=case.job_id, host=h, ts=ctx.now, incident_id=case.case_id, test="verdict",
                          ok=False, verdict="faulty", error="its agent is gone") for h in gone]
    ctx.publish(events)
    summary: dict[str, Any] = {v.host: {"verdict": v.verdict, "reason": v.reason, **v.values}
                               for v in verdicts.values()}
    summary.update({h: {"verdict": "faulty", "reason": "its agent is gone"} for h in gone})
    bad = sorted(h for h, v in summary.items() if v["verdict"] != "healthy")
    return end(ctx, case, "diagnose", "succeeded", details={"verdicts": summary},
                reason=f"{len(bad)} of {len(summary)} hosts not healthy: {', '.join(bad)}" if bad
                else f"all {len(summary)} hosts healthy")


def _groups(case: Case, n: int) -> list[list[str]]:
    step = case.step("diagnose", f"round-{n}")
    return [list(g) for g in step.started_details.get("groups", [])] if step is not None else []


def command_id(case: Case, n: int, host: str) -> str:
    return f"{case.case_id}/diag/r{n}/{host}"


def _round(ctx: Ctx, case: Case, n: int, grouping: Any) -> dict[str, HostResult] | None:
    """The results of round `n` once it is complete (starting it when it has not started), else None."""
    job = ctx.state.job(case.job_id)
    step = case.step("diagnose", f"round-{n}")
    d = ctx.settings.diagnostics
    if step is None or step.started_at is None:
        groups = [g for g in grouping() if g]
        cmds: list[Event] = []
        for group in groups:
            master = job.members[group[0]]
            port = master.ports[min(n, len(master.ports) - 1)]
            for rank, host in enumerate(group):
                params = DiagnoseParams(
                    round=n, group=group, rank=rank, master_addr=master.ip, master_port=port,
                    check_timeout_s=round(d.round_timeout_s * 0.4, 1), gemm_size=d.gemm_size, gemm_iters=d.gemm_iters,
                    alltoall_procs=d.alltoall_procs, allreduce_mb=d.allreduce_mb, allreduce_iters=d.allreduce_iters)
                cmds.append(ctx.command(case, host, "diagnose", command_id(case, n, host), diagnose=params,
                                        timeout_s=d.round_timeout_s, reason=f"diagnostics round {n}"))
        ctx.publish([ctx.act(case, "diagnose", f"round-{n}", "started", details={"groups": groups}), *cmds])
        return None
    hosts = [h for g in step.started_details.get("groups", []) for h in g]
    results: dict[str, HostResult] = {}
    for host in hosts:
        cid = command_id(case, n, host)
        check = ctx.state.check_of(cid, host)
        ack = ctx.state.ack(cid, host)
        if check is not None:
            results[host] = HostResult(host=host, ok=check.ok, elapsed_s=check.values.get("elapsed_s"),
                                       values={k: check.values[k] for k in VALUES if k in check.values})
        elif ack is not None and ack.status in ("failed", "skipped"):
            results[host] = HostResult(host=host, ok=False)
    late = ctx.since(step.started_at) >= d.round_timeout_s + DELIVERY_SLACK_S
    if len(results) < len(hosts) and not late:
        return None
    for host in hosts:
        results.setdefault(host, HostResult(host=host, ok=False))
    if not step.ended:
        ctx.publish([ctx.act(case, "diagnose", f"round-{n}", "succeeded", started_at=step.started_at,
                             details={h: {"ok": r.ok, "elapsed_s": r.elapsed_s} for h, r in results.items()},
                             reason="" if not late else "some hosts did not answer in time")])
    return results

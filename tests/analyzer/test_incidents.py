"""Incidents from one instant's findings: culprit, victims, cause, held-back cascades, stable ids."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from vigil.analyzer.detect.base import Finding
from vigil.analyzer.incidents.book import IncidentBook
from vigil.analyzer.incidents.build import build
from vigil.analyzer.incidents.errors import cause_of, claims_hardware, host_fault, kind_of
from vigil.analyzer.settings import IncidentSettings

pytestmark = pytest.mark.pure
T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
S = IncidentSettings()
NVLINK = "RuntimeError: CUDA error: uncorrectable NVLink error detected during execution"
CLOSED = ("RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:29603. "
          "This is typically caused by a remote worker crashing.")
TIMEOUT = "RuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 30000ms for recv operation"


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def exit_(host: str, rank: int, message: str, failed: float | None, gone: float, signal: str | None = None,
          code: int | None = 1) -> Finding:
    return Finding(alert="process_exit", subject=f"{host}/rank{rank}", host=host, severity="critical", since=at(gone),
                   summary=f"{host} rank {rank} exited: {message}",
                   evidence={"host": host, "rank": rank, "summary": message, "signal": signal,
                             "exit_code": None if signal else code, "launcher": False,
                             "failed_at": at(failed).isoformat() if failed is not None else None})


def log(host: str, category: str, ranks: list[int], first: float, severity: Any = "error") -> Finding:
    return Finding(alert="error_log", subject=f"{host}/{category}", host=host, severity=severity, since=at(first),
                   summary=f"{host} {category}", evidence={"host": host, "category": category, "ranks": ranks,
                                                          "first_line": at(first).isoformat()})


def kernel(host: str, category: str, ranks: list[int], first: float) -> Finding:
    """A hardware line the host's kernel reported whose catalog action takes the host out (Xid 74: cordon)."""
    f = log(host, category, ranks, first, "critical")
    return Finding(**{**f.__dict__, "evidence": {**f.evidence, "xids": [74], "source": "kernel", "action": "cordon",
                                                 "host_fault": True}})


def crash() -> list[Finding]:
    """Rank 2 (host-1) raises NVLink at 0 s and is gone at 2.3 s; its peers fail 1.3-3 s later."""
    return [exit_("host-1", 2, NVLINK, 0.0, 2.3), exit_("host-1", 3, CLOSED, 1.3, 2.2, signal="SIGTERM"),
            exit_("host-0", 1, CLOSED, 1.3, 4.0), exit_("host-0", 0, CLOSED, 3.0, 4.1, signal="SIGTERM"),
            kernel("host-1", "nvlink", [2], 0.0), log("host-1", "traceback", [2, 3], 0.0),
            log("host-0", "traceback", [0, 1], 1.3)]


def test_error_kinds_and_causes() -> None:
    assert kind_of(CLOSED, None) == kind_of(TIMEOUT, "SIGTERM") == "peer"
    assert kind_of("", "SIGTERM") == kind_of("Signal 15 (SIGTERM) received by PID 42", "SIGTERM") == "teardown"
    assert kind_of(NVLINK, None) == kind_of("", "SIGKILL") == kind_of("ValueError: bad shard", None) == "own"
    # a rank's own text never makes hardware: it is a claim, kept as evidence (issue 49)
    assert cause_of(NVLINK) == "software" and claims_hardware(NVLINK) and not claims_hardware("ValueError: x")
    assert cause_of("ValueError: x") == "software" and cause_of("") == "unknown"
    assert cause_of("NCCL WARN NET/IB : Got completion with error 12") == "network"
    assert cause_of("ValueError: x", hardware_lines=True) == "hardware"


def test_a_crash_cascade_names_the_first_own_error_not_the_first_exit() -> None:
    findings = crash()
    (d,) = build(findings, at(10), S).drafts
    assert (d.category, d.cause, d.strong) == ("host_fault", "hardware", True)
    assert [(c.host, c.rank, c.message) for c in d.culprits] == [("host-1", 2, NVLINK)]
    assert sorted((v.host, v.rank) for v in d.victims) == [("host-0", 0), ("host-0", 1), ("host-1", 3)]
    assert all("Connection closed" in v.message for v in d.victims)
    assert d.first_sign == T0
    assert {f.subject for f in d.culprit_findings} == {"host-1/rank2", "host-1/nvlink", "host-1/traceback"}
    assert {f.subject for f in d.victim_findings} == {"host-1/rank3", "host-0/rank1", "host-0/rank0",
                                                      "host-0/traceback"}
    assert d.summary.startswith("host fault on host-1: host-1 rank 2 failed first (RuntimeError: CUDA error")


def test_peer_errors_alone_wait_for_the_culprit_then_name_what_they_can() -> None:
    victims = crash()[2:4]  # only host-0's exits have arrived
    got = build(victims, at(5), S)
    assert got.drafts == [] and got.held == victims  # held back: no victim pages before its culprit is known
    (d,) = build(victims, at(1.3 + S.settle_s + 1), S).drafts
    assert (d.category, d.strong, d.culprits[0].rank, d.cause) == ("crash_cascade", False, 1, "unknown")
    # timeouts while one rank was torn down without an error: a hang, its silent rank the suspect
    hang = [exit_("host-0", 0, TIMEOUT, 30, 31), exit_("host-0", 1, TIMEOUT, 30, 31),
            exit_("host-1", 2, TIMEOUT, 30, 31), exit_("host-1", 3, "", None, 32, signal="SIGTERM")]
    (d,) = build(hang, at(60), S).drafts
    assert (d.category, d.strong, [(c.host, c.rank) for c in d.culprits]) == ("collective_hang", False, [("host-1", 3)])
    # a host that stopped reporting is the culprit of its peers' connection errors
    lost = Finding(alert="heartbeat_loss", subject="host-9", host="host-9", severity="critical", since=at(0),
                   summary="host-9 silent")
    (d,) = build([*victims, lost], at(60), S).drafts
    assert [(c.host, c.rank) for c in d.culprits] == [("host-9", None)] and d.culprit_findings[0] is lost


def test_a_hardware_line_waits_hardware_settle_s_for_its_crash_then_pages_alone() -> None:
    xid = kernel("host-1", "xid", [2], 0.0)
    assert S.hardware_settle_s < S.settle_s  # hardware is a hard fault: it waits less than peer errors do
    assert build([xid], at(S.hardware_settle_s - 1), S).held == [xid]  # the crash it may cause is seconds away
    got = build([xid], at(S.hardware_settle_s), S)
    assert got.held == [] and got.drafts == []  # no crash came: the line pages on its own
    # the crash within the wait claims it: one host_fault incident, the line its culprit's evidence
    (d,) = build([xid, exit_("host-1", 2, NVLINK, 0.5, 1.0)], at(S.hardware_settle_s - 1), S).drafts
    assert d.category == "host_fault" and xid in d.culprit_findings


def test_only_a_reported_host_fault_makes_a_crash_a_host_fault() -> None:
    """A kernel Xid 31 before a crash is the application's (catalog: restart the job): a crash cascade, software;
    a kernel Xid 79 makes it a host fault; a training process's printed Xid (a claim) never does (issue 49)."""
    illegal = "RuntimeError: CUDA error: an illegal memory access was encountered"

    def xid(code: int, source: str, host_fault: bool) -> Finding:
        f = log("host-1", "xid", [2], 0.0, "error")
        return Finding(**{**f.__dict__, "evidence": {**f.evidence, "xids": [code], "source": source,
                                                     "host_fault": host_fault}})

    app, gone, claim = xid(31, "kernel", False), xid(79, "kernel", True), xid(79, "process", False)
    assert build([app], at(1), S).held == [] and build([gone], at(1), S).held == [gone]
    for finding, category, cause in ((app, "crash_cascade", "software"), (gone, "host_fault", "hardware"),
                                     (claim, "crash_cascade", "software")):
        (d,) = build([finding, exit_("host-1", 2, illegal, 0.5, 1.0)], at(S.settle_s + 5), S).drafts
        assert (d.category, d.cause) == (category, cause), finding.evidence


def test_a_rank_that_raises_an_xid_makes_no_host_fault() -> None:
    """Training code that raises "NVRM: Xid 79" (and prints it: a process line, or one from before sources were
    told apart) is a software crash whose claim is evidence; only the host's kernel line makes it hardware."""
    lie = "RuntimeError: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus; uncorrectable ECC error"
    printed = log("host-1", "xid", [2], 0.0, "critical")
    claim = Finding(**{**printed.__dict__, "evidence": {**printed.evidence, "source": "process", "host_fault": True}})
    for lines in ([], [printed], [claim]):
        (d,) = build([exit_("host-1", 2, lie, 0.5, 1.0), *lines], at(S.settle_s + 5), S).drafts
        assert (d.category, d.cause, d.evidence["claims_hardware"]) == ("crash_cascade", "software", True), lines
        assert "claims a hardware fault the host did not report" in d.summary
    assert not host_fault(printed.evidence) and not host_fault(claim.evidence)
    assert not host_fault({"source": "kernel", "host_fault": False}) and host_fault(kernel("h", "xid", [], 0).evidence)
    (d,) = build([exit_("host-1", 2, lie, 0.5, 1.0), kernel("host-1", "xid", [2], 0.0)], at(S.settle_s + 5), S).drafts
    assert (d.category, d.cause, d.evidence["claims_hardware"]) == ("host_fault", "hardware", False)
    assert d.evidence["fault_classes"] == ["xid:nvlink"]  # Xid 74's catalog cause: what fleet memory counts


def hang_finding() -> Finding:
    return Finding(alert="collective_hang", subject="host-1/rank3", host="host-1", severity="critical", since=at(0),
                   summary="collective hang: host-1 rank 3 never joined gloo:all_reduce",
                   evidence={"verdict": "missing_rank", "confidence": "strong",
                             "culprits": [{"rank": 3, "host": "host-1", "message": "not in gloo:all_reduce"}],
                             "victims": [{"rank": r, "host": f"host-{r // 2}", "message": "waits"} for r in (0, 1, 2)]})


def test_a_hang_claims_its_later_timeouts_and_teardown() -> None:
    later = [exit_("host-0", 0, TIMEOUT, 30, 31), exit_("host-0", 1, TIMEOUT, 30, 31),
             exit_("host-1", 2, TIMEOUT, 30, 31), exit_("host-1", 3, "", None, 32, signal="SIGTERM"),
             log("host-0", "collective_timeout", [0, 1], 30), log("host-9", "collective_timeout", [7], 30)]
    (d,) = build([hang_finding(), *later], at(40), S).drafts
    assert (d.category, d.strong, [c.rank for c in d.culprits]) == ("collective_hang", True, [3])
    assert sorted((f.alert, f.subject) for f in d.culprit_findings) == [("collective_hang", "host-1/rank3"),
                                                                       ("process_exit", "host-1/rank3")]
    assert {f.subject for f in d.victim_findings} == {"host-0/rank0", "host-0/rank1", "host-1/rank2",
                                                      "host-0/collective_timeout"}


def test_the_book_keeps_one_id_while_the_picture_grows_and_resolves_it() -> None:
    book = IncidentBook(window_s=S.window_s)

    def step(findings: list[Finding], t: float, ran: tuple[str, ...] = ("process_exit", "error_log")) -> Any:
        drafts = build(findings, at(t), S).drafts
        for d in drafts:
            d.evidence["alert_kinds"] = sorted({f.alert for f in d.culprit_findings + d.victim_findings})
        fps = [[f"j/{f.alert}/{f.subject}" for f in d.culprit_findings + d.victim_findings] for d in drafts]
        return book.update("j", at(t), drafts, fps, ["critical"] * len(drafts), ran, {}, {})

    findings = crash()
    (iid,), first = step(findings[:1] + findings[4:5], 3)  # the culprit's exit and its NVLink line
    assert [e.status for e in first] == ["open"] and first[0].incident_id == iid
    assert iid == "j/host_fault/host-1/r2/20261101T120000"
    (same,), grown = step(findings, 5)
    assert same == iid and len(grown) == 1 and len(grown[0].victims) == 3 and grown[0].detected == at(3)
    assert step(findings, 7)[1] == []  # nothing new: nothing published
    assert step([], 9, ran=("error_log",))[1] == []  # process_exit did not run: no evidence it is over
    _, done = step([], 11)
    assert [(e.incident_id, e.status) for e in done] == [(iid, "resolved")]
    restored = IncidentBook()
    restored.restore([first[0], grown[0], done[0]])
    assert restored.open() == []


def test_a_straggler_on_a_host_whose_nic_fails_is_its_symptom_not_a_second_page() -> None:
    from vigil.analyzer.incidents.inhibit import inhibit

    def f(alert: str, subject: str, host: str, severity: Any = "warning") -> Finding:
        return Finding(alert=alert, subject=subject, host=host, severity=severity, summary="", since=T0)

    out = inhibit([f("traffic_stall", "h1/mlx5_3", "h1"), f("straggler", "h1/backward", "h1"),
                   f("straggler", "h2/forward", "h2"), f("traffic_stall", "job", "h3"), f("straggler", "h3/gpu1", "h3"),
                   f("traffic_stall", "h4/mlx5_0", "h4", "info"), f("straggler", "h4/forward", "h4")])
    sev = {x.subject: x.severity for x in out}
    assert sev == {"h1/mlx5_3": "warning", "h1/backward": "info", "h2/forward": "warning", "job": "warning",
                   "h3/gpu1": "warning", "h4/mlx5_0": "info", "h4/forward": "warning"}
    demoted = next(x for x in out if x.subject == "h1/backward")
    assert demoted.evidence == {"inhibited_by": "traffic_stall:h1/mlx5_3", "severity_before": "warning"}


def test_a_host_wide_culprit_and_its_rank_are_one_incident_not_two() -> None:
    """One crash of rank 1: first known host-wide (the launcher's exit), then as the rank: one crash_cascade."""
    from vigil.analyzer.incidents.draft import Draft, Party

    book = IncidentBook(window_s=S.window_s)

    def draft(rank: int | None, victims: list[Party]) -> Draft:
        return Draft(category="crash_cascade", cause="software", culprits=[Party(host="h0", rank=rank, message="x")],
                     victims=victims, strong=True, first_sign=at(0), last_sign=at(1), summary="h0 crashed")

    (first,), opened = book.update("j", at(3), [draft(None, [])], [["fp"]], ["critical"], (), {}, {})
    assert first.endswith("/host/20261101T120000") and len(opened) == 1
    (second,), grown = book.update("j", at(5), [draft(1, [Party(host="h0", rank=0)])], [["fp"]], ["critical"], (),
                                   {}, {})
    assert second == first and [e.incident_id for e in grown] == [first]
    assert [i.incident_id for i in book.open("j")] == [first]


def test_a_replica_named_again_by_another_run_re_publishes_its_incident_with_that_runs_first_sign() -> None:
    """After a rollback the replayed run's digest finding on the same replica continues the open incident; nothing
    else about it changed, but it is the replay's evidence (recovery/controller/replay.py): re-published once per run."""
    from vigil.analyzer.incidents.numeric import drafts

    def finding(run: str, since: float) -> Finding:
        return Finding(alert="replica_mismatch", subject="h1/rank1", host="h1", severity="error", since=at(since),
                       summary="rank 1 on h1: parameter digest differs", evidence={
                           "signal": "digest", "rank": 1, "host": "h1", "step": 15, "good_step": 10, "run": run})

    book = IncidentBook(window_s=120)

    def judged(f: Finding, t: float) -> tuple[list[str], list[Any]]:
        return book.update("j", at(t), drafts([f]), [["fp"]], ["error"], ["replica_mismatch"], {}, {})

    ids, first = judged(finding("run-1", 0), 1)
    assert len(first) == 1 and first[0].evidence["run"] == "run-1"
    assert judged(finding("run-1", 5), 6) == (ids, [])  # the same run: nothing new
    again, replayed = judged(finding("run-2", 30), 31)
    assert again == ids and [(e.incident_id, e.first_sign, e.evidence["run"]) for e in replayed] == [
        (ids[0], at(30), "run-2")]
    assert judged(finding("run-2", 35), 36) == (ids, [])

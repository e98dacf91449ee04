"""The Slurm backend's logic against an in-memory Slurm (slurm_fake.py): reasons, parsing, rate limit, fail-safe reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.recovery.slurm_fake import FakeNode, FakeSlurm
from vigil.recovery.backends import select
from vigil.recovery.backends.slurm import (
    CliTimeout,
    SlurmBackend,
    SlurmSettings,
    SubprocessCli,
    make_reason,
    parse_reason,
)
from vigil.recovery.backends.slurm.allocation import Allocation, relaunch_argv, running
from vigil.recovery.backends.slurm.hostlist import expand
from vigil.recovery.backends.slurm.nodes import parse_scontrol, parse_sinfo
from vigil.recovery.errors import BackendError
from vigil.recovery.settings import RecoverySettings
from vigil.settings import VigilSettings

pytestmark = pytest.mark.pure

# captured from slurm-wlm 22.05.8 (three slurmd on one machine, tests/support/slurm_cluster.py)
SCONTROL = ("NodeName=n2 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.47 AvailableFeatures=(null) "
            "NodeAddr=127.0.0.1 NodeHostName=localhost Port=26819 Version=22.05.8 OS=Linux 6.18.44-fc-v1294 #1 SMP "
            "PREEMPT_DYNAMIC @0  RealMemory=1000 State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Partitions=main  "
            "CurrentWatts=0 AveWatts=0 Reason=vigil: inc-1 hardware fault: Xid 79 rank=3 [root@2026-12-07T15:22:35]\n")
SINFO = ("n1|idle|Unknown|Unknown|none\nn2|drained|2026-12-07T15:22:35|root|vigil: inc-1 a|b fault\n"
         "n3|draining|2026-12-07T15:22:40|ops|hw check by ops\nn3|draining|2026-12-07T15:22:40|ops|hw check by ops\n")


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def backend(fake: FakeSlurm, **kw: object) -> tuple[SlurmBackend, Clock]:
    clock = Clock()
    return SlurmBackend(SlurmSettings(**kw), cli=fake, clock=clock), clock  # type: ignore[arg-type]


def test_reason_rule_round_trips_and_only_vigil_prefix_is_ours() -> None:
    reason = make_reason("job/inc 7", 'hardware fault:\n "Xid 79"', limit=200)
    assert reason == "vigil: job/inc_7 hardware fault: 'Xid 79'"
    assert parse_reason(reason) == ("job/inc_7", "hardware fault: 'Xid 79'")
    assert parse_reason("vigil: - manual") == ("", "manual")
    assert parse_reason("hw check by ops") is None and parse_reason("Vigil: x") is None
    assert len(make_reason("i", "x" * 500, limit=64)) == 64


def test_state_parsing_of_both_formats() -> None:
    node = parse_scontrol(SCONTROL)["n2"]
    assert node.state == "idle+drain" and node.drained and node.ours
    assert node.reason == "vigil: inc-1 hardware fault: Xid 79 rank=3" and node.user == "root" and node.at.endswith("Z")
    nodes = parse_sinfo(SINFO)
    assert list(nodes) == ["n1", "n2", "n3"]  # n3 in two partitions: once
    assert not nodes["n1"].drained and nodes["n1"].reason == ""
    assert nodes["n2"].ours and nodes["n2"].reason == "vigil: inc-1 a|b fault"
    assert nodes["n3"].drained and not nodes["n3"].ours and nodes["n3"].user == "ops"
    with pytest.raises(ValueError, match="expected"):
        parse_sinfo("n1 idle\n")


def test_hostlists() -> None:
    assert expand("n[1-3]") == ["n1", "n2", "n3"]
    assert expand("node[01-03,07],login") == ["node01", "node02", "node03", "node07", "login"]
    assert expand("n[08-10]-ib") == ["n08-ib", "n09-ib", "n10-ib"]
    assert expand("gpu-a[1-2],gpu-b[5]") == ["gpu-a1", "gpu-a2", "gpu-b5"]
    for bad in ("n[3-1]", "n[1-2", "n[1-2][3-4]", "n[a-b]", "n[0-99999999]"):
        with pytest.raises(ValueError):
            expand(bad)


def test_cordon_drains_with_vigils_reason_once() -> None:
    fake = FakeSlurm()
    b, _ = backend(fake)
    change = b.cordon("n2", reason="hardware fault: Xid 79", incident_id="inc-1", actor="controller")
    assert change.changed and fake.nodes["n2"].drain
    assert fake.nodes["n2"].reason == "vigil: inc-1 hardware fault: Xid 79"
    assert ["scontrol", "update", "nodename=n2", "state=drain", "reason=vigil: inc-1 hardware fault: Xid 79"] in fake.calls
    again = b.cordon("n2", reason="other", incident_id="inc-2", actor="controller")
    assert not again.changed and "already drained by vigil" in again.detail
    assert fake.nodes["n2"].reason.startswith("vigil: inc-1")
    info = b.cordoned()["n2"]
    assert (info.incident_id, info.reason, info.by) == ("inc-1", "hardware fault: Xid 79", "root")


def test_external_drain_is_evidence_never_overwritten_nor_resumed() -> None:
    fake = FakeSlurm()
    fake.nodes["n3"] = FakeNode(drain=True, reason="hw check by ops", user="ops")
    b, _ = backend(fake)
    assert b.cordoned() == {}
    assert b.drained()["n3"].reason == "hw check by ops"
    assert b.drained_by_others() == {"n3": {"reason": "hw check by ops", "by": "ops", "at": b.drained()["n3"].at}}
    cordon = b.cordon("n3", reason="x", incident_id="i", actor="controller")
    assert not cordon.changed and "hw check by ops" in cordon.detail and cordon.data["external"] == "hw check by ops"
    uncordon = b.uncordon("n3", reason="healthy", actor="user:alice")
    assert not uncordon.changed and "not vigil's to resume" in uncordon.detail
    assert fake.nodes["n3"].drain and fake.nodes["n3"].reason == "hw check by ops"
    assert not [c for c in fake.calls if c[1] == "update"]


def test_uncordon_resumes_only_vigils_drain() -> None:
    fake = FakeSlurm()
    b, _ = backend(fake, node_map={"host-b": "n2"})
    b.cordon("host-b", reason="hang", incident_id="inc-9", actor="controller")
    assert set(b.cordoned()) == {"host-b"}
    change = b.uncordon("host-b", reason="repaired", actor="user:alice")
    assert change.changed and change.data == {"node": "n2", "was": "vigil: inc-9 hang", "incident_id": "inc-9"}
    assert not fake.nodes["n2"].drain and b.cordoned() == {}
    assert not b.uncordon("host-b", reason="again", actor="user:alice").changed
    with pytest.raises(BackendError, match="nope"):
        b.cordon("nope", reason="x", incident_id="i", actor="controller")
    assert not b.evict("n1", job_id="j", reason="x", incident_id="i").changed


def test_reads_are_rate_limited_and_fail_safe() -> None:
    fake = FakeSlurm()
    b, clock = backend(fake, read_interval_s=5.0)
    fake.timeout_next()
    with pytest.raises(BackendError, match="no answer"):  # nothing known yet: the controller's turn retries
        b.cordoned()
    b.cordon("n1", reason="x", incident_id="i", actor="controller")
    assert set(b.cordoned()) == {"n1"}
    b.cordoned(), b.cordoned()
    sinfo = [c for c in fake.calls if c[0] == "sinfo"]
    assert len(sinfo) == 2  # the failed read and one real one: the later calls were served from it
    clock.t += 5.0
    fake.timeout_next()
    fake.nodes["n1"].drain = False
    assert set(b.cordoned()) == {"n1"} and "no answer" in b.stale  # the last known state, kept
    clock.t += 5.0
    assert b.cordoned() == {} and b.stale == ""


def test_select_and_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VIGIL_RECOVERY_BACKEND", "slurm")
    monkeypatch.setenv("VIGIL_RECOVERY_SLURM_READ_INTERVAL_S", "2.5")
    monkeypatch.setenv("VIGIL_RECOVERY_SLURM_SCONTROL", "/opt/slurm/bin/scontrol")
    settings = RecoverySettings.load()
    b = select(settings, VigilSettings.load())
    assert isinstance(b, SlurmBackend) and b.name == "slurm"
    assert settings.slurm.read_interval_s == 2.5 and settings.slurm.scontrol == "/opt/slurm/bin/scontrol"


def test_allocation_from_environment_and_relaunch() -> None:
    env = {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "n[1-3]", "SLURM_PROCID": "1", "SLURMD_NODENAME": "n2"}
    alloc = Allocation.from_env(env)
    assert alloc == Allocation(job_id="42", nodes=("n1", "n2", "n3"), host="n2", procid=1)
    assert Allocation.from_env({}) is None
    odd = Allocation.from_env({**env, "SLURM_JOB_NODELIST": "n[1-2][1-2]"}, hostnames=lambda s: ["x1", "x2"])
    assert odd is not None and odd.nodes == ("x1", "x2")
    cmd = ["vigil", "run", "--nodes", "2:3", "--", "torchrun", "train.py"]
    assert relaunch_argv(alloc, alive=True, exclude={"n2", "n9"}, nodes_min=2, nodes_max=3, command=cmd, script="") == [
        "srun", "--jobid=42", "-N", "2-2", "--ntasks-per-node=1", "--exclude=n2", *cmd]
    assert relaunch_argv(alloc, alive=True, exclude={"n1", "n2"}, nodes_min=2, nodes_max=3, command=cmd, script="") is None
    assert relaunch_argv(alloc, alive=False, exclude={"n2"}, nodes_min=2, nodes_max=3, command=cmd, script="job.sh") == [
        "sbatch", "--no-requeue", "-N", "2-3", "--exclude=n2", "job.sh"]
    fake = FakeSlurm(jobs={"42": "RUNNING", "43": "COMPLETING"})
    settings = SlurmSettings()
    assert running(fake, settings, "42") and not running(fake, settings, "43") and not running(fake, settings, "44")
    fake.fail.append(BackendError("slurm backend: squeue: exit 1: Unable to contact slurm controller"))
    with pytest.raises(BackendError, match="contact"):
        running(fake, settings, "42")


def test_vigil_run_under_srun_speaks_for_its_slurm_node() -> None:
    from vigil.app.cli.collector import slurm_identity

    env = {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "n[1-3]", "SLURM_PROCID": "2", "SLURMD_NODENAME": "n3"}
    assert slurm_identity(env) == {"host": "n3", "job_id": "slurm-42"}
    assert slurm_identity({**env, "VIGIL_HOST": "h", "VIGIL_JOB_ID": "llama"}) == {}
    assert slurm_identity({**env, "SLURM_JOB_NODELIST": "weird[[x"}) == {"host": "n3", "job_id": "slurm-42"}
    assert slurm_identity({}) == {}


def test_readme_lists_every_slurm_setting() -> None:
    readme = (Path(__file__).resolve().parents[2] / "docs" / "slurm.md").read_text()
    section = readme[readme.index("# Slurm node backend"):]
    table = section[section.index("`SlurmSettings`"):]
    assert [f for f in SlurmSettings.model_fields if f"`{f}`" not in table] == []


def test_the_subprocess_runner_bounds_and_names_failures(tmp_path: Path) -> None:
    slow, bad = tmp_path / "slow", tmp_path / "bad"
    slow.write_text("#!/bin/sh\nexec sleep 30\n")
    bad.write_text("#!/bin/sh\necho 'slurm_load_node error: Unable to contact slurm controller' >&2\nexit 1\n")
    for f in (slow, bad):
        f.chmod(0o755)
    cli = SubprocessCli(conf=str(tmp_path / "slurm.conf"))
    with pytest.raises(CliTimeout, match=r"no answer within 0\.2s"):
        cli.run([str(slow), "-h"], timeout_s=0.2)
    with pytest.raises(BackendError, match="exit 1: slurm_load_node error: Unable to contact"):
        cli.run([str(bad), "show", "node"], timeout_s=5)
    with pytest.raises(BackendError, match="cannot run"):
        cli.run([str(tmp_path / "missing")], timeout_s=5)
    b = SlurmBackend(SlurmSettings(sinfo=str(slow), command_timeout_s=0.2))
    with pytest.raises(BackendError, match="read node states"):
        b.cordoned()


def test_the_test_cluster_says_why_it_cannot_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.slurm_cluster import SlurmCluster, Unavailable

    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(Unavailable, match="slurm-wlm/munge not installed"):
        SlurmCluster(tmp_path).start()

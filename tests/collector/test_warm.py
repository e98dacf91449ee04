"""Warm start (collector.control.warm): a torchrun command runs in interpreters started and warmed before the order,
and the agent sees it as it sees torchrun: same rank prefixes, exits, failure report, stop."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from tests.support.waiting import wait_until
from vigil.collector.agent import Agent
from vigil.collector.control.childenv import child_environment
from vigil.collector.control.launcher import Launcher
from vigil.collector.control.stopping import ProcessGroups
from vigil.collector.control.warm import WarmPlan, WarmPool, plan
from vigil.collector.settings import CollectorSettings, resolve_paths
from vigil.collector.sink import MemorySink
from vigil.contract import ProcessExit
from vigil.kafka.broker import free_port

PROBE = """
import json, os, sys, time
entry = {"torch": "torch" in sys.modules, "vigil": sorted(m for m in sys.modules if m.split(".")[0] == "vigil")}
with open("/proc/self/stat") as fh:
    ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
boot = float(next(line for line in open("/proc/stat") if line.startswith("btime")).split()[1])
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
out, mode = sys.argv[1], sys.argv[2]
with open(os.path.join(out, f"rank{dist.get_rank()}.json"), "w") as fh:
    json.dump({**entry, "pid": os.getpid(), "started": boot + ticks / os.sysconf("SC_CLK_TCK"), "sum": t.item(),
               "env": dict(os.environ), "argv": sys.argv, "cwd": os.getcwd()}, fh)
print(f"rank {dist.get_rank()} ok", flush=True)
if mode == "fail" and dist.get_rank() == 1:
    raise RuntimeError("injected failure on rank 1")
if mode in ("fail", "sleep"):
    time.sleep(300)
"""


def command(script: Path, out: Path, mode: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--nnodes", "1", "--node-rank", "0",
            "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "--max-restarts", "0", *extra,
            str(script), str(out), mode]


@pytest.mark.pure
def test_plan_takes_static_torchrun_commands_only() -> None:
    env = dict(os.environ)
    argv = command(Path("train.py"), Path("out"), "ok")
    p = plan(argv, env)
    assert isinstance(p, WarmPlan) and (p.nproc, p.nnodes, p.script, p.args) == (2, 1, "train.py", ["out", "ok"])
    assert isinstance(plan([*argv[:3], "--tee", "3", "-m", "pkg.train", "x"], env), WarmPlan)
    for refused in (command(Path("t.py"), Path("o"), "ok", "--redirects", "3"),
                    command(Path("t.py"), Path("o"), "ok", "--no-python"),
                    [*argv[:3], "--nnodes", "1:2", "t.py"], [*argv[:3], "--nproc-per-node", "gpu", "t.py"],
                    [sys.executable, "t.py"]):
        assert isinstance(plan(refused, env), str), refused


@pytest.mark.pure
def test_a_warm_interpreter_may_import_no_vigil_platform_module() -> None:
    assert CollectorSettings(warm_imports=["torch", "vigil.timer", "vigil.recovery.checkpoint"]).warm_imports
    for bad in ("vigil.settings", "vigil.collector", "vigil.recovery", "vigil"):
        with pytest.raises(ValueError, match="training-side"):
            CollectorSettings(warm_imports=["torch", bad])


@pytest.fixture
def agent(tmp_path: Path) -> Agent:
    settings = CollectorSettings(host="h0", job_id="j", heartbeat_interval=3600, nic_interval=3600, poll_interval=0.05,
                                 sysfs_root=tmp_path / "none", procfs_root=tmp_path / "none")
    return Agent(settings=settings, paths=resolve_paths(settings, tmp_path), sink=MemorySink(), spool_roots=[])


def launch(agent: Agent, tmp_path: Path, mode: str, *, during: object = None) -> tuple[int, Launcher, float]:
    script, out = tmp_path / "probe.py", tmp_path / "ranks"
    script.write_text(PROBE)
    out.mkdir(exist_ok=True)
    env = child_environment({**os.environ, "VIGIL_KAFKA_EXTRA": "sasl.password=secret", "OMP_NUM_THREADS": "1"},
                            {"VIGIL_JOB_ID": "j", "VIGIL_HOST": "h0", "PYTHONUNBUFFERED": "1"})
    argv = command(script, out, mode)
    pool = WarmPool.for_command(argv, env, ["torch", "torch.distributed"])
    assert pool is not None
    pool.prepare()
    warmed(pool)
    launcher = Launcher(argv=argv, env=env, agent=agent, output_dir=tmp_path / "output", echo=False, warm=pool)
    agent.start()
    try:
        ordered = time.time()
        if callable(during):
            threading.Thread(target=during, args=(launcher, out), daemon=True).start()
        status = launcher.run()
    finally:
        pool.close()
        agent.stop(drain_timeout_s=5)
    return status, launcher, ordered


def warmed(pool: WarmPool) -> None:
    """Until the pool's 2 interpreters exist and sit idle (imports done: no CPU used for a second)."""
    assert pool.pid is not None
    launcher = psutil.Process(pool.pid)

    def idle() -> bool:
        kids = launcher.children()
        before = [k.cpu_times() for k in kids]
        time.sleep(1.0)
        return len(kids) == 2 and all(sum(k.cpu_times()[:2]) - sum(b[:2]) < 0.01 for k, b in zip(kids, before, strict=True))

    wait_until(idle, 300, "the warm interpreters to finish their imports")


def exits(agent: Agent) -> list[ProcessExit]:
    assert isinstance(agent.sink, MemorySink)
    return [e for e in agent.sink.events if isinstance(e, ProcessExit)]


def ranks(tmp_path: Path) -> dict[int, dict[str, object]]:
    return {int(p.stem[4:]): json.loads(p.read_text()) for p in (tmp_path / "ranks").glob("rank*.json")}


@pytest.mark.slow
def test_ranks_run_in_interpreters_warmed_before_the_order_with_torchruns_environment_and_no_credential(
        agent: Agent, tmp_path: Path) -> None:
    status, launcher, ordered = launch(agent, tmp_path, "ok")
    assert status == 0
    got = ranks(tmp_path)
    assert set(got) == {0, 1} and all(r["sum"] == 3.0 for r in got.values())
    for rank, r in got.items():
        assert r["torch"] is True and r["vigil"] == []  # warm: torch imported before the entry point, no vigil
        assert isinstance(r["started"], float) and r["started"] < ordered  # the interpreter predates the order
        env = r["env"]
        assert isinstance(env, dict)
        assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == (str(rank), str(rank),
                                                                                              "2", "2")
        assert env["VIGIL_JOB_ID"] == "j" and "VIGIL_KAFKA_EXTRA" not in env and "VIGIL_WARM_SLOT" not in env
        assert r["argv"] == [str(tmp_path / "probe.py"), str(tmp_path / "ranks"), "ok"] and r["cwd"] == os.getcwd()
    output = "".join(p.read_text() for p in (tmp_path / "output").glob("stdout.*.log"))
    assert "[default0]:rank 0 ok" in output and "[default1]:rank 1 ok" in output
    assert launcher.proc is not None
    assert sorted((e.rank if e.rank is not None else -1, e.exit_code, e.launcher, e.pid) for e in exits(agent)) == [
        (-1, 0, True, launcher.proc.pid), (0, 0, False, got[0]["pid"]), (1, 0, False, got[1]["pid"])]


@pytest.mark.slow
def test_a_failing_warm_rank_is_reported_as_under_torchrun_and_its_peer_stopped(agent: Agent, tmp_path: Path) -> None:
    status, launcher, _ = launch(agent, tmp_path, "fail")
    assert status == 1  # torchrun's own code when a worker failed
    by_rank = {e.rank: e for e in exits(agent) if not e.launcher}
    (mine,) = [e for e in exits(agent) if e.launcher]
    assert set(by_rank) == {0, 1}
    failed = by_rank[1]
    assert (failed.local_rank, failed.exit_code) == (1, 1)
    assert failed.summary == "RuntimeError: injected failure on rank 1" and failed.failed_at is not None
    assert "injected failure" not in by_rank[0].summary
    assert mine.exit_code == 1 and mine.summary == "rank 1 (local rank 1) failed first: RuntimeError: injected failure on rank 1"
    assert launcher.proc is not None and not _alive([int(str(r["pid"])) for r in ranks(tmp_path).values()])


@pytest.mark.slow
def test_terminate_stops_a_warm_generation_and_leaves_no_process(agent: Agent, tmp_path: Path) -> None:
    groups = ProcessGroups()

    def stop_when_training(launcher: Launcher, out: Path) -> None:
        wait_until(lambda: len(list(out.glob("rank*.json"))) == 2, 120, "both ranks to train")
        assert launcher.proc is not None
        groups.remember(launcher.proc.pid)
        launcher.terminate()

    status, launcher, _ = launch(agent, tmp_path, "sleep", during=stop_when_training)
    assert status != 0 and launcher.proc is not None
    assert groups.leftovers() == [] and not _alive([int(str(r["pid"])) for r in ranks(tmp_path).values()])
    assert {e.rank for e in exits(agent) if not e.launcher} == {0, 1}


def _alive(pids: list[int]) -> bool:
    for pid in pids:
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            continue
    return False


ENDING = """
import atexit, sys, threading, time
out, how = sys.argv[1], sys.argv[2]
atexit.register(lambda: open(out + "/atexit", "w").write("ran"))
def late() -> None:
    time.sleep(0.3)
    open(out + "/thread", "w").write("joined")
threading.Thread(target=late).start()
print("last words", end="")  # no newline, no flush: the exit must flush it
left_open = open(out + "/left-open", "w")  # written, never flushed nor closed
left_open.write("kept")
import concurrent.futures, gzip
pool = concurrent.futures.ThreadPoolExecutor(1)  # never shut down: its worker must not hold the exit
pool.submit(time.sleep, 0.1)
packed = gzip.open(out + "/packed.gz", "wt")  # its trailer is written on close only
packed.write("whole")
if how == "exit":
    sys.exit(3)
if how == "raise":
    raise RuntimeError("the entry point failed")
"""


@pytest.mark.pure
@pytest.mark.parametrize(("how", "status"), [("exit", 3), ("raise", 1), ("return", 0)])
def test_a_warm_child_ends_as_the_interpreter_would_threads_joined_atexit_run_output_flushed(
        tmp_path: Path, how: str, status: int) -> None:
    import subprocess

    import vigil.collector.control.warmchild as warmchild

    script = tmp_path / "ending.py"
    script.write_text(ENDING)
    order = {"env": {"PATH": os.environ.get("PATH", "")}, "cwd": str(tmp_path), "script": str(script),
             "module": None, "args": [str(tmp_path), how]}
    done = subprocess.run([sys.executable, "-u", warmchild.__file__, "json"], input=json.dumps(order) + "\n",
                          capture_output=True, text=True, timeout=60)  # a hang fails
    assert done.returncode == status, done.stderr
    assert done.stdout == "last words"
    assert (tmp_path / "atexit").read_text() == "ran" and (tmp_path / "thread").read_text() == "joined"
    assert (tmp_path / "left-open").read_text() == "kept"
    import gzip

    assert gzip.decompress((tmp_path / "packed.gz").read_bytes()) == b"whole"
    assert ("RuntimeError: the entry point failed" in done.stderr) == (how == "raise"), done.stderr


@pytest.mark.pure
def test_a_warm_child_runs_a_module_entry_point_as_python_dash_m_would(tmp_path: Path) -> None:
    import subprocess

    import vigil.collector.control.warmchild as warmchild

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text(
        "import gzip, sys\nout = gzip.open(sys.argv[1] + '/m.gz', 'wt')\nout.write(__name__ + ' ' + sys.argv[0])\n"
        "sys.exit(4)\n")
    order = {"env": {"PATH": os.environ.get("PATH", "")}, "cwd": str(tmp_path), "script": None, "module": "pkg.train",
             "args": [str(tmp_path)]}
    done = subprocess.run([sys.executable, "-u", warmchild.__file__, "json"], input=json.dumps(order) + "\n",
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 4, done.stderr
    import gzip

    assert gzip.decompress((tmp_path / "m.gz").read_bytes()).decode() == f"__main__ {tmp_path / 'pkg' / 'train.py'}"

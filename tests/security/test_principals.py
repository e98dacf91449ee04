"""Two principals on a node: a training job reads, traces and writes nothing of the processes holding an identity.

A real `vigil run` launches `prober.py` (tests/security), which attacks its agent (`/proc/<ppid>/environ`,
`mem`, a ptrace attach) and `vigil up`'s key directory (reading every private key, planting a public one),
as another uid (`vigil run --user 65534`, the agent
root) and as the agent's own uid (`vigil run` itself as 65534). The warm interpreters and the warm
diagnostics child, waiting for their order, are attacked the same way, their order channel
(`/proc/<pid>/fd/0`) included; once ordered, a warm interpreter is the training process, dumpable again.
Needs root (to switch uids) on Linux.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.waiting import wait_until
from vigil.app.stack.state import guard
from vigil.collector.control.warm import WarmPlan, WarmPool, stop_idle
from vigil.collector.control.warmdiag import WarmDiagnostics
from vigil.collector.principal import RunAs
from vigil.kafka.broker import free_port
from vigil.signing.keys import KeyStore, Role

NOBODY = 65534
SECRET = "Kafka-SASL-s3cret-of-the-agent"
PROBER = str(Path(__file__).with_name("prober.py"))
SYSTEM_PYTHON = f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}"
"""An interpreter uid 65534 may run (this venv's may sit under root's home): the prober's, the warm ones', and,
with this venv's packages added, vigil's as 65534."""
AS_ANYONE = [SYSTEM_PYTHON, "-c", "import runpy, site, sys; site.addsitedir(sys.argv.pop(1)); "
             "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)", sysconfig.get_paths()["purelib"]]
VIGIL_AS_ANYONE = [*AS_ANYONE, "vigil"]
pytestmark = [pytest.mark.pure, pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0 or not os.path.exists(SYSTEM_PYTHON),
    reason="needs Linux, root to switch uids and a system Python of this version")]
REFUSED = {"EACCES", "EPERM", "ENXIO"}


@pytest.fixture
def home() -> Iterator[Path]:
    """A VIGIL_HOME uid 65534 may use (pytest's tmp_path is root's only)."""
    path = Path(tempfile.mkdtemp(prefix="vigil-principal-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def agent_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIGIL_")}
    env.update(VIGIL_HOME=str(home), VIGIL_KAFKA_BOOTSTRAP=f"127.0.0.1:{free_port()}",
               VIGIL_KAFKA_EXTRA=json.dumps({"sasl.password": SECRET}), VIGIL_JOB_ID="job", VIGIL_HOST="h1")
    return env


def attack_through_vigil_run(home: Path, options: list[str], files: list[str], **popen: Any) -> dict[str, Any]:
    go = home / "go"
    argv = [*VIGIL_AS_ANYONE, "run", "--drain-timeout", "1", "--delivery-timeout", "1", *options, "--", SYSTEM_PYTHON,
            PROBER, "--wait", str(go), *files, "ppid"]
    agent = subprocess.Popen(argv, env=agent_env(home), cwd=home, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             **popen)
    try:
        def launched() -> bool:
            return agent.poll() is not None or any(PROBER in c.cmdline() for c in psutil.Process(agent.pid).children())

        wait_until(launched, what="the agent's child")
        with open(f"/proc/{agent.pid}/environ", "rb") as fh:  # root reads it: the secret was scrubbed
            assert SECRET.encode() not in fh.read()
        go.touch()
        out, err = agent.communicate(timeout=120)
    finally:
        if agent.poll() is None:
            agent.kill()
    assert agent.returncode == 0, err.decode()
    return dict(json.loads(next(ln for ln in out.decode().splitlines() if ln.startswith("{"))))


def assert_refused(got: dict[str, str], *what: str) -> None:
    for name in what:
        assert got[name] in REFUSED, (name, got)


def test_a_job_of_another_uid_reads_nothing_of_its_agent_nor_of_the_stacks_keys(home: Path) -> None:
    keys = home / "keys"  # laid out as `vigil up` does
    guard(home, keys)
    KeyStore(keys).ensure()
    guard(home, keys)
    private = sorted(str(k) for k in keys.glob("*.key"))
    assert len(private) == len(Role) - 1  # no fleet agent key: each host's agent has its own (`vigil keys issue`)
    planted = str(keys / "agent.planted.pub")
    got = attack_through_vigil_run(home, ["--user", str(NOBODY)],
                                   [*(a for k in private for a in ("--read", k)), "--write", planted])
    assert got["uid"] == NOBODY
    (agent,) = got["pid"].values()
    assert_refused(agent, "environ", "mem", "ptrace")
    assert all(got["read"][k] in REFUSED for k in private), got["read"]
    assert got["write"][planted] in REFUSED and not Path(planted).exists()
    assert not {"VIGIL_KAFKA_EXTRA", "VIGIL_HOME"} & set(got["env"]) and "VIGIL_CHECKPOINT_KEY_FILE" in got["env"]
    job_key = home / "jobkeys" / "job.key"  # the job's snapshot/checkpoint key: its own uid's, 0600
    assert (job_key.stat().st_uid, job_key.stat().st_mode & 0o777) == (NOBODY, 0o600)


def test_a_job_of_the_agents_own_uid_reads_nothing_of_it(home: Path) -> None:
    os.chown(home, NOBODY, NOBODY)
    got = attack_through_vigil_run(home, [], [], user=NOBODY, group=NOBODY, extra_groups=[])
    assert got["uid"] == NOBODY
    (agent,) = got["pid"].values()
    assert_refused(agent, "environ", "mem", "ptrace")


def test_vigil_run_as_another_user_is_refused_clearly_when_not_root(home: Path) -> None:
    done = subprocess.run([*VIGIL_AS_ANYONE, "run", "--user", "nobody", "--", "true"], env=agent_env(home), cwd=home,
                          user=NOBODY, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "must run as root" in done.stderr


def non_dumpable(pid: int) -> bool:
    return os.stat(f"/proc/{pid}/environ").st_uid == 0  # the kernel's mark of a non-dumpable process


def test_waiting_warm_processes_are_closed_to_the_job_until_their_order(home: Path) -> None:
    nobody = RunAs(uid=NOBODY, gid=NOBODY, groups=())
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIGIL_")}
    pool = WarmPool(python=SYSTEM_PYTHON, nproc=1, env=env, imports=[], run_as=nobody)
    pool.prepare()  # the diagnostics child as the job's uid too (it runs as the agent's: the same-uid case)
    diag = WarmDiagnostics.spawn([*AS_ANYONE, "vigil.recovery.diagnostics", "--serve"], env, subprocess.STDOUT,
                                  **nobody.popen())
    try:
        assert pool.pid is not None
        wait_until(lambda: psutil.Process(pool.pid).children(), what="the warm interpreter")
        (child,) = psutil.Process(pool.pid).children()
        waiting = [pool.pid, child.pid, diag.pid]
        wait_until(lambda: all(map(non_dumpable, waiting)), what="the waiting processes to close themselves")
        got = json.loads(subprocess.run([SYSTEM_PYTHON, PROBER, *map(str, waiting)], user=NOBODY,
                                        group=NOBODY, extra_groups=[], capture_output=True, check=True).stdout)
        for probed in got["pid"].values():  # the job's own uid, the interpreters' too
            assert_refused(probed, "environ", "mem", "fd0", "ptrace")
        script = home / "train.py"
        script.write_text("import ctypes, os\nprint('dumpable', ctypes.CDLL(None).prctl(3, 0, 0, 0, 0), os.getuid())\n")
        plan = WarmPlan(python=SYSTEM_PYTHON, nproc=1, nnodes=1, node_rank=0, master_addr="127.0.0.1",
                        master_port=free_port(), script=str(script), module=None, args=[], log_dir=None)
        proc = pool.take(plan, env)
        assert proc is not None
        out, _err = proc.communicate(timeout=60)
        assert f"dumpable 1 {NOBODY}" in out.decode()  # ordered: the training process, of the training uid
    finally:
        pool.close()
        stop_idle(diag)

"""A live recovery setup for end-to-end tests: a `vigil recovery run` process, `vigil run --nodes` agents,
the real broker; the test plays the analyzer (it publishes the incidents) and reads the log.

Every process shares one key set under the test's VIGIL_HOME (signing on, as in `vigil up`), and
`publish` signs as the analyzer. `Live.fold()` follows the recovery, commands, logs and alerts topics into a `ClusterState` (the
controller's own fold) and keeps every event; `wait_for` polls it. With `run_as` the agents start the training
commands as that user (`vigil run --user`, the agents root, `python` an interpreter that user can run: `interpreter_for`). `close()` stops every process
it started: agents by SIGTERM (each stops its training command), then SIGKILL of what is left.

The `live` fixture (re-exported by the conftests of tests/recovery and tests/security) is one on the test's topics,
torn down after it. A test marked `@pytest.mark.recovery_env({...})` gives the controller those extra environment
variables; one marked `@pytest.mark.recovery_run_as("nobody")` has its agents start the training processes as that
user (`vigil run --user`) in a folder that user may enter, and is skipped, saying why, where the machine does not
allow it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.waiting import wait_until
from vigil.app.demo.run import kill_tree
from vigil.contract import Event, Outcome, RecoveryAction
from vigil.kafka.follow import Follower
from vigil.kafka.producer import EventProducer
from vigil.recovery.controller.state import Case, ClusterState
from vigil.settings import VigilSettings
from vigil.signing import KeyStore, Role
from vigil.signing.setup import signer

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "tests" / "recovery"  # the worker scripts (job_worker.py, fake_train.py, snap_worker.py)
PY = sys.executable
SYSTEM_PYTHON = f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}"
RUN_AS_PATH = os.pathsep.join([str(ROOT), *(p for p in sys.path if p.endswith("site-packages"))])
"""PYTHONPATH of a job run as another user: the checkout and this venv's packages (for the system Python)."""
FAST = {  # the controller's timings for tests: act at once, short grace periods
    "VIGIL_RECOVERY_POLICY_SETTLE_S": "0", "VIGIL_RECOVERY_FORM_WAIT_S": "2", "VIGIL_RECOVERY_TICK_S": "0.2",
    "VIGIL_RECOVERY_POLICY_EXIT_GRACE_S": "60", "VIGIL_RECOVERY_MEMBER_STALE_S": "30",
}


@dataclass(kw_only=True)
class Live:
    settings: VigilSettings
    bootstrap: str
    tmp: Path
    recovery_env: dict[str, str] = field(default_factory=dict)
    run_as: str = ""  # `vigil run --user`: the training processes' user (the agents stay root's)
    python: str = PY  # the interpreter of the training command (`interpreter_for` run_as)
    agents: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    controller: subprocess.Popen[bytes] | None = None
    state: ClusterState = field(default_factory=ClusterState)
    events: list[Event] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.home = self.tmp / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("VIGIL_", "TORCH_FR"))}
        self.env.update(VIGIL_HOME=str(self.home), VIGIL_KAFKA_BOOTSTRAP=self.bootstrap,
                        VIGIL_TOPIC_PREFIX=self.settings.topic_prefix,
                        VIGIL_TOPIC_PARTITIONS=str(self.settings.topic_partitions), OMP_NUM_THREADS="1",
                        PYTHONPATH=RUN_AS_PATH if self.run_as else str(ROOT), **FAST, **self.recovery_env)
        self._follower = Follower(settings=self.settings, bootstrap=self.bootstrap,
                                  topics=["recovery", "commands", "logs", "alerts", "incidents"], refresh_s=1.0)
        # the key set every process here shares (VIGIL_HOME); the test plays the analyzer: it signs as one
        KeyStore(self.home / "keys").ensure()
        self._producer = EventProducer(settings=self.settings, bootstrap=self.bootstrap,
                                       signer=signer(Role.ANALYZER, self.home))

    # ---- processes -------------------------------------------------------------------------------
    def _spawn(self, argv: list[str], log: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        out = open(self.tmp / log, "ab")  # noqa: SIM115
        try:
            return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        finally:
            out.close()

    def start_controller(self) -> None:
        self.controller = self._spawn([PY, "-m", "vigil", "recovery", "run"], "controller.log", self.env)

    def kill_controller(self) -> None:
        assert self.controller is not None
        self.controller.send_signal(signal.SIGKILL)
        self.controller.wait(30)
        self.controller = None

    def start_agent(self, host: str, command: Sequence[str], *, nodes: str, job: str, spare: bool = False,
                    env: dict[str, str] | None = None) -> None:
        KeyStore(self.home / "keys").issue(host)  # its own key: the agent attests its host's facts with it
        assert not self.run_as or command[:1] != [PY] or self.python == PY, (
            f"{self.run_as} may not run {PY}: start the training command with `python=live.python`")
        argv = [PY, "-m", "vigil", "run", "--host", host, "--job", job, "--nodes", nodes, "--rdzv-addr", "127.0.0.1",
                "--keepalive", "2", "--kill-grace", "10", "--heartbeat-interval", "5", *(["--spare"] if spare else []),
                *self.user_args(), "--", *command]
        kmsg = self.kernel_log(host)
        memory = self.tmp / "shm"  # the hosts' memory for snapshots is this test's own, never /dev/shm/vigil shared
        memory.mkdir(exist_ok=True)  # by every test (same host and job names, other users): shm/<host>/<job>
        self.agents[host] = self._spawn(argv, f"agent-{host}.log", {**self.env, "VIGIL_KMSG_PATH": str(kmsg),
                                                                    "FAKE_KMSG": str(kmsg),
                                                                    "VIGIL_SNAPSHOT_ROOT": str(memory), **(env or {})})

    def writable(self, name: str) -> Path:
        """A folder under `tmp` the training processes may write (theirs under `run_as`)."""
        path = self.tmp / name
        path.mkdir(parents=True, exist_ok=True)
        return self._give(path)

    def user_args(self) -> list[str]:
        """`vigil run`'s options that start the training command as `run_as` (none without one)."""
        return ["--user", self.run_as] if self.run_as else []

    def kernel_log(self, host: str) -> Path:
        """`host`'s (fake) kernel log, which its agent follows: the workers' Xid faults go there (FAKE_KMSG): the
        fake driver is the training process, so the file is `run_as`'s."""
        kmsg = self.tmp / f"kmsg-{host}"
        kmsg.touch()
        return self._give(kmsg)

    def trained_as(self) -> set[str]:
        """The owners of the step records the training processes wrote (their spools under `home`)."""
        return {path.owner() for path in (self.home / "spool").rglob("*.jsonl")}

    def _give(self, path: Path) -> Path:
        """`path` handed to `run_as` (unchanged without one)."""
        if self.run_as:
            who = pwd.getpwnam(self.run_as)
            os.chown(path, who.pw_uid, who.pw_gid)
        return path

    def start_job(self, job: str, hosts: Sequence[str], command: Sequence[str], *, nodes: str,
                  timeout: float = 240, env: dict[str, str] | None = None) -> None:
        """An agent per host and the controller started, then awaited until the job trains on every host."""
        for h in hosts:
            self.start_agent(h, command, nodes=nodes, job=job, env=env)
        self.start_controller()
        self.wait_for(lambda s: (j := s.jobs.get(job)) is not None and len(j.world) == len(hosts)
                      and all(m.state == "training" for m in j.members.values()), timeout,
                      f"{job} to train on {len(hosts)} hosts")

    def close(self) -> None:
        for proc in self.agents.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.agents.values():
            _wait_or_kill(proc, 40)
        if self.controller is not None:
            self.controller.send_signal(signal.SIGTERM)
            _wait_or_kill(self.controller, 20)
        self._follower.close()

    # ---- the log ---------------------------------------------------------------------------------
    def publish(self, events: list[Event]) -> None:
        self._producer.send(events)
        self._producer.flush(15)

    def fold(self) -> ClusterState:
        new = self._follower.poll(0.2)
        self.events += new
        self.state.apply(new)
        return self.state

    def wait_for(self, predicate: Callable[[ClusterState], Any], timeout: float, what: str) -> None:
        try:
            wait_until(lambda: predicate(self.fold()), timeout, what)
        except AssertionError as exc:  # a failing wait says where the jobs, the cases and the processes stood
            raise AssertionError(f"{exc}\n{self.summary()}") from None

    def summary(self) -> str:
        """Where things stand, for a failure message: each job's world and members, each case's steps, each
        process's exit code and the last lines of its log."""
        out = []
        for j in self.state.jobs.values():
            members = ", ".join(f"{h}: g{m.generation} {m.state}" for h, m in sorted(j.members.items()))
            out.append(f"job {j.job_id}: generation {j.generation}, world {j.world}; members {members}")
        for c in self.state.cases.values():
            steps = ", ".join(f"{a}/{t}={st.status}{f' ({st.reason[:80]})' if st.reason else ''}"
                              for (a, t), st in c.steps.items())
            out.append(f"case {c.case_id}: plan {c.plan}; skipped {c.skipped!r}; steps {steps}; outcome {c.outcome}")
        procs = {**{f"agent-{h}": p for h, p in self.agents.items()}, "controller": self.controller}
        for log in sorted(self.tmp.glob("*.log")):  # ours, and any the test wrote beside them (srun.log)
            proc = procs.get(log.stem)
            state = f"exit {proc.poll()}" if proc is not None else "a log"
            out.append(f"--- {log.name} ({state}), its tail:\n{log.read_bytes()[-1500:].decode(errors='replace')}")
        return "\n".join(out)

    def actions(self, **match: Any) -> list[RecoveryAction]:
        return [e for e in self.events if isinstance(e, RecoveryAction)
                and all(getattr(e, k) == v for k, v in match.items())]

    def case(self, trigger: str) -> Case | None:
        """The recovery that took `trigger` (an incident may refine, or be merged into, the case an attested
        exit opened first: which comes first is a race between the agent and the analyzer)."""
        return self.state.cases.get(self.state.merged.get(trigger, trigger))

    def outcome(self, case: str) -> Outcome | None:
        c = self.case(case)
        return c.outcome if c is not None else None

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PY, "-m", "vigil", *args], env=self.env, capture_output=True, text=True, timeout=120)


FINDS_THE_JOB = ("import importlib.util as u, sys; t = u.find_spec('torch'); j = u.find_spec('tests.recovery.job_worker'); "
                 "sys.exit(not (t and j and t.origin and j.origin and open(t.origin, 'rb').read(1) "
                 "and open(j.origin, 'rb').read(1)))")
"""Whether an interpreter finds and may read torch and the test job (without the seconds an import of torch takes)."""


def interpreter_for(user: str) -> tuple[str, str]:
    """An interpreter `user` can run this checkout's job with under `vigil run --user` (this venv's, else the
    system Python of this version over this venv's packages: a venv whose interpreter lies under a home only root
    may enter), and "" — or "" and why this machine cannot (the agent must be root, on Linux)."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return "", "vigil run --user needs Linux and an agent running as root"
    try:
        who = pwd.getpwnam(user)
    except KeyError:
        return "", f"no user {user!r} on this machine"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIGIL_")}
    env["PYTHONPATH"] = RUN_AS_PATH
    tried: list[str] = []
    for python in dict.fromkeys((PY, SYSTEM_PYTHON)):
        try:
            done = subprocess.run([python, "-c", FINDS_THE_JOB], user=who.pw_uid,
                                  group=who.pw_gid, extra_groups=[], cwd="/", env=env, capture_output=True, text=True,
                                  timeout=300)
        except (OSError, subprocess.SubprocessError) as exc:
            tried.append(f"{python}: {exc}")
            continue
        if done.returncode == 0:
            return python, ""
        tried.append(f"{python}: {(done.stderr.strip().splitlines() or ['no output'])[-1]}")
    return "", f"{user} cannot run this checkout's job ({ROOT}) with {'; '.join(tried)}"


def _wait_or_kill(proc: subprocess.Popen[bytes], timeout: float) -> None:
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc)


def worker(*args: str, python: str = PY) -> list[str]:
    """A torchrun command line of the real training job (tests/recovery/job_worker.py), one rank per host."""
    return [python, "-m", "torch.distributed.run", "--nproc-per-node", "1", str(HERE / "job_worker.py"), *args]


def fake_train(*args: str, python: str = PY) -> list[str]:
    return [python, str(HERE / "fake_train.py"), *args]


RUN_AS = "nobody"
"""The training processes' user of the live tests that ask for the machine's default (tests/recovery)."""


@pytest.fixture(scope="session")
def live_default_user() -> tuple[str, str]:
    """The training user (and its interpreter) of a live test without a `recovery_run_as` marker: the agents' own
    here; tests/recovery/conftest.py overrides it with `nobody_where_allowed`."""
    return "", PY


def nobody_where_allowed() -> tuple[str, str]:
    """(`RUN_AS`, its interpreter) where the machine allows it; else ("", this interpreter), said once (a warning)."""
    python, why = interpreter_for(RUN_AS)
    if why:
        warnings.warn(f"live recovery tests: the training processes run as the agents' own user, not as {RUN_AS} "
                      f"(vigil run --user): {why}", stacklevel=1)
        return "", PY
    return RUN_AS, python


def _run_as(request: pytest.FixtureRequest) -> tuple[str, str]:
    """The test's training user and its interpreter ("" and this one: the agents' own user)."""
    marker = request.node.get_closest_marker("recovery_run_as")
    if marker is None:
        default: tuple[str, str] = request.getfixturevalue("live_default_user")
        return default
    user = str(marker.args[0])
    if not user:
        assert marker.kwargs.get("reason"), "recovery_run_as(\"\") states why the test keeps the agents' user"
        return "", PY
    python, why = interpreter_for(user)
    if why:
        pytest.skip(f"training processes as {user}: {why}")
    return user, python


@pytest.fixture
def live(topics: VigilSettings, broker_bootstrap: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Live]:
    """A live recovery setup on the test's topics, torn down after it. `@pytest.mark.recovery_env({...})` gives the
    controller those extra environment variables; the training user is `_run_as`'s: a `recovery_run_as(user)`
    marker's (skipped, saying why, where the machine cannot; `recovery_run_as("", reason=...)` keeps the agents'
    user for the reason it states), else `live_default_user`'s."""
    marker = request.node.get_closest_marker("recovery_env")
    run_as, python = _run_as(request)
    tmp, settings = tmp_path, topics
    if run_as:
        tmp = Path(tempfile.mkdtemp(prefix="vigil-runas-"))  # pytest's tmp_path is root's only: the job could not
        tmp.chmod(0o755)  # enter its own spool; its agent's keys under it stay 0600
        settings = topics.model_copy(update={"home": tmp / "home"})  # the test reads with the processes' key set
    setup = Live(settings=settings, bootstrap=broker_bootstrap, tmp=tmp,
                 recovery_env=dict(marker.args[0]) if marker else {}, run_as=run_as, python=python)
    try:
        yield setup
        if run_as:  # the step records the job wrote are that user's: it did train as run_as
            assert setup.trained_as() == {run_as}, f"training processes not (only) {run_as}'s: {setup.trained_as()}"
    finally:
        setup.close()
        if tmp != tmp_path:
            for log in tmp.glob("*.log"):  # the processes' logs stay with pytest's kept folders
                shutil.copy(log, tmp_path)
            shutil.rmtree(tmp, ignore_errors=True)

"""`vigil demo`: the whole platform on embedded defaults, with a sick job to look at.

Starts the stack in this process (broker, ClickHouse, analyzer, dashboard, notifier), then
side by side:
1. a real PyTorch job: `train.py` under DDP/gloo, 4 ranks as 2 hosts, each host a
   `vigil run -- torchrun ...` agent; one rank is slowed part-way, another prints an Xid line;
2. a simulated 256-host job with a straggler, a NIC stall and MFU decay injected.
It prints where to look and runs until Ctrl-C (or --duration), then stops every child:
SIGINT first (each agent forwards it to torchrun and SIGKILLs the tree `KILL_GRACE_S` later),
then, past `STOP_WAIT_S`, SIGKILL to every process still left under it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from vigil.app.stack.runner import Stack
from vigil.contract import JobRegistered, RankPlacement
from vigil.contract.telemetry import ParallelCoords
from vigil.kafka.broker import free_port
from vigil.kafka.producer import EventProducer
from vigil.settings import VigilSettings

TRAIN = Path(__file__).with_name("train.py")
TORCH_JOB, SIM_JOB = "demo-torch", "demo-sim"
HOSTS = ("demo-host-0", "demo-host-1")
SLOW_RANK, XID_RANK = 3, 0
# An agent SIGKILLs torchrun's tree KILL_GRACE_S after the forwarded SIGINT, then delivers
# for at most DRAIN_S; the demo waits STOP_WAIT_S (> both, plus its output threads' 2 x 5 s).
KILL_GRACE_S, DRAIN_S, STOP_WAIT_S = 5.0, 5.0, 30.0
# (kind, host index at 256 hosts, options); indices wrap for smaller --sim-hosts.
SIM_FAULTS = (
    ("straggler", 42, "start=20,magnitude=0.10"),
    ("nic_drop", 101, "start=30,magnitude=0.7"),
    ("traffic_stop", 200, "start=45"),
    ("mfu_decay", 7, "start=20,magnitude=0.25"),
)


def sim_host(index: int, hosts: int) -> str:
    return f"sim-host-{index % hosts:04d}"


@dataclass(kw_only=True)
class Demo:
    settings: VigilSettings
    sim_hosts: int = 256
    sim_gpus: int = 8
    sim_speed: float = 1.0
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def register_torch_job(self, stack: Stack) -> None:
        assert stack.ctx is not None
        ranks = [RankPlacement(rank=r, host=HOSTS[r // 2], local_rank=r % 2, coords=ParallelCoords(dp=r))
                 for r in range(4)]
        job = JobRegistered(job_id=TORCH_JOB, host=HOSTS[0], name="tiny transformer, DDP on CPU (gloo)",
                            world_size=4, dp=4, gpus_per_host=2, gpu_model="cpu", gpu_peak_tflops=0.05, ranks=ranks)
        producer = EventProducer(settings=self.settings, bootstrap=stack.ctx.bootstrap)
        producer.send([job])
        producer.flush()

    def _spawn(self, argv: list[str], log_name: str, env: dict[str, str]) -> None:
        log = open(self.settings.home / "demo" / log_name, "ab")  # noqa: SIM115
        self.children.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                              env=env, start_new_session=True))
        log.close()

    def start_torch_job(self, bootstrap: str) -> None:
        port = free_port()
        for node, host in enumerate(HOSTS):
            env = {**os.environ, "VIGIL_KAFKA_BOOTSTRAP": bootstrap, "OMP_NUM_THREADS": "1",
                   "VIGIL_SPOOL_DIR": str(self.settings.home / "demo" / "spool" / host)}
            argv = [sys.executable, "-m", "vigil", "run", "--host", host, "--job", TORCH_JOB,
                    "--kill-grace", str(KILL_GRACE_S), "--drain-timeout", str(DRAIN_S), "--",
                    sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
                    "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(port),
                    str(TRAIN), "--slow-rank", str(SLOW_RANK), "--slow-from", "60", "--xid-rank", str(XID_RANK),
                    "--xid-at", "40", "--ckpt-dir", str(self.settings.home / "demo" / "checkpoints"),
                    "--ckpt-every", "20"]
            self._spawn(argv, f"{host}.log", env)

    def start_simulation(self, bootstrap: str) -> None:
        env = {**os.environ, "VIGIL_KAFKA_BOOTSTRAP": bootstrap}
        argv = [sys.executable, "-m", "vigil", "simulate", "--job", SIM_JOB, "--hosts", str(self.sim_hosts),
                "--gpus", str(self.sim_gpus), "--steps", "100000", "--step-ms", "2000", "--speed", str(self.sim_speed), "--seed", "7"]
        for kind, index, opts in SIM_FAULTS:
            argv += ["--fault", f"{kind}:host={sim_host(index, self.sim_hosts)},{opts}"]
        self._spawn(argv, "simulate.log", env)

    def stop_children(self, timeout: float = STOP_WAIT_S) -> None:
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signal.SIGINT)
        deadline = time.monotonic() + timeout
        for child in self.children:
            try:
                child.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                kill_tree(child)
        self.children.clear()


def kill_tree(child: subprocess.Popen[bytes]) -> None:
    """SIGKILL `child` and every descendant: torchrun runs in a session of its own, out of the child's group."""
    try:
        family = psutil.Process(child.pid).children(recursive=True)
    except psutil.Error:
        family = []
    for p in family:
        try:
            p.kill()
        except psutil.Error:
            pass
    child.kill()
    child.wait()


def notify_line(health: dict[str, object]) -> str:
    """Where the demo's alerts and incidents are sent, from the notifier's health."""
    receivers = health.get("receivers")
    if not isinstance(receivers, dict) or not receivers:
        return ("Notify    no receiver: VIGIL_NOTIFY_WEBHOOK_URL=https://... make demo sends the demo's alerts and "
                "incidents to a webhook.")
    where = ", ".join(f"{name} ({r['kind']} {r['where']}{', signed' if r['signed'] else ''})"
                      for name, r in receivers.items())
    return (f"Notify    alerts and incidents go to {where}, {health.get('group_wait_s')} s after they first fire;\n"
            "          the Notifications page shows every delivery, `vigil notify status` too.")


def guide(urls: dict[str, str], sim_hosts: int, notify: dict[str, object] | None = None) -> str:
    dash = urls.get("dashboard", "(dashboard not available)")
    straggler, nic, stop, _ = (sim_host(i, sim_hosts) for _, i, _ in SIM_FAULTS)
    return f"""
vigil demo is running.  Open {dash}

What to look at (give it a minute or two to develop):
  Overview  two jobs: {TORCH_JOB} (real PyTorch, 4 ranks on 2 hosts) and {SIM_JOB} ({sim_hosts} simulated hosts).
  Heatmap   {TORCH_JOB}: {HOSTS[1]} turns red in 'forward' once rank {SLOW_RANK} is slowed (step 60)
            ({HOSTS[0]} warms in 'backward': its ranks wait for the slow one in the all-reduce);
            {SIM_JOB}: {straggler} stands out in 'forward' (10% slower from step 20).
  Alerts    a straggler alert for each, an Xid 79 alert from {HOSTS[0]}, a NIC drop on {nic},
            a traffic stop on {stop}, MFU drift on {TORCH_JOB} (its slowed rank drags every step);
            MFU drift on {SIM_JOB} follows after a few minutes (its decay ramps over 100 steps).
  Network   the stall of {stop} and the drop of {nic}.
{notify_line(notify or {})}
From another terminal: `vigil status`, `vigil alerts`, `vigil tail --kind alert`.
Ctrl-C stops everything.
"""


def run_demo(settings: VigilSettings, *, duration: float | None = None, sim_hosts: int = 256, sim_speed: float = 1.0) -> int:
    (settings.home / "demo").mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stack = Stack(settings=settings)
    demo = Demo(settings=settings, sim_hosts=sim_hosts, sim_speed=sim_speed)
    try:
        state = stack.start()
        print(f"stack up: kafka {state.bootstrap}, clickhouse {state.clickhouse_dsn}, control {state.control_url}",
              flush=True)
        demo.register_torch_job(stack)
        demo.start_torch_job(state.bootstrap)
        demo.start_simulation(state.bootstrap)
        print(guide(state.urls, sim_hosts, stack.health()["parts"].get("notify")), flush=True)
        deadline = time.monotonic() + duration if duration else None
        while not stop.wait(1.0):
            if deadline is not None and time.monotonic() > deadline:
                break
    finally:
        print("stopping the demo ...", flush=True)
        demo.stop_children()
        stack.stop()
        print("demo stopped; nothing left running.", flush=True)
    return 0

"""`vigil demo`: the whole platform on embedded defaults, with a sick job to look at and an automatic recovery.

Starts the stack in this process (broker, ClickHouse, analyzer, recovery controller, dashboard,
notifier), then side by side:
1. a real PyTorch job: `train.py`, data-parallel on gloo, 6 ranks as 3 hosts, each host a `vigil run
   --nodes 2:3 -- torchrun ...` agent under recovery control (the controller starts it, node
   count elastic 2..3, a checkpoint every `CKPT_EVERY` steps); one rank is slowed part-way, and
   at step `XID_AT` rank 0, on `demo-host-0`, dies of an Xid 79 that the demo writes to that host's fake
   kernel log (`<home>/demo/kmsg/<host>`, which its agent follows as /dev/kmsg; the terminal shows the Xid
   with its source and the catalog's action): the controller pauses the
   job, cordons that host (the Xid names it: no diagnostics to wait for) and restarts the job on the
   other two from the freshest state: the ranks renumber (`demo-host-1` now runs ranks 0 and 1, whose
   state died with `demo-host-0`), so each restores its rank's snapshot of the step before from the
   copy its host held as the buddy of the host that ran that rank (the demo prints each step as it
   happens);
   later, at step `HANG_AT`, the slowed rank hangs once (a stuck GPU): the ranks' Flight Recorder
   traces (the step timer's hang watchdog) name it the culprit of a `collective_hang` incident,
   and the controller dumps, diagnoses and restarts the job from its checkpoint;
   then, at step `FLIP_AT`, one rank of `demo-host-2` flips one bit of one weight, once (silent data corruption):
   the analyzer's replica digests name it at the next digest step, the controller rolls the job back to the
   checkpoint of the last step its replicas agreed at (the job keeps `CKPT_KEEP` of them), replays, and judges
   the fault transient (it does not repeat);
2. a simulated 256-host job with a straggler, a NIC stall and MFU decay injected.
It prints where to look and runs until Ctrl-C (or --duration), then stops every child:
SIGINT first (each agent forwards it to torchrun and SIGKILLs the tree `KILL_GRACE_S` later),
then, past `STOP_WAIT_S`, SIGKILL to every process still left under it.
"""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

import vigil
from vigil.app.demo.principal import job_identity, job_reads
from vigil.app.stack.runner import Stack
from vigil.contract import Event, JobRegistered, LogLine, Outcome, RecoveryAction
from vigil.kafka.follow import Follower
from vigil.redact import shown_dsn
from vigil.settings import VigilSettings
from vigil.signing.setup import key_store

TRAIN = Path(__file__).with_name("train.py")
TORCH_JOB, SIM_JOB = "demo-torch", "demo-sim"
HOSTS = ("demo-host-0", "demo-host-1", "demo-host-2")
NODES, PROCS = "2:3", 2  # the job runs on 2 or 3 hosts, 2 ranks each
# by host and local rank: a restart on fewer hosts renumbers the global ranks
SLOW, XID = "demo-host-1:1", "demo-host-0:0"
XID_AT, CKPT_EVERY = 30, 10
# The demo's 2 CPUs are shared by ~15 processes, so diagnostics' timings are noisy: cordon only
# what fails (and the Xid host itself), never a host that merely looked slow.
# The three agents start at once but not in the same second: the job waits for all three to form.
RECOVERY_DEFAULTS = {"VIGIL_RECOVERY_POLICY_CORDON_SLOW": "false", "VIGIL_RECOVERY_FORM_WAIT_S": "60"}
# after the restart on two hosts, the slowed rank hangs once at HANG_AT; its peers time out PG_TIMEOUT_S later
# (the hang watchdog's dumps, HANG_FLOOR_S after the last step, have named it by then)
HANG_AT, PG_TIMEOUT_S = 155, 180
# once the hang's recovery restarted the job (its steps cannot come before), one rank of demo-host-2 flips one bit of
# one weight once after step FLIP_AT (silent data corruption): the analyzer names its replica at the next digest
# (every DIGEST_EVERY steps), the controller rolls the job back to the checkpoint of the last agreed step (the job
# keeps CKPT_KEEP: detection takes tens of steps on the demo's busy CPUs) and replays; no flip again: transient
FLIP, FLIP_AT, DIGEST_EVERY, CKPT_KEEP = "demo-host-2:0", HANG_AT + 50, 10, 12
# The step timer's hang watchdog dumps after max(5 x the longest step, this floor) without a step: on the demo's
# 2 busy CPUs a rank can stall for 10 s (a checkpoint, the simulator), which must not read as a hang.
HANG_FLOOR_S = 40
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
    job_user: str | None = None  # `vigil run --user` for the training job (`principal.job_identity`)
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def _spawn(self, argv: list[str], log_name: str, env: dict[str, str]) -> None:
        log = open(self.settings.home / "demo" / log_name, "ab")  # noqa: SIM115
        self.children.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                              env=env, start_new_session=True))
        log.close()

    def start_torch_job(self, bootstrap: str) -> None:
        """One agent per host under recovery control: the controller starts the job once they wait."""
        job_dir = self.settings.home / "demo" / "job"  # what the job writes: markers, checkpoints (its uid's)
        job_dir.mkdir(parents=True, exist_ok=True)
        once, hang_once, flip_once = job_dir / "xid.once", job_dir / "hang.once", job_dir / "flip.once"
        for marker in (once, hang_once, flip_once):
            marker.unlink(missing_ok=True)
        uid = pwd.getpwnam(self.job_user).pw_uid if self.job_user else None
        if uid is not None:
            os.chown(job_dir, uid, -1)
            job_dir.chmod(0o700)
        for host in HOSTS:
            kmsg = self.settings.home / "demo" / "kmsg" / host  # the host's kernel log: the Xid is written there
            kmsg.parent.mkdir(parents=True, exist_ok=True)
            kmsg.touch()  # kept across demo runs: its sequence numbers go on where the agent's saved position is
            if uid is not None:  # the job plays the kernel here: its rank writes the simulated Xid
                os.chown(kmsg, uid, -1)
            key_store(self.settings.home).issue(host)  # per-host identity: each agent attests with its own key
            env = {**os.environ, "VIGIL_KAFKA_BOOTSTRAP": bootstrap, "OMP_NUM_THREADS": "1",
                   "VIGIL_KMSG_PATH": str(kmsg), "DEMO_FAKE_KMSG": str(kmsg),
                   "VIGIL_SPOOL_DIR": str(self.settings.home / "demo" / "spool" / host),
                   "VIGIL_HANG_FLOOR_S": str(HANG_FLOOR_S),
                   "VIGIL_SNAPSHOT_ROOT": str(self.settings.home / "demo" / "shm")}  # each host's snapshot memory
            argv = [sys.executable, "-m", "vigil", "run", *(["--user", self.job_user] if self.job_user else []),
                    "--host", host, "--job", TORCH_JOB, "--nodes", NODES,
                    "--rdzv-addr", "127.0.0.1", "--kill-grace", str(KILL_GRACE_S), "--drain-timeout", str(DRAIN_S),
                    "--", sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(PROCS),
                    str(TRAIN), "--slow-rank", SLOW, "--slow-from", "60", "--xid-rank", XID,
                    "--xid-at", str(XID_AT), "--xid-dies", "--xid-once", str(once),
                    "--ckpt-dir", str(job_dir / "checkpoints"), "--ckpt-every", str(CKPT_EVERY), "--ckpt-keep", str(CKPT_KEEP),
                    "--hang-rank", SLOW, "--hang-at", str(HANG_AT), "--hang-once", str(hang_once),
                    "--digest-every", str(DIGEST_EVERY), "--flip-rank", FLIP, "--flip-at", str(FLIP_AT),
                    "--flip-once", str(flip_once),
                    "--pg-timeout-s", str(PG_TIMEOUT_S)]
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


# how the terminal names where a restart's state came from (the outcome's restore_source)
RESTORED = {"memory": "the in-memory snapshot of step", "peer": "a peer host's copy of the snapshot of step",
            "persisted": "the checkpoint of step"}


def narrate(event: Event) -> str | None:
    """One line of the torch job's recovery, as the controller publishes it (None: not worth a line)."""
    if event.job_id != TORCH_JOB:
        return None
    if isinstance(event, JobRegistered):
        return resplit_line(event)
    if isinstance(event, LogLine):
        return kernel_line(event)
    if isinstance(event, Outcome):
        if event.category == "start":
            return f"Recovery  {TORCH_JOB} started on {', '.join(event.hosts)} (generation {event.generation})"
        if event.result != "resumed":
            return f"Recovery  {event.incident_id}: {event.result}: {event.reason}"
        return (f"Recovery  resumed on {', '.join(event.hosts)} at step {event.first_step} from "
                f"{RESTORED.get(event.restore_source, 'the checkpoint of step')} {event.checkpoint_step}"
                f" ({event.steps_lost} step{'' if event.steps_lost == 1 else 's'} lost), {event.total_s} s after the first "
                f"sign{'; cordoned ' + ', '.join(event.cordoned) if event.cordoned else ''}")
    if isinstance(event, RecoveryAction) and event.actor == "controller" and event.status in ("planned", "succeeded",
                                                                                              "failed"):
        if event.action == "plan" and event.status == "planned":
            return f"Recovery  {event.reason[:220]} -> plan: {' -> '.join(event.details.get('steps', []))}"
        if event.action != "plan" and event.status != "planned" and event.target in (TORCH_JOB, *HOSTS):
            took = f" ({event.duration_ms / 1000:.1f} s)" if event.duration_ms is not None else ""
            return f"Recovery    {event.action} {event.target}: {event.status}{took} {event.reason[:120]}".rstrip()
    return None


def kernel_line(event: LogLine) -> str | None:
    """A hardware fault the host's kernel reported, with its source and the Xid catalog's action (None: a
    process's own line)."""
    if event.source == "process" or event.category in ("kernel_log_lost",):
        return None
    gpu = f" GPU {event.gpu_index}" if event.gpu_index is not None else ""
    what = f"Xid {event.xid}" if event.xid is not None else event.category
    action = f", catalog action {event.action.value}" if event.action is not None else ""
    return f"Hardware  {event.host}{gpu}: {what} [source {event.source}{action}] {event.message[:160]}"


def resplit_line(event: JobRegistered) -> str | None:
    """The data re-split of a resumed start, as the job's rank 0 reported it (None on a fresh start)."""
    d = event.data
    if d is None or d.samples_done == 0:
        return None
    verdict = "none lost or repeated" if d.exact else "NOT exactly once: samples lost or repeated"
    return (f"Recovery    data: {d.samples_left} samples of epoch {d.epoch} re-split over {d.ranks} ranks "
            f"({d.samples_done} read before, {d.in_flight} shards part-way): {verdict}")


def follow_recovery(settings: VigilSettings, bootstrap: str, stop: threading.Event) -> None:
    """Print the torch job's recovery as it happens (the demo's terminal tells the story too)."""
    try:
        follower = Follower(settings=settings, bootstrap=bootstrap, topics=["recovery", "jobs", "logs"])
    except Exception as exc:
        print(f"Recovery  (not followed: {exc})", flush=True)
        return
    try:
        while not stop.is_set():
            for event in follower.poll(0.5):
                line = narrate(event)
                if line:
                    print(line, flush=True)
    finally:
        follower.close()


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
  Overview  two jobs: {TORCH_JOB} (real PyTorch, 6 ranks on 3 hosts, then 4 on 2) and {SIM_JOB}
            ({sim_hosts} simulated hosts).
  Recovery  at step {XID_AT} rank 0, on {HOSTS[0]}, dies of an Xid 79 from its kernel log: the recovery controller
            pauses the job, cordons {HOSTS[0]} and restarts the job on {HOSTS[1]} and {HOSTS[2]} from the
            snapshots of the step before that each host's buddy held in memory (the ranks renumber:
            {HOSTS[1]} takes over ranks 0 and 1, whose copies it held for {HOSTS[0]}); the lines below tell
            it as it happens; the Recovery page ({dash.rstrip("/")}/recovery?job={TORCH_JOB}) shows each step's
            timing, the cordon and the goodput it cost (read-only unless VIGIL_DASHBOARD_ACTION_TOKEN is
            set); so do `vigil recovery history` and `vigil recovery status`.
  Heatmap   {TORCH_JOB}: {HOSTS[1]} turns red in 'forward' once its rank is slowed (step 60)
            (the others wait for it in 'grad_sync', and that waiting is charged to {HOSTS[1]} too);
            {SIM_JOB}: {straggler} stands out in 'forward' (10% slower from step 20).
  Alerts    a straggler alert for each, the Xid 79 and the exits of {TORCH_JOB}, a NIC drop on {nic},
            a traffic stop on {stop}, MFU drift on {TORCH_JOB} (its slowed rank drags every step);
            MFU drift on {SIM_JOB} follows after a few minutes (its decay ramps over 100 steps).
  Network   the stall of {stop} and the drop of {nic}.
  Incident  at step {HANG_AT} (a few minutes in) the slowed rank ({HOSTS[1]}'s local rank 1, global rank 1 on two
            hosts) hangs once: the Alerts page shows one collective_hang incident naming it (from the
            Flight Recorder traces every rank dumps), the other ranks its victims (linked, not paged);
            the 3D view marks the culprit and dims the victims; `vigil incidents --job {TORCH_JOB}`
            prints it. The controller dumps, diagnoses and restarts the job.
  SDC       then, at step {FLIP_AT}, a rank of {HOSTS[2]} flips one bit of one weight, once: at the next digest step
            the analyzer names that replica (a silent_data_corruption incident, the majority of its replicas against
            it); the controller rolls the job back to the checkpoint of the last step they agreed at, replays, and
            records the verdict: transient (the flip does not repeat), counted against {HOSTS[2]}.
{notify_line(notify or {})}
From another terminal: `vigil status`, `vigil alerts`, `vigil incidents`, `vigil recovery history`,
`vigil tail --kind alert`, `vigil trace --job {TORCH_JOB} -o trace.json` (open it in ui.perfetto.dev).
Ctrl-C stops everything.
"""


def run_demo(settings: VigilSettings, *, duration: float | None = None, sim_hosts: int = 256, sim_speed: float = 1.0) -> int:
    (settings.home / "demo").mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    for key, value in RECOVERY_DEFAULTS.items():
        os.environ.setdefault(key, value)
    stack = Stack(settings=settings)
    who = job_identity(euid=os.geteuid(), reads=[*job_reads(Path(vigil.__file__).resolve().parent.parent, TRAIN),
                                                 settings.home / "demo"])  # fmt: skip
    print(who.note, flush=True)
    demo = Demo(settings=settings, sim_hosts=sim_hosts, sim_speed=sim_speed, job_user=who.user)
    try:
        state = stack.start()
        print(f"stack up: kafka {state.bootstrap}, clickhouse {shown_dsn(state.clickhouse_dsn)}, control {state.control_url}",
              flush=True)
        threading.Thread(target=follow_recovery, args=(settings, state.bootstrap, stop), name="demo-recovery",
                         daemon=True).start()
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

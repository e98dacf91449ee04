"""Recovery control of `vigil run`: the node agent as the recovery controller's actuator.

With `--nodes MIN:MAX` the agent does not start its command by itself. It announces itself
(`member` events: waiting, its node range, its address and free ports) and executes the
controller's commands, acknowledging each with `recovery` events:

* `start`: launch the command for the command's world (`collector.control.rendezvous` fills torchrun's
  rendezvous options); a start of a newer generation first stops the running one;
* `stop`: SIGTERM to the command (torchrun passes it to each worker's process group), the tree
  killed after the grace, then whatever outlived it in the remembered process groups
  (`collector.control.stopping`); acknowledged once nothing is left;
* `diagnose`: run the diagnostics argv with its time limit (`collector.control.diagnose`);
* `dump`: record the state of the training processes;
* (before a `start`) the snapshots its ranks need and do not hold are staged from the new world's
  other hosts, then its ranks' new snapshots replicate to its buddy (`collector.control.replication`);
* `finish`: the job is over (the controller saw its command exit 0 on every host): the agent
  acknowledges and exits 0, whether it trained, waited as a spare or was cordoned.

When its command fails (non-zero status or a signal, not one the controller ordered), the agent
reports it at once: an `exited` member event before anything else, so the controller can pause
the job within a second. Then (and for any exit) it waits (up to `settle_s`) until the step
records the command wrote are shipped, so its last `exited` member event carries the final
progress. With `seal` (the agent role's key: `vigil.signing`) every member event is attested,
which is what lets the controller act on an exit without waiting for the analyzer.

While its host is in the cordon registry the agent stops its command and refuses to start.
It reports progress (first and latest step of the running generation, from the step records
it ships: `collector.control.progress`) in `member` events, on every change and every `keepalive_s`.
The main thread runs the command (the agent's signals reach it there: Ctrl-C ends the
agent); commands, the cordon check and keep-alives run on a control thread, diagnostics on
a thread of their own.
"""

from __future__ import annotations

import logging
import queue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast

import psutil

from vigil.collector.agent import Agent
from vigil.collector.control.commands import CommandFeed, ack
from vigil.collector.control.diagnose import run_diagnostics
from vigil.collector.control.gpus import devices
from vigil.collector.control.launcher import Launcher, exit_status
from vigil.collector.control.progress import Progress
from vigil.collector.control.rendezvous import NodeRange, fill, free_ports, rendezvous_env
from vigil.collector.control.replication import Replicator
from vigil.collector.control.stopping import ProcessGroups
from vigil.collector.control.warmdiag import WarmDiagnostics
from vigil.collector.gpumap import GpuMap
from vigil.collector.summary import OwnError
from vigil.contract import Command, HardwareFault, Member, MemberState, World, utcnow
from vigil.contract.xid import XidAction
from vigil.cordons import CordonRegistry, RegistryError

log = logging.getLogger(__name__)
PORTS = 4  # free ports announced: the training master's, and the diagnostics rounds'
FAULT_WINDOW_S = 60.0  # a hardware line this long before a failed exit names its cause; an older one does not


@dataclass(kw_only=True)
class Supervisor:
    agent: Agent
    argv: list[str]
    env: dict[str, str]
    nodes: NodeRange
    make_launcher: Callable[[list[str], dict[str, str]], Launcher]
    feed: Callable[[], CommandFeed]  # built on the control thread (it reaches Kafka)
    registry: CordonRegistry | None
    address: str
    spare: bool = False
    keepalive_s: float = 10.0
    reap_grace_s: float = 5.0
    settle_s: float = 10.0  # after the command exits: how long to wait for its last step records to ship
    progress: Progress = field(default_factory=Progress)
    replicator: Replicator | None = None  # buddy replication of the ranks' in-memory snapshots
    nproc: int = 1  # training processes per host (torchrun's --nproc-per-node): which ranks run here
    seal: Callable[[Member], Member] | None = None  # attests member events (the agent role's signer)
    warm_diag: WarmDiagnostics | None = None  # the next diagnostics child, started ahead (collector.control.warmdiag)
    state: MemberState = field(default="waiting", init=False)
    generation: int = field(default=0, init=False)
    world: World | None = field(default=None, init=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, init=False, repr=False)
    _launches: queue.Queue[tuple[World, Command]] = field(default_factory=queue.Queue, init=False, repr=False)
    _launcher: Launcher | None = field(default=None, init=False, repr=False)
    _start_cmd: Command | None = field(default=None, init=False, repr=False)
    _stop_cmds: list[Command] = field(default_factory=list, init=False, repr=False)
    _groups: ProcessGroups = field(default_factory=ProcessGroups, init=False, repr=False)
    _exit: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _cordoned: str | None = field(default=None, init=False, repr=False)
    _diag: threading.Thread | None = field(default=None, init=False, repr=False)
    _ports: list[int] = field(default_factory=list, init=False, repr=False)
    _started_at: datetime | None = field(default=None, init=False, repr=False)
    _exit_code: int | None = field(default=None, init=False, repr=False)
    _fault: tuple[HardwareFault, OwnError] | None = field(default=None, init=False, repr=False)  # category, line
    _signal: str | None = field(default=None, init=False, repr=False)
    _last_announce: float = field(default=0.0, init=False, repr=False)
    _since: datetime | None = field(default=None, init=False, repr=False)
    _announced_first: bool = field(default=False, init=False, repr=False)
    _stopped_through: int = field(default=0, init=False, repr=False)  # queued starts up to here are void
    _finished: Command | None = field(default=None, init=False, repr=False)  # the job is over: exit 0

    # ---- main thread ---------------------------------------------------------------------------
    def run(self) -> int:
        previous = {sig: signal.signal(sig, lambda *_: self._exit.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
        control = threading.Thread(target=self._control, name="vigil-run-control", daemon=True)
        self._check_cordon()
        self._announce("cordoned" if self._cordoned else "waiting", reason="agent started")
        control.start()
        status = 0
        try:
            while not self._exit.is_set():
                try:
                    world, command = self._launches.get(timeout=0.5)
                except queue.Empty:
                    continue
                status = self._run_generation(world, command)
        finally:
            self._exit.set()
            control.join(timeout=10)
            with self._lock:  # no round starts once `_exit` is set (`_diagnose`)
                diag = self._diag
            if diag is not None:
                diag.join(timeout=10)  # its child is killed within STOP_POLL_S of the exit
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._announce("left", reason="the job finished" if self._finished else "agent exiting")
        return 0 if self._finished is not None else status

    def _run_generation(self, world: World, command: Command) -> int:
        if self._cordoned or world.generation <= self._stopped_through:
            why = f"host is cordoned: {self._cordoned}" if self._cordoned else "stopped before it started"
            self.agent.emit([ack(command, "skipped", reason=why)])
            return 0
        if self.replicator is not None:  # before the ranks look for them: what they need from the new world
            self.replicator.stage(world, self.nproc)
            self.replicator.follow(world, self.nproc)
        env = {**self.env, **rendezvous_env(world)}
        got = devices(fill(self.argv, world), env, quarantined={*world.quarantined_gpus, *self._quarantined()},
                      known=self._known_gpus())
        if isinstance(got, str):
            log.warning("generation %d not started: %s", world.generation, got)
            self.agent.emit([ack(command, "failed", reason=got)])
            return 0
        if got.excluded:
            log.warning("generation %d: GPUs %s quarantined: %s=%s, %d rank(s) here", world.generation,
                        list(got.excluded), "CUDA_VISIBLE_DEVICES", got.env.get("CUDA_VISIBLE_DEVICES"), got.nproc)
        launcher = self.make_launcher(got.argv, {**env, **got.env})
        if got.nproc != self.nproc:
            launcher.warm = None  # the warm interpreters were started for more ranks: this generation starts cold
        with self._lock:
            self._launcher, self._start_cmd, self.world = launcher, command, world
            self.generation, self._started_at = world.generation, utcnow()
            self._exit_code = self._signal = self._fault = None
            self._announced_first = False
            self.progress.reset(self._started_at)
        self._announce("starting", command_id=command.command_id, reason=command.reason)
        log.info("generation %d: node rank %d of %d, master %s:%d", world.generation, world.node_rank,
                 world.nnodes, world.master_addr, world.master_port)
        status = launcher.run()
        self._report_failure(launcher, status)
        left = self._groups.reap(self.reap_grace_s)
        self._settle()
        with self._lock:
            self._launcher = None
            stops, self._stop_cmds = self._stop_cmds, []
            if launcher.proc is not None and launcher.proc.returncode is not None:
                self._exit_code, self._signal, _ = exit_status(launcher.proc.returncode)
        if launcher.interrupted:
            self._exit.set()
        if self._start_cmd is command:  # it never came up
            self._ack_start(launcher, "failed", "the command ended before it started")
        for stop in stops:
            self.agent.emit([ack(stop, "succeeded", started=stop.ts, details={"reaped": left, "exit_code": status})])
        if stops or self._cordoned:
            self._announce("cordoned" if self._cordoned else "waiting", reason="stopped", fresh_ports=True)
        else:
            self._announce("exited", reason=self._exit_reason(status), fresh_ports=True)
        return status

    # ---- control thread ------------------------------------------------------------------------
    def _control(self) -> None:
        feed: CommandFeed | None = None
        while not self._exit.is_set():
            try:
                if feed is None:
                    feed = self.feed()
                commands = feed.poll(0.5)
            except Exception as exc:
                log.warning("recovery commands unavailable (%s); retrying", exc)
                self._exit.wait(2.0)
                commands = []
            try:
                self._tick()
                for command in commands:
                    self._handle(command)
            except Exception:  # the control loop must outlive any one command
                log.exception("recovery control failed")

    def _tick(self) -> None:
        self._check_cordon()
        with self._lock:
            launcher = self._launcher
        if launcher is not None and launcher.proc is not None:
            self._groups.remember(launcher.proc.pid)
            if self._start_cmd is not None:
                self._ack_start(launcher, "succeeded", f"launched as pid {launcher.proc.pid}")
        snap = self.progress.snapshot()
        if self.state == "starting" and snap.first_step is not None and not self._announced_first:
            self._announced_first = True
            self._announce("training", reason=f"first step {snap.first_step}")
            if self.replicator is not None:  # every host of the world has started: staging is over
                self.replicator.settled()
        elif utcnow().timestamp() - self._last_announce >= self.keepalive_s:
            self._announce(self.state)

    def _ack_start(self, launcher: Launcher, status: Any, reason: str) -> None:
        with self._lock:
            command, self._start_cmd = self._start_cmd, None
        if command is not None:
            self.agent.emit([ack(command, status, reason=reason, started=command.ts)])

    def _quarantined(self) -> set[int]:
        """This host's GPUs in the local registry's quarantine (none without a registry or when it is unreadable)."""
        if self.registry is None:
            return set()
        try:
            held = self.registry.quarantined().get(self.agent.settings.host)
        except RegistryError as exc:
            log.warning("%s", exc)
            return set()
        return set(held.gpus) if held is not None else set()

    def _known_gpus(self) -> list[int]:
        """The GPU indices NVML or sysfs enumerate on this host ([] where there are none)."""
        try:
            return GpuMap(sysfs_root=self.agent.settings.sysfs_root, probe=self.agent.gpus).indices()
        except Exception:  # a failed look at NVML or sysfs: the agent's CUDA_VISIBLE_DEVICES or one GPU per rank
            log.debug("enumerating the GPUs failed", exc_info=True)
            return []

    def _check_cordon(self) -> None:
        if self.registry is None:
            return
        try:
            entry = self.registry.get(self.agent.settings.host)
        except RegistryError as exc:
            log.warning("%s", exc)
            return
        if entry is not None and not self._cordoned:
            self._cordoned = entry.reason or "cordoned"
            log.warning("host cordoned (%s): stopping the command, taking no new work", self._cordoned)
            with self._lock:
                launcher = self._launcher
            if launcher is not None:
                launcher.terminate()
            self._announce("cordoned", reason=self._cordoned)
        elif entry is None and self._cordoned:
            self._cordoned = None
            log.info("host uncordoned")
            if self.state == "cordoned":
                self._announce("waiting", reason="uncordoned", fresh_ports=True)

    def _handle(self, command: Command) -> None:
        log.info("command %s: %s (%s)", command.command_id, command.action, command.reason or "no reason")
        if command.action == "start":
            self._start(command)
        elif command.action == "stop":
            self._stop(command)
        elif command.action == "diagnose":
            self._diagnose(command)
        elif command.action == "finish":
            self._finish(command)
        else:
            self._dump(command)

    def _start(self, command: Command) -> None:
        assert command.world is not None
        if self._cordoned:
            self.agent.emit([ack(command, "skipped", reason=f"host is cordoned: {self._cordoned}")])
            return
        with self._lock:
            running = self._launcher
            if command.generation < self.generation or (command.generation == self.generation and running):
                self.agent.emit([ack(command, "skipped", reason=f"generation {self.generation} already started")])
                return
        if running is not None:
            running.terminate()
        self.agent.emit([ack(command, "started", reason="queued", started=command.ts)])
        self._launches.put((command.world, command))

    def _stop(self, command: Command) -> None:
        with self._lock:
            self._stopped_through = max(self._stopped_through, command.generation)
            running = self._launcher
            if running is not None and self.generation <= command.generation:
                self._stop_cmds.append(command)
        if running is None or self.generation > command.generation:
            why = "nothing running" if running is None else f"generation {self.generation} is newer"
            self.agent.emit([ack(command, "succeeded", reason=why, started=command.ts)])
            return
        self._announce("stopping", command_id=command.command_id, reason=command.reason)
        running.terminate()

    def _finish(self, command: Command) -> None:
        with self._lock:
            self._finished = command
            running = self._launcher
        self.agent.emit([ack(command, "succeeded", reason="the job finished: the agent exits", started=command.ts)])
        if running is not None:  # not expected: the job finishes once every host's command exited
            running.terminate()
        self._exit.set()

    def _report_failure(self, launcher: Launcher, status: int) -> None:
        """A failure nobody ordered is reported before the reaping and the settling (the controller's cue); one that
        ended before its start was acknowledged keeps its fault for the report after the failed start's ack."""
        with self._lock:
            ordered = bool(self._stop_cmds) or self._cordoned is not None or launcher.interrupted
            code = launcher.proc.returncode if launcher.proc is not None else None
            if ordered or status == 0 or code is None:
                return
            self._exit_code, self._signal, _ = exit_status(code)
            # the agent read its kernel log past the exit and its ranks' output is classified (the launcher drained
            # it): the host fault of this generation names the cause, attested, and the controller cordons at once
            recent = utcnow() - timedelta(seconds=FAULT_WINDOW_S)
            fault = self.agent.memory.fault_since(max(self._started_at, recent) if self._started_at else recent)
            self._fault = (cast(HardwareFault, fault[0]), fault[1]) if fault is not None else None
            if self._start_cmd is not None:  # it never came up: the start's failed ack comes first
                return
        self._announce("exited", reason=self._exit_reason(status))

    def _exit_reason(self, status: int) -> str:
        why = f"the command exited with status {status}"
        return f"{self._fault[0]} error: {self._fault[1].text}; then {why}" if self._fault is not None else why

    def _settle(self) -> None:
        """Wait until the spool was scanned after the command ended and everything in it was shipped."""
        ended = time.monotonic()
        spool = self.agent.spool
        deadline = ended + self.settle_s
        while time.monotonic() < deadline:
            if spool.scanned_at > ended and spool.tailer.backlog_bytes() == 0:
                return
            time.sleep(0.05)
        log.warning("step records of the command not all shipped after %.0f s: progress may be behind", self.settle_s)

    def _diagnose(self, command: Command) -> None:
        with self._lock:
            if self._exit.is_set():
                busy = "the agent is leaving"
            elif self._launcher is not None:
                busy = "training is running here"
            elif self._diag is not None and self._diag.is_alive():
                busy = "a diagnosis is running"
            else:
                busy = ""
            if not busy:  # under the lock: `run`'s exit joins the thread it sees
                self._diag = threading.Thread(target=self._run_diagnosis, args=(command,), name="vigil-run-diagnose",
                                              daemon=True)
                self._diag.start()
        if busy:
            self.agent.emit([ack(command, "failed", reason=busy, started=command.ts)])

    def _run_diagnosis(self, command: Command) -> None:
        before = self.state
        started = utcnow()
        self.agent.emit([ack(command, "started", started=started)])
        self._announce("diagnosing", command_id=command.command_id, reason=command.reason)
        s = self.agent.settings
        result = run_diagnostics(command, job_id=s.job_id, host=s.host, base_env=self.env, warm=self.warm_diag,
                                 stop=self._exit)
        self.agent.emit(result.events)
        details = {"seconds": round(result.seconds, 3), "events": len(result.events), "tail": result.tail[-500:],
                   "warm": result.warm}
        self.agent.emit([ack(command, "succeeded" if result.ok else "failed", reason=result.error(),
                             started=started, details=details)])
        self._announce("cordoned" if self._cordoned else before, reason="diagnosis done")

    def _dump(self, command: Command) -> None:
        started = utcnow()
        with self._lock:
            launcher = self._launcher
        procs: list[dict[str, Any]] = []
        if launcher is not None and launcher.proc is not None:
            try:
                root = psutil.Process(launcher.proc.pid)
                family = [root, *root.children(recursive=True)][:64]
            except psutil.Error:
                family = []
            for p in family:
                procs.append(_describe(p))
        self.agent.emit([ack(command, "succeeded", reason=f"{len(procs)} processes", started=started,
                             details={"processes": procs})])

    # ---- member events -------------------------------------------------------------------------
    def _announce(self, state: MemberState, *, command_id: str = "", reason: str = "",
                  fresh_ports: bool = False) -> None:
        with self._lock:
            if state != self.state or self._since is None:
                self._since = utcnow()
            self.state = state
            if fresh_ports or not self._ports:
                self._ports = free_ports(PORTS)
            snap = self.progress.snapshot()
            world = self.world
            s = self.agent.settings
            member = Member(
                job_id=s.job_id, host=s.host, state=state, since=self._since, generation=self.generation,
                node_rank=world.node_rank if world is not None and state in ("starting", "training", "stopping")
                else None,
                nodes_min=self.nodes.min, nodes_max=self.nodes.max, node_multiple=self.nodes.multiple,
                spare=self.spare, ip=self.address, ports=list(self._ports), started_at=self._started_at,
                exit_code=self._exit_code, signal=self._signal, first_step=snap.first_step,
                first_step_at=snap.first_step_at, last_step=snap.last_step, last_step_at=snap.last_step_at,
                steps=snap.steps, step_ms=snap.step_ms, command_id=command_id, reason=reason[:2048],
                replication=self.replicator.report() if self.replicator is not None else None,
                fault=fault[0] if (fault := self._fault if state == "exited" else None) is not None else None,
                fault_gpus=list(fault[1].gpus) if fault is not None else [],
                fault_action=XidAction(fault[1].action) if fault is not None and fault[1].action else None,
            )
            self._last_announce = utcnow().timestamp()
        self.agent.emit([self.seal(member) if self.seal is not None else member])


def _describe(p: psutil.Process) -> dict[str, Any]:
    doc: dict[str, Any] = {"pid": p.pid}
    try:
        with p.oneshot():
            cpu = p.cpu_times()
            doc.update(name=p.name(), status=p.status(), threads=p.num_threads(),
                       cpu_user_s=round(cpu.user, 2), cpu_system_s=round(cpu.system, 2))
    except psutil.Error as exc:
        doc["error"] = type(exc).__name__
    try:
        doc["wchan"] = Path(f"/proc/{p.pid}/wchan").read_text().strip()
    except OSError:
        pass
    return doc

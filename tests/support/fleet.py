"""A simulated fleet of node agents for the controller's engine: they answer its commands as `vigil run` does.

No broker and no processes: the engine publishes into `MemoryEffects`, the fleet reacts to the
commands it finds there (acknowledgements, member states, diagnostic results) and the reactions
are folded into the engine's state, one simulated second per turn.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from vigil.contract import Checkpoint, Command, Diagnostic, Event, Incident, Member, RankRef, RecoveryAction
from vigil.cordons import CordonRegistry
from vigil.recovery.backends.local import LocalBackend
from vigil.recovery.controller.effects import MemoryEffects
from vigil.recovery.controller.engine import Engine
from vigil.recovery.controller.state import ClusterState
from vigil.recovery.settings import RecoverySettings

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


ATTESTED = "agent/verified-by-the-gate"  # the harness folds without a gate: a signature here stands for a verified one


@dataclass(kw_only=True)
class Fleet:
    job: str
    hosts: list[str]
    nodes: tuple[int, int, int] = (2, 3, 1)
    slow: dict[str, float] = field(default_factory=dict)  # host -> elapsed factor in diagnostics
    broken: set[str] = field(default_factory=set)  # hosts whose diagnostics fail
    checkpoint: int | None = None  # latest committed step
    steps_per_turn: int = 5
    finish_on_start: bool = False  # a started generation trains to the end before its first member report
    start_exit: dict[str, int] = field(default_factory=dict)  # host -> its start's exit status, before a step
    members: dict[str, Member] = field(default_factory=dict)
    _pending: list[Event] = field(default_factory=list)

    def member(self, host: str, state: str, now: datetime, **kw: Any) -> Member:
        held = self.members.get(host)
        base: dict[str, Any] = {} if held is None else {k: getattr(held, k) for k in (
            "generation", "node_rank", "started_at", "first_step", "first_step_at", "last_step", "last_step_at",
            "steps", "exit_code")}
        base.update(kw)
        base["since"] = held.since if held is not None and held.state == state and held.since else now
        lo, hi, mult = self.nodes
        at = now if held is None else max(now, held.ts)  # an agent dates its reports on one clock: never backwards
        m = Member(job_id=self.job, host=host, ts=at, state=state, nodes_min=lo, nodes_max=hi,  # type: ignore[arg-type]
                   node_multiple=mult, ip="127.0.0.1", ports=[30000 + i for i in range(4)], **base)
        self.members[host] = m
        return m

    def announce(self, now: datetime) -> list[Event]:
        return [self.member(h, "waiting", now) for h in self.hosts]

    def crash(self, host: str, now: datetime, code: int = 1) -> list[Event]:
        return [self.member(host, "exited", now, exit_code=code)]

    def commit(self, step: int, now: datetime, *, attested: bool = True) -> list[Event]:
        """Rank 0's commit, shipped by its host's agent (`attested`: the gate verified its signature; the fold
        sees a non-empty one) or unattested (a claim that counts for nothing)."""
        self.checkpoint = step
        return [Checkpoint(job_id=self.job, host=self.hosts[0], ts=now, step=step, phase="committed", rank=0,
                           signature=ATTESTED if attested else "")]

    def react(self, events: list[Event], now: datetime) -> list[Event]:
        out: list[Event] = self._pending
        self._pending = []
        for c in events:
            if not isinstance(c, Command) or c.job_id != self.job or c.host not in self.hosts:
                continue
            ack = {"job_id": self.job, "host": c.host, "ts": now, "action": c.action, "target": c.host,
                   "command_id": c.command_id, "incident_id": c.incident_id, "actor": f"agent:{c.host}"}
            if c.action == "stop":
                out += [RecoveryAction(status="succeeded", **ack), self.member(c.host, "waiting", now)]
            elif c.action == "start":
                assert c.world is not None
                newest = self.checkpoint  # the ranks restore the newest state at or below the rollback's bound
                if c.world.restore_max_step is not None and newest is not None:
                    newest = min(newest, c.world.restore_max_step)
                first = (newest if newest is not None else -1) + 1
                out += [RecoveryAction(status="succeeded", **ack),
                        self.member(c.host, "starting", now, generation=c.generation, node_rank=c.world.node_rank,
                                    started_at=now, first_step=None, first_step_at=None, last_step=None, steps=0)]
                if c.host in self.start_exit:
                    self._pending.append(self.member(c.host, "exited", now + timedelta(seconds=1),
                                                     exit_code=self.start_exit[c.host]))
                    continue
                self._pending.append(self.member(
                    c.host, "exited" if self.finish_on_start else "training", now + timedelta(seconds=1),
                    first_step=first, first_step_at=now + timedelta(seconds=1), last_step=first,
                    **({"exit_code": 0} if self.finish_on_start else {})))
            elif c.action == "diagnose":
                ok = c.host not in self.broken
                elapsed = 0.2 * self.slow.get(c.host, 1.0)
                out += [RecoveryAction(status="succeeded" if ok else "failed", **ack),
                        Diagnostic(job_id=self.job, host=c.host, ts=now, incident_id=c.incident_id,
                                   command_id=c.command_id, test="check", ok=ok,
                                   values={"elapsed_s": elapsed} if ok else {})]
            elif c.action == "dump":
                out.append(RecoveryAction(status="succeeded", **ack))
            elif c.action == "finish":
                out += [RecoveryAction(status="succeeded", **ack), self.member(c.host, "left", now)]
        return out

    def train(self, now: datetime) -> list[Event]:
        """Progress of training hosts (a keep-alive for the others)."""
        out: list[Event] = []
        for h in self.hosts:
            m = self.members[h]
            if m.state == "training":
                out.append(self.member(h, "training", now, last_step=(m.last_step or 0) + self.steps_per_turn,
                                       last_step_at=now, step_ms=200.0))
            else:
                out.append(self.member(h, m.state, now))
        return out


def incident(job: str, host: str, *, cause: str = "hardware", category: str = "host_fault", at: datetime,
             iid: str | None = None, strong: bool = True) -> Incident:
    return Incident(job_id=job, host=host, ts=at, incident_id=iid or f"{job}/{category}/{host}/{at:%H%M%S}",
                    category=category, cause=cause, status="open", severity="critical",  # type: ignore[arg-type]
                    summary=f"{host}: {category}", culprits=[RankRef(host=host, rank=0, message="Xid 79")],
                    confidence="strong" if strong else "weak", first_sign=at - timedelta(seconds=2), detected=at)


class Died(Exception):
    """The controller process is gone (what `DyingEffects` simulates)."""


@dataclass(kw_only=True)
class DyingEffects(MemoryEffects):
    """Publishes like MemoryEffects until an event matching `die_after` went out, then the controller is dead."""

    die_after: Callable[[Event], bool]
    dead: bool = False

    def publish(self, events: Sequence[Event]) -> None:
        if self.dead:
            raise Died("dead controllers publish nothing")
        super().publish(events)
        if any(self.die_after(e) for e in events):
            self.dead = True
            raise Died("killed")


@dataclass(kw_only=True)
class Harness:
    fleet: Fleet
    engine: Engine
    fx: MemoryEffects
    now: datetime = T0
    seen: int = 0

    @classmethod
    def build(cls, fleet: Fleet, tmp: Path, die_after: Callable[[Event], bool] | None = None,
              **settings: Any) -> Harness:
        defaults: dict[str, Any] = {"policy_settle_s": 0, "form_wait_s": 0, "policy_scale_up": False}
        rs = RecoverySettings(**{**defaults, **settings})
        backend = LocalBackend(CordonRegistry(tmp / "cordons.json"))
        fx = MemoryEffects(backend=backend) if die_after is None else DyingEffects(backend=backend,
                                                                                   die_after=die_after)
        h = cls(fleet=fleet, engine=Engine(state=ClusterState(), settings=rs, fx=fx), fx=fx)
        h.feed(fleet.announce(h.now))
        return h

    def feed(self, events: list[Event]) -> None:
        self.engine.state.apply(events)

    def successor(self) -> Harness:
        """A new controller taking over: its state folded from the log alone (what the old one published and
        what the agents said), the same backend, the same clock."""
        state = ClusterState()
        state.apply([*self.fx.events, *self.fleet.members.values()])
        fx = MemoryEffects(backend=self.fx.backend)
        return Harness(fleet=self.fleet, engine=Engine(state=state, settings=self.engine.settings, fx=fx), fx=fx,
                       now=self.now)

    def turn(self) -> None:
        if isinstance(self.fx, DyingEffects) and self.fx.dead:
            return
        self.engine.tick(self.now)
        assert self.engine.last_error == "" or isinstance(self.fx, DyingEffects), self.engine.last_error
        new = self.fx.events[self.seen:]
        self.seen = len(self.fx.events)
        self.now += timedelta(seconds=1)
        self.feed(self.fleet.react(new, self.now) + self.fleet.train(self.now))

    def run(self, until: Any, turns: int = 200) -> None:
        for _ in range(turns):
            if until():
                return
            self.turn()
        raise AssertionError(f"not reached in {turns} turns; events: {[str(e)[:160] for e in self.fx.events[-8:]]}")

    def actions(self, **match: Any) -> list[RecoveryAction]:
        return [e for e in self.fx.events if isinstance(e, RecoveryAction)
                and all(getattr(e, k) == v for k, v in match.items())]

    def training(self, generation: int) -> bool:
        return all(m.state == "training" and m.generation == generation
                   for h, m in self.fleet.members.items() if h in self.engine.state.job(self.fleet.job).world) \
            and self.engine.state.job(self.fleet.job).generation == generation

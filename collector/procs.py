"""The training processes on this node: the launched child's tree, or processes matching a regex.

`refresh()` (each heartbeat) walks the tree with psutil, keeping one `psutil.Process`
per pid so CPU percentages are measured between heartbeats, and reads each new
process's `RANK` / `LOCAL_RANK` once, which also maps torchrun's `[default3]:` local
rank prefixes to global ranks. Processes that vanish or deny access are skipped.

Every process that carries a `RANK` is also kept as a `Worker` (pid, rank, local rank,
torchrun restart count, when it was first seen and when it was seen gone) for the exit
report; `watch()` is the cheap walk that keeps that list current between heartbeats. A warm
interpreter (`collector.control.warm`) learns its `RANK` only after it started, so its environment as
/proc shows it names only its slot (`VIGIL_WARM_SLOT`, its local rank): its rank comes from
`warm_ranks`, which the launcher sets when it gives the interpreters their world.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from datetime import datetime

import psutil

from vigil.contract import ProcessState, utcnow
from vigil.trainside import env

MAX_PROCESSES = 256
WARM_SLOT = env.WARM_SLOT  # the warm launcher (stdlib only, run by path) spells it out itself


def _env_int(env: dict[str, str], name: str) -> int | None:
    value = env.get(name, "")
    return int(value) if value.isdigit() else None


@dataclass(kw_only=True)
class _Tracked:
    proc: psutil.Process
    rank: int | None
    local_rank: int | None


@dataclass(kw_only=True)
class Worker:
    """A training rank's process as the tracker saw it."""

    pid: int
    rank: int
    local_rank: int | None
    restart: int | None
    seen_at: datetime
    gone_at: datetime | None = None


@dataclass(kw_only=True)
class ProcessTracker:
    root_pids: list[int] = field(default_factory=list)
    match: str | None = None
    warm_ranks: dict[int, int] = field(default_factory=dict)  # warm interpreters: local rank (slot) -> rank
    _tracked: dict[int, _Tracked] = field(default_factory=dict, init=False)
    _ranks: dict[int, int] = field(default_factory=dict, init=False)
    _workers: dict[int, Worker] = field(default_factory=dict, init=False)
    _inspected: set[int] = field(default_factory=set, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def _candidates(self) -> list[psutil.Process]:
        procs: list[psutil.Process] = []
        roots: list[psutil.Process] = []
        for pid in self.root_pids:
            try:
                roots.append(psutil.Process(pid))
            except psutil.Error:
                continue
        if self.match:
            pattern = re.compile(self.match)
            for p in psutil.process_iter(["cmdline"]):
                cmd = " ".join(p.info.get("cmdline") or [])
                if cmd and pattern.search(cmd):
                    roots.append(p)
        seen: set[int] = set()
        for root in roots:
            try:
                family = [root, *root.children(recursive=True)]
            except psutil.Error:
                family = [root]
            for p in family:
                if p.pid not in seen:
                    seen.add(p.pid)
                    procs.append(p)
        return procs[:MAX_PROCESSES]

    def refresh(self) -> list[ProcessState]:
        states: list[ProcessState] = []
        alive: dict[int, _Tracked] = {}
        for p in self._candidates():
            t = self._tracked.get(p.pid)
            try:
                if t is None:
                    t = self._track(p)
                    t.proc.cpu_percent(None)  # first call primes the measurement
                    cpu = None
                else:
                    cpu = t.proc.cpu_percent(None)
                with t.proc.oneshot():
                    status = t.proc.status()
                    rss = t.proc.memory_info().rss / 2**20
            except psutil.Error:
                continue
            alive[p.pid] = t
            states.append(ProcessState(pid=p.pid, status=str(status), local_rank=t.local_rank,
                                       cpu_pct=cpu, rss_mib=round(rss, 1)))
        with self._lock:
            self._tracked = alive
            self._ranks = {t.local_rank: t.rank for t in alive.values()
                           if t.local_rank is not None and t.rank is not None}
            self._mark_gone(set(alive))
        return states

    def _track(self, p: psutil.Process) -> _Tracked:
        try:
            env = p.environ()
        except psutil.Error:
            env = {}
        t = _Tracked(proc=p, rank=_env_int(env, "RANK"), local_rank=_env_int(env, "LOCAL_RANK"))
        slot = _env_int(env, WARM_SLOT)
        if t.rank is None and slot is not None:
            t.rank, t.local_rank = self.warm_ranks.get(slot), slot
        if t.rank is not None:
            with self._lock:
                self._workers.setdefault(p.pid, Worker(pid=p.pid, rank=t.rank, local_rank=t.local_rank,
                                                       restart=_env_int(env, "TORCHELASTIC_RESTART_COUNT"),
                                                       seen_at=utcnow()))
        return t

    def _mark_gone(self, alive: set[int]) -> None:
        now = utcnow()
        for w in self._workers.values():
            if w.gone_at is None and w.pid not in alive:
                w.gone_at = now

    def watch(self) -> None:
        """Note new ranks and ranks gone (a light walk: no CPU or memory readings)."""
        alive: set[int] = set()
        for p in self._candidates():
            alive.add(p.pid)
            if p.pid not in self._inspected:
                self._inspected.add(p.pid)
                try:
                    t = self._track(p)
                except psutil.Error:
                    continue
                if t.local_rank is not None and t.rank is not None:
                    with self._lock:
                        self._ranks.setdefault(t.local_rank, t.rank)
        with self._lock:
            self._mark_gone(alive)

    def workers(self) -> list[Worker]:
        """Every rank process seen so far (its latest incarnation last), with when it was seen gone."""
        with self._lock:
            return sorted(self._workers.values(), key=lambda w: w.seen_at)

    def rank_of(self, local_rank: int) -> int | None:
        with self._lock:
            return self._ranks.get(local_rank)

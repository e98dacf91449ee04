"""Warm restart: the agent keeps the next generation's training interpreters started, torch imported.

A cold (re)start of `torchrun ... train.py` pays two interpreter starts and imports before the
rendezvous: torchrun's own (it imports torch) and then each worker's (torch, its distributed
and checkpoint packages: ~5 s of CPU per process here). Under recovery control the agent can do
both ahead of time. `WarmPool` keeps one `collector.control.warmlaunch` process started (in a session of
its own, with the training command's scrubbed environment, `collector.control.childenv`), which keeps
one `collector.control.warmchild` interpreter per local rank with `warm_imports` imported. At a `start`,
`take` hands it the order (the world from the filled torchrun options, the environment, the
entry point) and returns it as the generation's child process: the `Launcher` pipes, echoes,
classifies, signals, kills and reports it as it does torchrun (the same `[defaultN]:` prefixes,
the same failure report), so only the rendezvous, the restore and the first step remain. The
next generation's pool is started `refill_delay_s` (setting `warm_refill_delay_s`, 5 s) after a
take, or when the generation ends if sooner: its imports (a few seconds of one core per local
rank) then do not compete with the restart itself for CPU, and it is warm by the next restart.

`plan` decides what can be warm: `torchrun` or `python -m torch.distributed.run` with a fixed
node count, an integer `--nproc-per-node`, `--max-restarts 0`, the console tee, and nothing else
that changes how workers start (`--no-python`, `--redirects`, `--role`, an elastic rendezvous, ...);
any other command runs cold, as before. All agents of a job must agree (setting `warm_start`):
warm workers host the TCP store themselves, torchrun's agents expect each other's.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vigil.collector.control.rendezvous import REPLACED
from vigil.collector.control.torchrun import parse, scan
from vigil.collector.principal import RunAs

log = logging.getLogger(__name__)
HERE = Path(__file__).resolve().parent
WARM_OPTIONS = frozenset({"--nnodes", "--node-rank", "--master-addr", "--master-port", "--max-restarts",
                          "--nproc-per-node", "--tee", "--log-dir", "--monitor-interval", "--start-method",
                          "--run-path", "-m", "--module"})


@dataclass(frozen=True, kw_only=True)
class WarmPlan:
    """A torchrun command line as the warm launcher runs it."""

    python: str
    nproc: int
    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int
    script: str | None
    module: str | None
    args: list[str]
    log_dir: str | None


def _python(argv: Sequence[str], start: int, env: Mapping[str, str]) -> str | None:
    path = env.get("PATH", os.defpath)
    if start == 1:  # torchrun's console script: the interpreter of its shebang
        script = shutil.which(argv[0], path=path)
        try:
            with open(script or "", "rb") as fh:
                first = fh.readline(4096).decode(errors="replace")
        except OSError:
            return None
        words = first[2:].split() if first.startswith("#!") else []
        return words[0] if len(words) == 1 and os.path.basename(words[0]).startswith("python") else None
    return shutil.which(argv[0], path=path) if start == 3 else None


def plan(argv: Sequence[str], env: Mapping[str, str]) -> WarmPlan | str:
    """How `argv` runs warm, or why it cannot (a reason to log)."""
    opts, args = scan(argv), parse(argv)
    if opts is None or args is None:
        return "not a torchrun command"
    unknown = sorted(set(args.options) - WARM_OPTIONS)
    if unknown:
        return f"torchrun options a warm start does not reproduce: {', '.join(unknown)}"
    o = args.options
    numbers = [o.get("--nproc-per-node", "1"), o.get("--nnodes", "1"), o.get("--node-rank", "0"),
               o.get("--master-port", "29500"), o.get("--max-restarts", "0")]
    if not all(n.isdigit() for n in numbers) or int(numbers[0]) < 1 or int(numbers[4]) != 0:
        return "--nproc-per-node, --nnodes, --node-rank, --master-port must be plain numbers and --max-restarts 0"
    if o.get("--tee", "3") != "3" or opts.end >= len(argv):
        return "--tee other than 3, or no entry point"
    python = _python(argv, opts.start, env)
    if python is None:
        return f"cannot tell which Python runs {argv[0]!r}"
    entry, rest = argv[opts.end], list(argv[opts.end + 1:])
    module = "-m" in o or "--module" in o
    return WarmPlan(python=python, nproc=int(numbers[0]), nnodes=int(numbers[1]), node_rank=int(numbers[2]),
                    master_addr=o.get("--master-addr", "127.0.0.1"), master_port=int(numbers[3]),
                    script=None if module else entry, module=entry if module else None, args=rest,
                    log_dir=o.get("--log-dir") or None)


@dataclass(kw_only=True)
class IdleProcess:
    """One process started ahead that waits for one order (a JSON line on its stdin), handed over once."""

    refill_delay_s: float = 5.0  # after a take: the work it was taken for first, then the next one's imports
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _closed: bool = field(default=False, init=False, repr=False)

    def prepare(self) -> None:
        raise NotImplementedError

    @staticmethod
    def spawn(argv: list[str], env: Mapping[str, str], stderr: int, **kw: Any) -> subprocess.Popen[bytes]:
        """`argv` started in a session of its own, its order channel (stdin) one end of a socket pair: unlike a
        pipe, a socket cannot be opened again through `/proc/<pid>/fd/0`, so nobody but the agent writes its order."""
        mine, theirs = socket.socketpair()
        try:
            proc = subprocess.Popen(argv, env=dict(env), stdin=theirs.fileno(), stdout=subprocess.PIPE, stderr=stderr,
                                    start_new_session=True, **kw)
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        proc.stdin = os.fdopen(mine.detach(), "wb")
        return proc

    def _pop(self, refill: bool = True) -> subprocess.Popen[bytes] | None:
        """The waiting process, if alive (with `refill`, the next one starts `refill_delay_s` later)."""
        with self._lock:
            proc, self._proc = self._proc, None
        if refill:
            self.refill()
        if proc is not None and (proc.poll() is not None or proc.stdin is None):
            stop_idle(proc)  # died waiting: its pipes closed, nothing left of it
            proc = None
        return proc

    def refill(self) -> None:
        """Start the next one `refill_delay_s` from now (nothing once closed)."""
        if not self._closed:
            timer = threading.Timer(self.refill_delay_s, self.prepare)
            timer.daemon = True
            timer.start()

    @staticmethod
    def _order(proc: subprocess.Popen[bytes], order: Mapping[str, Any], what: str) -> subprocess.Popen[bytes] | None:
        """`proc` after its order was written and its stdin closed; None (and `proc` stopped) when it refused it."""
        assert proc.stdin is not None
        try:
            proc.stdin.write((json.dumps(order) + "\n").encode())
            proc.stdin.close()
            proc.stdin = None  # the order is all it reads (and `communicate` must not flush a closed pipe)
        except OSError as exc:
            log.warning("%s: the process refused its order (%s); starting cold", what, exc)
            stop_idle(proc)
            return None
        return proc

    def close(self) -> None:
        with self._lock:
            self._closed = True
            proc, self._proc = self._proc, None
        if proc is not None:
            stop_idle(proc)


@dataclass(kw_only=True)
class WarmPool(IdleProcess):
    """The next generation's launcher and interpreters, started ahead (see the module's docstring)."""

    python: str
    nproc: int
    env: dict[str, str]  # the training command's environment (scrubbed), without a world
    imports: list[str]
    run_as: RunAs | None = None  # `vigil run --user/--group`: the interpreters run as the command's uid/gid

    @classmethod
    def for_command(cls, argv: Sequence[str], env: dict[str, str], imports: list[str],
                    refill_delay_s: float = 5.0, run_as: RunAs | None = None) -> WarmPool | None:
        """The pool for a controlled command (its rendezvous options are the controller's to fill), or None."""
        opts = scan(argv)
        kept = [tok for i, tok in enumerate(argv) if opts is None or not any(
            name in REPLACED and first <= i < end for name, first, end in opts.spans)]
        how = plan(kept, env)
        if isinstance(how, str):
            log.info("warm start: off for this command (%s)", how)
            return None
        return cls(python=how.python, nproc=how.nproc, env=env, imports=imports, refill_delay_s=refill_delay_s,
                   run_as=run_as)

    def prepare(self) -> None:
        """Start the next launcher and interpreters unless they are (never raises)."""
        with self._lock:
            if self._closed or (self._proc is not None and self._proc.poll() is None):
                return
            argv = [self.python, "-u", str(HERE / "warmlaunch.py"), str(self.nproc), str(HERE / "warmchild.py"),
                    *self.imports]
            try:
                self._proc = self.spawn(argv, self.env, subprocess.PIPE,
                                         **(self.run_as.popen() if self.run_as is not None else {}))
            except OSError as exc:
                log.warning("warm start: cannot start %s (%s); the next start is cold", argv[0], exc)
                self._proc = None
                return
            log.info("warm start: %d interpreter(s) warming under pid %d", self.nproc, self._proc.pid)

    @property
    def pid(self) -> int | None:
        """The waiting launcher's pid (None: none started)."""
        proc = self._proc
        return proc.pid if proc is not None else None

    def take(self, p: WarmPlan, env: Mapping[str, str]) -> subprocess.Popen[bytes] | None:
        """The warm launcher, ordered to run `p` with `env`; None when none is ready for it (start cold)."""
        if (p.python, p.nproc) != (self.python, self.nproc):
            return None
        proc = self._pop()  # the next generation's starts once this one is up
        if proc is None:
            return None
        error_dir = str(Path(p.log_dir) / f"warm_{uuid.uuid4().hex[:8]}" / "attempt_0") if p.log_dir else None
        order = {"env": dict(env), "cwd": os.getcwd(), "script": p.script, "module": p.module, "args": p.args,
                 "nnodes": p.nnodes, "node_rank": p.node_rank, "master_addr": p.master_addr,
                 "master_port": p.master_port, "error_dir": error_dir}
        return self._order(proc, order, "warm start")


def stop_idle(proc: subprocess.Popen[bytes]) -> None:
    """An idle (or refused) warm process (a launcher, a diagnostics child): EOF and SIGTERM stop it and its interpreters; SIGKILL after 5 s."""
    try:
        if proc.stdin is not None and not proc.stdin.closed:
            proc.stdin.close()
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=5.0)
    except (OSError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()

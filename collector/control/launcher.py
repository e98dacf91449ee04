"""The child of `vigil run`: start it, capture and echo its output, forward signals, report its end.

The command runs in its own session with stdout and stderr piped. A torchrun command line
first gets `--log-dir`/`--tee` so each worker line is attributed to its rank (see
`collector.control.torchrun`). One thread per stream echoes each line to the agent's own stream,
appends it to numbered segment files (`stdout.000000001.log`, ...: `max_bytes` each, the
newest `keep` + 1 kept; a disk that refuses is counted in `output_errors`, never raised) and
queues it for classification on another thread (`collector.classifying`: a bounded queue,
full = dropped and counted), so the child never waits on the rules. SIGINT, SIGTERM and SIGHUP are
forwarded to the child (torchrun passes them on to its workers); a second signal, or
`kill_grace_s` after the first, kills the whole process tree. While it runs, the rank
processes under it are watched every half second; when it ends, each gets its own
ProcessExit with its own last error and the launcher one naming its first failing rank
(`collector.exits`). The exit code is the child's (128+N for signal N). Given a `WarmPool`, a torchrun
command it can run starts in the pool's pre-warmed launcher instead (`collector.control.warm`), which then
stands for torchrun in all of the above.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil

from vigil.collector.agent import Agent
from vigil.collector.classifying import LineClassifier
from vigil.collector.control import torchrun
from vigil.collector.control.warm import WarmPool
from vigil.collector.control.warm import plan as warm_plan
from vigil.collector.exits import first_failure, launched_exits, launcher_summary
from vigil.collector.principal import RunAs
from vigil.collector.segments import SegmentWriter
from vigil.contract import ProcessExit, utcnow

log = logging.getLogger(__name__)
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def exit_status(returncode: int) -> tuple[int | None, str | None, int]:
    """(exit_code, signal name, shell-style status) of a Popen returncode."""
    if returncode >= 0:
        return returncode, None, returncode
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"SIG{-returncode}"
    return None, name, 128 - returncode


@dataclass(kw_only=True)
class Launcher:
    argv: list[str]
    env: dict[str, str]
    agent: Agent
    output_dir: Path
    max_bytes: int = 64 << 20
    keep: int = 3
    kill_grace_s: float = 30.0
    echo: bool = True
    attribute: bool = True  # torchrun: add --log-dir / --tee so every worker line names its rank
    warm: WarmPool | None = None  # pre-warmed interpreters to start a torchrun command in (`collector.control.warm`)
    run_as: RunAs | None = None  # `vigil run --user/--group`: the command's uid/gid (None: the agent's)
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)
    output_errors: int = field(default=0, init=False)
    unclassified: int = field(default=0, init=False)  # lines dropped because classification fell behind
    _signals: int = field(default=0, init=False)
    _kill_at: float | None = field(default=None, init=False)
    _terminate: bool = field(default=False, init=False)

    def run(self) -> int:
        if not self.argv:
            raise ValueError("vigil run: no command given (usage: vigil run [options] -- CMD ...)")
        argv = self._attributed()
        try:
            self.proc = self._warm_start(argv) or subprocess.Popen(
                argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                **(self.run_as.popen() if self.run_as is not None else {}))
        except OSError as exc:
            message = f"cannot start {self.argv[0]!r}: {exc.strerror or exc}"
            print(f"vigil run: {message}", file=sys.stderr, flush=True)
            s = self.agent.settings
            self.agent.emit([ProcessExit(job_id=s.job_id, host=s.host, pid=0, exit_code=127, summary=message)])
            return 127
        self.agent.tracker.root_pids.append(self.proc.pid)
        self._watch()  # warm: the rank processes exist already (a rank gone before the first look has no rank)
        if self._terminate:  # stopped before it started
            self.terminate()
        previous = {sig: signal.signal(sig, self._on_signal) for sig in FORWARDED}
        readers = [self._reader(self.proc.stdout, "stdout", sys.stdout), self._reader(self.proc.stderr, "stderr", sys.stderr)]
        try:
            returncode = self._wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if self.warm is not None:  # the generation ended: the next one starts warm (if it did not start yet)
                self.warm.prepare()
        for thread, _classifier, _out in readers:
            thread.join(timeout=5.0)  # a grandchild may hold the pipe open: do not wait for it forever
        for _thread, classifier, out in readers:
            classifier.close()
            self.agent.emit(classifier.stream.close())
            out.close()
            self.unclassified += classifier.dropped
        if returncode != 0 and not (self._terminate or self.interrupted):  # a failure nobody ordered: the driver
            self.agent.read_kernel_log_to_now()  # logged its fault before the rank saw the error; read past it
        return self._report(returncode)

    def _attributed(self) -> list[str]:
        if not self.attribute:
            return list(self.argv)
        got = torchrun.with_attribution(self.argv, self.output_dir / "torchelastic")
        if got.log_dir is not None:
            if self.run_as is not None:  # torchrun, as the command's uid, writes its per-rank files there
                self.run_as.give(got.log_dir)
            if got.injected:
                torchrun.prune_runs(got.log_dir)
            if got.redirected:
                self.agent.add_log_dir(got.log_dir)
            log.info("torchrun: per-rank files in %s%s", got.log_dir, " (tailed)" if got.redirected else "")
        return got.argv

    def _warm_start(self, argv: list[str]) -> subprocess.Popen[bytes] | None:
        """The pre-warmed launcher ordered to run `argv` (`collector.control.warm`), or None: start it cold."""
        if self.warm is None:
            return None
        how = warm_plan(argv, self.env)
        if isinstance(how, str):
            log.info("warm start: not for this command (%s); starting it cold", how)
            return None
        self.agent.tracker.warm_ranks = {lr: how.node_rank * how.nproc + lr for lr in range(how.nproc)}
        proc = self.warm.take(how, self.env)
        log.info("warm start: %s", f"ordered pid {proc.pid}" if proc is not None else "no warm interpreter ready, cold")
        return proc

    def _watch(self) -> None:
        try:
            self.agent.tracker.watch()
        except Exception:  # a failed look at /proc must not stop the launcher
            log.debug("watching the rank processes failed", exc_info=True)

    def _wait(self) -> int:
        assert self.proc is not None
        while True:
            try:
                return self.proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                self._watch()
                if self._kill_at is not None and time.monotonic() >= self._kill_at:
                    self.kill_tree()
                    self._kill_at = None

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self._signals += 1
        if self.proc is None or self.proc.poll() is not None:
            return
        if self._signals == 1:
            log.info("forwarding %s to pid %d", signal.Signals(signum).name, self.proc.pid)
            try:
                os.kill(self.proc.pid, signum)
            except ProcessLookupError:
                return
            self._kill_at = time.monotonic() + self.kill_grace_s
        else:
            self.kill_tree()

    # ---- recovery control (`collector.control.supervisor`): stop on request, from any thread ----------
    def terminate(self) -> None:
        """Stop the child as a first forwarded SIGTERM does: torchrun passes it to every worker's
        process group; the tree is killed `kill_grace_s` later. Safe before the child started."""
        self._terminate = True
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        try:
            os.kill(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        if self._kill_at is None:
            self._kill_at = time.monotonic() + self.kill_grace_s

    @property
    def interrupted(self) -> bool:
        """The agent itself was signalled (Ctrl-C, SIGTERM) while the child ran."""
        return self._signals > 0

    def kill_tree(self) -> None:
        assert self.proc is not None
        try:
            family = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            family = []
        log.warning("killing the process tree of pid %d (%d descendants)", self.proc.pid, len(family))
        for p in [*family]:
            try:
                p.kill()
            except psutil.Error:
                pass
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass

    def _reader(self, pipe: IO[bytes] | None, name: str,
                echo_to: Any) -> tuple[threading.Thread, LineClassifier, SegmentWriter]:
        assert pipe is not None
        classifier = LineClassifier(stream=self.agent.new_stream(stream=name), emit=self.agent.emit, name=name)
        out = SegmentWriter(directory=self.output_dir, stem=f"{name}.", suffix=".log", segment_bytes=self.max_bytes,
                            keep=self.keep)
        sink = getattr(echo_to, "buffer", None) if self.echo else None

        def pump() -> None:
            nonlocal sink
            for raw in iter(lambda: pipe.readline(1 << 16), b""):
                if sink is not None:
                    try:
                        sink.write(raw)
                        sink.flush()
                    except (OSError, ValueError):
                        sink = None  # our own stdout went away: keep capturing
                try:
                    out.append(raw)
                except OSError as exc:
                    self.output_errors += 1
                    if self.output_errors == 1 or self.output_errors % 1000 == 0:
                        log.warning("output of %s: write failed (%s); %d failures so far", name, exc,
                                    self.output_errors)
                classifier.offer(raw)

        thread = threading.Thread(target=pump, name=f"vigil-run-{name}", daemon=True)
        thread.start()
        return thread, classifier, out

    def _report(self, returncode: int) -> int:
        assert self.proc is not None
        self._watch()
        s = self.agent.settings
        events = launched_exits(job_id=s.job_id, host=s.host, memory=self.agent.memory,
                                workers=self.agent.tracker.workers(), child_pid=self.proc.pid,
                                returncode=returncode, now=utcnow())
        self.agent.emit(events)
        if returncode != 0:
            mine = next((e for e in events if e.pid == self.proc.pid), None)
            first = first_failure(events)
            what = (mine.summary if mine is not None and mine.launcher else "") or \
                (launcher_summary(first) if first is not None else "") or (mine.summary if mine else "")
            how = exit_status(returncode)[1] or f"code {returncode}"
            log.info("child exited with %s: %s", how, what or "(no error output)")
        return exit_status(returncode)[2]

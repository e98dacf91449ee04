"""The local launcher of a warm start: torchrun's part on one node, for interpreters started ahead of time.

`python -u .../warmlaunch.py NPROC CHILD [MODULE ...]`, started by the agent (`collector.control.warm`) in a
session of its own before any start command: it starts NPROC warm interpreters at once
(`collector.control.warmchild`, each in its own session, as torchrun starts its workers; `LOCAL_RANK` and
`VIGIL_WARM_SLOT` in their initial environment), echoes their output prefixed `[default<local
rank>]:` as `torchrun --tee 3` does, and waits for one JSON line on stdin, the agent's order:
`{env, cwd, script | module, args, nnodes, node_rank, master_addr, master_port, error_dir}`. It gives
each interpreter the environment torchrun gives a static rendezvous's workers (`RANK` = node rank x
NPROC + local rank, `WORLD_SIZE`, `MASTER_ADDR`/`MASTER_PORT`, `TORCHELASTIC_*`, an error file under
`error_dir`) with `TORCHELASTIC_USE_AGENT_STORE=False` (there is no agent store: rank 0 hosts the
TCP store on the master port, as `init_process_group("env://")` does by itself). The other ranks
get their order once that store listens (`await_store`, polled every 20 ms), not before: a rank
that finds no store backs off inside c10d for a second or more.

Then, as torchrun with `--max-restarts 0`: every 50 ms it looks at its workers; all exited 0 -> it
exits 0; one failed -> the others' process groups get SIGTERM (SIGKILL after
`TORCH_ELASTIC_SHUTDOWN_TIMEOUT`, 30 s) and it prints torchrun's failure report (the same fields,
which `collector.summary` reads) and exits 1; SIGTERM, SIGINT or SIGHUP -> passed to every
worker's process group, the same shutdown, exit 1. EOF instead of an order (the agent gone) or a
signal before it stops the idle interpreters. Standard library only; run by path, imports no vigil.
"""

from __future__ import annotations

import os
import sys

if sys.path and os.path.realpath(sys.path[0] or ".") == os.path.dirname(os.path.realpath(__file__)):
    del sys.path[0]  # the collector's folder: its modules must not shadow the standard library's

import json
import signal
import socket
import subprocess
import threading
import time
from typing import IO, Any

POLL_S = 0.05
RULE, END = "-" * 60, "=" * 60


def dumpable(on: bool) -> None:
    """prctl(PR_SET_DUMPABLE): off while it waits for its order, so no other process of its uid reads or writes
    it through /proc or ptrace (`collector.principal`); Linux only, best effort."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(4, int(on), 0, 0, 0)
        except (OSError, AttributeError):
            pass


class Stop(Exception):
    pass


def _on_signal(signum: int, _frame: Any) -> None:
    raise Stop(signum)


def pump(src: IO[bytes] | None, dst: IO[bytes], prefix: bytes, lock: threading.Lock) -> threading.Thread:
    assert src is not None

    def run() -> None:
        out: IO[bytes] | None = dst
        for raw in iter(lambda: src.readline(1 << 16), b""):
            if out is None:
                continue  # the agent is gone: drain, so the rank never blocks on a full pipe
            with lock:
                try:
                    out.write(prefix + raw)
                    out.flush()
                except (OSError, ValueError):
                    out = None

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def worker_env(order: dict[str, Any], nproc: int, local_rank: int) -> dict[str, str]:
    node, nnodes = int(order["node_rank"]), int(order["nnodes"])
    rank, world = node * nproc + local_rank, nnodes * nproc
    env = {str(k): str(v) for k, v in order["env"].items()}
    env.update(LOCAL_RANK=str(local_rank), RANK=str(rank), GROUP_RANK=str(node), ROLE_RANK=str(rank),
               ROLE_NAME="default", LOCAL_WORLD_SIZE=str(nproc), WORLD_SIZE=str(world), GROUP_WORLD_SIZE=str(nnodes),
               ROLE_WORLD_SIZE=str(world), MASTER_ADDR=str(order["master_addr"]), MASTER_PORT=str(order["master_port"]),
               TORCHELASTIC_RESTART_COUNT="0", TORCHELASTIC_MAX_RESTARTS="0", TORCHELASTIC_RUN_ID="none",
               TORCHELASTIC_USE_AGENT_STORE="False")
    env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    if nproc > 1:
        env.setdefault("OMP_NUM_THREADS", "1")
    if order.get("error_dir"):
        folder = os.path.join(str(order["error_dir"]), str(local_rank))
        os.makedirs(folder, exist_ok=True)
        env["TORCHELASTIC_ERROR_FILE"] = os.path.join(folder, "error.json")
    return env


def _traceback(path: str | None) -> list[str]:
    try:
        with open(path or "") as fh:
            msg = json.load(fh)["message"]
        text = msg if isinstance(msg, str) else (msg.get("extraInfo") or {}).get("py_callstack") or msg["message"]
        return str(text).rstrip().splitlines() or [""]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return ["To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"]


def report(name: str, failed: list[tuple[int, int, int, float, str | None]], nproc: int, node: int) -> str:
    """torchrun's failure report: (local rank, pid, returncode, when, error file) per failed worker."""
    def entry(i: int, f: tuple[int, int, int, float, str | None]) -> list[str]:
        lr, pid, code, at, err = f
        sig = f" ({signal.Signals(-code).name})" if code < 0 and -code in signal.valid_signals() else ""
        tb = _traceback(err)
        return [f"[{i}]:", f"  time      : {time.strftime('%Y-%m-%d_%H:%M:%S', time.localtime(at))}",
                f"  host      : {socket.getfqdn()}", f"  rank      : {node * nproc + lr} (local_rank: {lr})",
                f"  exitcode  : {code} (pid: {pid}){sig}", f"  error_file: {err or '<N/A>'}",
                f"  traceback : {tb[0]}", *(f"  {line}" for line in tb[1:])]
    others = [line for i, f in enumerate(failed[1:], 1) for line in entry(i, f)] or ["  <NO_OTHER_FAILURES>"]
    return "\n".join([END, f"{name} FAILED", RULE, "Failures:", *others, RULE, "Root Cause (first observed failure):",
                      *entry(0, failed[0]), END])


def await_store(host: str, port: int, timeout_s: float = 30.0) -> None:
    """Until rank 0's TCP store listens (or `timeout_s`): a rank that connects before it does backs off for
    seconds inside c10d; polling here every 20 ms costs nothing of the sort."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.02)


def shutdown(procs: list[subprocess.Popen[bytes]], sig: int) -> None:
    live = [p for p in procs if p.poll() is None]
    for p in live:
        try:
            os.killpg(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + float(os.environ.get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "30"))
    while any(p.poll() is None for p in live) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    for p in live:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            p.wait()


def spawn(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A warm interpreter in a session of its own, its order channel a socket (never reopened via /proc)."""
    mine, theirs = socket.socketpair()
    try:
        p = subprocess.Popen(argv, env=env, stdin=theirs.fileno(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
    except BaseException:
        mine.close()
        raise
    finally:
        theirs.close()
    p.stdin = os.fdopen(mine.detach(), "wb")
    return p


def main() -> int:
    dumpable(False)
    nproc, child, imports = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    lock, procs, pumps = threading.Lock(), [], []
    try:
        for lr in range(nproc):
            env = dict(os.environ, LOCAL_RANK=str(lr), VIGIL_WARM_SLOT=str(lr))
            p = spawn([sys.executable, "-u", child, *imports], env)
            procs.append(p)
            prefix = f"[default{lr}]:".encode()
            pumps += [pump(p.stdout, sys.stdout.buffer, prefix, lock), pump(p.stderr, sys.stderr.buffer, prefix, lock)]
        line = sys.stdin.readline()
        if not line.strip():
            shutdown(procs, signal.SIGTERM)
            return 0
        order = json.loads(line)
        first = int(order["node_rank"]) * nproc  # the global rank of local rank 0
        for lr, p in enumerate(procs):
            if first + lr == 1 or (first > 0 and lr == 0):
                await_store(str(order["master_addr"]), int(order["master_port"]))
            assert p.stdin is not None
            p.stdin.write((json.dumps({**order, "env": worker_env(order, nproc, lr)}) + "\n").encode())
            p.stdin.close()
        ended: dict[int, float] = {}
        while True:
            for lr, p in enumerate(procs):
                if lr not in ended and p.poll() is not None:
                    ended[lr] = time.time()
            failed = [lr for lr in sorted(ended, key=ended.__getitem__) if procs[lr].returncode != 0]
            if failed:
                shutdown(procs, signal.SIGTERM)
                error_dir = order.get("error_dir")
                rows = [(lr, procs[lr].pid, procs[lr].returncode or 0, ended[lr],
                         os.path.join(error_dir, str(lr), "error.json") if error_dir and
                         os.path.exists(os.path.join(error_dir, str(lr), "error.json")) else None) for lr in failed]
                _join(pumps)
                print(report(str(order.get("script") or order.get("module")), rows, nproc, int(order["node_rank"])),
                      file=sys.stderr, flush=True)
                return 1
            if len(ended) == nproc:
                _join(pumps)
                return 0
            time.sleep(POLL_S)
    except Stop as stop:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # the agent kills the tree after its grace
        signum = int(stop.args[0])
        print(f"warmlaunch: received {signal.Signals(signum).name}, shutting down workers", file=sys.stderr, flush=True)
        shutdown(procs, signum)
        _join(pumps)
        return 1


def _join(pumps: list[threading.Thread]) -> None:
    for t in pumps:
        t.join(timeout=2.0)  # a grandchild may hold a pipe open: do not wait for it forever


if __name__ == "__main__":
    sys.exit(main())

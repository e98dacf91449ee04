"""An attacker in a training job: tries to read, trace and write the processes that hold a platform identity.

`python prober.py [--wait FILE] [--read PATH | --write PATH ...] PID ...`: for each PID (`ppid`: its parent's), opening `/proc/PID/environ` and
`/proc/PID/mem` for reading, `/proc/PID/fd/0` for writing (a waiting process's order channel) and a
ptrace attach; for each PATH, reading it (`--read`) or creating it (`--write`). Prints one JSON object: `{"uid": ..., "pid":
{PID: {what: "ok" | errno name}}, "read" | "write": {PATH: "ok" | errno name}, "env": [its variables]}`. With `--wait FILE` it first waits for FILE to exist (the test looks at the agent meanwhile).
Standard library only.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import sys
import time

PTRACE_SEIZE = 0x4206  # attaches without stopping the tracee; the tracer's exit detaches it


def attempt(fn: object) -> str:
    try:
        fn()  # type: ignore[operator]
        return "ok"
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc.errno))


def ptrace(pid: int) -> str:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(PTRACE_SEIZE, pid, None, None) == 0:
        return "ok"
    return errno.errorcode.get(ctypes.get_errno(), "?")


def probe(pid: int) -> dict[str, str]:
    def environ() -> None:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            fh.read()

    def mem() -> None:
        open(f"/proc/{pid}/mem", "rb").close()

    def order() -> None:
        os.close(os.open(f"/proc/{pid}/fd/0", os.O_WRONLY | os.O_NONBLOCK))

    return {"environ": attempt(environ), "mem": attempt(mem), "fd0": attempt(order), "ptrace": ptrace(pid)}


def main(argv: list[str]) -> None:
    reads: list[str] = []
    if argv[:1] == ["--wait"]:
        while not os.path.exists(argv[1]):
            time.sleep(0.05)
        argv = argv[2:]
    writes: list[str] = []
    while argv[:1] in (["--read"], ["--write"]):
        (reads if argv[0] == "--read" else writes).append(argv[1])
        argv = argv[2:]
    pids = [str(os.getppid()) if p == "ppid" else p for p in argv]
    def write(path: str) -> None:
        with open(path, "xb") as fh:
            fh.write(b"planted")

    def read(path: str) -> None:
        with open(path, "rb") as fh:
            fh.read()

    out = {"uid": os.getuid(), "pid": {p: probe(int(p)) for p in pids}, "env": sorted(os.environ),
           "read": {path: attempt(lambda path=path: read(path)) for path in reads},
           "write": {path: attempt(lambda path=path: write(path)) for path in writes}}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
